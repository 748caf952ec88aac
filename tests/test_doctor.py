"""`pgfunnel doctor`: findings on a healthy database and on broken ones; exit code 3."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from funnel_util import conninfo_part, doc, ingest, one_row
from typer.testing import CliRunner

from pgfunnel.db import connect
from pgfunnel.doctor import (
    Finding,
    _is_embedded,
    check_active_indexes,
    check_chunking,
    check_orphan_rows,
    check_pgvector,
    check_statistics,
    run_checks,
    worst,
)
from pgfunnel.search import Funnel


def _doctor(dsn: str, *extra: str) -> tuple[int, dict[str, Any]]:
    from pgfunnel.cli.main import app

    # the DSN from PGFUNNEL_DSN: the findings read as the library words them (a --dsn
    # typed is added to the commands they name, which tests/test_cli_hints.py checks)
    result = CliRunner().invoke(app, ["doctor", "--json", *extra], env={"PGFUNNEL_DSN": dsn})
    return result.exit_code, json.loads(result.output[result.output.index("{"):])


def _checks(report: dict[str, Any], level: str) -> set[str]:
    return {f["check"] for f in report["findings"] if f["level"] == level}


def test_healthy_database_has_no_errors(sample_db: str) -> None:
    code, report = _doctor(sample_db)
    assert code == 0 and report["ok"], report
    assert _checks(report, "error") == set()
    names = {f["check"] for f in report["findings"]}
    assert {"pgvector", "schema", "active_index", "statistics", "index_memory",
            "row_security"} <= names
    # a clean install warns about nothing it ships itself (the inlined _bm25_idf is known)
    assert "security.search_path" not in _checks(report, "warning")
    # below 0.8.3 it warns, except on the embedded server (0.8.2), which has no upgrade
    with connect(sample_db, autocommit=True) as conn:
        version = one_row(conn.execute(
            "select extversion from pg_extension where extname = 'vector'"))[0]
        [finding] = check_pgvector(conn)
        embedded = _is_embedded(conn)
    old = tuple(int(x) for x in version.split(".")[:3]) < (0, 8, 3)
    assert finding.level == ("warning" if old and not embedded else "info")
    assert version in finding.message
    if old and embedded:
        assert "embedded" in finding.message and "0.8.3" in finding.message


def test_a_version_that_predates_titles_is_pointed_to_reindex(sample_db: str) -> None:
    with connect(sample_db, autocommit=True) as conn:
        assert not [f for f in check_active_indexes(conn) if "document title" in f.message]
        conn.execute("update pgfunnel.index_version set params = params - 'embed_input'")
        [note] = [f for f in check_active_indexes(conn) if "document title" in f.message]
    assert note.level == "info" and "pgfunnel reindex -c default --activate" in note.message


def test_a_version_whose_bm25_reads_the_text_alone_is_pointed_to_reindex(
        sample_db: str) -> None:
    with connect(sample_db, autocommit=True) as conn:
        assert not [f for f in check_active_indexes(conn) if "for BM25" in f.message]
        conn.execute("update pgfunnel.index_version set params = params - 'lexical_input'")
        [note] = [f for f in check_active_indexes(conn) if "for BM25" in f.message]
        assert note.level == "info" and "pgfunnel reindex -c default --activate" in note.message
        assert "(it predates that)" in note.message
        # built so on purpose (reindex --lexical-input text): it said "it predates that"
        conn.execute("update pgfunnel.index_version "
                     "set params = params || '{\"lexical_input\": \"text\"}'")
        [note] = [f for f in check_active_indexes(conn) if "for BM25" in f.message]
        assert "(built with --lexical-input text)" in note.message


def test_a_version_that_counts_the_title_once_is_pointed_to_reindex(sample_db: str) -> None:
    with connect(sample_db, autocommit=True) as conn:
        assert not [f for f in check_active_indexes(conn) if "title once" in f.message]
        conn.execute("update pgfunnel.index_version "
                     "set params = params || '{\"lexical_input\": \"title\"}'")
        [note] = [f for f in check_active_indexes(conn) if "title once" in f.message]
        assert note.level == "info" and "pgfunnel reindex -c default --activate" in note.message
        # after a switch back, the retired version that counts it twice needs no reindex
        from pgfunnel import versions

        res = versions.reindex(conn, "default", activate_after=True)
        assert not [f for f in check_active_indexes(conn) if "title once" in f.message]
        versions.rollback(conn, "default")
        back = [f.message for f in check_active_indexes(conn)]
        assert any("title once" in m for m in back)
        assert any(f"retired version {res.version} " in m and "versions activate" in m
                   for m in back)


def test_chunks_deleted_past_the_trigger_are_pointed_to_reindex(sample_db: str) -> None:
    delete_one = ("delete from pgfunnel.document where citekey = "
                  "(select min(citekey) from pgfunnel.document)")
    with connect(sample_db, autocommit=True) as conn:
        assert [f.level for f in check_statistics(conn)] == ["info"]
        # a plain DELETE keeps the statistics (trigger on pgfunnel.lexical)
        conn.execute(delete_one)
        assert [f.level for f in check_statistics(conn)] == ["info"]
        # with the trigger off (as under session_replication_role = replica) they drift
        conn.execute("alter table pgfunnel.lexical disable trigger lexical_deleted")
        conn.execute(delete_one)
        off, drift = check_statistics(conn)
        assert off.level == "warning" and "lexical_deleted" in off.message
        assert "disabled" in off.message
        conn.execute("alter table pgfunnel.lexical enable trigger lexical_deleted")
        [finding] = check_statistics(conn)
        assert finding is not None and finding.message == drift.message
        conn.execute("drop trigger chunk_indexed_columns on pgfunnel.chunk")
        missing = [f for f in check_statistics(conn) if "chunk_indexed_columns" in f.message]
        assert [f.level for f in missing] == ["warning"]
        assert "pgfunnel migrate" in missing[0].message
    assert finding.level == "warning"
    assert "pgfunnel reindex -c default --activate" in finding.message


def test_an_uncached_graph_walk_is_pointed_to_init(sample_db: str) -> None:
    from pgfunnel.ingest import refresh_hnsw_walks

    def uncached(conn: psycopg.Connection[Any]) -> list[Finding]:
        return [f for f in check_active_indexes(conn) if "graph walk" in f.message]

    with connect(sample_db, autocommit=True) as conn:
        assert not uncached(conn)
        # what sql/ installs before the walks are written back
        conn.execute("create or replace function pgfunnel._hnsw_walk(version_id integer, "
                     "query_embedding vector, n integer, out chunk_ids bigint[], "
                     "out scores double precision[], out cached boolean) language plpgsql "
                     "as $$ begin cached := false; end $$")
        [note] = uncached(conn)
        assert note.level == "warning" and "pgfunnel init" in note.message
        assert refresh_hnsw_walks(conn)
        assert not uncached(conn)


def test_a_version_with_an_older_analyzer_is_pointed_to_its_newest(sample_db: str) -> None:
    with connect(sample_db, autocommit=True) as conn:
        # the sample collection was built with today's default
        assert not [f for f in check_active_indexes(conn) if "analyzer" in f.message]
        notes = {}
        for older in ("simple_v1", "english_v2"):
            conn.execute("update pgfunnel.index_version set analyzer = %s", (older,))
            [notes[older]] = [f for f in check_active_indexes(conn) if "analyzer" in f.message]
    assert {n.level for n in notes.values()} == {"info"}
    v1, v2 = notes["simple_v1"].message, notes["english_v2"].message
    assert "pgfunnel reindex -c default --analyzer simple_v8 --activate" in v1
    assert "inner names" in v1
    assert "pgfunnel reindex -c default --analyzer english_v8 --activate" in v2
    assert "inner names" not in v2


def test_a_retired_version_with_what_a_reindex_would_bring_is_named(sample_db: str) -> None:
    """After a switch back to an older version, doctor sent the user to a reindex (a
    whole new build) although the version switched away from was there to activate."""
    from pgfunnel import versions

    with connect(sample_db, autocommit=True) as conn:
        # vectors are copied from version 1: an analyzer change embeds nothing
        res = versions.reindex(conn, "default", analyzer="english_v2")
        versions.activate(conn, "default", res.version)
        notes = [f.message for f in check_active_indexes(conn)]
        assert any("--analyzer english_v8" in n for n in notes), notes
        [named] = [n for n in notes if "retired version" in n]
        assert "retired version 1 (model" in named and "analyzer english_v8" in named
        assert "`pgfunnel versions activate 1 -c default`" in named
        # a retired version that lacks it too is not offered
        conn.execute("update pgfunnel.index_version set analyzer = 'english_v1' "
                     "where version = 1")
        assert not [f for f in check_active_indexes(conn) if "retired version" in f.message]


def test_a_version_that_counts_a_terms_heading_once_is_pointed_to_reindex(
        sample_db: str) -> None:
    with connect(sample_db, autocommit=True) as conn:
        assert not [f for f in check_active_indexes(conn) if "heading once" in f.message]
        conn.execute("update pgfunnel.index_version "
                     "set params = params || '{\"lexical_input\": \"title2\"}'")
        [note] = [f for f in check_active_indexes(conn) if "heading once" in f.message]
        assert note.level == "info" and "pgfunnel reindex -c default --activate" in note.message
        assert "ingested again" in note.message
        # one that counts the title once is told about the title, not both
        conn.execute("update pgfunnel.index_version "
                     "set params = params || '{\"lexical_input\": \"title\"}'")
        notes = [f.message for f in check_active_indexes(conn)]
        assert any("title once" in n for n in notes)
        assert not any("heading once" in n for n in notes)


def test_a_retired_version_of_another_analyzer_is_not_offered_for_the_title(
        sample_db: str) -> None:
    # the active simple_v8 version counted the title once; the retired english_v8 one was
    # offered as having "what the notes above would reindex for", an analyzer switch
    from pgfunnel import versions

    with connect(sample_db, autocommit=True) as conn:
        res = versions.reindex(conn, "default", analyzer="simple_v8", lexical_input="title",
                               activate_after=True)
        notes = [f.message for f in check_active_indexes(conn)]
        assert any("title once" in n for n in notes), notes
        assert not [n for n in notes if "retired version" in n], notes
        # one of the same analyzer that counts it twice is offered
        same = versions.reindex(conn, "default", analyzer="simple_v8")
        versions.activate(conn, "default", same.version)
        versions.activate(conn, "default", res.version)
        [named] = [f.message for f in check_active_indexes(conn) if "retired version" in f.message]
        assert f"retired version {same.version} " in named and "simple_v8" in named


def _analyzer_notes(conn: psycopg.Connection[Any]) -> list[str]:
    return [f.message for f in check_active_indexes(conn) if "analyzer" in f.message]


def test_a_v3_version_is_pointed_to_the_newest_only_when_it_holds_chinese_or_japanese(
        conn: psycopg.Connection[Any]) -> None:
    from funnel_util import make_collection

    make_collection(conn, "t", 16, analyzer="english_v3")
    ingest(conn, [doc("en", "How to create an index in PostgreSQL.")])
    assert _analyzer_notes(conn) == []
    ingest(conn, [doc("zh", "数据库索引的性能取决于索引类型。")])
    [note] = _analyzer_notes(conn)
    assert "pgfunnel reindex -c t --analyzer english_v8 --activate" in note
    assert "Chinese or Japanese" in note and "Korean" not in note


def test_a_v4_version_is_pointed_to_the_newest_only_when_it_holds_korean(
        conn: psycopg.Connection[Any]) -> None:
    from funnel_util import make_collection

    make_collection(conn, "t", 16, analyzer="simple_v4")
    # Chinese reads the same under v4 and v5, and so do Korean words of two syllables
    ingest(conn, [doc("zh", "数据库索引的性能取决于索引类型。"), doc("ko", "검색 방법")])
    assert _analyzer_notes(conn) == []
    ingest(conn, [doc("ko2", "데이터베이스를 백업하는 방법")])
    [note] = _analyzer_notes(conn)
    assert "pgfunnel reindex -c t --analyzer simple_v8 --activate" in note
    assert "Korean text (2 terms of it" in note and "Chinese" not in note


def test_a_v5_version_is_pointed_to_the_newest_only_when_it_holds_thai_or_indic_text(
        conn: psycopg.Connection[Any]) -> None:
    from funnel_util import make_collection

    make_collection(conn, "t", 16, analyzer="english_v5")
    # Chinese and Korean read the same under v5 and v6
    ingest(conn, [doc("zh", "数据库索引的性能取决于索引类型。"), doc("ko", "데이터베이스를 백업")])
    assert _analyzer_notes(conn) == []
    ingest(conn, [doc("hi", "हिन्दी में खोज")])
    [note] = _analyzer_notes(conn)
    assert "pgfunnel reindex -c t --analyzer english_v8 --activate" in note
    assert "Thai, Lao, Burmese, Khmer or Indic text" in note and "Korean" not in note


def test_a_v6_version_is_pointed_to_v7_only_when_words_are_joined_by_unicode_dashes(
        conn: psycopg.Connection[Any]) -> None:
    from funnel_util import make_collection

    make_collection(conn, "t", 16, analyzer="english_v6")
    make_collection(conn, "v7", 16, analyzer="english_v7")
    # a dash between spaces and the em dash between words are read alike by v6 and v7
    ingest(conn, [doc("en", "Refunds \u2013 annual plans only\u2014see ERR-4029.")])
    ingest(conn, [doc("en", "Code ERR\u20114029 closes the refund window.")], collection="v7")
    assert _analyzer_notes(conn) == []
    ingest(conn, [doc("code", "Code ERR\u20114029 closes the refund window.")])
    [note] = _analyzer_notes(conn)
    assert "collection 't'" in note and "Unicode hyphens or dashes" in note
    assert "pgfunnel reindex -c t --analyzer english_v8 --activate" in note


def test_a_v7_version_is_pointed_to_v8_only_when_names_open_or_close_with_underscores(
        conn: psycopg.Connection[Any]) -> None:
    from funnel_util import make_collection

    make_collection(conn, "t", 16, analyzer="english_v7")
    make_collection(conn, "v8", 16, analyzer="english_v8")
    # underscores inside an identifier, or standing alone, are read alike by v7 and v8,
    # and so is a fill-in blank of five or more beside a word
    ingest(conn, [doc("en", "Call jsonb_path_exists; a blank is written _ or __ here.")])
    ingest(conn, [doc("form", "Signature__________ Date: ______ __________x")])
    ingest(conn, [doc("en", "Define __init__ to set up an instance.")], collection="v8")
    assert _analyzer_notes(conn) == []
    ingest(conn, [doc("py", "Define __init__ to set up an instance.")])
    [note] = _analyzer_notes(conn)
    assert "collection 't'" in note and "opened or closed by underscores" in note
    assert "pgfunnel reindex -c t --analyzer english_v8 --activate" in note


def test_a_v7_version_is_pointed_to_v8_when_a_run_of_underscores_joins_a_name(
        conn: psycopg.Connection[Any]) -> None:
    # `author__name` (Django's field lookups) is `author` and `name` under v7, one term and
    # its parts under v8; the note looked only at underscores opening or closing a name
    from funnel_util import make_collection

    make_collection(conn, "t", 16, analyzer="english_v7")
    ingest(conn, [doc("en", "Filter with author_name or jsonb_path_exists.")])
    assert _analyzer_notes(conn) == []
    ingest(conn, [doc("orm", "Filter with Entry.objects.filter(author__name='x').")])
    [note] = _analyzer_notes(conn)
    assert "collection 't'" in note and "joined by a run of them (author__name)" in note
    assert "pgfunnel reindex -c t --analyzer english_v8 --activate" in note


def test_a_collection_of_german_documents_is_pointed_to_german_v8(
        conn: psycopg.Connection[Any]) -> None:
    """doctor read no document's language: a collection of German documents on
    english_v8 got no note, where german_v8 is the analyzer made for it."""
    from funnel_util import make_collection

    from pgfunnel import versions

    make_collection(conn, "t", 16, analyzer="english_v8")
    # half German (a region counts, `DE` as stored does not): not most
    ingest(conn, [doc("de1", "Die Datenbank wird gesichert.", language="de"),
                  doc("de2", "Der Index wird erstellt.", language="de-AT"),
                  doc("up", "Die Tabelle wird geleert.", language="DE"),
                  doc("en", "The database is backed up.", language="en")], collection="t")
    assert _analyzer_notes(conn) == []
    ingest(conn, [doc("de3", "Die Sicherung wird geprüft.", language="de")], collection="t")
    [note] = _analyzer_notes(conn)
    assert "collection 't'" in note and "3 of its 5 documents say language German" in note
    assert "pgfunnel reindex -c t --analyzer german_v8 --activate" in note
    # an older analyzer's note names german_v8 too, so one reindex brings both
    conn.execute("update pgfunnel.index_version set analyzer = 'simple_v2'")
    notes = _analyzer_notes(conn)
    assert len(notes) == 2 and all("--analyzer german_v8 --activate" in n for n in notes)
    # once moved, nothing more is said, and the English version is not offered back
    versions.reindex(conn, "t", analyzer="german_v8", activate_after=True)
    assert _analyzer_notes(conn) == []
    assert not [f for f in check_active_indexes(conn) if "retired version" in f.message]
    # switched back, the retired german_v8 version is named as having it
    versions.activate(conn, "t", 1)
    [named] = [f.message for f in check_active_indexes(conn) if "retired version" in f.message]
    assert "retired version 2 (model" in named and "analyzer german_v8" in named


def test_an_ascii_only_collation_is_a_warning_for_collections_with_other_text(
        server_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from funnel_util import c_locale_database, make_collection

    from pgfunnel import schema

    with c_locale_database(server_dsn) as dsn, connect(dsn, autocommit=True) as conn:
        make_collection(conn, "v5", 16, analyzer="english_v5")
        make_collection(conn, "v6", 16, analyzer="english_v6")
        for name in ("v5", "v6"):
            ingest(conn, [doc("en", "How to back up a database.")], collection=name)
        assert [f for f in check_active_indexes(conn) if "analyzer" in f.message] == []
        for name in ("v5", "v6"):
            ingest(conn, [doc("fr", "Sauvegarder la base de données")], collection=name)
        [warning] = [f for f in check_active_indexes(conn) if "analyzer" in f.message]
        # a server with no collation that lowers beyond ASCII (none here: Postgres 17
        # and later always have pg_c_utf8, so the choices are taken away)
        monkeypatch.setattr(schema, "CASE_COLLATIONS", ())
        unlowered = [f for f in check_active_indexes(conn) if "CAFÉ" in f.message]
    assert warning.level == "warning"
    assert "collection 'v5'" in warning.message and "reads only ASCII letters" in warning.message
    assert "pgfunnel reindex -c v5 --analyzer english_v8 --activate" in warning.message
    [note] = unlowered
    assert note.level == "warning" and "collection 'v6'" in note.message


def test_a_full_precision_graph_is_pointed_to_reindex(sample_db: str) -> None:
    from pgfunnel.ingest import create_hnsw_index

    with connect(sample_db, autocommit=True) as conn:
        assert not [f for f in check_active_indexes(conn) if "full-precision" in f.message]
        vid, dims = conn.execute("select id, dimensions from pgfunnel.index_version "
                                 "where state = 'active'").fetchone()  # type: ignore[misc]
        conn.execute("update pgfunnel.index_version set params = params - 'hnsw_type'")
        conn.execute(f"drop index pgfunnel.embedding_hnsw_v{vid}")
        create_hnsw_index(conn, vid, dims)
        findings = check_active_indexes(conn)
    [note] = [f for f in findings if "full-precision" in f.message]
    assert note.level == "info" and "pgfunnel reindex -c default --activate" in note.message
    assert worst(findings) != "error", findings


def test_invalid_and_missing_indexes_are_errors_with_exit_3(sample_db: str) -> None:
    with connect(sample_db, autocommit=True) as conn:
        vid = one_row(conn.execute("select id from pgfunnel.index_version where state = 'active'"
                                   ))[0]
        conn.execute(f"drop index pgfunnel.embedding_hnsw_v{vid}")
        code, report = _doctor(sample_db)
        assert code == 3 and not report["ok"]
        assert any(f["check"] == "active_index" and "missing" in f["message"]
                   for f in report["findings"])
        # an invalid index (a concurrent build that failed half-way)
        conn.execute("create table pgfunnel.t_dup (x int)")
        conn.execute("insert into pgfunnel.t_dup values (1), (1)")
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("create unique index concurrently t_dup_x on pgfunnel.t_dup (x)")
        code, report = _doctor(sample_db)
        assert code == 3
        assert any(f["check"] == "invalid_index" and "t_dup_x" in f["message"]
                   for f in report["findings"])


def test_row_security_without_policy_is_an_error(sample_db: str) -> None:
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("alter table pgfunnel.chunk enable row level security")
        findings = run_checks(conn)
    rs = [f for f in findings if f.check == "row_security"]
    assert any(f.level == "error" and "pgfunnel.chunk" in f.message for f in rs)
    assert worst(findings) == "error"


def test_row_security_off_is_said_once(sample_db: str) -> None:
    """doctor said twice that row-level security is off, in two info lines
    (`row_security` and `security.rls`, "RLS mode is off"); one says it now, with the fix."""
    from pgfunnel.cli.main import app

    code, report = _doctor(sample_db)
    # (a `privileges` finding on members of pgfunnel_reader, roles other tests in the
    # cluster may have left, also says "RLS mode is off here": it is about those roles)
    said = [f for f in report["findings"] if f["check"] != "privileges"
            and ("security is off" in f["message"] or "RLS mode is off" in f["message"])]
    assert code == 0 and [(f["level"], f["check"]) for f in said] == [
        ("info", "row_security")], said
    assert "`pgfunnel init --rls` adds policies" in said[0]["message"]
    assert "funnel_search's filters" in said[0]["message"]
    res = CliRunner().invoke(app, ["doctor", "--dsn", sample_db], env={"COLUMNS": "300"})
    lines = [line for line in res.output.splitlines() if "its members" not in line
             and ("security is off" in line or "RLS mode is off" in line)]
    assert len(lines) == 1, res.output


def test_schema_missing_is_reported_not_raised(empty_db: str) -> None:
    code, report = _doctor(empty_db)
    assert code == 3
    assert "schema" in _checks(report, "error") or "pgvector" in _checks(report, "error")
    # the checks that read the schema are skipped, not reported as failing on its absence
    assert not any("the check failed" in f["message"] for f in report["findings"]), report


def test_worst_level_order() -> None:
    assert worst([]) is None
    assert worst([Finding("info", "a", "x"), Finding("warning", "b", "y")]) == "warning"
    assert worst([Finding("warning", "b", "y"), Finding("error", "c", "z")]) == "error"


def test_app_role_option_checks_the_named_role(sample_db: str) -> None:
    # the owner the tests connect as is a superuser: as an application role it fails twice
    with connect(sample_db, autocommit=True) as conn:
        me = one_row(conn.execute("select current_user"))[0]
    code, report = _doctor(sample_db, "--app-role", me)
    assert code == 3
    assert {"security.app_role_owner", "security.app_role_superuser"} <= _checks(report, "error")
    code, report = _doctor(sample_db, "--app-role", "no_such_role_here")
    assert code == 3 and "security.app_role" in _checks(report, "error")
    code, report = _doctor(sample_db)
    assert code == 0 and not any(c.startswith("security.app_role_") for c in
                                 _checks(report, "error"))


def test_an_empty_app_role_is_refused_not_skipped(sample_db: str) -> None:
    """`--app-role "$APP_ROLE"` with the variable unset checked no role and passed."""
    from pgfunnel.cli.main import app

    from pgfunnel.errors import ConfigError

    for empty in ("", " "):
        result = CliRunner().invoke(app, ["doctor", "--dsn", sample_db, "--app-role", empty],
                                    env={"COLUMNS": "300"})
        assert result.exit_code == 1, result.output
        assert result.output.startswith("error: --app-role: must be a role name"), result.output
    with connect(sample_db, autocommit=True) as conn, \
            pytest.raises(ConfigError, match="app_role: must be a role name"):
        run_checks(conn, app_role="")


def test_public_documents_with_readers_are_refused_and_older_ones_reported(
        sample_db: str) -> None:
    """Readers restrict only a document that is not public: giving a public document
    readers alone used to leave it readable by everyone."""
    from pgfunnel.errors import InvalidInputError, translate
    from pgfunnel.search import Funnel

    with connect(sample_db, autocommit=True) as conn:
        key, text = one_row(conn.execute(
            "select d.citekey, c.text from pgfunnel.document d join pgfunnel.chunk c "
            "on c.document_id = d.id where d.is_public order by d.id limit 1"))
        with pytest.raises(psycopg.errors.CheckViolation) as exc:
            conn.execute("update pgfunnel.document set readers = '{hr-only}' "
                         "where citekey = %s", (key,))
        err = translate(exc.value)
        assert isinstance(err, InvalidInputError) and "is_public = false" in str(err)
        # with is_public the update goes through and the document is hidden at once
        conn.execute("update pgfunnel.document set readers = '{hr-only}', is_public = false "
                     "where citekey = %s", (key,))
        query = " ".join(text.split()[:12])
        with Funnel(conn, embedder=None) as f:
            assert key not in [r.citekey for r in f.search(query, k=20).results]
            assert key in [r.citekey for r in f.search(query, k=20,
                                                        principals=["hr-only"]).results]
        assert not [f for f in run_checks(conn) if f.check == "public_with_readers"]
        # a row written before the constraint (migration 0007 adds it NOT VALID) is found
        conn.execute("alter table pgfunnel.document "
                     "drop constraint document_with_readers_is_not_public")
        conn.execute("update pgfunnel.document set is_public = true where citekey = %s", (key,))
        conn.execute("alter table pgfunnel.document add constraint "
                     "document_with_readers_is_not_public "
                     "check (not is_public or cardinality(readers) = 0) not valid")
    code, report = _doctor(sample_db)
    assert code == 3 and "public_with_readers" in _checks(report, "error")
    [finding] = [f for f in report["findings"] if f["check"] == "public_with_readers"]
    assert repr(key) in finding["message"] and "is_public = false" in finding["message"]


@pytest.mark.parametrize(("column", "value", "constraint"), [
    ("tenant", "''", "document_tenant_not_empty"),
    ("language", "''", "document_language_not_empty"),
    ("readers", "'{NULL}'", "document_readers_named"),
    ("readers", "'{alice,\"\"}'", "document_readers_named"),
    ("valid_to", "now() - interval '1 day'", "document_validity_ordered"),
])
def test_hand_written_values_ingest_refuses_are_refused_and_older_ones_reported(
        sample_db: str, column: str, value: str, constraint: str) -> None:
    """A document with a tenant or language of '', a NULL or '' reader, or a validity range
    that ends before it starts is one no search finds; ingest refuses them, and since
    migration 0010 so does the table."""
    from pgfunnel.errors import InvalidInputError, translate

    update = f"update pgfunnel.document set is_public = false, valid_from = now(), " \
             f"{column} = {value} where citekey = %s"
    with connect(sample_db, autocommit=True) as conn:
        key = one_row(conn.execute("select min(citekey) from pgfunnel.document"))[0]
        with pytest.raises(psycopg.errors.CheckViolation) as exc:
            conn.execute(update, (key,))
        err = translate(exc.value)
        assert isinstance(err, InvalidInputError)
        assert str(err).startswith(f"document: {column} "), err
        assert not [f for f in run_checks(conn) if f.check == "unfindable_documents"]
        # a row written before the constraint (migration 0010 adds it NOT VALID) is found
        [definition] = one_row(conn.execute(
            "select pg_get_constraintdef(oid) from pg_constraint where conname = %s",
            (constraint,)))
        assert "NOT VALID" in definition
        conn.execute(f"alter table pgfunnel.document drop constraint {constraint}")
        conn.execute(update, (key,))
        conn.execute(f"alter table pgfunnel.document add constraint {constraint} {definition}")
    code, report = _doctor(sample_db)
    assert code == 0 and "unfindable_documents" in _checks(report, "warning")
    [finding] = [f for f in report["findings"] if f["check"] == "unfindable_documents"]
    assert repr(key) in finding["message"] and "1 document(s)" in finding["message"]


def test_deletes_in_replica_mode_leave_orphans_that_doctor_names(sample_db: str) -> None:
    # replica mode skips the foreign keys' cascades too: the chunks stay, parentless
    with connect(sample_db, autocommit=True) as conn:
        assert check_orphan_rows(conn) == []
        conn.execute("set session_replication_role = replica")
        conn.execute("delete from pgfunnel.document where citekey = "
                     "(select min(citekey) from pgfunnel.document)")
        conn.execute("reset session_replication_role")
        found = check_orphan_rows(conn)
    assert found and {f.level for f in found} == {"warning"}
    assert "pgfunnel.chunk belong to no document" in found[0].message
    _, report = _doctor(sample_db)
    assert "orphans" in _checks(report, "warning")


def test_doctor_as_a_reader_under_rls_says_whom_to_run_it_as(sample_db: str) -> None:
    from _security_helpers import create_app_role

    from pgfunnel.security import enable_rls

    with connect(sample_db) as conn:
        enable_rls(conn)
        conn.commit()
    reader = create_app_role(sample_db)
    code, report = _doctor(reader)
    assert "doctor_role" in _checks(report, "error") and code != 0
    # no count made under row-level security: no advice to reindex a healthy collection
    assert not any("reindex" in f["message"] for f in report["findings"])
    _, as_owner = _doctor(sample_db)
    assert "doctor_role" not in _checks(as_owner, "error")


def test_a_missing_hnsw_index_names_the_statement_that_rebuilds_it(sample_db: str) -> None:
    from pgfunnel.ingest import refresh_hnsw_walks

    with connect(sample_db, autocommit=True) as conn:
        vid = one_row(conn.execute("select id from pgfunnel.index_version where state = 'active'"
                                   ))[0]
        before = conn.execute("select pg_get_indexdef(%s::regclass)",
                              (f"pgfunnel.embedding_hnsw_v{vid}",)).fetchone()
        conn.execute(f"drop index pgfunnel.embedding_hnsw_v{vid}")
        [finding] = [f for f in check_active_indexes(conn) if "missing" in f.message]
        assert finding.level == "error" and "pgfunnel reindex" not in finding.message
        statements = [s for s in finding.message.split("`")[1::2]
                      if s.startswith(("set ", "create "))]
        assert statements[-1].startswith("create index concurrently")
        for statement in statements:
            conn.execute(statement)
        after = conn.execute("select pg_get_indexdef(%s::regclass)",
                             (f"pgfunnel.embedding_hnsw_v{vid}",)).fetchone()
        assert after == before
        refresh_hnsw_walks(conn)  # what the `pgfunnel init` it names does
        assert worst(check_active_indexes(conn)) == "info"


def test_a_missing_hnsw_index_is_built_by_the_ingest_its_finding_names(conn: Any) -> None:
    # a first ingest stopped before its indexes leaves this; doctor's error and its
    # warning about the postings both name running the ingest again, which builds them
    ingest(conn, [doc("a", "How to rotate an API key.")])
    vid = one_row(conn.execute("select id from pgfunnel.index_version where state = 'active'"
                               ))[0]
    conn.execute(f"drop index pgfunnel.embedding_hnsw_v{vid}")
    [finding] = [f for f in check_active_indexes(conn) if "missing" in f.message]
    assert finding.level == "error" and "`pgfunnel ingest PATH -c t`" in finding.message
    ingest(conn, [doc("b", "How to revoke an API key.")], seed=1)
    assert one_row(conn.execute("select to_regclass(%s) is not null",
                                (f"pgfunnel.embedding_hnsw_v{vid}",)))[0]
    assert worst(check_active_indexes(conn)) == "info"


def test_vectors_of_no_chunk_are_counted_with_their_delete(sample_db: str) -> None:
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("set session_replication_role = replica")
        conn.execute("delete from pgfunnel.chunk where id = (select min(id) from pgfunnel.chunk)")
        conn.execute("reset session_replication_role")
        vectors = one_row(conn.execute("select count(*) from pgfunnel.embedding"))[0]
        [finding] = [f for f in check_active_indexes(conn) if f.level == "warning"]
        assert f"1 of its {vectors} vectors belong to no chunk of the collection" in finding.message
        assert "chunks have no rows" not in finding.message
        delete = finding.message.split("`")[-2]
        assert delete.startswith("delete from pgfunnel.embedding")
        conn.execute(delete)
        assert worst(check_active_indexes(conn)) == "info"


def test_orphan_rows_are_deleted_with_statistics_kept_exact(sample_db: str) -> None:
    from pgfunnel.doctor import check_orphans

    with connect(sample_db, autocommit=True) as conn:
        conn.execute("set session_replication_role = replica")
        conn.execute("delete from pgfunnel.document where citekey = "
                     "(select min(citekey) from pgfunnel.document)")
        conn.execute("reset session_replication_role")
        found = check_orphan_rows(conn)
        assert found and not any("pgfunnel reindex" in f.message for f in found)
        for finding in found:
            conn.execute(finding.message.split("`")[1])
        assert check_orphan_rows(conn) == [] and check_orphans(conn) == []
        # the delete's cascades and trigger kept the counts and term_stat exact
        assert [f.level for f in check_statistics(conn)] == ["info"]
        assert worst(check_active_indexes(conn)) == "info"


def test_term_stat_drift_is_found_and_reindex_repairs_it(sample_db: str) -> None:
    from pgfunnel import versions

    with connect(sample_db, autocommit=True) as conn:
        assert [f.level for f in check_statistics(conn)] == ["info"]
        vid = one_row(conn.execute("select id from pgfunnel.index_version where state = 'active'"
                                   ))[0]
        # a word of the corpus, and its most common term
        gone, skewed = "refund", one_row(conn.execute(
            "select term from pgfunnel.term_stat where index_version_id = %s "
            "order by df desc, term limit 1", (vid,)))[0]
        conn.execute("delete from pgfunnel.term_stat where index_version_id = %s "
                     "and term = %s", (vid, gone))
        conn.execute("update pgfunnel.term_stat set df = df + 3 where index_version_id = %s "
                     "and term = %s", (vid, skewed))
        with Funnel(conn, embedder=None) as f:
            assert f.search(gone, k=5).results == []
        [finding] = check_statistics(conn)
        assert finding.level == "error"
        assert "2 term(s)" in finding.message
        assert "1 of them have no statistics row" in finding.message
        assert f"{gone!r} (no row vs " in finding.message and f"{skewed!r} (" in finding.message
        assert "pgfunnel reindex -c default --activate" in finding.message
        # df alone wrong: scores skew, nothing goes unsearchable
        conn.execute("insert into pgfunnel.term_stat (index_version_id, term, df) "
                     "select %s, term, df from pgfunnel.bm25_recount(%s) where term = %s",
                     (vid, vid, gone))
        [finding] = check_statistics(conn)
        assert finding.level == "warning" and "1 term(s)" in finding.message
        # the fix named: a reindex builds exact statistics
        versions.reindex(conn, "default", activate_after=True)
        assert [f.level for f in check_statistics(conn)] == ["info"]
        with Funnel(conn, embedder=None) as f:
            assert f.search(gone, k=5).results


def _search_as(dsn: str) -> None:
    """One lexical search, as the role in ``dsn``; raises what Postgres raises."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("select set_config('pgfunnel.principals', '[]', true)")
        conn.execute("select count(*) from funnel_search('refund billing', "
                     "collection => 'default')").fetchone()


def _errors(report: dict[str, Any], check: str) -> list[str]:
    return [f["message"] for f in report["findings"]
            if f["level"] == "error" and f["check"] == check]


def test_lost_privileges_under_rls_are_errors_that_migrate_repairs(sample_db: str) -> None:
    from _security_helpers import create_app_role

    from pgfunnel import schema
    from pgfunnel.security import enable_rls

    with connect(sample_db) as conn:
        enable_rls(conn)
        conn.commit()
    reader = create_app_role(sample_db)
    webapp = conninfo_part(reader, "user")
    _search_as(reader)
    code, report = _doctor(sample_db, "--app-role", webapp)
    assert code == 0 and _errors(report, "privileges") == [], [
        f for f in report["findings"] if f["level"] == "error"]
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("revoke execute on function pgfunnel._term_df(integer,text[]) "
                     "from pgfunnel_reader")
        conn.execute("revoke select on pgfunnel.chunk from pgfunnel_reader")
        conn.execute("revoke insert on pgfunnel.search_log from pgfunnel_reader")
        conn.execute("revoke delete on pgfunnel.document from pgfunnel_writer")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        _search_as(reader)
    code, report = _doctor(sample_db, "--app-role", webapp)
    errors = _errors(report, "privileges")
    assert code == 3
    for role, privilege, obj in (("pgfunnel_reader", "EXECUTE", "pgfunnel._term_df"),
                                 ("pgfunnel_reader", "SELECT", "pgfunnel.chunk"),
                                 ("pgfunnel_reader", "INSERT", "pgfunnel.search_log"),
                                 ("pgfunnel_writer", "DELETE", "pgfunnel.document")):
        [message] = [m for m in errors if m.startswith(f"{role} lacks {privilege} ") and obj in m]
        assert "`pgfunnel migrate` as the schema owner" in message
    assert len(errors) == 4, errors
    # schema usage, and the application role's membership
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("revoke usage on schema pgfunnel from pgfunnel_reader")
        conn.execute(f"revoke pgfunnel_reader from {webapp}")
    _, report = _doctor(sample_db, "--app-role", webapp)
    errors = _errors(report, "privileges")
    assert any(m.startswith("pgfunnel_reader lacks USAGE on schema pgfunnel") for m in errors)
    [member] = [m for m in errors if "application role" in m]
    assert f"`grant pgfunnel_reader to {webapp}`" in member
    # the fix named: migrate grants again all the roles' privileges; the membership is
    # the one thing left
    schema.migrate(sample_db)
    _, report = _doctor(sample_db, "--app-role", webapp)
    assert _errors(report, "privileges") == [member]
    with connect(sample_db, autocommit=True) as conn:
        conn.execute(f"grant pgfunnel_reader to {webapp}")
    code, report = _doctor(sample_db, "--app-role", webapp)
    assert code == 0 and _errors(report, "privileges") == []
    _search_as(reader)


def test_privileges_without_rls_name_a_fix_that_works(sample_db: str) -> None:
    from _security_helpers import create_app_role

    from pgfunnel import schema
    from pgfunnel.doctor import check_privileges
    from pgfunnel.security import ensure_roles

    with connect(sample_db, autocommit=True) as conn:
        # roles of another database's `init --rls` (they are cluster-wide): this one never
        # granted them its tables, and that is no error
        ensure_roles(conn)
        found = check_privileges(conn)
        assert [f.level for f in found] == ["info", "info"], found
        assert all("RLS mode is off" in f.message for f in found)
    reader = create_app_role(sample_db)  # grant_privileges, no policies
    webapp = conninfo_part(reader, "user")
    _search_as(reader)
    with connect(sample_db, autocommit=True) as conn:
        assert [f.level for f in check_privileges(conn, webapp)] == ["info"]
        conn.execute("revoke select on pgfunnel.chunk from pgfunnel_reader")
        conn.execute("revoke execute on function pgfunnel._term_df(integer,text[]) "
                     "from pgfunnel_reader")
        found = check_privileges(conn, webapp)
        [table, function] = [f.message for f in found
                             if f.message.startswith("pgfunnel_reader lacks ")]
        assert "SELECT on table pgfunnel.chunk:" in table
        assert "EXECUTE on function pgfunnel._term_df(integer,text[]):" in function
        [app] = [f.message for f in found if "application role" in f.message]
        assert {f.level for f in found} == {"error"}
        # outside RLS mode migrate grants EXECUTE again, not table privileges
        assert "pgfunnel migrate" in function and "pgfunnel migrate` grants the roles no" in table
        assert "pgfunnel init --rls" in app
        grant = table.rsplit("`", 2)[1]
        assert grant == "grant select on pgfunnel.chunk to pgfunnel_reader"
        conn.execute(grant)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        _search_as(reader)
    schema.migrate(sample_db)
    _search_as(reader)
    with connect(sample_db, autocommit=True) as conn:
        assert [f.level for f in check_privileges(conn, webapp)] == ["info"]
        conn.execute(f"revoke pgfunnel_reader from {webapp}")
        [revoked] = check_privileges(conn, webapp)
    assert revoked.level == "error" and revoked.message.endswith(
        f"`grant pgfunnel_reader to {webapp}`")


def test_an_owner_held_to_forced_rls_is_told_to_join_the_writers(sample_db: str) -> None:
    """After `pg_restore --no-owner` of a database in RLS mode the restoring role owns the
    tables, and FORCE holds it to the policies: running as the owner is no fix."""
    import uuid

    from _security_helpers import with_user
    from psycopg import sql

    from pgfunnel.security import enable_rls

    owner = f"pgf_app_{uuid.uuid4().hex[:8]}"
    with connect(sample_db, autocommit=True) as conn:
        enable_rls(conn)
        conn.execute(sql.SQL("create role {} login").format(sql.Identifier(owner)))
        conn.execute(sql.SQL("alter schema pgfunnel owner to {}").format(sql.Identifier(owner)))
        for (table,) in conn.execute(
                "select c.oid::regclass::text from pg_class c "
                "where c.relnamespace = 'pgfunnel'::regnamespace and c.relkind in ('r', 'p')"
                ).fetchall():
            conn.execute(sql.SQL("alter table {} owner to {}").format(
                sql.SQL(table), sql.Identifier(owner)))
    code, report = _doctor(with_user(sample_db, owner))
    [message] = _errors(report, "doctor_role")
    assert code == 3 and "owns the pgfunnel tables" in message
    assert f"a superuser must run `grant pgfunnel_writer to {owner}`" in message
    assert "run `pgfunnel doctor` as the tables' owner" not in message
    with connect(sample_db, autocommit=True) as conn:
        conn.execute(sql.SQL("grant pgfunnel_writer to {}").format(sql.Identifier(owner)))
    _, report = _doctor(with_user(sample_db, owner))
    assert _errors(report, "doctor_role") == []


def test_pgvector_off_the_path_is_one_error_not_an_index_mismatch(sample_db: str) -> None:
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("create schema ext")
        conn.execute("alter extension vector set schema ext")
    # installed as a database whose extensions live in ext would be
    from pgfunnel import schema

    schema.migrate(psycopg.conninfo.make_conninfo(sample_db,
                                                  options="-c search_path=public,ext"))
    off_path = psycopg.conninfo.make_conninfo(sample_db, options="-c search_path=public")
    with connect(off_path, autocommit=True) as conn:
        # the index definition now names ext.halfvec: the same index, qualified
        assert "ext.halfvec" in one_row(conn.execute(
            "select pg_get_indexdef(c.oid) from pg_class c "
            "where c.relname ~ '^embedding_hnsw_v'"))[0]
        assert [f for f in check_active_indexes(conn) if f.level == "error"] == []
        [finding] = check_pgvector(conn)
        assert finding.level == "error" and "search_path" in finding.message


def test_pgfunnel_on_the_search_path_raises_no_false_security_findings(sample_db: str) -> None:
    # regprocedure text drops "pgfunnel." (in names and types) when the schema is on the
    # path: the by-design SECURITY DEFINER _term_df was reported as an error then
    on_path = psycopg.conninfo.make_conninfo(
        sample_db, options="-c search_path=pgfunnel,public")
    code, report = _doctor(on_path)
    assert code == 0 and report["ok"], [f for f in report["findings"] if f["level"] == "error"]
    assert "security.security_definer" not in _checks(report, "error")
    assert "security.search_path" not in _checks(report, "warning")


def test_documents_chunked_by_an_older_pgfunnel_are_named_and_chunked_again_once(
        sample_db: str, embedder: Any) -> None:
    from pgfunnel.cli.main import SAMPLE_CORPUS, app

    from pgfunnel.ingest import Ingester
    from pgfunnel.sources import CHUNKING_VERSION, read_path

    with connect(sample_db, autocommit=True) as conn:
        assert check_chunking(conn) == []
        # two documents as a pgfunnel before chunking version 7 stored them: a bare
        # sha256, no version mark
        conn.execute("update pgfunnel.document set content_hash = substring(content_hash "
                     "from position(':' in content_hash) + 1) "
                     "where id in (select id from pgfunnel.document order by id limit 2)")
        [finding] = check_chunking(conn)
        assert finding.level == "info"
        assert "'default': 2 document(s)" in finding.message
        assert "6 or older" in finding.message and f"now {CHUNKING_VERSION}" in finding.message
        # the upgrade itself says so too
        migrated = CliRunner().invoke(app, ["migrate", "--dsn", sample_db])
        assert migrated.exit_code == 0, migrated.output
        assert "note: collection 'default': 2 document(s) were chunked by an older" in \
            " ".join(migrated.output.split())
        # the result on stdout, the note on stderr
        assert "functions refreshed" in migrated.stdout and "note:" not in migrated.stdout
        assert migrated.stderr.startswith("note: collection 'default'")
        # the next ingest of the unchanged sources rewrites those two, says why, and
        # needs no model: their chunks read the same
        stats = Ingester(conn, "default", embedder=embedder).ingest(read_path(SAMPLE_CORPUS))
        assert stats.documents_written == 2 and stats.chunks_embedded == 0
        assert any("2 document(s) had been chunked by an older pgfunnel" in note
                   for note in stats.notes), stats.notes
        assert check_chunking(conn) == []
        # a document from a newer pgfunnel is a warning: this one would chunk it back
        conn.execute("update pgfunnel.document set content_hash = 'c999:' || content_hash "
                     "where id = (select min(id) from pgfunnel.document)")
        [newer] = check_chunking(conn)
        assert newer.level == "warning" and "newer pgfunnel" in newer.message


def test_walks_past_the_cache_limit_are_not_pointed_to_init(
        conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # more collections than the walk cache holds (32): doctor warned, for each one left
    # out, to run `pgfunnel init`, which caches the same 32 again
    import pgfunnel.doctor as doctor_module
    import pgfunnel.ingest as ingest_module
    from pgfunnel.ingest import refresh_hnsw_walks

    for name in ("a", "b", "c"):
        ingest(conn, [doc(f"{name}1", "some words")], collection=name)
    monkeypatch.setattr(ingest_module, "MAX_CACHED_WALKS", 2)
    monkeypatch.setattr(doctor_module, "MAX_CACHED_WALKS", 2, raising=False)
    assert refresh_hnsw_walks(conn)
    walks = [f for f in check_active_indexes(conn) if "graph walk" in f.message]
    assert [f.level for f in walks] == ["info"]
    assert "pgfunnel init" not in walks[0].message
    assert "1 active version(s)" in walks[0].message and "'a'" in walks[0].message


def test_a_connection_lost_during_the_checks_is_one_error_not_a_finding_each(
        sample_db: str) -> None:
    """A server stopped (or a session terminated) while doctor ran made every check left
    fail on the closed connection: `pgfunnel doctor` printed a table of "the check failed:
    ..." errors and exited 3, as if each were a finding about the database. It is one
    ConnectionFailedError (one line and exit 1 in the CLI) now."""
    from pgfunnel.errors import ConnectionFailedError

    with connect(sample_db, autocommit=True) as conn:
        pid = conn.info.backend_pid
        with psycopg.connect(sample_db, autocommit=True) as other:
            other.execute("select pg_terminate_backend(%s)", (pid,))
        with pytest.raises(ConnectionFailedError, match="lost the connection"):
            run_checks(conn)


def test_an_app_role_that_cannot_reach_the_database_is_an_error(sample_db: str) -> None:
    """After `revoke connect on database DB from public` (what security.database_connect
    advises) without the grant for the application's role, or with a role made by `create
    role` (NOLOGIN), `doctor --app-role` found every privilege in order while each of the
    role's connections was refused."""
    from _security_helpers import create_app_role
    from psycopg import sql

    from pgfunnel.security import enable_rls

    with connect(sample_db) as conn:
        enable_rls(conn)
        conn.commit()
    reader = create_app_role(sample_db)
    webapp = conninfo_part(reader, "user")
    dbname = conninfo_part(sample_db, "dbname")
    code, report = _doctor(sample_db, "--app-role", webapp)
    assert code == 0 and _errors(report, "privileges") == []
    with connect(sample_db, autocommit=True) as conn:
        conn.execute(sql.SQL("revoke connect on database {} from public").format(
            sql.Identifier(dbname)))
        conn.execute(sql.SQL("alter role {} nologin").format(sql.Identifier(webapp)))
    with pytest.raises(psycopg.OperationalError):
        _search_as(reader)
    code, report = _doctor(sample_db, "--app-role", webapp)
    assert code == 3 and _errors(report, "privileges") == [
        f"application role {webapp!r} may not log in (NOLOGIN, what `create role` makes): "
        f"its connections are refused; `alter role {webapp} login`",
        f"application role {webapp!r} may not connect to database {dbname} (CONNECT is "
        f"granted neither to it nor to PUBLIC): its connections are refused; `grant connect "
        f"on database {dbname} to {webapp}`"]
    with connect(sample_db, autocommit=True) as conn:
        conn.execute(f"alter role {webapp} login")
        conn.execute(f"grant connect on database {dbname} to {webapp}")
    code, report = _doctor(sample_db, "--app-role", webapp)
    assert code == 0 and _errors(report, "privileges") == []
    _search_as(reader)


def test_a_role_granted_nothing_gets_one_finding_saying_what_it_lacks(sample_db: str) -> None:
    """`doctor` as a login role granted nothing on pgfunnel printed one `the check failed:
    permission denied for schema pgfunnel` line per check, naming neither what the role
    lacks nor what to run instead. It is one finding now, naming the checks it skipped,
    the schema's owner to run doctor as, and the grant; the checks that ran stay."""
    import uuid

    from _security_helpers import with_user
    from psycopg import sql

    role = f"pgf_app_{uuid.uuid4().hex[:8]}"
    with connect(sample_db, autocommit=True) as conn:
        conn.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
        [owner] = conn.execute("select pg_get_userbyid(nspowner) from pg_namespace "
                               "where nspname = 'pgfunnel'").fetchone() or [None]
    code, report = _doctor(with_user(sample_db, role))
    assert code == 3, report
    failed = [f for f in report["findings"] if "the check failed" in f["message"]]
    assert failed == [], failed
    [denied] = [f for f in report["findings"] if f["check"] == "doctor_access"]
    message = denied["message"]
    assert denied["level"] == "error"
    assert message.startswith(f"role {role!r} lacks USAGE on schema pgfunnel"), message
    assert "checks were skipped: " in message and "statistics" in message, message
    assert f"run `pgfunnel doctor --dsn OWNER_DSN` as {owner!r}" in message, message
    assert f"grant pgfunnel_reader to {role}" in message, message
    # the checks that need no privilege on the schema still ran and said what they found
    assert {"pgvector"} <= {f["check"] for f in report["findings"]}, report


def _warns_of_readers(finding: dict[str, Any], opening: str, roles: tuple[str, ...]) -> str:
    """A search_log_readers finding, checked: a warning whose message opens with
    ``opening`` and names exactly ``roles`` (quoted, sorted) as reading the table without
    row-level security. Its message, for what else a test looks for in it."""
    said = str(finding["message"])
    assert finding["level"] == "warning", finding
    assert said.startswith(opening), said
    named = said.split("(no row-level security on it): ")[1].split("; revoke")[0]
    assert named == ", ".join(repr(r) for r in sorted(roles)), said
    return said


def test_doctor_names_the_roles_that_may_read_the_search_log_without_rls(db: str) -> None:
    """Without row-level security a role granted SELECT on search_log reads every traced
    search's text, principals and tenant (docs/security.md, who reads the search log), and
    doctor said nothing of it. It warns now, naming each role other than the owner that
    may read query_text: granted the table, the column, or a group role that holds them,
    and PUBLIC; not a role holding `select (id)` alone, what a traced search needs. Under
    row-level security the policies hold readers to their own searches: no warning."""
    import uuid

    from psycopg import sql

    from pgfunnel.doctor import check_search_log_readers
    from pgfunnel.security import enable_rls

    table, member, column, logger = (f"pgf_app_{uuid.uuid4().hex[:8]}" for _ in range(4))
    with connect(db, autocommit=True) as conn:
        assert check_search_log_readers(conn) == []  # as init leaves it
        for role in (table, member, column, logger):
            conn.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
        conn.execute(sql.SQL("grant select on pgfunnel.search_log to {}").format(
            sql.Identifier(table)))
        conn.execute(sql.SQL("grant {} to {}").format(sql.Identifier(table),
                                                      sql.Identifier(member)))
        conn.execute(sql.SQL("grant select (id, query_text) on pgfunnel.search_log to {}")
                     .format(sql.Identifier(column)))
        conn.execute(sql.SQL("grant select (id) on pgfunnel.search_log to {}").format(
            sql.Identifier(logger)))
        [owner] = conn.execute("select pg_get_userbyid(relowner) from pg_class "
                               "where oid = 'pgfunnel.search_log'::regclass").fetchone() \
            or [None]
    code, report = _doctor(db)
    assert code == 0, report  # a warning: doctor exits 3 on errors alone
    [finding] = [f for f in report["findings"] if f["check"] == "search_log_readers"]
    said = _warns_of_readers(finding, "roles other than the owner may read "
                             "pgfunnel.search_log, every traced search's query text",
                             (table, member, column))
    assert logger not in said and repr(owner) not in said, said
    assert "`grant select (id) on pgfunnel.search_log` alone" in said, said

    with connect(db, autocommit=True) as conn:
        conn.execute("grant select on pgfunnel.search_log to public")
        [public] = check_search_log_readers(conn)
        assert "(no row-level security on it): PUBLIC (every role); revoke" \
            in public.message, public.message
        conn.execute("revoke select on pgfunnel.search_log from public")
        conn.execute(sql.SQL("revoke select on pgfunnel.search_log from {}, {}").format(
            sql.Identifier(table), sql.Identifier(column)))
        assert check_search_log_readers(conn) == []
        # RLS mode, with a role still granted the table: the policies read for it
        conn.execute(sql.SQL("grant select on pgfunnel.search_log to {}").format(
            sql.Identifier(table)))
        with connect(db) as owner_conn:
            enable_rls(owner_conn)
            owner_conn.commit()
        assert check_search_log_readers(conn) == []


def test_doctor_names_the_roles_that_may_read_the_search_trace_without_rls(db: str) -> None:
    """search_trace holds the chunk ids and ranks of every traced search's pool, of every
    user: without row-level security a role granted SELECT on it (or on any of its
    columns, or through a group role, or PUBLIC) reads them, and doctor said nothing of it.
    The search_log rule covers it now, in a finding of its own naming the table; a role
    holding only the INSERT a traced search needs is not named, nor a search_log reader.
    Under row-level security the policies hold readers to their own searches: no warning."""
    import uuid

    from psycopg import sql

    from pgfunnel.doctor import check_search_log_readers
    from pgfunnel.security import enable_rls

    table, member, column, tracer, log_reader = (f"pgf_app_{uuid.uuid4().hex[:8]}"
                                                 for _ in range(5))

    def grant(what: str, role: str) -> None:
        conn.execute(sql.SQL("grant " + what + " to {}").format(sql.Identifier(role)))

    with connect(db, autocommit=True) as conn:
        assert check_search_log_readers(conn) == []  # as init leaves it
        for role in (table, member, column, tracer, log_reader):
            conn.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
        grant("select on pgfunnel.search_trace", table)
        conn.execute(sql.SQL("grant {} to {}").format(sql.Identifier(table),
                                                      sql.Identifier(member)))
        grant("select (fused_rank) on pgfunnel.search_trace", column)
        grant("insert on pgfunnel.search_trace", tracer)
        grant("select (id) on pgfunnel.search_log", tracer)
        grant("select on pgfunnel.search_log", log_reader)
    code, report = _doctor(db)
    assert code == 0, report  # warnings: doctor exits 3 on errors alone
    found = [f for f in report["findings"] if f["check"] == "search_log_readers"]
    by_table = {f["message"].split(", ")[0]: f for f in found}
    assert sorted(by_table) == ["roles other than the owner may read pgfunnel.search_log",
                                "roles other than the owner may read pgfunnel.search_trace"], found
    trace = by_table["roles other than the owner may read pgfunnel.search_trace"]
    said = _warns_of_readers(trace, "roles other than the owner may read "
                             "pgfunnel.search_trace, the chunk ids and ranks of every "
                             "traced search's pool", (table, member, column))
    assert "`revoke select on pgfunnel.search_trace from ROLE`" in said, said
    assert "`grant insert on pgfunnel.search_trace` alone" in said, said
    # each table names its own readers
    log_said = by_table["roles other than the owner may read pgfunnel.search_log"]["message"]
    assert repr(log_reader) in log_said and table not in log_said, log_said
    assert log_reader not in said, said

    with connect(db, autocommit=True) as conn:
        conn.execute(sql.SQL("revoke select on pgfunnel.search_log from {}").format(
            sql.Identifier(log_reader)))
        conn.execute("grant select (chunk_id) on pgfunnel.search_trace to public")
        [public] = check_search_log_readers(conn)
        assert public.message.startswith(
            "roles other than the owner may read pgfunnel.search_trace"), public.message
        assert "(no row-level security on it): PUBLIC (every role); revoke" \
            in public.message, public.message
        conn.execute("revoke select (chunk_id) on pgfunnel.search_trace from public")
        conn.execute(sql.SQL("revoke select on pgfunnel.search_trace from {}").format(
            sql.Identifier(table)))
        conn.execute(sql.SQL("revoke select (fused_rank) on pgfunnel.search_trace from {}")
                     .format(sql.Identifier(column)))
        assert check_search_log_readers(conn) == []
        # RLS mode, with a role still granted the table: the policies read for it
        grant("select on pgfunnel.search_trace", table)
        with connect(db) as owner_conn:
            enable_rls(owner_conn)
            owner_conn.commit()
        assert check_search_log_readers(conn) == []


def _functions_named_replaced(db: str, count: int) -> str:
    """doctor's one schema error for functions changed by hand, checked whole (exit 3, the
    opening that counts ``count`` of them, the advice that ends it): the functions it
    names, each with what differs."""
    code, report = _doctor(db)
    assert code == 3, report
    [finding] = [f for f in report["findings"]
                 if f["check"] == "schema" and f["level"] == "error"]
    said = finding["message"]
    opening = (f"{count} of pgfunnel's SQL functions differ from this release's although the "
               "release recorded is this one (replaced by hand?): ")
    advice = "; run `pgfunnel migrate` to install this release's again"
    assert said.startswith(opening) and said.endswith(advice), said
    return str(said[len(opening):-len(advice)])


def test_doctor_names_a_function_replaced_by_hand(db: str) -> None:
    """doctor told the installed functions from this release's by the digest init and
    migrate write in the schema's comment alone: a `create or replace function
    pgfunnel.explain ...` typed by hand (a hot fix, an experiment) left the comment as
    it was, and doctor said the schema was this release's. It now reads each function's
    body and SECURITY (an `alter function ... security definer`) against sql/, naming
    the ones that differ; `pgfunnel migrate` puts them back."""
    from pgfunnel import schema

    code, report = _doctor(db)
    assert "schema" not in _checks(report, "error"), report
    with connect(db, autocommit=True) as conn:
        [definition] = conn.execute(
            "select pg_get_functiondef('pgfunnel.explain'::regproc)").fetchone() or [None]
        assert definition is not None and "\nbegin\n" in definition
        conn.execute(definition.replace("\nbegin\n", "\nbegin\n    -- a hot fix\n", 1))
        conn.execute("alter function pgfunnel._pool_asked(integer, integer, integer, "
                     "integer) security definer")
    assert _functions_named_replaced(db, 2) == (
        "pgfunnel._pool_asked (its SECURITY), pgfunnel.explain (its body)")
    schema.migrate(db)
    code, report = _doctor(db)
    assert "schema" not in _checks(report, "error"), report


def test_doctor_names_a_function_whose_header_was_altered_by_hand(db: str) -> None:
    """doctor compared a function's body and SECURITY with sql/, not the rest of its
    header: an `alter function ... set search_path = public, pgfunnel` (or `reset
    search_path`) changes what the function's names resolve to, and `alter function ...
    volatile` / `called on null input` / `parallel unsafe` what the planner may do with
    it, and doctor said nothing. It now names each of those; the same path written
    another way (quoted, `to`, no spaces) is not a difference."""
    from pgfunnel import schema

    with connect(db, autocommit=True) as conn:
        conn.execute("alter function pgfunnel._pool_asked(integer, integer, integer, "
                     "integer) set search_path = public, pgfunnel")
        conn.execute("alter function pgfunnel.version() reset search_path")
        conn.execute("alter function pgfunnel._bm25_idf(bigint, bigint) volatile")
        conn.execute("alter function pgfunnel._fold_accents(text) called on null input "
                     "parallel unsafe")
        # what sql/ declares (`pg_catalog, pgfunnel`), spelled otherwise
        conn.execute("alter function pgfunnel.analyzers() "
                     "set search_path to \"pg_catalog\",PGFUNNEL")
    assert _functions_named_replaced(db, 4) == (
        "pgfunnel._bm25_idf (its volatility), "
        "pgfunnel._fold_accents (its strictness and parallel safety), "
        "pgfunnel._pool_asked (its search_path), pgfunnel.version (its search_path)")
    schema.migrate(db)
    code, report = _doctor(db)
    assert "schema" not in _checks(report, "error"), report


def test_doctor_names_a_function_whose_other_settings_were_altered_or_that_was_dropped(
        db: str) -> None:
    """doctor compared body, SECURITY, search_path, volatility, strictness and parallel
    safety, not the other SET clauses sql/ declares (`jit = off`, `plan_cache_mode =
    force_generic_plan`: what keeps a search's plans generic and uncompiled), leakproof,
    COST, ROWS, or one added by hand; and a function dropped by hand read as `(its
    body)`. It now names each SET clause that differs by its parameter, leakproof, COST
    and ROWS, and a dropped function as missing; the same value spelled otherwise is not
    a difference, and `pgfunnel migrate` puts all back."""
    from pgfunnel import schema

    with connect(db, autocommit=True) as conn:
        assert schema.replaced_functions(conn) == []
        conn.execute("alter function pgfunnel.analyze_each(text[], text, boolean) "
                     "set jit = on")
        conn.execute("alter function pgfunnel._analyze_pass(text[], text, text[], boolean) "
                     "reset plan_cache_mode")
        conn.execute("alter function pgfunnel.version() set work_mem = '64MB'")
        conn.execute("alter function pgfunnel.version() cost 5")
        conn.execute("alter function pgfunnel.analyze_each(text[], text, boolean) rows 10")
        # ROWS as Postgres gives a set-returning function by default
        conn.execute("alter function pgfunnel._analyze_pass(text[], text, text[], boolean) "
                     "rows 1000")
        conn.execute("alter function pgfunnel._fold_accents(text) leakproof")
        conn.execute("drop function pgfunnel.dropped_query_words(text, text)")
        # what sql/ declares (`jit = off`), spelled otherwise
        conn.execute("alter function pgfunnel._term_df(integer, text[]) set jit to 'OFF'")
        # a SET clause sql/ declares, written by hand as it was: nothing differs
        conn.execute("alter function pgfunnel.analyzers() set search_path = pg_catalog, "
                     "pgfunnel")
    assert _functions_named_replaced(db, 5) == (
        "pgfunnel._analyze_pass (its SET plan_cache_mode), "
        "pgfunnel._fold_accents (its leakproof), "
        "pgfunnel.analyze_each (its ROWS and SET jit), "
        "pgfunnel.dropped_query_words (missing from the database), "
        "pgfunnel.version (its COST and SET work_mem)")
    with connect(db, autocommit=True) as conn:
        # two settings of one function, named together
        conn.execute("alter function pgfunnel._analyze_pass(text[], text, text[], boolean) "
                     "set jit = on")
        assert ("pgfunnel._analyze_pass", "its SET jit and SET plan_cache_mode") in \
            schema.replaced_functions(conn)
    schema.migrate(db)
    code, report = _doctor(db)
    assert "schema" not in _checks(report, "error"), report


def test_a_header_form_doctor_cannot_read_is_not_compared() -> None:
    """What the header comparison leaves out rather than guess (a false alarm on every
    doctor run would teach users to ignore it): attributes on a line with other words
    (the return type), a path written as a string literal, two SET search_path lines."""
    from pgfunnel.schema import _declared_header

    assert _declared_header("x integer)\nreturns integer language sql stable\n"
                            "set search_path = pg_catalog\n") == {
        "SECURITY": False, "search_path": ("pg_catalog",), "COST": 100.0,
        "ROWS": "the default", "settings": {}}
    assert _declared_header("language text)\nreturns text\nlanguage plpgsql stable strict\n"
                            "security definer\nset search_path = '$user', public\n") == {
        "SECURITY": True, "volatility": "s", "strictness": True, "parallel safety": "u",
        "leakproof": False, "COST": 100.0, "ROWS": "the default", "settings": {}}
    assert "search_path" not in _declared_header(
        ")\nreturns int\nlanguage sql\nset search_path = a\nset search_path = b\n")
    assert _declared_header(")\nreturns int\nlanguage sql returns null on null input "
                            "parallel restricted\n")["search_path"] == ()
    # other SET clauses as proconfig keeps them (`name=value`); one whose value this does
    # not read (`from current`, a list) leaves all of them out
    assert _declared_header(")\nreturns int\nlanguage sql leakproof\nset JIT = OFF\n"
                            "set work_mem to '64MB'\nset join_collapse_limit = 1\n") == {
        "SECURITY": False, "search_path": (), "volatility": "v", "strictness": False,
        "parallel safety": "u", "leakproof": True, "COST": 100.0, "ROWS": "the default",
        "settings": {"jit": "off", "work_mem": "64MB", "join_collapse_limit": "1"}}
    for clause in ("set jit from current", "set datestyle = iso, mdy"):
        assert "settings" not in _declared_header(f")\nreturns int\nlanguage sql\n{clause}\n")
    # COST and ROWS as said, ROWS 1000 as the default it is (only a set-returning function
    # takes ROWS); neither where a clause is not read or the language is C
    said = _declared_header(")\nreturns setof int\nlanguage plpgsql\ncost 5\nrows 10\n")
    assert said["COST"] == 5.0 and said["ROWS"] == 10.0
    assert _declared_header(")\nreturns setof int\nlanguage sql\nrows 1000\n")["ROWS"] \
        == "the default"
    for header in (")\nreturns int\nlanguage sql\ncost 1e3\n", ")\nreturns int\nlanguage c\n"):
        assert "COST" not in _declared_header(header) and "ROWS" not in _declared_header(header)


def _sql_declaring(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, clauses: str) -> None:
    """sql/ as the package's, but analyze_each's header also says ``clauses``: the
    reference doctor compares with for a clause the package's own sql/ does not write."""
    import shutil

    from pgfunnel import schema

    copy = tmp_path / "sql"
    shutil.copytree(schema.sql_dir(), copy)
    analyzer = copy / "010_analyzer.sql"
    text = analyzer.read_text()
    at = text.index("\nset jit = off\n",
                    text.index("create or replace function pgfunnel.analyze_each("))
    analyzer.write_text(text[:at] + "\n" + clauses + text[at:])
    monkeypatch.setattr(schema, "sql_dir", lambda: copy)


def test_doctor_reads_a_written_rows_and_each_settings_value_as_postgres_does(
        db: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ROWS a sql/ header writes was not compared (none writes one today: a copy of sql/
    whose analyze_each says `rows 50` and `set application_name = 'Pgfunnel'` stands for
    one), and every setting's value was compared in any case: right for a boolean's or
    an enum's, which Postgres reads in any case and spelling (`'FALSE'`, `'0'` are
    `off`), wrong for a string's, where `pgfunnel` is not `Pgfunnel`."""
    from pgfunnel import schema

    _sql_declaring(tmp_path, monkeypatch, "rows 50\nset application_name = 'Pgfunnel'")
    sig = "pgfunnel.analyze_each(text[], text, boolean)"
    as_declared = (f"alter function {sig} rows 50 set application_name = 'Pgfunnel' "
                   "set jit = off set plan_cache_mode = force_generic_plan")
    with connect(db, autocommit=True) as conn:
        assert schema.replaced_functions(conn) == [
            ("pgfunnel.analyze_each", "its ROWS and SET application_name")]
        conn.execute(as_declared)
        assert schema.replaced_functions(conn) == []
        for clause, named in [("rows 10", "its ROWS"), ("rows 1000", "its ROWS"),
                              ("set application_name = 'pgfunnel'", "its SET application_name"),
                              ("set jit = 'FALSE'", None), ("set jit = '0'", None),
                              ("set jit = 'on'", "its SET jit"),
                              ("set plan_cache_mode = 'Force_Generic_Plan'", None)]:
            conn.execute(f"alter function {sig} {clause}")
            assert schema.replaced_functions(conn) == (
                [] if named is None else [("pgfunnel.analyze_each", named)]), clause
            conn.execute(as_declared)
    monkeypatch.undo()
    with connect(db, autocommit=True) as conn:
        # against the package's own sql/, which writes neither
        assert schema.replaced_functions(conn) == [
            ("pgfunnel.analyze_each", "its ROWS and SET application_name")]


def test_doctor_reads_a_unit_bearing_settings_value_in_its_base_unit(
        db: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An integer or real setting's value was compared as written, so `work_mem = '64MB'`
    in sql/ against `'65536kB'` set by hand read as a changed SET work_mem, though
    Postgres reads both as 65536 kB. Each is now read in the setting's base unit (a copy
    of sql/ whose analyze_each sets work_mem and statement_timeout stands for one that
    does: the package's sql/ sets no such setting today)."""
    from pgfunnel import schema

    _sql_declaring(tmp_path, monkeypatch,
                   "set work_mem = '64MB'\nset statement_timeout = 60000")
    sig = "pgfunnel.analyze_each(text[], text, boolean)"
    as_declared = (f"alter function {sig} set work_mem = '64MB' "
                   "set statement_timeout = 60000")
    with connect(db, autocommit=True) as conn:
        conn.execute(as_declared)
        assert schema.replaced_functions(conn) == []
        for clause, named in [("set work_mem = '65536kB'", None),
                              ("set work_mem = 65536", None),
                              ("set work_mem = ' 0.0625 GB '", None),
                              ("set work_mem = '67108864B'", None),
                              ("set work_mem = '65536.4'", None),
                              ("set work_mem = '63MB'", "its SET work_mem"),
                              ("set work_mem = '64GB'", "its SET work_mem"),
                              ("set statement_timeout = '1min'", None),
                              ("set statement_timeout = '60s'", None),
                              ("set statement_timeout = '60000.4ms'", None),
                              ("set statement_timeout = '1h'", "its SET statement_timeout"),
                              ("set statement_timeout = '60ms'", "its SET statement_timeout")]:
            conn.execute(f"alter function {sig} {clause}")
            assert schema.replaced_functions(conn) == (
                [] if named is None else [("pgfunnel.analyze_each", named)]), clause
            conn.execute(as_declared)


@pytest.mark.parametrize(("name", "spellings"), [
    # kB, blocks of 8kB, bytes, milliseconds; a real in milliseconds
    ("work_mem", ["64MB", "65536kB", "65536", " 64 MB ", "0.0625GB", "64.0001MB", "1e2MB",
                  "0x10000", "0200000", "65536.5", "65537.5", "100000B", "1TB", "2.5e-3TB",
                  "64mb", "64 M B", "64MBs", "MB", "", "1e", "08", "+.5MB", " .5MB",
                  "64MB x", "1e400"]),
    ("min_parallel_table_scan_size", ["8MB", "1024", "8000kB", "8191B", "0.3kB", "1GB",
                                      "8 mB"]),
    ("log_parameter_max_length", ["1kB", "1023", "1.5kB", "0.4kB", "-1", "3B", "2kb"]),
    ("statement_timeout", ["1min", "60s", "60000", "1.5s", "2500us", "2500.5us", "1d",
                           "0.001h", "1.0000001s", "1 sec", "1MIN", "1m"]),
    ("vacuum_cost_delay", ["2", "2ms", "2000us", "0.002s", " 2 ms", "1.5", "1.2345us",
                           "2MS", "2 msec", "abc", "0x10", "0x1.8p1ms", "1e400"]),
])
def test_a_numeric_settings_value_reads_as_postgres_reads_it(
        db: str, name: str, spellings: list[str]) -> None:
    """_setting_value against Postgres itself: for each spelling a setting of each kind
    of unit (pg_settings' vartype and unit) takes, the number Postgres keeps in its base
    unit (pg_settings.setting), or, for one Postgres refuses, the value as written."""
    import math

    from pgfunnel.schema import _setting_value

    with connect(db, autocommit=True) as conn:
        [(kind, unit)] = conn.execute(
            "select vartype, unit from pg_settings where name = %s", (name,)).fetchall()
        for spelling in spellings:
            read = _setting_value(spelling, kind, unit)
            try:
                conn.execute("select set_config(%s, %s, false)", (name, spelling))
            except psycopg.errors.InvalidParameterValue:
                assert read == spelling, (name, spelling, read)
                continue
            [(kept,)] = conn.execute("select setting from pg_settings where name = %s",
                                     (name,)).fetchall()
            if kind == "integer":
                assert read == kept, (name, spelling, read, kept)
            else:
                # pg_settings writes a real with six significant digits (%g)
                assert math.isclose(float(read), float(kept), rel_tol=1e-5), \
                    (name, spelling, read, kept)


def test_a_numeric_settings_value_in_seconds_or_minutes() -> None:
    """The base units the settings a role may set in a session do not cover (seconds,
    minutes: checkpoint_timeout, log_rotation_age), rounded as Postgres documents:
    to the next smaller unit, then to a whole base unit, half to even."""
    from pgfunnel.schema import _setting_value

    assert [_setting_value(v, "integer", "s") for v in
            ("1.5min", "1500ms", "2500ms", "1h", "90", "1d", "1.5 min", "1Min")] == [
        "90", "2", "2", "3600", "90", "86400", "90", "1Min"]
    assert [_setting_value(v, "integer", "min") for v in ("1h", "90s", "150s", "1d")] == [
        "60", "2", "2", "1440"]
    # no unit: any number, but no unit after it
    assert _setting_value("10", "integer", None) == "10"
    assert _setting_value("10kB", "integer", None) == "10kB"
    assert _setting_value("0.5", "real", None) == "0.5"


@pytest.mark.parametrize(("written", "stored", "read"), [
    # what sql/ declares, spelled otherwise: Postgres folds it to the same setting
    ('"pg_catalog",  PGFUNNEL', "pg_catalog, pgfunnel", ("pg_catalog", "pgfunnel")),
    ('"$user", public', '"$user", public', ("$user", "public")),
    ('"PGFUNNEL", pg_catalog', '"PGFUNNEL", pg_catalog', ("PGFUNNEL", "pg_catalog")),
    ('pg_catalog, "My ""Schema"""', 'pg_catalog, "My ""Schema"""',
     ("pg_catalog", 'My "Schema"')),
    # one schema whose name holds a comma: split at the comma, it read as pgfunnel's own
    # two, and the security check passed it
    ("'pg_catalog, pgfunnel'", '"pg_catalog, pgfunnel"', ("pg_catalog, pgfunnel",)),
])
def test_doctor_and_the_security_check_read_a_pinned_path_as_postgres_does(
        db: str, written: str, stored: str, read: tuple[str, ...]) -> None:
    """doctor's replaced-functions check and the security check's pinned-path check read
    pg_proc.proconfig's search_path two ways, and the security check's (a split at every
    comma, quotes stripped) passed a quoted name that holds a comma. One reader now
    serves both; each form below is what Postgres stores for the path written."""
    from pgfunnel.db import search_path_schemas
    from pgfunnel.schema import replaced_functions
    from pgfunnel.security import PINNED_PATH_SCHEMAS, security_findings

    with connect(db, autocommit=True) as conn:
        conn.execute(f"alter function pgfunnel.analyzers() set search_path = {written}")
        [setting] = conn.execute(
            "select s from pg_proc p, unnest(p.proconfig) s "
            "where p.oid = 'pgfunnel.analyzers'::regproc and s like 'search_path=%'"
        ).fetchone() or [None]
        assert setting == f"search_path={stored}"
        assert search_path_schemas(stored) == read
        as_declared = read == ("pg_catalog", "pgfunnel")
        assert replaced_functions(conn) == (
            [] if as_declared else [("pgfunnel.analyzers", "its search_path")])
        warned = [f.message for f in security_findings(conn)
                  if f.check == "search_path" and f.level == "warning"]
        others = [name for name in read if name not in PINNED_PATH_SCHEMAS]
        assert warned == ([] if not others else [
            f"pgfunnel.analyzers() pins search_path to {stored}: {', '.join(others)} "
            f"{'is' if len(others) == 1 else 'are'} not pgfunnel's own (run `pgfunnel "
            "migrate` to reinstall the functions)"])


def test_a_pinned_path_the_reader_cannot_read_fails_the_security_check(db: str) -> None:
    """The one reader answers None for a form it does not read for sure; the security
    check counts that as not pinned (as the split at commas did, or stricter), and doctor
    names the function's search_path. Postgres stores no such form from `alter function`,
    so the setting is written into the catalog directly."""
    from pgfunnel.db import search_path_schemas
    from pgfunnel.schema import replaced_functions
    from pgfunnel.security import security_findings

    for value in ('"pgfunnel', "pgfunnel pg_catalog", "pgfunnel,,pg_catalog", '""',
                  "'pgfunnel'", "pgfunnel,"):
        assert search_path_schemas(value) is None, value
    assert search_path_schemas("") == ()
    assert search_path_schemas(" \tpgfunnel ,pg_catalog\n") == ("pgfunnel", "pg_catalog")
    # Postgres folds ASCII letters alone in a UTF-8 database
    assert search_path_schemas("ÉCOLE, Pg_Temp") == ("École", "pg_temp")
    with connect(db, autocommit=True) as conn:
        for value in ('"pgfunnel', "", "'pgfunnel'"):
            conn.execute("update pg_catalog.pg_proc set proconfig = array[%s] "
                         "where oid = 'pgfunnel.analyzers'::regproc",
                         (f"search_path={value}",))
            assert replaced_functions(conn) == [("pgfunnel.analyzers", "its search_path")]
            warned = [f.message for f in security_findings(conn)
                      if f.check == "search_path" and f.level == "warning"]
            # the setting as Postgres shows it (an empty one as SHOW shows it, below), not
            # in Python's quotes ('"pgfunnel', "''")
            shown = value or '""'
            assert warned == [
                f"pgfunnel.analyzers() pins search_path to {shown}, which pgfunnel "
                "cannot read as a list of its own schemas (run `pgfunnel migrate` to "
                "reinstall the functions)"], value
        with conn.transaction():
            conn.execute("set local search_path = ''")
            assert conn.execute("show search_path").fetchone() == ('""',)
