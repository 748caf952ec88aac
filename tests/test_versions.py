"""Index versions: reindex, validate, activate/rollback/retire/drop, compare, one writer,
kill -9 mid-build, and searches while the active version flips."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from funnel_util import load_module, one_row, wait_for_lock_wait
from psycopg import sql
from typer.testing import CliRunner

from pgfunnel import versions
from pgfunnel.db import connect
from pgfunnel.errors import ConfigError, ConflictError, NotFoundError, PgfunnelError
from pgfunnel.search import Funnel

ROOT = Path(__file__).resolve().parent.parent
QUERIES = ROOT / "pgfunnel" / "data" / "helpcenter_queries.jsonl"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from pgfunnel.tiny_models import build_tiny_bi_encoder

    return str(build_tiny_bi_encoder(tmp_path_factory.mktemp("tiny-bi") / "model", dim=64))


@pytest.fixture(scope="session")
def tiny_embedder(tiny_model: str) -> Any:
    from pgfunnel.embedder import Embedder

    return Embedder(tiny_model)


def _state(conn: psycopg.Connection[Any]) -> dict[int, str]:
    return {int(v): str(s) for v, s in conn.execute(
        "select version, state from pgfunnel.index_version order by version").fetchall()}


def _top(dsn: str, query: str, embedder: Any) -> list[tuple[int, Any, Any]]:
    with Funnel(dsn, "default", embedder=embedder) as f:
        return [(r.chunk_id, r.lexical_rank, r.dense_rank) for r in f.search(query, k=5).results]


def _invalid_indexes(conn: psycopg.Connection[Any]) -> list[str]:
    return [r[0] for r in conn.execute(
        "select c.relname from pg_index i join pg_class c on c.oid = i.indexrelid "
        "where c.relnamespace = 'pgfunnel'::regnamespace and not i.indisvalid").fetchall()]


def test_an_analyzer_the_database_lacks_yet_says_to_migrate(sample_db: str,
                                                              embedder: Any) -> None:
    """Doctor on a schema behind this package points at the newest analyzer; the reindex
    it suggests said only "unknown analyzer" until `pgfunnel migrate` had run. Now any
    reindex on an older schema is refused first, naming both revisions."""
    from pgfunnel.errors import ConfigError, SchemaOutdatedError

    with connect(sample_db, autocommit=True) as conn:
        with pytest.raises(ConfigError, match="unknown analyzer 'english_v0'") as err:
            versions.reindex(conn, "default", analyzer="english_v0", embedder=embedder)
        assert "migrate" not in str(err.value)
        # the functions and revision of the release before english_v6
        conn.execute("update pgfunnel.alembic_version set version_num = '0012'")
        conn.execute("create or replace function pgfunnel.analyzers() "
                     "returns table (name text, stem_dictionary text, description text) "
                     "language sql as $$ values ('english_v5'::text, 'english_stem'::text, "
                     "''::text) $$")
        with pytest.raises(SchemaOutdatedError, match="at revision 0012, older than this "
                                                      ".*run `pgfunnel migrate` first"):
            versions.reindex(conn, "default", analyzer="english_v6", embedder=embedder)
        assert _state(conn) == {1: "active"}


def test_analyzer_reindex_activate_rollback_retire_drop(sample_db: str, embedder: Any) -> None:
    with connect(sample_db, autocommit=True) as conn:
        chunks = conn.execute("select count(*) from pgfunnel.chunk").fetchone()[0]  # type: ignore[index]
        res = versions.reindex(conn, "default", analyzer="simple_v1")
        assert res.state == "ready" and res.version == 2 and res.analyzer == "simple_v1"
        assert any("copied from version 1" in n for n in res.notes)
        v = res.validation
        assert v is not None and v.ok and v.index_valid and v.index_used
        assert v.recall is not None and v.recall >= 0.95 and v.sample == 50
        assert v.lexical_rows == v.embedding_rows == v.collection_chunks == chunks
        # exact BM25 statistics: term_stat equals a recount from the postings
        diff = conn.execute(
            "select count(*) from pgfunnel.bm25_recount(%s) r full join (select term, df from "
            "pgfunnel.term_stat where index_version_id = %s) t using (term) "
            "where r.df is distinct from t.df", (res.version_id, res.version_id)).fetchone()
        assert diff == (0,)
        assert _state(conn) == {1: "active", 2: "ready"}

        lex_sql = ("select array_agg(lexical_score order by final_rank) from "
                   "funnel_search('refunds billing', collection => 'default')")
        lex_before = conn.execute(lex_sql).fetchone()
        act = versions.activate(conn, "default", 2)
        assert (act.activated, act.replaced) == (2, 1)
        assert _state(conn) == {1: "retired", 2: "active"}
        analyzer = conn.execute("select analyzer from pgfunnel._active_version("
                                "pgfunnel._collection_id('default'))").fetchone()
        assert analyzer == ("simple_v1",)
        # no stemming now: other BM25 terms, other lexical scores
        assert conn.execute(lex_sql).fetchone() != lex_before

        assert versions.rollback(conn, "default").activated == 1
        assert _state(conn) == {1: "active", 2: "retired"}
        assert versions.rollback(conn, "default").activated == 2  # toggles back
        assert versions.rollback(conn, "default").activated == 1
        previous = "select pgfunnel.previous_version('default')"
        assert conn.execute(previous).fetchone() == (2,)

        with pytest.raises(ConflictError, match="active version"):
            versions.drop(conn, "default", 1)
        with pytest.raises(ConflictError, match="active"):
            versions.retire(conn, "default", 1)
        walks = ("select version_id from unnest(%s::integer[]) as version_id where "
                 "(pgfunnel._hnsw_walk(version_id, array_fill(1, array[%s])::vector, 1)).cached")
        dims = conn.execute("select dimensions from pgfunnel.index_version where id = 1"
                            ).fetchone()[0]  # type: ignore[index]
        assert conn.execute(walks, ([1, res.version_id], dims)).fetchall() == [
            (1,), (res.version_id,)]
        versions.drop(conn, "default", 2)
        assert _state(conn) == {1: "active"}
        # the dropped version's cached walk went with it
        assert conn.execute(walks, ([1, res.version_id], dims)).fetchall() == [(1,)]
        assert conn.execute("select to_regclass(%s)", (f"pgfunnel.embedding_hnsw_v"
                                                        f"{res.version_id}",)).fetchone() == (None,)
        assert conn.execute("select count(*) from pgfunnel.posting where index_version_id = %s",
                            (res.version_id,)).fetchone() == (0,)
        with pytest.raises(PgfunnelError, match="nothing to roll back"):
            versions.rollback(conn, "default")
        # the SQL helper says so too: no number that activate_version could take
        assert conn.execute(previous).fetchone() == (None,)
        # a new build takes the dropped version's number; it is still not what version 1
        # replaced, and rollback must not put it live untried
        again = versions.reindex(conn, "default", analyzer="simple_v2")
        assert again.version == 2 and again.version_id != res.version_id
        with pytest.raises(PgfunnelError, match="was dropped .the version 2 listed now is a "
                                                "later build that took its number.; nothing"):
            versions.rollback(conn, "default")
        assert conn.execute(previous).fetchone() == (None,)
        assert _state(conn) == {1: "active", 2: "ready"}


def _ingest_late_doc(conn: psycopg.Connection[Any], embedder: Any) -> None:
    """A document ingested after a reindex: only the active version indexes it."""
    from pgfunnel.ingest import Ingester
    from pgfunnel.sources import DocumentRecord

    Ingester(conn, "default", embedder=embedder).ingest([DocumentRecord(
        citekey="late-doc", title="Late", text="Zanzibar quokka migration guide. " * 5)])


def test_activation_catches_up_chunks_ingested_after_the_build(sample_db: str,
                                                                embedder: Any) -> None:

    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1")
        _ingest_late_doc(conn, embedder)
        info = {v.version: v for v in versions.list_versions(conn, "default")}
        assert info[2].missing_chunks > 0
        # the SQL switch itself refuses a version that does not cover the collection
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState), conn.transaction():
            conn.execute("select pgfunnel.activate_version('default', 2)")
        act = versions.activate(conn, "default", 2)
        assert act.caught_up == info[2].missing_chunks
        cov = conn.execute("select * from pgfunnel.version_coverage(%s)", (info[2].id,)).fetchone()
        assert cov is not None and cov[0] == cov[1] == cov[2] == cov[3] and cov[4] == 0
        # a version that does not exist is said to, not a row of NULLs ("nothing missing")
        with pytest.raises(psycopg.errors.NoDataFound, match="index version id 999999"), \
                conn.transaction():
            conn.execute("select * from pgfunnel.version_coverage(999999)")
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match="^version_id: must not be NULL"), conn.transaction():
            conn.execute("select * from pgfunnel.version_coverage(null)")
        # and so is version_index, whose present = false read as "its index is missing"
        with pytest.raises(psycopg.errors.NoDataFound, match="index version id 999999"), \
                conn.transaction():
            conn.execute("select * from pgfunnel.version_index(999999)")
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match="^version_id: must not be NULL"), conn.transaction():
            conn.execute("select * from pgfunnel.version_index(null)")
        idx = conn.execute("select * from pgfunnel.version_index(%s)", (info[2].id,)).fetchone()
        assert idx is not None and idx[0] == f"embedding_hnsw_v{info[2].id}" and idx[1] and idx[2]
    assert _top(sample_db, "zanzibar quokka", embedder)[0][1] == 1


def test_compare_indexes_the_chunks_a_version_lacks_first(sample_db: str, embedder: Any,
                                                          tmp_path: Path) -> None:
    # a version built before an ingest lacks its chunks (ingest writes only the active
    # one): compared as it stood, every new chunk counted as "only in" the active version,
    # a change users would never see, since the activation indexes them first
    from pgfunnel.cli.main import app

    from pgfunnel.ingest import Ingester
    from pgfunnel.sources import DocumentRecord

    with connect(sample_db, autocommit=True) as conn:
        # the active version's settings: any difference can only come from coverage
        versions.reindex(conn, "default")
        versions.reindex(conn, "default", analyzer="simple_v1")
        _ingest_late_doc(conn, embedder)
        lacking = versions.list_versions(conn, "default")[1].missing_chunks
        assert lacking > 0
        cmp = versions.compare(conn, "default", 1, 2, ["zanzibar quokka migration"], k=5)
        assert cmp.caught_up == {2: lacking}
        assert cmp.identical == 1 and cmp.mean_overlap == 1.0, cmp.per_query
        assert cmp.per_query[0].only_a == cmp.per_query[0].only_b == []
        assert versions.list_versions(conn, "default")[1].missing_chunks == 0
        # nothing was switched
        assert _state(conn) == {1: "active", 2: "ready", 3: "ready"}
        Ingester(conn, "default", embedder=embedder).ingest([DocumentRecord(
            citekey="later-doc", title="Later", text="Zanzibar quokka second guide. " * 5)])
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query": "zanzibar quokka guide"}\n')
    res = CliRunner().invoke(app, ["versions", "compare", "1", "3", "--queries", str(queries),
                                   "--dsn", sample_db], env={"COLUMNS": "300"})
    said = " ".join(res.output.split())
    assert res.exit_code == 0, said
    with connect(sample_db, autocommit=True) as conn:
        n = sum(1 for _ in conn.execute("select 1 from pgfunnel.chunk c join pgfunnel.document "
                                        "d on d.id = c.document_id where d.citekey in "
                                        "('late-doc', 'later-doc')"))
    assert (f"version 3 lacked {n} chunks ingested since its build (ingest writes only the "
            "active version): indexed first, as its activation would, so both versions are "
            "compared on the same chunks") in said, said
    # on a replica (a read-only transaction) it is refused before the model embeds them
    from pgfunnel.errors import ReadOnlyError

    with connect(sample_db, autocommit=True) as conn:
        Ingester(conn, "default", embedder=embedder).ingest([DocumentRecord(
            citekey="last-doc", title="Last", text="Zanzibar quokka third guide. " * 5)])
    read_only = psycopg.conninfo.make_conninfo(sample_db,
                                               options="-c default_transaction_read_only=on")
    with connect(read_only, autocommit=True) as conn, \
            pytest.raises(ReadOnlyError, match=r"^versions compare \(it indexes the chunks a "
                                               r"version lacks\) writes to the database"):
        versions.compare(conn, "default", 1, 3, ["zanzibar quokka guide"])


def test_two_catch_ups_of_one_version_at_once_write_each_chunk_once(sample_db: str,
                                                                    embedder: Any) -> None:
    # two activations of a version (or one and a `versions compare`) catch it up at once:
    # both read the same chunks as missing, and the second failed on the first's rows
    # ("duplicate key value violates unique constraint")
    import threading


    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1")
        _ingest_late_doc(conn, embedder)
        infos = versions.list_versions(conn, "default")
        coll_id = int(conn.execute("select id from pgfunnel.collection where name = 'default'"
                                   ).fetchone()[0])  # type: ignore[index]
        lacking = infos[1].missing_chunks
        assert lacking > 0
        active_id, target = infos[0].id, infos[1].id
        outcome: list[Any] = []

        def second() -> None:
            try:
                with connect(sample_db, autocommit=True) as other:
                    other.execute("set application_name = 'second catch-up'")
                    outcome.append(versions.catch_up(other, coll_id, target,
                                                     reuse_from=active_id))
            except Exception as exc:  # noqa: BLE001 - the test reports it
                outcome.append(exc)

        with connect(sample_db) as first:
            with first.transaction():
                assert versions.catch_up(first, coll_id, target, in_transaction=True,
                                         reuse_from=active_id) == lacking
                thread = threading.Thread(target=second)
                thread.start()
                wait_for_lock_wait(conn, "second catch-up")
            thread.join(60)
        assert outcome == [0], outcome
        cov = conn.execute("select * from pgfunnel.version_coverage(%s)", (target,)).fetchone()
        assert cov is not None and cov[0] == cov[1] == cov[2] == cov[3] and cov[4] == 0, cov
        recount = conn.execute("select count(*) from pgfunnel.bm25_recount(%s) r join "
                               "pgfunnel.term_stat t on t.index_version_id = %s "
                               "and t.term = r.term and t.df = r.df", (target, target)
                               ).fetchone()
        terms = conn.execute("select count(*) from pgfunnel.term_stat where index_version_id "
                             "= %s and df > 0", (target,)).fetchone()
        assert recount == terms, (recount, terms)
        assert versions.activate(conn, "default", 2).caught_up == 0


def _consistent(conn: psycopg.Connection[Any], version_id: int) -> tuple[int, int]:
    """A version's BM25 statistics against its postings and lexical rows, recounted: df of
    every term, chunk_count and total_length; its (chunks, lexical rows)."""
    stored = {str(t): int(n) for t, n in conn.execute(
        "select term, df from pgfunnel.term_stat where index_version_id = %s and df > 0",
        (version_id,))}
    recount = {str(t): int(n) for t, n in conn.execute(
        "select term, df from pgfunnel.bm25_recount(%s)", (version_id,))}
    assert stored == recount, set(stored.items()) ^ set(recount.items())
    row = conn.execute(
        "select v.chunk_count, v.total_length, (select count(*) from pgfunnel.lexical l "
        " where l.index_version_id = v.id), (select coalesce(sum(l.length), 0) "
        " from pgfunnel.lexical l where l.index_version_id = v.id) "
        "from pgfunnel.index_version v where v.id = %s", (version_id,)).fetchone()
    assert row is not None and (row[0], row[1]) == (row[2], row[3]), row
    cov = conn.execute("select * from pgfunnel.version_coverage(%s)", (version_id,)).fetchone()
    assert cov is not None
    return int(cov[0]), int(cov[1])


def test_a_delete_and_ingests_while_a_reindex_embeds_a_batch_leave_every_version_whole(
        sample_db: str, embedder: Any) -> None:
    """`delete` and `ingest` take no reindex lock, and reindex takes no run lock: a batch
    of chunks the reindex read, embedded outside any transaction, may be deleted (a
    document deleted, another re-ingested with new chunks) before it writes them, and a
    document may arrive that the batch never read. Paused there (holding the advisory
    lock the batch takes before it writes), the three commit, and then: the new version
    indexes none of the chunks gone, the re-ingested and new documents' chunks once each
    (after its activation, which catches up), and each version's statistics match its
    postings, recounted."""
    import threading

    from pgfunnel.ingest import Ingester, delete_documents
    from pgfunnel.sources import DocumentRecord

    with connect(sample_db, autocommit=True) as conn:
        gone, changed = (str(r[0]) for r in conn.execute(
            "select citekey from pgfunnel.document order by citekey limit 2").fetchall())
        last = int(conn.execute("select coalesce(max(id), 0) from pgfunnel.index_version"
                                ).fetchone()[0])  # type: ignore[index]
        outcome: list[Any] = []

        def run_reindex() -> None:
            try:
                with connect(sample_db, autocommit=True) as other:
                    outcome.append(versions.reindex(other, "default", analyzer="simple_v1",
                                                    embedder=embedder, batch_size=100_000))
            except Exception as exc:  # noqa: BLE001 - the test reports it
                outcome.append(exc)

        with connect(sample_db) as pause:
            # the new version's id is one of the next few: its batch waits on one of these
            for vid in range(last + 1, last + 6):
                pause.execute("select pg_advisory_xact_lock(hashtext(%s))",
                              (f"pgfunnel:catch-up:{vid}",))
            thread = threading.Thread(target=run_reindex)
            thread.start()
            wait_for_lock_wait(conn, "pgfunnel reindex default", "pg_advisory_xact_lock")
            # every chunk was read and embedded: the batch waits to write them
            assert delete_documents(conn, "default", [gone]) == 1
            Ingester(conn, "default", embedder=embedder).ingest([
                DocumentRecord(citekey=changed, title="Changed",
                               text="Zanzibar quokka rewritten from scratch. " * 5),
                DocumentRecord(citekey="arrived", title="Arrived",
                               text="Okapi migration notes for the new release. " * 5)])
            pause.rollback()
            thread.join(120)
        assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
        built = outcome[0]
        new_id = int(conn.execute("select id from pgfunnel.index_version where version = %s",
                                  (built.version,)).fetchone()[0])  # type: ignore[index]
        versions.activate(conn, "default", built.version)
        old_id = int(conn.execute(
            "select id from pgfunnel.index_version where version = 1").fetchone()[0])  # type: ignore[index]
        for vid in (old_id, new_id):
            chunks, lexical = _consistent(conn, vid)
            assert chunks == lexical, (vid, chunks, lexical)
            # no row of the chunks gone, in any table a version keeps
            for table in ("lexical", "embedding", "posting"):
                assert conn.execute(
                    sql.SQL("select count(*) from pgfunnel.{} t where t.index_version_id = %s "
                            "and not exists (select from pgfunnel.chunk c "
                            "where c.id = t.chunk_id)").format(sql.Identifier(table)),
                    (vid,)).fetchone() == (0,), (table, vid)
        assert conn.execute("select count(*) from pgfunnel.document where citekey = %s",
                            (gone,)).fetchone() == (0,)
        for citekey, word in ((changed, "zanzibar"), ("arrived", "okapi")):
            assert conn.execute(
                "select count(*) from pgfunnel.lexical l join pgfunnel.chunk c "
                "on c.id = l.chunk_id join pgfunnel.document d on d.id = c.document_id "
                "where l.index_version_id = %s and d.citekey = %s and l.terms @@ %s::tsquery",
                (new_id, citekey, word)).fetchone() != (0,), citekey


def test_a_delete_while_an_ingest_batch_waits_leaves_the_document_whole(
        sample_db: str, embedder: Any) -> None:
    """`delete` takes no run lock: it commits between an ingest's reading of what is
    stored (to embed ahead, outside any transaction) and its batch's write. The batch
    reads again under the collection's ingest lock, so the document it had found stored
    is written whole as a new one (the ingest's source holds it, and it wrote last), not
    as a replacement of chunks that are gone; the statistics stay those of the postings."""
    import threading

    from pgfunnel.ingest import Ingester, delete_documents, ingest_lock
    from pgfunnel.sources import DocumentRecord, chunk_text

    with connect(sample_db, autocommit=True) as conn:
        citekey, title = (str(v) for v in conn.execute(
            "select citekey, title from pgfunnel.document order by citekey limit 1"
        ).fetchone() or ())
        text = "Zanzibar quokka guide, rewritten. " * 120
        outcome: list[Any] = []

        def run_ingest() -> None:
            try:
                with connect(sample_db, autocommit=True) as other:
                    other.execute("set application_name = 'racing ingest'")
                    outcome.append(Ingester(other, "default", embedder=embedder).ingest(
                        [DocumentRecord(citekey=citekey, title=title, text=text)]))
            except Exception as exc:  # noqa: BLE001 - the test reports it
                outcome.append(exc)

        with connect(sample_db) as delete:
            # the delete's transaction holds the ingest lock first: the batch, its
            # vectors made, waits for it, then finds the document gone
            ingest_lock(delete, "default")
            thread = threading.Thread(target=run_ingest)
            thread.start()
            wait_for_lock_wait(conn, "racing ingest", "pg_advisory_xact_lock")
            assert delete_documents(delete, "default", [citekey]) == 1
            delete.commit()
            thread.join(120)
        assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
        stored = conn.execute(
            "select count(*) from pgfunnel.chunk c join pgfunnel.document d "
            "on d.id = c.document_id where d.citekey = %s", (citekey,)).fetchone()
        assert stored == (len(chunk_text(text, 200)),), stored
        active_id = int(conn.execute(
            "select id from pgfunnel.index_version where state = 'active'").fetchone()[0])  # type: ignore[index]
        chunks, lexical = _consistent(conn, active_id)
        assert chunks == lexical, (chunks, lexical)


def test_activate_version_names_its_own_parameters(conn: psycopg.Connection[Any]) -> None:
    """docs/sql.md: errors name the parameter. A NULL version number named `version`,
    which activate_version does not take (its parameter is version_number)."""
    conn.execute("insert into pgfunnel.collection (name) values ('named')")
    with pytest.raises(psycopg.errors.InvalidParameterValue,
                       match="^version_number: must not be NULL"), conn.transaction():
        conn.execute("select pgfunnel.activate_version('named', null)")
    with pytest.raises(psycopg.errors.InvalidParameterValue,
                       match="^collection: must not be NULL"), conn.transaction():
        conn.execute("select pgfunnel.activate_version(null, 1)")


def test_activate_version_of_a_building_version_points_at_the_resuming_reindex(
        conn: psycopg.Connection[Any]) -> None:
    """The SQL refusal said "finish it with pgfunnel reindex": run as written, that reindex
    asks for the active version's settings (on collection 'default') and drops the
    half-built version. It now names the list that gives the version's own command."""
    from funnel_util import make_collection

    from pgfunnel.ingest import create_version

    for name, shown in (("t", "-c t"), ("my docs", "-c 'my docs'")):
        coll = make_collection(conn, name, 16)
        coll_id = conn.execute("select collection_id from pgfunnel.index_version where id = %s",
                               (coll,)).fetchone()[0]  # type: ignore[index]
        create_version(conn, coll_id, "random-unit", 16, "simple_v7", "building")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState,
                           match="is building; only a validated") as exc, conn.transaction():
            conn.execute("select pgfunnel.activate_version(%s, 2)", (name,))
        hint = exc.value.diag.message_hint or ""
        assert "a pgfunnel reindex with its own settings resumes" in hint
        assert f"pgfunnel versions list {shown} names that command" in hint


@pytest.mark.parametrize("name", ["my docs", "it's", "a;b $(x)"])
def test_activate_version_names_commands_that_paste_for_any_collection_name(
        conn: psycopg.Connection[Any], name: str) -> None:
    """pgfunnel.activate_version's refusals name the command to run next (as psql prints
    its hint, and Python its message) with the collection given to -c as written:
    `pgfunnel versions drop 2 -c my docs` split into two words, and `'it''s'` (SQL's
    quoting) pasted as `its`. Each now quotes the name as a shell reads it, as shlex.quote
    does, so that pasted it reaches the collection named."""
    from funnel_util import make_collection

    from pgfunnel.ingest import create_version

    active = make_collection(conn, name, 16)
    coll_id = conn.execute("select collection_id from pgfunnel.index_version where id = %s",
                           (active,)).fetchone()[0]  # type: ignore[index]
    target = create_version(conn, coll_id, "random-unit", 16, "english_v1", "ready")
    conn.commit()

    def refusal(update: str) -> str:
        with conn.transaction(force_rollback=True):
            conn.execute(update, (target,))
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as exc, \
                    conn.transaction():
                conn.execute("select pgfunnel.activate_version(%s, 2)", (name,))
        diag = exc.value.diag
        return f"{diag.message_primary} {diag.message_hint or ''}"

    said = [
        refusal("update pgfunnel.index_version set params = params || '{\"dropping\": true}' "
                "where id = %s"),
        refusal("update pgfunnel.index_version set state = 'building' where id = %s"),
        # a chunk count no row backs: rows deleted past the deletion trigger
        refusal("update pgfunnel.index_version set chunk_count = 1 where id = %s"),
        # no HNSW index on the empty version: the activation that builds it is named
        refusal("select %s"),
    ]
    quoted = shlex.quote(name)
    expected = [f"finished by pgfunnel versions drop 2 -c {quoted}",
                f"pgfunnel versions list -c {quoted} names that command",
                f"(pgfunnel reindex -c {quoted}, with the options",
                f"pgfunnel versions activate 2 -c {quoted} builds it before it switches"]
    for text, command in zip(said, expected, strict=True):
        assert command in text, text
    assert f"(pgfunnel versions drop 2 -c {quoted})" in said[2], said[2]
    # funnel_search's hint for a vector of another model, quoted by the same function
    with pytest.raises(psycopg.errors.MostSpecificTypeMismatch) as wrong, conn.transaction():
        conn.execute("select * from pgfunnel.funnel_search(null, '[1,0,0]'::vector, "
                     "collection => %s)", (name,))
    assert f"`pgfunnel embed TEXT -c {quoted}` prints" in (wrong.value.diag.message_hint or "")
    # pasted, each gives the collection back as one word
    assert shlex.split(f"-c {quoted}") == ["-c", name]


def test_shell_word_quotes_as_shlex_quote_does(conn: psycopg.Connection[Any]) -> None:
    """pgfunnel._shell_word, which the SQL hints quote a collection with, gives what
    Python's shlex.quote gives for the same word, over tricky words (empty, only safe
    characters, a lone quote, a newline, non-ASCII letters that \\w would match outside
    ASCII) and a few thousand random ones, and each reads back as the one word."""
    import random

    rng = random.Random(20261207)
    alphabet = ("abcXYZ019_@%+=:,./-'\" \t\n\\$`!*?[]{}()<>|&;#~^" "é中ß٣\u00a0\u200b\u2028🙂")
    words = ["", "a", "default", "'", "''", "\"", "\n", " ", "-", "--x", "a-b_c.d/e:f",
             "a,b=c+d%e@f", "it's", "my docs", "a;b $(touch /tmp/pwned)", "é", "ß", "٣",
             "x\ny", "\\", "$HOME", "`id`", "a'b'c", "'\"'\"'", "*", "~", "#"]
    words += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
              for _ in range(3000)]
    rows = conn.execute("select pgfunnel._shell_word(w) from unnest(%s::text[]) "
                        "with ordinality as t(w, i) order by i", (words,)).fetchall()
    got = [str(r[0]) for r in rows]
    assert len(got) == len(words)
    differ = [(w, g, shlex.quote(w)) for w, g in zip(words, got, strict=True)
              if g != shlex.quote(w)]
    assert not differ, differ[:5]
    assert all(shlex.split(g) == [w] for w, g in zip(words, got, strict=True) if w), words[:3]


def test_second_writer_is_refused_naming_the_holder(sample_db: str) -> None:
    from pgfunnel.cli.main import app

    with connect(sample_db, autocommit=True) as holder:
        holder.execute("set application_name = 'someone else''s reindex'")
        with versions.writer_lock(holder, "default"):
            result = CliRunner().invoke(app, ["reindex", "--dsn", sample_db,
                                              "--analyzer", "simple_v1"])
            assert result.exit_code == 1, result.output
            text = " ".join(result.output.split())
            assert f"pid {holder.info.backend_pid}" in text
            assert "someone else's reindex" in text
            with connect(sample_db, autocommit=True) as other, \
                    pytest.raises(ConflictError, match="another reindex"):
                versions.reindex(other, "default", analyzer="simple_v1")
        # released: the same command now runs
        result = CliRunner().invoke(app, ["reindex", "--dsn", sample_db, "--analyzer",
                                          "simple_v1", "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output[result.output.index("{"):])["state"] == "ready"


def test_second_writer_names_the_holder_as_it_is_named(sample_db: str) -> None:
    """A reindex names its session `pgfunnel reindex NAME`; the second one's error gave
    every `pgfunnel <command>` in it the -c typed, the holder's name too, and read "held by
    pid 28922 (pgfunnel reindex -c docs docs, ...)", a name no session had and a command
    that reindexes a collection named docs docs."""
    from pgfunnel.cli.main import app

    with connect(sample_db, autocommit=True) as holder:
        holder.execute("set application_name = 'pgfunnel reindex default'")
        pid = holder.info.backend_pid
        with versions.writer_lock(holder, "default"):
            result = CliRunner().invoke(app, ["reindex", "--dsn", sample_db, "-c", "default",
                                              "--analyzer", "simple_v1"],
                                        env={"COLUMNS": "300"})
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert (f"held by pid {pid} (application_name "
            "'pgfunnel reindex default', connected since") in text, text
    assert "-c default default" not in text, text


def test_versions_list_shows_each_graphs_build_settings(sample_db: str) -> None:
    """A version reindexed with --m 8 --ef-construction 32 was listed as the active one
    was but for its index size: nothing in `versions list` said the graphs were built
    differently (only --json's params held it)."""
    from pgfunnel.cli.main import app

    env = {"COLUMNS": "80"}
    built = CliRunner().invoke(app, ["reindex", "--dsn", sample_db, "--m", "8",
                                     "--ef-construction", "32"], env=env)
    assert built.exit_code == 0, built.output
    res = CliRunner().invoke(app, ["versions", "list", "--dsn", sample_db], env=env)
    assert res.exit_code == 0, res.output
    lines = {line.split(":")[0].strip(): line for line in res.stdout.splitlines()[1:]}
    assert "m/ef_construction 16/64" in lines["version 1 (active)"], res.stdout
    assert "m/ef_construction 8/32" in lines["version 2 (ready)"], res.stdout


def test_reindex_progress_shows_the_graph_build_however_quick(sample_db: str) -> None:
    """docs/cli.md: "Progress bars show the embedding and the index build". A graph built
    before the first quarter-second poll of pg_stat_progress_create_index (every
    collection under some thousands of chunks) showed no build at all, in a log or on a
    terminal, where an ingest's build shows its line."""
    import re

    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, ["reindex", "--dsn", sample_db, "--analyzer", "simple_v1"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    with connect(sample_db) as conn:
        chunks = conn.execute("select count(*) from pgfunnel.chunk").fetchone()[0]  # type: ignore[index]
    assert re.search(rf"^reindex: building HNSW index {chunks:,}/{chunks:,} \(100%\), ",
                     res.stderr, re.M), res.stderr


def test_a_reindex_cut_off_says_what_it_left(sample_db: str) -> None:
    """A reindex whose connection was ended once its version existed (`pgfunnel stop`, a
    server restart, pg_terminate_backend) said `error: lost the connection to Postgres:
    terminating connection due to administrator command` and nothing of the version left
    'building' or how to go on, as its Ctrl-C does."""
    import threading

    from pgfunnel.cli.main import app

    ended: list[int] = []

    def end_it() -> None:
        with connect(sample_db, autocommit=True) as watcher:
            for _ in range(6000):
                # once the run has written rows of its version (it made it, then counted
                # the chunks, then embeds them in batches of 4)
                if watcher.execute("select 1 from pgfunnel.embedding e join "
                                   "pgfunnel.index_version v on v.id = e.index_version_id "
                                   "where v.state = 'building' limit 1").fetchone():
                    row = watcher.execute(
                        "select pg_terminate_backend(pid) from pg_stat_activity "
                        "where application_name = 'pgfunnel reindex default'").fetchone()
                    ended.append(int(bool(row and row[0])))
                    return
                time.sleep(0.005)

    thread = threading.Thread(target=end_it)
    thread.start()
    res = CliRunner().invoke(app, ["reindex", "--dsn", sample_db, "--analyzer", "simple_v1",
                                   "--batch-size", "4"], env={"COLUMNS": "400"})
    thread.join()
    assert ended == [1], ended
    assert res.exit_code == 1, res.output
    said = " ".join(res.stderr.split())
    assert "error: lost the connection to Postgres" in said, said
    assert ("; the version this run made is kept, with what it wrote: `pgfunnel versions "
            "list --dsn") in said, said
    assert "names the `pgfunnel reindex" in said and "resumes it" in said, said
    listed = CliRunner().invoke(app, ["versions", "list", "--dsn", sample_db])
    assert "version 2 (building)" in listed.stdout, listed.stdout


def test_reindex_hints_run_as_pasted(sample_db: str) -> None:
    import shlex

    from pgfunnel.cli.main import app

    # the DSN from PGFUNNEL_DSN, which a pasted hint reads too (one typed with --dsn is
    # written into the hints: test_cli_hints.py)
    env = {"COLUMNS": "300", "PGFUNNEL_DSN": sample_db}
    # nothing logged yet: --last would have nothing to compare, the hint names a file
    result = CliRunner().invoke(app, ["reindex", "--analyzer", "simple_v1"], env=env)
    assert result.exit_code == 0, result.output
    hint = " ".join(result.output.split())
    assert "pgfunnel versions compare 1 2 -c default --queries QUERIES.jsonl" in hint
    last = CliRunner().invoke(app, ["versions", "compare", "1", "2", "--last", "5"], env=env)
    said = " ".join(last.output.split())
    assert last.exit_code == 1 and said.startswith("error: --last:"), said
    assert "pgfunnel search --trace" in said and "--queries FILE" in said
    with Funnel(sample_db, "default", embedder=None) as f:
        f.search("refund", trace=True)
    result = CliRunner().invoke(app, ["reindex", "--analyzer", "simple_v2"], env=env)
    hint = " ".join(result.output.split())
    assert "pgfunnel versions compare 1 3 -c default --last 100" in hint
    switch = hint[hint.index("Switch: ") + len("Switch: "):].strip()
    args = shlex.split(switch)
    assert args[:3] == ["pgfunnel", "versions", "activate"] and "-c" in args
    switched = CliRunner().invoke(app, args[1:], env=env)
    assert switched.exit_code == 0, switched.output
    assert "versions rollback -c default" in " ".join(switched.output.split())
    with connect(sample_db, autocommit=True) as conn:
        assert [i.version for i in versions.list_versions(conn, "default")
                if i.state == "active"] == [3]
        # a collection left without an active version: nothing to compare with, and the
        # hint held `<active>`, which a shell reads as a redirect
        conn.execute("update pgfunnel.index_version set state = 'retired' "
                     "where state = 'active'")
    result = CliRunner().invoke(app, ["reindex", "--analyzer", "simple_v1"], env=env)
    hint = " ".join(result.output.split())
    assert result.exit_code == 0 and "<" not in hint and "compare" not in hint, hint
    assert "is ready. Switch: pgfunnel versions activate 4 -c default" in hint, hint


def test_reindex_errors_name_the_option_typed(sample_db: str) -> None:
    from pgfunnel.cli.main import app

    for args, flag in ((["--analyzer", "klingon_v1"], "--analyzer"),
                       (["--maintenance-work-mem", "lots"], "--maintenance-work-mem"),
                       (["--model", "/no/such/model"], "--model")):
        result = CliRunner().invoke(app, ["reindex", "--dsn", sample_db, *args],
                                    env={"COLUMNS": "300", "HF_HUB_OFFLINE": "1"})
        said = " ".join(result.output.split())
        assert result.exit_code == 1 and said.startswith(f"error: {flag}: "), said
    result = CliRunner().invoke(app, ["search", "refund", "--dsn", "not a dsn"],
                                env={"COLUMNS": "300"})
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and said.startswith("error: --dsn (or PGFUNNEL_DSN): "), said


def test_a_database_error_in_reindex_is_a_pgfunnel_error(sample_db: str) -> None:
    """reindex let the driver's errors through, where every other version command
    translates them: the CLI printed a traceback (here a lock_timeout while another
    session holds index_version)."""
    from pgfunnel.cli.main import app

    impatient = psycopg.conninfo.make_conninfo(sample_db, options="-c lock_timeout=200")
    with connect(sample_db) as holder:
        holder.execute("lock table pgfunnel.index_version in exclusive mode")
        with connect(impatient, autocommit=True) as conn, \
                pytest.raises(ConflictError, match="lock timeout"):
            versions.reindex(conn, "default", analyzer="simple_v3")
        result = CliRunner().invoke(app, ["reindex", "--dsn", impatient, "--analyzer",
                                          "simple_v3"], env={"COLUMNS": "300"})
        holder.rollback()
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: canceling statement due to lock timeout"), \
        result.output
    with connect(sample_db, autocommit=True) as conn:
        assert _state(conn) == {1: "active"}


def test_bad_options_are_config_errors(sample_db: str) -> None:
    from pgfunnel.cli.main import app

    with connect(sample_db, autocommit=True) as conn:
        with pytest.raises(ConfigError, match="analyzer"):
            versions.reindex(conn, "default", analyzer="klingon_v1")
        with pytest.raises(ConfigError, match="maintenance_work_mem"):
            versions.reindex(conn, "default", analyzer="simple_v1",
                             maintenance_work_mem="lots")
        with pytest.raises(PgfunnelError, match="no index version 9"):
            versions.activate(conn, "default", 9)
    # the collection is named: a number given without its -c is looked up in 'default'
    # (the DSN from PGFUNNEL_DSN: a typed one is added to the hint, test_cli_hints.py)
    res = CliRunner().invoke(app, ["versions", "drop", "9"],
                             env={"COLUMNS": "300", "PGFUNNEL_DSN": sample_db})
    assert res.exit_code == 1 and ("error: VERSION: collection 'default' has no index "
                                   "version 9 (`pgfunnel versions list -c default` shows "
                                   "them)") in res.output, res.output
    with connect(sample_db, autocommit=True) as conn:
        # pgvector's rule for the pair, refused before anything is embedded or written
        with pytest.raises(ConfigError, match=r"^ef_construction: must be at least 2 x m"):
            versions.reindex(conn, "default", m=16, ef_construction=8)
        assert conn.execute("select count(*) from pgfunnel.index_version").fetchone() == (1,)


def test_small_maintenance_work_mem_notice_is_shown(sample_db: str) -> None:
    from test_ingest import _smallest_maintenance_work_mem

    seen: list[str] = []
    with connect(sample_db, autocommit=True) as conn:
        if _smallest_maintenance_work_mem(conn) != "64kB":
            pytest.skip("before Postgres 17 maintenance_work_mem is at least 1MB, where the "
                        "sample corpus's graph fits: nothing to notice")
        res = versions.reindex(conn, "default", analyzer="simple_v1",
                               maintenance_work_mem="64kB", notice=seen.append)
    assert any("maintenance_work_mem" in n for n in seen), seen
    assert seen == res.notices and res.state == "ready"


def test_compare_versions_differing_in_analyzer_and_in_model(sample_db: str, tiny_model: str,
                                                             tiny_embedder: Any) -> None:
    from pgfunnel.cli.main import app

    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1")
        res3 = versions.reindex(conn, "default", model=tiny_model, embedder=tiny_embedder)
        assert res3.dimensions == 64 and res3.validation is not None and res3.validation.ok
        before = _state(conn)
    runner = CliRunner()
    out = runner.invoke(app, ["versions", "compare", "1", "2", "--queries", str(QUERIES),
                              "--dsn", sample_db, "--json"])
    assert out.exit_code == 0, out.output
    cmp = json.loads(out.output[out.output.index("{"):])
    assert cmp["judged"] and cmp["n_queries"] == 97
    assert 0.3 < cmp["mean_overlap"] < 1.0  # analyzers differ, yet mostly agree
    assert cmp["ndcg_low"] <= cmp["ndcg_diff"] <= cmp["ndcg_high"]
    text = runner.invoke(app, ["versions", "compare", "1", "3", "--queries", str(QUERIES),
                               "--dsn", sample_db])
    assert text.exit_code == 0, text.output
    flat = " ".join(text.output.split())
    assert "mean overlap@10" in flat and "nDCG@10: version 1" in flat
    assert "paired bootstrap" in flat
    with connect(sample_db, autocommit=True) as conn:
        cmp13 = versions.compare(conn, "default", 1, 3, versions.read_query_file(QUERIES)[0])
        assert _state(conn) == before  # pinned searches leave no trace
    # a random tiny model is far worse than MiniLM: a clearly negative change
    assert cmp13.mean_overlap < cmp["mean_overlap"]
    # version 1 (active) scores what `pgfunnel eval` gives it: follow-ups resolved alike
    from pgfunnel.eval.harness import Harness, preset_configs

    queries = versions.read_query_file(QUERIES)[0]
    assert any(q.history for q in queries)
    evaluated = Harness(sample_db, "default").run(queries, preset_configs("default"))
    (only,) = evaluated.report.configs.values()
    assert cmp13.ndcg_a == pytest.approx(only.aggregates["all"]["ndcg@10"], abs=1e-9)
    assert cmp13.ndcg_diff is not None and cmp13.ndcg_high is not None and cmp13.ndcg_high < 0


def test_compare_last_logged_searches(sample_db: str, embedder: Any) -> None:
    from pgfunnel.cli.main import app

    with Funnel(sample_db, "default", embedder=embedder) as f:
        for q in ("refund a monthly plan", "reset my password", "ERR-4321"):
            f.search(q, k=5, trace=True)
    with connect(sample_db, autocommit=True) as conn:
        assert set(versions.last_queries(conn, "default", 10)) == {
            "refund a monthly plan", "reset my password", "ERR-4321"}
        versions.reindex(conn, "default", analyzer="simple_v1")
    out = CliRunner().invoke(app, ["versions", "compare", "1", "2", "--last", "2",
                                   "--dsn", sample_db, "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output[out.output.index("{"):])["n_queries"] == 2
    # a usage error, as click's own
    bad = CliRunner().invoke(app, ["versions", "compare", "1", "2", "--dsn", sample_db])
    assert bad.exit_code == 2 and "exactly one of" in bad.output


def test_compare_names_its_flags_and_refuses_a_negative_show(sample_db: str) -> None:
    """A bad -k is named by its flag (docs/cli.md, exit codes), and --show takes no
    negative count (a slice [:-1] would quietly leave out the most changed query)."""
    from pgfunnel.cli.main import app

    for k in ("0", "1001"):
        out = CliRunner().invoke(app, ["versions", "compare", "1", "1", "--queries",
                                       str(QUERIES), "-k", k, "--dsn", sample_db],
                                 env={"COLUMNS": "300"})
        assert out.exit_code == 1, out.output
        assert out.output.startswith("error: --k: "), out.output
    out = CliRunner().invoke(app, ["versions", "compare", "1", "1", "--queries", str(QUERIES),
                                   "--show", "-1", "--dsn", sample_db],
                             env={"COLUMNS": "300"})
    assert out.exit_code == 2 and "--show" in out.output, out.output


def test_compare_last_leaves_out_a_logged_text_no_search_could_take(sample_db: str) -> None:
    """final() logged any query_text its caller passed (it refuses one over 10,000
    characters now, but logs keep what it wrote before); replayed by compare --last, such a
    text failed the whole compare ("query_text: is 20000 characters long")."""
    with connect(sample_db, autocommit=True) as conn:
        cid = conn.execute("select min(id) from pgfunnel.chunk").fetchone()[0]  # type: ignore[index]
        conn.execute("select * from pgfunnel.final(array[%s]::bigint[], '{1}', '{1}', "
                     "'{1}', '{1}', '{NULL}', '{NULL}', trace => true, query_text => %s)",
                     (cid, "refund a monthly plan")).fetchall()
        # the row an older final() wrote for a long text, written as it wrote it
        conn.execute("insert into pgfunnel.search_log (collection_id, index_version_id, "
                     "config_hash, config, query_text, principals) "
                     "select collection_id, index_version_id, config_hash, config, %s, "
                     "principals from pgfunnel.search_log order by id limit 1", ("a" * 20_000,))
        assert versions.last_queries(conn, "default", 10) == ["refund a monthly plan"]


def test_compare_as_a_reader_names_the_privilege_it_lacks(sample_db: str) -> None:
    """A reader cannot pin a version; compare says so up front, for --last too (which under
    RLS would otherwise report that nothing was ever logged)."""
    from _security_helpers import create_app_role
    from pgfunnel.cli.main import app

    from pgfunnel.errors import AccessError

    reader = create_app_role(sample_db)
    writer = create_app_role(sample_db, writer=True)
    with connect(reader, autocommit=True) as conn, \
            pytest.raises(AccessError, match="pgfunnel_writer"):
        versions.search_pinned(conn, "default", 1, ["refund"])
    for args in (["--last", "5"], ["--queries", "missing.jsonl"]):
        out = CliRunner().invoke(app, ["versions", "compare", "1", "1", *args, "--dsn", reader])
        assert out.exit_code == 1 and "needs UPDATE on pgfunnel.index_version" in out.output, \
            out.output
    with connect(writer, autocommit=True) as conn:
        versions.require_pin_privilege(conn)  # a writer may
        assert len(versions.search_pinned(conn, "default", 1, ["refund"], k=3)[0]) == 3


def test_kill_9_mid_build_then_rerun_resumes_and_cleans(sample_db: str, embedder: Any,
                                                        tiny_model: str,
                                                        tiny_embedder: Any) -> None:
    before = _top(sample_db, "cancel my subscription", embedder)
    env = dict(os.environ, PGFUNNEL_DSN=sample_db)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgfunnel.cli.main", "reindex", "--model", tiny_model,
         "--batch-size", "2", "--json"], env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    killed_at = 0
    with connect(sample_db, autocommit=True) as conn:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            row = conn.execute("select chunk_count from pgfunnel.index_version "
                               "where state = 'building'").fetchone()
            if row is not None and row[0] >= 10:
                proc.send_signal(signal.SIGKILL)
                killed_at = int(row[0])
                break
            time.sleep(0.02)
        proc.wait(30)
        assert killed_at, "the reindex finished before it could be killed"
        # the killed client's backend goes away and frees the lock
        coll_id = conn.execute("select id from pgfunnel.collection").fetchone()[0]  # type: ignore[index]
        for _ in range(100):
            if versions.lock_holder(conn, coll_id) is None:
                break
            time.sleep(0.1)
        assert _state(conn) == {1: "active", 2: "building"}
        assert _top(sample_db, "cancel my subscription", embedder) == before

        # and an index build interrupted half-way: cancel a concurrent build -> invalid index
        vid = conn.execute("select id from pgfunnel.index_version where version = 2"
                           ).fetchone()[0]  # type: ignore[index]
        # a row whose vector cannot be cast to the index's dimension makes the build fail
        # after its catalog entry committed, as a killed build would leave it
        bogus = conn.execute("select c.id from pgfunnel.chunk c where not exists (select 1 "
                             "from pgfunnel.lexical l where l.index_version_id = %s and "
                             "l.chunk_id = c.id) limit 1", (vid,)).fetchone()[0]  # type: ignore[index]
        conn.execute("insert into pgfunnel.embedding values (%s, %s, '[1,2,3]')", (vid, bogus))
        with pytest.raises(psycopg.errors.DataException):
            conn.execute(f"create index concurrently embedding_hnsw_v{vid} on pgfunnel.embedding "
                         "using hnsw ((embedding::vector(64)) vector_cosine_ops) "
                         f"where index_version_id = {vid}")
        conn.execute("delete from pgfunnel.embedding where index_version_id = %s and chunk_id = %s",
                     (vid, bogus))
        assert _invalid_indexes(conn) == [f"embedding_hnsw_v{vid}"]

        done_before = conn.execute("select chunk_count from pgfunnel.index_version "
                                   "where version = 2").fetchone()[0]  # type: ignore[index]
        res = versions.reindex(conn, "default", model=tiny_model, embedder=tiny_embedder)
        assert res.resumed and res.version == 2 and res.chunks_before == done_before
        total = conn.execute("select count(*) from pgfunnel.chunk").fetchone()[0]  # type: ignore[index]
        assert res.chunks_indexed == res.chunks_embedded == total - done_before
        assert any(f"dropped invalid index embedding_hnsw_v{vid}" in n for n in res.notes)
        assert res.state == "ready" and _invalid_indexes(conn) == []
        assert _state(conn) == {1: "active", 2: "ready"}
    assert _top(sample_db, "cancel my subscription", embedder) == before


def test_a_building_version_names_the_reindex_that_resumes_it(sample_db: str,
                                                              tiny_model: str,
                                                              tiny_embedder: Any) -> None:
    # activating (or comparing) a version whose reindex was interrupted said "finish it
    # with `pgfunnel reindex`": pasted, that reindex asked for the active version's model
    # and analyzer, so it dropped the half-built version and began another
    import shlex

    from pgfunnel.cli.main import app

    def stop(stage: str, n: int, total: int | None) -> None:
        if stage == "embedding":
            raise KeyboardInterrupt  # Ctrl-C once the first batch is written

    with connect(sample_db, autocommit=True) as conn:
        with pytest.raises(KeyboardInterrupt):
            versions.reindex(conn, "default", model=tiny_model, embedder=tiny_embedder,
                             analyzer="simple_v1", batch_size=4, m=12, progress=stop)
        assert _state(conn) == {1: "active", 2: "building"}
        with pytest.raises(ConflictError, match="still building") as activating:
            versions.activate(conn, "default", 2)
        with pytest.raises(ConflictError, match="still building") as comparing:
            versions.compare(conn, "default", 1, 2, ["refund"])
    said = str(activating.value)
    assert str(comparing.value) == said
    # after a kill -9 nothing is said: the list names the command (the DSN from
    # PGFUNNEL_DSN: a typed one is added to the command, test_cli_hints.py)
    listed = CliRunner().invoke(app, ["versions", "list"],
                                env={"COLUMNS": "300", "PGFUNNEL_DSN": sample_db})
    hint = said.split(": ", 1)[1]
    assert (f"note: version 2 is not being built (its reindex was interrupted): {hint}"
            in " ".join(listed.output.split())), listed.output
    with connect(sample_db, autocommit=True) as conn, versions.writer_lock(conn, "default"):
        # while a reindex runs, it is being built
        listed = CliRunner().invoke(app, ["versions", "list", "--dsn", sample_db],
                                    env={"COLUMNS": "300"})
        assert listed.exit_code == 0 and "not being built" not in listed.output, listed.output
    assert said.endswith("(a reindex with other settings drops it); `pgfunnel versions drop "
                         "2 -c default` discards it"), said
    args = shlex.split(said.split("`")[1])
    assert args[:4] == ["pgfunnel", "reindex", "-c", "default"], args
    assert {"--model", "--analyzer", "--m"} <= set(args), args
    pasted = CliRunner().invoke(app, [*args[1:], "--dsn", sample_db],
                                env={"COLUMNS": "300", "HF_HUB_OFFLINE": "1"})
    out = " ".join(pasted.output.split())
    assert pasted.exit_code == 0, out
    assert "resuming version 2" in out and "dropped half-built" not in out, out
    with connect(sample_db, autocommit=True) as conn:
        assert _state(conn) == {1: "active", 2: "ready"}
        info = versions.list_versions(conn, "default")[1]
        assert (info.embedding_model, info.analyzer, info.params["m"]) == (
            tiny_model, "simple_v1", 12)


def test_searches_while_switching_see_one_version_wholly(sample_db: str) -> None:
    bench = load_module("switch_under_load", ROOT / "bench" / "switch_under_load.py")
    # ef_search above the chunk count: the dense leg is exhaustive, so a difference
    # between answers can only come from mixing versions, not from ANN approximation
    counts = bench.run(sample_db, "default", searches=500, n_queries=30, ef_search=1000)
    assert counts["searches"] == 500
    assert counts["errors"] == 0, counts["first_errors"]
    assert counts["empty"] == 0 and counts["mixed"] == 0, counts["first_mixed"]
    assert counts["switches_during_searches"] >= 20
    # both versions served, and answers could be told apart
    assert counts["version_a"] > 0 and counts["version_b"] > 0
    assert counts["ambiguous"] < counts["searches"] // 2


def test_reindex_sizes_maintenance_work_mem_unless_given(sample_db: str) -> None:
    from test_ingest import _smallest_maintenance_work_mem

    seen: list[str] = []
    with connect(sample_db, autocommit=True) as conn:
        smallest = _smallest_maintenance_work_mem(conn)
        conn.execute(f"set maintenance_work_mem = '{smallest}'")
        res = versions.reindex(conn, "default", analyzer="simple_v1", notice=seen.append)
        assert res.state == "ready"
        assert not [n for n in seen if "maintenance_work_mem" in n], seen
        # the concurrent build's session setting is put back afterwards
        assert conn.execute("show maintenance_work_mem").fetchone() == (smallest,)


def _relations(conn: psycopg.Connection[Any], version_id: int) -> list[str]:
    return [r[0] for r in conn.execute(
        "select c.relname from pg_class c where c.relnamespace = 'pgfunnel'::regnamespace "
        "and c.relname in (%s, %s) order by 1",
        (f"posting_v{version_id}", f"embedding_hnsw_v{version_id}")).fetchall()]


def test_drop_collection_takes_its_tables_and_indexes_too(db: str) -> None:
    from funnel_util import doc, ingest
    from pgfunnel.cli.main import app

    from pgfunnel.doctor import check_orphans

    with connect(db, autocommit=True) as conn:
        ingest(conn, [doc(f"a{i}", f"alpha text number {i}") for i in range(5)], collection="a")
        ingest(conn, [doc(f"b{i}", f"beta text number {i}") for i in range(5)], collection="b")
        vid_a, vid_b = (int(one_row(conn.execute(
            "select v.id from pgfunnel.index_version v join pgfunnel.collection c "
            "on c.id = v.collection_id where c.name = %s", (name,)))[0])
            for name in ("a", "b"))
        assert len(_relations(conn, vid_a)) == 2

        # the CLI asks for confirmation first
        runner = CliRunner()
        refused = runner.invoke(app, ["versions", "drop-collection", "a", "--dsn", db],
                                env={"COLUMNS": "200"})
        assert refused.exit_code == 2 and "--yes" in refused.output
        assert "(5 documents)" in refused.output
        # a name that is no collection is said to be none before confirmation is asked
        misspelt = runner.invoke(app, ["versions", "drop-collection", "aa", "--dsn", db],
                                 env={"COLUMNS": "200"})
        assert misspelt.exit_code == 1 and "--yes" not in misspelt.output, misspelt.output
        assert "collection 'aa' does not exist: nothing to drop" in misspelt.output
        # with --yes too: it said "ingest into it first", as a search is told
        gone = runner.invoke(app, ["versions", "drop-collection", "aa", "--yes", "--dsn", db],
                             env={"COLUMNS": "200"})
        assert gone.exit_code == 1 and "nothing to drop" in gone.output, gone.output
        assert "ingest" not in gone.output
        done = runner.invoke(app, ["versions", "drop-collection", "a", "--yes", "--dsn", db,
                                   "--json"])
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout) == {"collection": "a", "versions": [1], "documents": 5}

        assert _relations(conn, vid_a) == []
        assert conn.execute("select count(*) from pgfunnel.document d join "
                            "pgfunnel.collection c on c.id = d.collection_id "
                            "where c.name = 'a'").fetchone() == (0,)
        assert check_orphans(conn) == []
        # the other collection is untouched and searchable
        assert conn.execute("select count(*) from funnel_search('beta', null, 5, "
                            "collection => 'b')").fetchone() == (5,)

        # a plain DELETE of a collection row leaves its partition and graph index behind,
        # which doctor names
        conn.execute("delete from pgfunnel.collection where name = 'b'")
        found = check_orphans(conn)
        assert sorted(f.message.split()[1] for f in found) == \
            sorted(f"pgfunnel.{r}" for r in _relations(conn, vid_b))
        assert len(found) == 2 and all(f.level == "warning" for f in found)
        # named once: the active-index check leaves an orphaned graph to this one
        from pgfunnel.doctor import check_active_indexes

        assert not [f for f in check_active_indexes(conn)
                    if f"embedding_hnsw_v{vid_b}" in f.message]


def test_reindex_runs_the_model_outside_its_batch_transactions(sample_db: str,
                                                               embedder: Any) -> None:
    # as ingest: a batch's vectors are computed before its transaction opens, so a
    # re-embedding reindex survives idle_in_transaction_session_timeout (managed Postgres)
    from funnel_util import SlowEmbedder

    slow = SlowEmbedder(embedder)
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("set idle_in_transaction_session_timeout = '300ms'")
        chunks = conn.execute("select count(*) from pgfunnel.chunk").fetchone()[0]  # type: ignore[index]
        res = versions.reindex(conn, "default", reembed=True, embedder=slow,  # type: ignore[arg-type]
                               batch_size=64)
        assert res.state == "ready" and res.validation is not None and res.validation.ok
        assert slow.calls == -(-chunks // 64)



def test_an_interrupted_reembed_resumes_embedding(sample_db: str, embedder: Any) -> None:
    # `reindex --reembed` interrupted, then resumed by the command `versions list` names
    # (which lacked --reembed), copied the old version's vectors for every chunk the first
    # run had not reached: a version of fresh and stale vectors, unsaid
    batches = []

    def stop(stage: str, n: int, total: int | None) -> None:
        if stage == "embedding":
            batches.append(n)
            if len(batches) == 2:
                raise KeyboardInterrupt  # Ctrl-C once the first batch is written

    with connect(sample_db, autocommit=True) as conn:
        with pytest.raises(KeyboardInterrupt):
            versions.reindex(conn, "default", reembed=True, embedder=embedder, batch_size=4,
                             progress=stop)
        assert _state(conn) == {1: "active", 2: "building"}
        info = versions.list_versions(conn, "default")[1]
        done = conn.execute("select count(*) from pgfunnel.embedding where index_version_id = %s",
                            (info.id,)).fetchone()[0]  # type: ignore[index]
        assert done > 0
        hint = versions.resume_hint("default", info)
        assert "--reembed" in hint.split("`")[1], hint
        # resumed without the flag (a script's rerun, or the Python API): still re-embeds
        res = versions.reindex(conn, "default", embedder=embedder)
        assert res.resumed and res.state == "ready"
        total = conn.execute("select count(*) from pgfunnel.chunk").fetchone()[0]  # type: ignore[index]
        assert (res.chunks_embedded, res.chunks_copied) == (total - done, 0)
        assert not any("vectors copied" in n for n in res.notes), res.notes


def test_an_auto_funnel_follows_the_active_versions_model(sample_db: str, tiny_model: str,
                                                          tmp_path: Path) -> None:
    """A long-lived Funnel with embedder="auto" embeds with the model of the version that
    is active now: after a switch to another model of the same dimension (where the SQL
    cannot tell) as of another dimension (which the SQL refuses)."""
    from pgfunnel.embedder import Embedder
    from pgfunnel.errors import InvalidVectorError
    from pgfunnel.tiny_models import build_tiny_bi_encoder

    other = str(build_tiny_bi_encoder(tmp_path / "other", dim=64, seed=1))
    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", model=tiny_model, activate_after=True)
        versions.reindex(conn, "default", model=other)
    query = "how do I get a refund on an annual plan"

    def fresh() -> list[int]:
        with Funnel(sample_db, "default") as f:
            return [r.chunk_id for r in f.search(query, k=5).results]

    with Funnel(sample_db, "default") as funnel:
        assert [r.chunk_id for r in funnel.search(query, k=5).results] == fresh()
        assert funnel._embedder is not None and funnel._embedder.model_name == tiny_model
        with connect(sample_db, autocommit=True) as conn:
            versions.activate(conn, "default", 3)  # same dimension, another model
        assert [r.chunk_id for r in funnel.search(query, k=5).results] == fresh()
        assert funnel._embedder.model_name == other
        with connect(sample_db, autocommit=True) as conn:
            versions.activate(conn, "default", 1)  # all-MiniLM-L6-v2, 384 dimensions
        assert [r.chunk_id for r in funnel.search(query, k=5).results] == fresh()
        assert funnel._embedder.model_name != other
    # a Funnel given its model does not switch: it says which model the version needs
    with Funnel(sample_db, "default", embedder=Embedder(tiny_model)) as pinned_model, \
            pytest.raises(InvalidVectorError, match="create the Funnel with that model"):
        pinned_model.search(query, k=5)


def test_an_auto_funnel_alternating_between_two_models_loads_each_once(
        sample_db: str, tiny_model: str, tmp_path: Path) -> None:
    """One Funnel searching collections built with two models (embedder "auto") loaded
    the model again at every switch between them (about 0.5 s each on a CPU)."""
    from pgfunnel.embedder import Embedder
    from pgfunnel.ingest import Ingester
    from pgfunnel.sources import DocumentRecord
    from pgfunnel.tiny_models import build_tiny_bi_encoder

    other = str(build_tiny_bi_encoder(tmp_path / "other", dim=64, seed=1))
    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", model=tiny_model, activate_after=True)
        Ingester(conn, "b", embedder=Embedder(other)).ingest(
            [DocumentRecord(citekey="x", text="Refunds for annual plans are prorated.")])
    with Funnel(sample_db, "default") as funnel:
        first = funnel.search("refund", k=3, collection="default")
        a = funnel._embedder
        assert a is not None and a.model_name == tiny_model
        assert "model_load" in first.timings_ms
        switched = funnel.search("refund", k=3, collection="b")
        b = funnel._embedder
        assert b is not None and b.model_name == other
        assert switched.results and "model_load" in switched.timings_ms
        back = funnel.search("refund", k=3, collection="default")
        assert funnel._embedder is a  # the model set aside, not loaded again
        assert "model_load" not in back.timings_ms
        assert [r.chunk_id for r in back.results] == [r.chunk_id for r in first.results]
        funnel.search("refund", k=3, collection="b")
        assert funnel._embedder is b


class _SwitchingReranker:
    """A reranker (the CrossEncoder.rank shape) that, the first time it runs, has another
    session put version 2 live: a switch that commits in the middle of a search."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.calls = 0

    def rank(self, query: str, documents: list[str]) -> list[dict[str, Any]]:
        self.calls += 1
        if self.calls == 1:
            with connect(self.dsn, autocommit=True) as other:
                versions.activate(other, "default", 2)
        return [{"corpus_id": i, "score": float(-i)} for i in range(len(documents))]


def test_a_switch_during_the_rerank_does_not_relabel_the_trace(sample_db: str) -> None:
    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1")
        ids = dict(conn.execute("select version, id from pgfunnel.index_version").fetchall())
    query = "refund on an annual plan"
    with Funnel(sample_db, "default", embedder=None) as plain:
        on_v1 = {r.chunk_id: r.lexical_score for r in plain.search(query, k=5).results}
    with Funnel(sample_db, "default", embedder=None,
                reranker=_SwitchingReranker(sample_db)) as funnel:
        resp = funnel.search(query, k=5, trace=True)
    assert {r.chunk_id: r.lexical_score for r in resp.results} == on_v1  # read from v1
    with connect(sample_db, autocommit=True) as conn:
        assert _state(conn)[2] == "active"
        logged = conn.execute("select index_version_id from pgfunnel.search_log where id = %s",
                              (resp.search_id,)).fetchone()
    assert logged == (ids[1],)


def test_search_multi_reads_one_version_across_its_phrasings(sample_db: str) -> None:
    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1")
        ids = dict(conn.execute("select version, id from pgfunnel.index_version").fetchall())
    reranker = _SwitchingReranker(sample_db)
    with Funnel(sample_db, "default", embedder=None, reranker=reranker) as funnel:
        resp = funnel.search_multi(["refund on an annual plan", "money back for a yearly plan",
                                    "cancel and get my money back"], k=5, trace=True)
    # the switch committed during the first phrasing's rerank: the other two read version
    # 2, so the plan ran again, every phrasing on version 2
    assert reranker.calls == 6
    record = resp.transforms[-1]
    assert record["version_switches"] == 1
    assert resp.index_version_id == ids[2]
    with connect(sample_db, autocommit=True) as conn:
        assert _state(conn)[2] == "active"
        logged = conn.execute("select distinct index_version_id from pgfunnel.search_log "
                              "where id = any(%s)", (record["search_ids"],)).fetchall()
    assert logged == [(ids[2],)]


class _SlowReranker:
    """A reranker that takes its time, as a cross-encoder on a CPU does."""

    def rank(self, query: str, documents: list[str]) -> list[dict[str, Any]]:
        time.sleep(0.6)
        return [{"corpus_id": i, "score": float(-i)} for i in range(len(documents))]


def test_a_plans_model_calls_run_outside_any_transaction(
        sample_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The phrasings of one plan used to share one repeatable-read transaction, left idle
    # while the model reranked each of them: a role's idle_in_transaction_session_timeout
    # shorter than a rerank ended the connection in the middle of the plan.
    monkeypatch.setenv("PGOPTIONS", "-c idle_in_transaction_session_timeout=300")
    with Funnel(sample_db, "default", embedder=None, reranker=_SlowReranker()) as funnel:
        multi = funnel.search_multi(["refund on an annual plan", "money back"], k=3)
        parts = funnel.search_decomposed("currency on monthly plans and levy on annual plans",
                                         qualifiers=["monthly", "annual"], k=4)
    assert multi.reranked and len(multi.results) == 3
    assert parts.reranked and len(parts.transforms[-1]["parts"]) == 2
    assert multi.index_version_id is not None


def test_versions_list_reads_at_80_columns(sample_db: str) -> None:
    """At 80 columns the table cut every header and value ("vers…", "acti…"); a terminal
    too narrow for it gets one line per version instead, with nothing cut."""
    from pgfunnel.cli.main import app

    with connect(sample_db, autocommit=True) as conn:
        res = versions.reindex(conn, "default", analyzer="simple_v1")
        versions.activate(conn, "default", res.version)
    narrow = CliRunner().invoke(app, ["versions", "list", "--dsn", sample_db],
                                env={"COLUMNS": "80"})
    assert narrow.exit_code == 0, narrow.output
    flat = " ".join(narrow.output.split())
    assert "…" not in narrow.output
    assert "version 1 (retired): model all-MiniLM-L6-v2, dims 384, analyzer english_v8" in flat
    assert "version 2 (active):" in flat and "analyzer simple_v1" in flat
    # what the embedder and BM25 read per chunk
    assert "analyzer simple_v1, inputs title/title2_term2," in flat
    wide = CliRunner().invoke(app, ["versions", "list", "--dsn", sample_db],
                              env={"COLUMNS": "200"})
    assert "┃ version ┃ state" in wide.output and "…" not in wide.output


def _in_thread(fn: Any) -> tuple[Any, list[Any]]:
    import threading

    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except Exception as exc:  # noqa: BLE001 - handed to the test
            out.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return t, out


def test_retire_racing_an_activation_does_not_retire_the_active_version(
        sample_db: str) -> None:
    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1")
        with connect(sample_db) as switcher, \
                connect(sample_db, autocommit=True) as other:
            other.execute("set application_name = 'racing-retire'")
            # an activation of version 2 in flight when retire reads it as 'ready'
            switcher.execute("select pgfunnel.activate_version('default', 2)")
            t, out = _in_thread(lambda: versions.retire(other, "default", 2))
            try:
                wait_for_lock_wait(conn, "racing-retire")
            finally:
                switcher.commit()
                t.join(30)
        # the way out names the command, as the refusal of a version active when read
        # does; it said only "activate another version first"
        assert isinstance(out[0], ConflictError) and str(out[0]) == (
            "version 2 of 'default' is active now (a concurrent switch); only a ready "
            "version can be retired: activate another version first: `pgfunnel versions "
            "rollback -c default` returns to version 1, which it replaced"), out[0]
        assert _state(conn) == {1: "retired", 2: "active"}


def test_drop_racing_an_activation_does_not_drop_the_active_version(sample_db: str) -> None:
    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1")
        with connect(sample_db) as switcher, \
                connect(sample_db, autocommit=True) as other:
            switcher.execute("select pgfunnel.activate_version('default', 2)")
            t, out = _in_thread(lambda: versions.drop(other, "default", 2))
            try:
                # the drop names its session
                wait_for_lock_wait(conn, "pgfunnel versions drop default")
            finally:
                switcher.commit()
                t.join(30)
        assert isinstance(out[0], ConflictError) and "active version now" in str(out[0])
        assert _state(conn) == {1: "retired", 2: "active"}
        info = {v.version: v for v in versions.list_versions(conn, "default")}
        assert info[2].index_valid and info[2].missing_chunks == 0
        # a version marked by a drop (one interrupted before its rows went) is not
        # activated: its index may be half dropped
        versions.activate(conn, "default", 1)
        conn.execute("update pgfunnel.index_version set params = params || "
                     "'{\"dropping\": \"2026-01-01\"}' where id = %s", (info[2].id,))
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState,
                           match="version 2 of 'default' is being dropped"), conn.transaction():
            conn.execute("select pgfunnel.activate_version('default', 2)")
        with pytest.raises(ConflictError, match="versions drop 2 -c default"):
            versions.activate(conn, "default", 2)
        versions.drop(conn, "default", 2)
        assert _state(conn) == {1: "active"}


def test_ingest_into_a_collection_left_without_an_active_version_is_refused(
        sample_db: str, embedder: Any) -> None:
    from pgfunnel.errors import NotFoundError
    from pgfunnel.ingest import Ingester
    from pgfunnel.sources import DocumentRecord

    with connect(sample_db, autocommit=True) as conn:
        # what a race, a hand-made update or a drop cut short can leave
        conn.execute("update pgfunnel.index_version set state = 'retired'")
        doc = DocumentRecord(citekey="late-doc", title="Late", text="Zanzibar quokka guide. " * 5)
        with pytest.raises(ConflictError, match=r"no active index version but holds \d+ chunk"
                                                r".*versions \(1 retired\).*versions activate N"):
            Ingester(conn, "default", embedder=embedder).ingest([doc])
        # no version 2 holding this document alone was made active
        assert _state(conn) == {1: "retired"}
        # and the batch's own check, for a switch after the up-front one
        with pytest.raises(ConflictError, match="no active index version"), conn.transaction():
            Ingester(conn, "default", embedder=embedder)._version()
        assert _state(conn) == {1: "retired"}
        # the search's advice is to activate one, not to ingest (which is refused above)
        with Funnel(sample_db, "default") as f, \
                pytest.raises(NotFoundError, match="has no active index version .*versions list"):
            f.search("refund")
        versions.activate(conn, "default", 1)
        Ingester(conn, "default", embedder=embedder).ingest([doc])
        assert _state(conn) == {1: "active"}


def test_a_drop_holding_the_writer_lock_is_named(sample_db: str) -> None:
    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1")
        with connect(sample_db) as reader, connect(sample_db, autocommit=True) as dropper:
            # an open transaction that read the table: DROP INDEX CONCURRENTLY waits for it
            reader.execute("select count(*) from pgfunnel.embedding")
            t, out = _in_thread(lambda: versions.drop(dropper, "default", 2))
            try:
                wait_for_lock_wait(conn, "pgfunnel versions drop default")
                with pytest.raises(ConflictError, match=r"another reindex \(or version drop\)"
                                                        r".*\(application_name 'pgfunnel "
                                                        r"versions drop default',"):
                    versions.reindex(conn, "default", analyzer="english_v2")
            finally:
                reader.rollback()
                t.join(30)
        assert not isinstance(out[0], Exception) and _state(conn) == {1: "active"}


def test_activate_builds_a_missing_or_invalid_index_first(sample_db: str) -> None:
    """A ready version whose graph was dropped (by hand, or a rebuild cut short) could not
    be activated, and the advice was a reindex, which makes a new version instead."""
    from pgfunnel.ingest import hnsw_index_name

    with connect(sample_db, autocommit=True) as conn:
        res = versions.reindex(conn, "default", analyzer="simple_v1")
        vid = conn.execute("select id from pgfunnel.index_version where collection_id = "
                           "(select id from pgfunnel.collection where name = 'default') "
                           "and version = %s", (res.version,)).fetchone()[0]  # type: ignore[index]
        conn.execute(f"drop index pgfunnel.{hnsw_index_name(vid)}")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as exc, \
                conn.transaction():
            conn.execute("select pgfunnel.activate_version('default', %s)", (res.version,))
        assert exc.value.diag.message_hint == (
            f"pgfunnel versions activate {res.version} -c default builds it before it switches")
        act = versions.activate(conn, "default", res.version)
        assert act.index_built and act.replaced == 1
        assert conn.execute("select present, valid from pgfunnel.version_index(%s)",
                            (vid,)).fetchone() == (True, True)
        # the graph is used: the dense leg of the new active version finds rows
        assert conn.execute("select count(*) from pgfunnel.funnel_search(null, "
                            "(select embedding from pgfunnel.embedding limit 1), 5)"
                            ).fetchone()[0] == 5  # type: ignore[index]
        # an active or valid version is left alone
        again = versions.activate(conn, "default", 1)
        assert not again.index_built


def test_an_ingest_right_before_validation_does_not_fail_the_reindex(
        sample_db: str, embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A document ingested after reindex's last catch-up and before its validation was a
    chunk the version lacked: validation failed ("counts differ") and the version stayed
    'building'. The catch-up the validation runs under the ingest lock takes it in."""
    from pgfunnel.ingest import Ingester
    from pgfunnel.sources import DocumentRecord

    real_catch_up = versions.catch_up
    arrived: list[str] = []

    def catch_up_then_an_ingest_commits(*args: Any, **kwargs: Any) -> int:
        done = real_catch_up(*args, **kwargs)
        if not kwargs.get("in_transaction"):
            # another writer, on its own connection, right after each unlocked catch-up
            key = f"late-{len(arrived)}"
            with connect(sample_db, autocommit=True) as other:
                Ingester(other, "default", embedder=embedder).ingest([DocumentRecord(
                    citekey=key, title="Late", text="Zanzibar quokka migration guide. " * 5)])
            arrived.append(key)
        return done

    monkeypatch.setattr(versions, "catch_up", catch_up_then_an_ingest_commits)
    with connect(sample_db, autocommit=True) as conn:
        res = versions.reindex(conn, "default", analyzer="simple_v1", embedder=embedder)
        assert res.state == "ready" and res.validation is not None and res.validation.ok
        assert len(arrived) >= 2  # one of them after the build's catch-up
        info = {v.version: v for v in versions.list_versions(conn, "default")}
        assert info[res.version].missing_chunks == 0


@pytest.mark.parametrize("rls", [False, True])
def test_a_writer_that_does_not_own_the_tables_cannot_leave_a_version_half_dropped(
        sample_db: str, rls: bool) -> None:
    """`versions drop` by a pgfunnel_writer member marked the version as being dropped,
    then failed on `must be owner of index ...`: the version stayed marked, and no
    `versions activate` would take it again. The role is refused before anything is
    written, and so is `drop-collection`."""
    from _security_helpers import create_app_role

    from pgfunnel.errors import AccessError
    from pgfunnel.security import enable_rls

    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v6")
        if rls:
            with conn.transaction():
                enable_rls(conn)
    writer = create_app_role(sample_db, writer=True)
    with connect(writer, autocommit=True) as conn:
        with pytest.raises(AccessError, match="takes the owner of the pgfunnel tables"):
            versions.drop(conn, "default", 2)
        with pytest.raises(AccessError, match="takes the owner of the pgfunnel tables"):
            versions.drop_collection(conn, "default")
    with connect(sample_db, autocommit=True) as conn:
        params = conn.execute("select params from pgfunnel.index_version where version = 2"
                              ).fetchone()
        assert params is not None and "dropping" not in params[0]
        assert versions.activate(conn, "default", 2).activated == 2
        assert conn.execute("select count(*) from pgfunnel.document").fetchone() != (0,)


def test_a_version_dropped_while_its_activation_catches_up_is_not_switched_to(
        sample_db: str, embedder: Any, tiny_model: str) -> None:
    """`versions activate V` embeds the chunks V lacks before it takes any lock; a
    `versions drop V` run meanwhile by another operator went through, and the activation
    then failed on `... violates foreign key constraint "embedding_index_version_id_fkey"`.
    It now says that V was dropped meanwhile, and nothing is switched."""
    from pgfunnel.embedder import Embedder
    from pgfunnel.ingest import Ingester
    from pgfunnel.sources import DocumentRecord

    class DropsTheVersionFirst(Embedder):
        dropped = False

        def embed(self, texts: Sequence[str],
                  progress: Callable[[int], None] | None = None) -> np.ndarray:
            if not self.dropped:
                self.dropped = True
                with connect(sample_db, autocommit=True) as other:
                    versions.drop(other, "default", 2)
            return super().embed(texts, progress=progress)

    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", model=tiny_model,
                         embedder=Embedder(tiny_model))
        Ingester(conn, "default", embedder=embedder).ingest(
            [DocumentRecord(citekey="late", text="Ingested after version 2 was built.")])
        with pytest.raises(ConflictError, match="version 2 of 'default' was dropped"):
            versions.activate(conn, "default", 2, embedder=DropsTheVersionFirst(tiny_model))
        states = conn.execute("select version, state from pgfunnel.index_version "
                              "order by version").fetchall()
    assert states == [(1, "active")]


def test_versions_list_names_a_drop_that_did_not_finish(sample_db: str) -> None:
    """A `versions drop` cut short (here cancelled while DROP INDEX CONCURRENTLY waits for
    an open transaction; Ctrl-C does the same) leaves the version marked as being dropped:
    `versions activate` refuses it, but `versions list` showed it as plain `ready`."""
    import threading

    from pgfunnel.cli.main import app as cli

    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v6")
    failed: list[BaseException] = []

    def drop() -> None:
        try:
            with connect(sample_db, autocommit=True) as conn:
                versions.drop(conn, "default", 2)
        except Exception as exc:  # noqa: BLE001 - asserted on below
            failed.append(exc)

    with connect(sample_db, autocommit=True) as watcher, \
            connect(sample_db) as blocker:
        blocker.execute("select count(*) from pgfunnel.embedding")  # its transaction stays
        t = threading.Thread(target=drop)
        t.start()
        wait_for_lock_wait(watcher, "pgfunnel versions drop default", "drop index")
        watcher.execute("select pg_cancel_backend(pid) from pg_stat_activity "
                        "where application_name = 'pgfunnel versions drop default'")
        t.join()
        blocker.rollback()
    assert failed, "the drop was not cut short"
    res = CliRunner().invoke(cli, ["versions", "list", "--dsn", sample_db],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert "ready, drop unfinished" in res.output
    assert (f"`pgfunnel versions drop --dsn {shlex.quote(sample_db)} 2 -c default` "
            "finishes it") in " ".join(res.output.split())


def test_rollback_without_an_active_version_says_so(sample_db: str) -> None:
    """A collection whose active version was retired around pgfunnel: rollback said "the
    active version replaced no other version", of a version that is not there."""
    from pgfunnel.errors import NotFoundError

    with connect(sample_db, autocommit=True) as conn:
        conn.execute("update pgfunnel.index_version set state = 'retired', "
                     "retired_at = now() where state = 'active'")
        with pytest.raises(NotFoundError, match="has no active version.*versions activate N"):
            versions.rollback(conn, "default")


def test_the_versions_api_on_a_connection_with_another_row_factory(sample_db: str,
                                                                   embedder: Any) -> None:
    # an application's connection opened with row_factory=dict_row (as its pool hands
    # out) failed list_versions, reindex, activate and the rest with KeyError 0: they read
    # rows by position. Each must give what it gives on a plain connection, and put the
    # connection's own row factory back.
    from psycopg.rows import dict_row

    with Funnel(sample_db, "default", embedder=embedder) as f:
        f.search("reset my password", k=5, trace=True)
    with connect(sample_db, autocommit=True) as plain:
        expected = [(v.version, v.state) for v in versions.list_versions(plain, "default")]
    with psycopg.connect(sample_db, autocommit=True, row_factory=dict_row) as conn:
        assert [(v.version, v.state) for v in versions.list_versions(conn, "default")
                ] == expected
        assert versions.last_queries(conn, "default", 5) == ["reset my password"]
        assert versions.building_version(conn, "default") is None
        res = versions.reindex(conn, "default", analyzer="simple_v1")
        assert res.state == "ready" and res.validation is not None and res.validation.ok
        assert versions.activate(conn, "default", res.version).activated == res.version
        assert versions.rollback(conn, "default").activated == 1
        assert versions.retire(conn, "default", res.version).state == "retired"
        assert versions.lock_holder(conn, 1) is None
        with versions.writer_lock(conn, "default") as coll_id:
            assert coll_id == 1
        compared = versions.compare(conn, "default", 1, res.version, ["reset my password"],
                                    k=5)
        assert compared.n_queries == 1
        versions.drop(conn, "default", res.version)
        assert [(v.version, v.state) for v in versions.list_versions(conn, "default")
                ] == [(1, "active")]
        assert conn.row_factory is dict_row  # put back
        assert conn.execute("select 1 as one").fetchone() == {"one": 1}


def test_a_reindex_with_the_active_versions_settings_says_so(sample_db: str) -> None:
    # a plain `pgfunnel reindex` on a collection whose active version already has the
    # defaults built a second identical version without a word; a changed setting does not
    # get the remark, and --reembed (vectors computed again) is a rebuild on purpose
    with connect(sample_db, autocommit=True) as conn:
        same = versions.reindex(conn, "default")
        said = " ".join(same.notes)
        assert (f"version {same.version} has the active version 1's settings (model, analyzer, "
                "embedding and lexical inputs, m, ef_construction) and its vectors: it will "
                "rank as that one does") in said, said
        assert f"pgfunnel versions drop {same.version} -c default removes it" in said
        versions.drop(conn, "default", same.version)
        other = versions.reindex(conn, "default", analyzer="simple_v1")
        assert not any("rank as that one does" in n for n in other.notes), other.notes
        # the same reindex run twice: the second copies the first, ready (not active)
        twice = versions.reindex(conn, "default", analyzer="simple_v1")
        said = " ".join(twice.notes)
        assert (f"version {twice.version} has the ready version {other.version}'s settings "
                "(model, analyzer, embedding and lexical inputs, m, ef_construction) and its "
                "vectors: it will rank as that one does") in said, said
        versions.drop(conn, "default", twice.version)
        versions.drop(conn, "default", other.version)
        other = versions.reindex(conn, "default", lexical_input="title2")
        assert not any("rank as that one does" in n for n in other.notes), other.notes
        versions.drop(conn, "default", other.version)
        # with --activate the copy is active by the time the note is read, and the drop it
        # named was refused ("is the active version"): it says to roll back first
        again = versions.reindex(conn, "default", activate_after=True)
        said = " ".join(again.notes)
        assert again.state == "active" and "rank as that one does" in said, said
        assert (f"it is active now: pgfunnel versions rollback -c default returns to version "
                f"1, then pgfunnel versions drop {again.version} -c default removes it"
                ) in said, said
        versions.rollback(conn, "default")
        versions.drop(conn, "default", again.version)
        assert _state(conn) == {1: "active"}


def test_compare_reads_as_the_reader_given_and_says_when_it_compared_nothing(
        sample_db: str, tmp_path: Path) -> None:
    # `versions compare` replayed queries with no principals and had no --principal: on
    # a collection whose documents are not public both versions returned nothing, which
    # it reported as "identical"
    from pgfunnel.cli.main import app

    with connect(sample_db, autocommit=True) as conn:
        conn.execute("update pgfunnel.document set readers = '{alice}', is_public = false")
        versions.reindex(conn, "default", analyzer="simple_v1")
    queries = ["refund on an annual plan", "reset my password"]
    with connect(sample_db, autocommit=True) as conn:
        blind = versions.compare(conn, "default", 1, 2, queries, k=5)
        seen = versions.compare(conn, "default", 1, 2, queries, k=5, principals=["alice"])
    assert blind.empty_in_both == 2 and blind.mean_overlap == 1.0
    assert seen.empty_in_both == 0 and all(d.only_a or d.overlap > 0 for d in seen.per_query)
    args = ["versions", "compare", "1", "2", "--dsn", sample_db, "--k", "5"]
    query_file = tmp_path / "queries.jsonl"
    query_file.write_text("".join(json.dumps({"query": q}) + "\n" for q in queries))
    out = CliRunner().invoke(app, [*args, "--queries", str(query_file)],
                             env={"COLUMNS": "200"})
    said = " ".join(out.output.split())
    assert out.exit_code == 0, said
    assert ("2 of 2 queries returned nothing on either version (no --principal: public "
            "documents only); they count as identical") in said, said
    out = CliRunner().invoke(app, [*args, "--queries", str(query_file), "-p", "alice",
                                   "--json"])
    assert out.exit_code == 0, out.output
    cmp = json.loads(out.output[out.output.index("{"):])
    assert cmp["empty_in_both"] == 0 and cmp["notices"] == []


def test_compare_reads_judged_file_names_as_eval_does(sample_db: str, tmp_path: Path) -> None:
    # the docs promise both tools one nDCG@k for the active version; compare scored an
    # item written as a file name (`refunds-annual.md`) as never found, eval matched it
    from pgfunnel.cli.main import app

    from pgfunnel.eval.harness import Harness, preset_configs
    from pgfunnel.eval.qrels import load_queries

    lines = [{"query_id": "q1", "query": "refund on an annual plan", "slice": "s",
              "relevant": {"refunds-annual.md": 1}},
             {"query_id": "q2", "query": "reset my password", "slice": "s",
              "relevant": {"no-such-doc": 1}}]
    path = tmp_path / "judged.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1")
        cmp = versions.compare(conn, "default", 1, 2, versions.read_query_file(path)[0], k=10)
        with pytest.warns(UserWarning):
            ran = Harness(conn, "default", k=10, embedder="auto").run(
                load_queries(path), preset_configs("default"))
    assert cmp.judged_items_respelled == {"refunds-annual.md": "refunds-annual"}
    assert cmp.judged_items_missing == ["no-such-doc"]
    assert cmp.ndcg_a is not None and cmp.ndcg_a > 0
    assert cmp.ndcg_a == pytest.approx(ran.report.configs["default"].aggregates["all"]["ndcg@10"])
    # the command says them as eval does: the file name read as a citekey is a note, the
    # item the collection lacks a warning (both were warnings, where the docs said a note)
    res = CliRunner().invoke(app, ["versions", "compare", "1", "2", "--queries", str(path),
                                   "--dsn", sample_db], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    said = res.stderr.splitlines()
    assert said[0].startswith("note: versions compare: 1 judged item was written as a file "
                              "name and matched to its citekey ('refunds-annual.md' -> "
                              "'refunds-annual')"), res.stderr
    assert said[1].startswith("warning: versions compare: 1 of 2 judged items are not in "
                              "collection 'default'"), res.stderr
    assert "judged items" not in res.stdout, res.stdout


def test_activating_a_version_with_rows_deleted_past_its_trigger_says_what_mends_it(
        sample_db: str) -> None:
    # it said "does not cover the collection: ... 0 chunks missing" with the hint that
    # activate catches up missing chunks, which it had done and which cannot mend this
    from pgfunnel.errors import PgfunnelError

    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1")
        conn.execute("alter table pgfunnel.lexical disable trigger lexical_deleted")
        conn.execute("delete from pgfunnel.document where citekey = 'refunds-annual'")
        conn.execute("alter table pgfunnel.lexical enable trigger lexical_deleted")
        with pytest.raises(PgfunnelError) as err:
            versions.activate(conn, "default", 2)
        said = " ".join(str(err.value).split())
        assert "version 2 of 'default' does not match the collection" in said, said
        assert "BM25 chunk count of" in said and "nothing is missing to catch up" in said
        assert "0 chunks missing" not in said
        assert "pgfunnel versions drop 2 -c default" in said
        assert _state(conn) == {1: "active", 2: "ready"}


def test_compare_last_replays_each_search_as_the_reader_it_ran_as(sample_db: str,
                                                                   embedder: Any) -> None:
    # `--last` replayed the logged texts with no principals: on documents that are not
    # public both versions found nothing
    from pgfunnel.cli.main import app

    with connect(sample_db, autocommit=True) as conn:
        conn.execute("update pgfunnel.document set readers = '{alice}', is_public = false")
    with Funnel(sample_db, "default", embedder=embedder) as f:
        for q in ("refund on an annual plan", "reset my password"):
            f.search(q, k=5, principals=["alice"], trace=True)
        f.search("invoice address", k=5, principals=["bob"], tenant=None, trace=True)
    with connect(sample_db, autocommit=True) as conn:
        logged = versions.last_searches(conn, "default", 10)
        assert sorted((s.query_text, s.principals) for s in logged) == [
            ("invoice address", ("bob",)), ("refund on an annual plan", ("alice",)),
            ("reset my password", ("alice",))]
        versions.reindex(conn, "default", analyzer="simple_v1")
    base = ["versions", "compare", "1", "2", "--last", "10", "--k", "5", "--json",
            "--dsn", sample_db]
    replayed = CliRunner().invoke(app, base)
    assert replayed.exit_code == 0, replayed.output
    cmp = json.loads(replayed.output[replayed.output.index("{"):])
    # bob sees nothing in either version; alice's two searches find her documents
    assert (cmp["n_queries"], cmp["empty_in_both"]) == (3, 1), cmp
    as_bob = CliRunner().invoke(app, [*base, "-p", "bob"])
    assert json.loads(as_bob.output[as_bob.output.index("{"):])["empty_in_both"] == 3


def test_compare_last_names_the_reader_of_a_text_two_readers_logged(
        sample_db: str, embedder: Any, tiny_model: str) -> None:
    # one text logged by two readers came back as two "most changed" lines that read the
    # same ('refund ...': overlap 0.60, then 'refund ...': overlap 0.80), and --json did
    # not say which reader each line was replayed as
    from pgfunnel.cli.main import app

    query = "refund on an annual plan"
    with Funnel(sample_db, "default", embedder=embedder) as f:
        f.search(query, k=5, trace=True)
        f.search(query, k=5, principals=["alice"], tenant="acme", trace=True)
    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", model=tiny_model)  # another model: lists differ
    base = ["versions", "compare", "1", "2", "--last", "10", "--dsn", sample_db]
    # 80 columns: the table does not fit, and each row is one whole line
    env = {"COLUMNS": "80", "HF_HUB_OFFLINE": "1"}
    as_json = CliRunner().invoke(app, [*base, "--json"], env=env)
    assert as_json.exit_code == 0, as_json.output
    cmp = json.loads(as_json.output[as_json.output.index("{"):])
    assert sorted((d["query"], d["reader"]["principals"], d["reader"]["tenant"] or "")
                  for d in cmp["per_query"]) == [(query, [], ""), (query, ["alice"], "acme")]
    text = CliRunner().invoke(app, base, env=env)
    assert text.exit_code == 0, text.output
    lines = [ln.split(": overlap")[0] for ln in text.output.splitlines()
             if ln.startswith(repr(query))]
    assert sorted(lines) == [repr(query), f"{query!r} (as principals alice; tenant acme)"], (
        text.output)


def test_compare_last_replays_each_search_as_of_the_time_it_searched(sample_db: str,
                                                                    embedder: Any) -> None:
    # `--last` replayed a search made as of another time as of now: a document valid then
    # and withdrawn since was found by neither version, which compared as identical
    import datetime as dt

    from pgfunnel.cli.main import app

    then = dt.datetime(2020, 3, 1, 12, tzinfo=dt.UTC)
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("update pgfunnel.document set valid_to = '2021-01-01'")
    with Funnel(sample_db, "default", embedder=embedder) as f:
        assert f.search("refund on an annual plan", k=5, as_of=then, trace=True).results
        f.search("refund on an annual plan", k=5, trace=True)  # as of now: nothing
    with connect(sample_db, autocommit=True) as conn:
        logged = versions.last_searches(conn, "default", 10)
        row = conn.execute("select max(at) from pgfunnel.search_log where config ->> 'as_of' "
                           "is null").fetchone()
        assert row is not None
        # the search made as of its own time: as of the time it ran
        assert sorted((s[:4] for s in logged), key=lambda s: s[3] or then) == [
            ("refund on an annual plan", (), None, then),
            ("refund on an annual plan", (), None, row[0])]
        versions.reindex(conn, "default", analyzer="simple_v1")
    base = ["versions", "compare", "1", "2", "--last", "10", "--k", "5", "--json",
            "--dsn", sample_db]
    for extra in ([], ["-p", "bob"]):  # a reader named for all keeps each search's time
        res = CliRunner().invoke(app, [*base, *extra])
        assert res.exit_code == 0, res.output
        cmp = json.loads(res.output[res.output.index("{"):])
        assert (cmp["n_queries"], cmp["empty_in_both"]) == (2, 1), cmp
        # each query's reader says the time it was replayed as of, a reader named for all
        # or not
        readers = sorted((d["reader"] for d in cmp["per_query"]),
                         key=lambda r: r["as_of"])
        assert readers[0]["as_of"].startswith("2020-03-01 12:00")
        assert readers[1]["as_of"] == str(row[0])
        assert ("principals" in readers[1]) is not bool(extra)


def _log_sql_and_eval_searches(dsn: str, embedder: Any, *statements: str) -> None:
    """Searches logged two ways a replay must read apart from the Python search's: each
    of ``statements``, a traced funnel_search called from SQL (which logs its own
    config), then `cancel my subscription` traced by an eval (rrf, overfetch 8), whose
    log records its pool's length as its k, not the eval's."""
    from pgfunnel.eval.harness import EvalConfig, Harness
    from pgfunnel.eval.qrels import JudgedQuery

    with connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement).fetchall()
    Harness(dsn, "default", embedder=embedder, trace=True, k=5).run(
        [JudgedQuery("e1", "cancel my subscription", "keyword", {"refunds-annual": 1})],
        [EvalConfig.from_dict("rrf", {"fusion": "rrf", "overfetch": 8})])


def _as_logged_before_weights_given(conn: psycopg.Connection[Any]) -> None:
    """Every logged search as a release before notes.weights_given logged it: whether its
    weights were given is then a guess from the pair (pgfunnel._automatic_weights)."""
    conn.execute("update pgfunnel.search_log set notes = notes - 'weights_given'")


def test_compare_last_replays_each_search_with_the_configuration_it_was_logged_with(
        sample_db: str, embedder: Any) -> None:
    # `--last` replayed every logged search with the caller's parameters (k 10, min-max,
    # cap 3, ...): a search made with rrf, k 3 and cap 1 was compared as another search
    from pgfunnel.cli.main import app

    rrf = "refund on an annual plan"
    with Funnel(sample_db, "default", embedder=embedder) as f:
        resp = f.search(rrf, k=3, fusion="rrf", per_source_cap=1, trace=True)
        seen = {r.item_key for r in resp.results}
        f.search("reset my password", trace=True)  # the defaults
    # lexical alone from SQL (no vector)
    _log_sql_and_eval_searches(
        sample_db, embedder, "select * from funnel_search('invoice address', null, k => 4, "
        "fusion => 'zscore', overfetch => 2, trace => true)")
    with connect(sample_db, autocommit=True) as conn:
        logged = {s.query_text: s for s in versions.last_searches(conn, "default", 10)}
        config = logged[rrf].config
        assert config is not None
        assert {n: config[n] for n in ("k", "fusion", "per_source_cap")} == {
            "k": 3, "fusion": "rrf", "per_source_cap": 1}
        sql_logged = logged["invoice address"].config
        assert sql_logged is not None and (sql_logged["k"], sql_logged["fusion"],
                                           sql_logged["overfetch"]) == (4, "zscore", 2)
        eval_logged = logged["cancel my subscription"].config
        # not the pool's length its final() was given: the k the eval scored at
        assert eval_logged is not None and eval_logged["k"] == 5
        assert (eval_logged["fusion"], eval_logged["overfetch"]) == ("rrf", 8)
        versions.reindex(conn, "default", analyzer="simple_v1")
        cmp = versions.compare(conn, "default", 1, 2, list(logged.values()))
        by_text = {d.query: d for d in cmp.per_query}
        d = by_text[rrf]
        assert d.k == 3 and d.config is not None and d.config["fusion"] == "rrf", d
        assert (d.config_guessed, d.overridden) == ([], []), d
        # replayed on version 1 it returns what the logged search returned, and on version
        # 2 what a search with its parameters returns there
        assert set(d.only_a) <= seen, (d, seen)
        (on_b,) = versions.search_pinned(conn, "default", 2, [rrf], k=3, fusion="rrf",
                                         per_source_cap=1)
        assert (seen - set(d.only_a)) | set(d.only_b) == {r.item_key for r in on_b}
        assert by_text["invoice address"].k == 4 and by_text["invoice address"].legs == \
            "lexical"
        assert by_text["reset my password"].k == 10
        # the eval's log keeps the k it scored at (5) in its notes: replayed with it
        assert by_text["cancel my subscription"].k == 5
        assert by_text["cancel my subscription"].config_guessed == []
        assert cmp.config_guessed == []
        assert cmp.k is None  # 3, 4 and 10: each query's own cutoff
        # funnel_search logs the weights it used, and its notes whether they were given:
        # weights it chose are chosen again on the version compared, not fixed
        assert logged["reset my password"].config is not None
        assert logged["reset my password"].config["weights"] is None
        weights = conn.execute("select config -> 'weights' from pgfunnel.search_log "
                               "where query_text = 'reset my password'").fetchone()
        assert weights is not None and weights[0] is not None
        # a key a row logged before pgfunnel recorded it lacks: the default, a guess; so are
        # the weights of a row that does not say whether they were given
        conn.execute("update pgfunnel.search_log set config = config - 'per_source_cap' "
                     "where query_text = %s", (rrf,))
        _as_logged_before_weights_given(conn)
        (old,) = [s for s in versions.last_searches(conn, "default", 10)
                  if s.query_text == rrf]
        again = versions.compare(conn, "default", 1, 2, [old], k=5)
    (d,) = again.per_query
    assert d.config is not None and d.config["per_source_cap"] == 3 and d.config["k"] == 5
    assert d.config["weights"] is None
    assert (d.config_guessed, d.overridden, again.overridden) == (
        ["weights", "per_source_cap"], ["k"], {"k": 5}), d
    # the CLI: a --k given replaces the logged k, and says so
    base = ["versions", "compare", "1", "2", "--last", "10", "--dsn", sample_db]
    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1"}
    res = CliRunner().invoke(app, [*base, "--json"], env=env)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    assert out["k"] is None and out["overridden"] == {}
    per = {q["query"]: q for q in out["per_query"]}
    assert (per[rrf]["k"], per[rrf]["config"]["fusion"]) == (3, "rrf")
    assert per[rrf]["config_guessed"] == ["weights", "per_source_cap"]
    assert per["cancel my subscription"]["config_guessed"] == []
    assert any("replayed with the default" in n for n in out["notices"]), out["notices"]
    res = CliRunner().invoke(app, base, env=env)
    assert res.exit_code == 0, res.output
    assert "4 queries, k as each search was logged (3 to 10): mean overlap@k " in \
        " ".join(res.output.split()), res.output
    res = CliRunner().invoke(app, [*base, "--k", "5"], env=env)
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "4 queries, k=5: mean overlap@5" in said, said
    assert ("note: 3 logged searches were replayed with the --k 5 given instead of what "
            "they were logged with (each other search parameter as logged)") in said, said
    # the eval's k is given now, no guess; what the older rows lack still is
    guessed = said[said.index("note: 3 logged searches ("):]
    assert guessed.index(") do not record weights, per_source_cap in their log (logged "
                         "before pgfunnel recorded them; an eval's log did not keep the k it "
                         "cut at), so they were replayed with the defaults (weights chosen "
                         "per query, per_source_cap 3), a guess") > 0, said
    assert all(repr(q) in guessed.split(")")[0]
               for q in ("invoice address", "reset my password", rrf)), said


def test_explain_a_logged_search_replays_it_as_compare_last_does(
        sample_db: str, embedder: Any) -> None:
    # `explain --search-id` replayed a funnel_search row with the weights the search chose
    # for its query as fixed ones (compare --last chooses them again), and an eval's row
    # with the pool's length as its k, said nowhere (compare replays the default, a guess)
    from pgfunnel.cli.main import app

    from pgfunnel.explain_log import explain_logged

    _log_sql_and_eval_searches(
        sample_db, embedder,
        "select * from funnel_search('invoice address', null, k => 4, trace => true)",
        "select * from funnel_search('reset my password', null, k => 4, "
        "weights => '{1,0.7}', trace => true)")
    with connect(sample_db, autocommit=True) as conn:
        ids = dict(conn.execute("select query_text, id from pgfunnel.search_log").fetchall())
        chose = conn.execute("select config -> 'weights' from pgfunnel.search_log "
                             "where query_text = 'invoice address'").fetchone()
        assert chose is not None and chose[0] is not None  # the weights it chose, logged
        pool = conn.execute("select (config ->> 'k')::int, count(t.*) from "
                            "pgfunnel.search_log l join pgfunnel.search_trace t on "
                            "t.search_id = l.id where l.id = %s group by 1",
                            (ids["cancel my subscription"],)).fetchone()
        assert pool is not None and pool[0] == pool[1]  # an eval logs its pool's length
        # a document none of the three logged: its explain replays each search
        far = conn.execute("select d.citekey from pgfunnel.document d where not exists "
                           "(select from pgfunnel.chunk ch join pgfunnel.search_trace t "
                           "on t.chunk_id = ch.id where ch.document_id = d.id) "
                           "order by d.citekey limit 1").fetchone()
        assert far is not None
        logged = {s.query_text: s for s in versions.last_searches(conn, "default", 10)}
    target = str(far[0])
    with Funnel(sample_db, "default", embedder=embedder) as f:
        (chosen,) = explain_logged(f, ids["invoice address"], [target])
        (given,) = explain_logged(f, ids["reset my password"], [target])
        (judged,) = explain_logged(f, ids["cancel my subscription"], [target])
    with connect(sample_db, autocommit=True) as conn:
        for e in (chosen, given, judged):
            assert e.replayed_on == 1 and e.search_config is not None, e
            # the parameters compare --last replays the same search with: one rule
            (d,) = versions.compare(conn, "default", 1, 1,
                                    [logged[str(e.searched)]]).per_query
            assert (e.search_config, e.config_guessed) == (d.config, d.config_guessed), d
    assert chosen.search_config is not None and chosen.search_config["weights"] is None
    assert (chosen.config_guessed, chosen.notices) == ([], []), chosen
    assert given.search_config is not None and given.search_config["weights"] == [1, 0.7]
    # the k the eval scored at (Harness k=5), which its log's notes keep
    assert judged.search_config is not None and judged.search_config["k"] == 5
    assert judged.config_guessed == [] and not any("a guess" in n for n in judged.notices)
    cli = ["explain", target, "--search-id", str(ids["cancel my subscription"]), "--json",
           "--dsn", sample_db]
    res = CliRunner().invoke(app, cli, env={"HF_HUB_OFFLINE": "1"})
    assert res.exit_code == 0, res.output
    (out,) = json.loads(res.output[res.output.index("["):])
    assert (out["config_guessed"], out["search_config"]["k"]) == ([], 5), out
    assert not any("a guess" in n for n in out["notices"]), out["notices"]
    # an eval logged before its notes kept its k: the default, said to be a guess
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("update pgfunnel.search_log set notes = notes - 'eval_k'")
    with Funnel(sample_db, "default", embedder=embedder) as f:
        (judged,) = explain_logged(f, ids["cancel my subscription"], [target])
    assert judged.search_config is not None and judged.search_config["k"] == 10
    assert judged.config_guessed == ["k"]
    assert ("pgfunnel: search {}'s log does not record its k (logged before pgfunnel "
            "recorded it; an eval's log did not keep the k it cut at), so it is explained "
            "with the default (k 10), a guess".format(ids["cancel my subscription"])
            in judged.notices), judged.notices
    # an older row that does not say whether its weights were given: automatic ones are
    # chosen again, a guess, as compare --last takes them
    with connect(sample_db, autocommit=True) as conn:
        _as_logged_before_weights_given(conn)
    with Funnel(sample_db, "default", embedder=embedder) as f:
        (older,) = explain_logged(f, ids["reset my password"], [target])
    assert older.search_config is not None and older.search_config["weights"] is None
    assert older.config_guessed == ["weights"], older
    # the CLI says the guess, and gives the configuration in --json
    res = CliRunner().invoke(app, cli, env={"HF_HUB_OFFLINE": "1"})
    assert res.exit_code == 0, res.output
    (out,) = json.loads(res.output[res.output.index("["):])
    assert (out["config_guessed"], out["search_config"]["k"]) == (["k"], 10), out
    assert any("a guess" in n for n in out["notices"]), out["notices"]


def test_a_logged_eval_candidate_below_the_guessed_k_is_cut_at_k(
        sample_db: str, embedder: Any) -> None:
    """An eval's trace ranks its whole pool (its log's k is the pool's length, 40), so
    `explain --search-id` of a candidate at final rank 11 answered "returned at rank 11"
    for a search whose eval scored only its first 10: the judged page that eval counted
    as lost read as found. Below the k the explanation takes (the default, said to be a
    guess) it is cut at k, as for any other search."""
    from pgfunnel.explain_log import explain_logged

    _log_sql_and_eval_searches(sample_db, embedder)
    with connect(sample_db, autocommit=True) as conn:
        (sid,) = conn.execute("select id from pgfunnel.search_log where query_text = "
                              "'cancel my subscription'").fetchone() or (None,)
        rows = conn.execute(
            "select d.citekey || '#' || ch.ordinal, t.final_rank from pgfunnel.search_trace t "
            "join pgfunnel.chunk ch on ch.id = t.chunk_id join pgfunnel.document d on "
            "d.id = ch.document_id where t.search_id = %s and t.final_rank in (3, 6, 11, 12) "
            "order by t.final_rank", (sid,)).fetchall()
        assert [rank for _, rank in rows] == [3, 6, 11, 12], rows
        # the k the eval scored at (Harness k=5) is kept in the log's notes: the chunk at
        # rank 6, which the eval did not score, is cut at that k, said without a guess
        with Funnel(sample_db, "default", embedder=embedder) as f:
            kept, *below = explain_logged(f, sid, [key for key, _ in rows])
        assert (kept.verdict, kept.final_rank) == ("returned", 3), kept
        for e, above in zip(below, (5, 10, 11), strict=True):
            assert (e.verdict, e.final_rank) == ("cut at k", None), e
            assert e.config_guessed == [] and e.search_config is not None \
                and e.search_config["k"] == 5, e
            assert e.reason.endswith(f"not capped, but {above} chunks came before it after "
                                     "the per-source cap and k was 5"), e.reason
            assert not any("a guess" in n for n in e.notices), e
        # an eval's log from before its notes kept the k: the default, said to be a guess
        conn.execute("update pgfunnel.search_log set notes = notes - 'eval_k'")
    with Funnel(sample_db, "default", embedder=embedder) as f:
        kept, sixth, *below = explain_logged(f, sid, [key for key, _ in rows])
    assert (kept.verdict, kept.final_rank) == ("returned", 3), kept
    assert (sixth.verdict, sixth.final_rank) == ("returned", 6), sixth
    for e, above in zip(below, (10, 11), strict=True):
        assert (e.verdict, e.final_rank) == ("cut at k", None), e
        assert e.config_guessed == ["k"] and e.search_config is not None \
            and e.search_config["k"] == 10, e
        assert e.reason.endswith(f"not capped, but {above} chunks came before it after the "
                                 "per-source cap and k was 10"), e.reason
        assert any("does not record its k" in n and "a guess" in n for n in e.notices), e


def _sql_function_bodies() -> dict[str, str]:
    """Each function in sql/ by name: its text from `create` to its closing `$$;`, the
    comments taken out."""
    import re

    from pgfunnel import schema

    bodies: dict[str, str] = {}
    for path in schema.sql_files():
        text = re.sub(r"--[^\n]*", "", path.read_text())
        for m in re.finditer(r"create or replace function ([\w.]+)\(", text):
            bodies[m.group(1)] = text[m.start():text.find("$$;", m.start())]
    return bodies


def test_every_weight_pair_a_search_chooses_is_one_an_older_log_is_replayed_to_choose(
        sample_db: str) -> None:
    # the pairs the search chooses were written twice, in its SQL rules and as jsonb in
    # LOGGED_PARAMS: a rule choosing a new pair would have had a row logged before
    # notes.weights_given replayed with that pair fixed, as if its caller had given it
    import re

    from psycopg import sql

    from pgfunnel.versions import LOGGED_PARAMS, LOGGED_SEARCH_PARAMS

    pair = re.compile(r"'\{\s*-?[\d.e]+\s*,\s*-?[\d.e]+\s*\}'"
                      r"|array\[\s*-?[\d.e]+\s*,\s*-?[\d.e]+\s*\]")
    bodies = _sql_function_bodies()
    assert "pgfunnel._automatic_weights" in bodies
    for name, body in bodies.items():
        if name != "pgfunnel._automatic_weights":
            # a pair a rule writes itself is one the replay does not know
            assert not pair.search(body), (name, pair.search(body))
    for name in ("pgfunnel._default_weights", "pgfunnel._pool"):
        assert "pgfunnel._automatic_weights(" in bodies[name], name
    with connect(sample_db, autocommit=True) as conn:
        automatic = dict(conn.execute(
            "select rule, weights from pgfunnel._automatic_weights()").fetchall())
        assert automatic == {"default": [1.0, 0.7], "identifier": [1.0, 0.2],
                             "dense_leads": [0.7, 1.0]}
        given = [*automatic.values(), [1.0, 0.5], [0.2, 1.0]]
        ids = []
        for weights in given:
            ids.append(conn.execute(
                "select search_id from funnel_search('invoice address', null, k => 4, "
                "weights => %s, trace => true) limit 1", (weights,)).fetchone()[0])  # type: ignore[index]
        _as_logged_before_weights_given(conn)
        replayed = dict(conn.execute(sql.SQL(
            "select sl.id, {} from pgfunnel.search_log sl where sl.id = any(%s)").format(
                sql.SQL(LOGGED_PARAMS)), (list(LOGGED_SEARCH_PARAMS), ids)).fetchall())
    chosen_again = [w for w, i in zip(given, ids, strict=True) if "weights" not in replayed[i]]
    assert chosen_again == list(automatic.values())
    assert [replayed[i]["weights"] for i in ids[len(automatic):]] == [[1, 0.5], [0.2, 1]]


class _ReversingReranker:
    """A reranker (the CrossEncoder.rank shape) that puts its head in reverse order."""

    def rank(self, query: str, documents: list[str]) -> list[dict[str, Any]]:
        return [{"corpus_id": i, "score": float(i)} for i in range(len(documents))]


def test_compare_last_says_which_logged_searches_it_compares_without_their_rerank(
        sample_db: str, embedder: Any) -> None:
    # a logged search that reranked its pool was replayed without the reranker, which no
    # index version holds, and compared as if its user had seen the funnel's order
    from pgfunnel.cli.main import app

    reranked = "refund on an annual plan"
    with Funnel(sample_db, "default", embedder=embedder,
                reranker=_ReversingReranker()) as f:
        assert f.search(reranked, k=3, trace=True).results[0].rerank_rank == 1
    with Funnel(sample_db, "default", embedder=embedder) as f:
        f.search("reset my password", k=3, trace=True)
    with connect(sample_db, autocommit=True) as conn:
        logged = {s.query_text: s for s in versions.last_searches(conn, "default", 10)}
        assert (logged[reranked].reranked, logged["reset my password"].reranked) == (
            True, False)
        cmp = versions.compare(conn, "default", 1, 1, list(logged.values()))
    by_text = {d.query: d for d in cmp.per_query}
    assert by_text[reranked].logged_reranked
    assert not by_text["reset my password"].logged_reranked
    assert cmp.logged_reranked == [by_text[reranked].query_id]
    base = ["versions", "compare", "1", "1", "--last", "10", "--dsn", sample_db]
    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1"}
    res = CliRunner().invoke(app, [*base, "--json"], env=env)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    assert {q["query"]: q["logged_reranked"] for q in out["per_query"]} == {
        reranked: True, "reset my password": False}
    res = CliRunner().invoke(app, base, env=env)
    assert res.exit_code == 0, res.output
    assert (f"note: 1 logged search ('{reranked}') reranked its pool when it ran; compare "
            "does not rerank (a reranker is no part of an index version), so its overlap "
            "compares each version's results before the rerank, not the list the user "
            "saw") in " ".join(res.output.split()), res.output
    # a changed query's line says it too
    from pgfunnel.cli.versions import replayed_as

    assert "reranked when logged, compared before the rerank" in replayed_as(
        by_text[reranked])


def test_compare_takes_the_search_options_search_takes(sample_db: str, embedder: Any,
                                                      tmp_path: Path) -> None:
    # of the search parameters compare() replaces in a logged search, the CLI took -k alone:
    # "what if these searches had used rrf" could not be asked from the command line
    from pgfunnel.cli.main import app

    refund, reset = "refund on an annual plan", "reset my password"
    with Funnel(sample_db, "default", embedder=embedder) as f:
        f.search(refund, k=3, fusion="rrf", trace=True)
        f.search(reset, k=3, per_source_cap=1, trace=True)
    base = ["versions", "compare", "1", "1", "--dsn", sample_db]
    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1"}
    options = ["--fusion", "rrf", "--per-source-cap", "1", "--lexical-weight", "1",
               "--dense-weight", "0.5"]
    res = CliRunner().invoke(app, [*base, "--last", "10", *options, "--json"], env=env)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    assert out["overridden"] == {"fusion": "rrf", "weights": [1.0, 0.5],
                                 "per_source_cap": 1}, out["overridden"]
    per = {q["query"]: q for q in out["per_query"]}
    assert per[refund]["overridden"] == ["weights", "per_source_cap"]
    assert per[reset]["overridden"] == ["fusion", "weights"]
    for q in per.values():
        assert (q["config"]["fusion"], q["config"]["weights"], q["config"]["per_source_cap"],
                q["config"]["k"]) == ("rrf", [1.0, 0.5], 1, 3), q["config"]
    res = CliRunner().invoke(app, [*base, "--last", "10", *options], env=env)
    assert res.exit_code == 0, res.output
    assert ("note: 2 logged searches were replayed with the --fusion rrf, --lexical-weight / "
            "--dense-weight 1,0.5, --per-source-cap 1 given instead of what they were logged "
            "with (each other search parameter as logged)") in " ".join(res.output.split())
    # --queries are searched with them
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"query": refund}) + "\n", encoding="utf-8")
    res = CliRunner().invoke(app, [*base, "--queries", str(queries), "--overfetch", "2",
                                   "--lexical-depth", "50", "--json"], env=env)
    assert res.exit_code == 0, res.output
    # a value the search refuses is said before anything is searched, by its flag
    for bad, said in ((["--fusion", "nope"], "--fusion"),
                      (["--per-source-cap", "0"], "--per-source-cap"),
                      (["--fusion", "minmax", "--rrf-k", "30"], "--rrf-k: applies only")):
        res = CliRunner().invoke(app, [*base, "--last", "10", *bad], env=env)
        assert res.exit_code == 1, (bad, res.output)
        assert said in " ".join(res.output.split()), (bad, res.output)


def test_compare_last_rrf_k_alone_applies_to_the_searches_that_fused_with_rrf(
        sample_db: str, embedder: Any, tmp_path: Path) -> None:
    # --rrf-k needed --fusion rrf under --last too, which turned every logged search into
    # an rrf one: "what if the rrf searches had used another constant" could not be asked
    from pgfunnel.cli.main import app

    refund, reset = "refund on an annual plan", "reset my password"
    with Funnel(sample_db, "default", embedder=embedder) as f:
        f.search(refund, k=3, fusion="rrf", trace=True)
        f.search(reset, k=3, trace=True)
    base = ["versions", "compare", "1", "1", "--dsn", sample_db]
    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1"}
    res = CliRunner().invoke(app, [*base, "--last", "10", "--rrf-k", "30", "--json"], env=env)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    per = {q["query"]: q for q in out["per_query"]}
    assert (per[refund]["config"]["fusion"], per[refund]["config"]["rrf_k"]) == ("rrf", 30)
    assert (per[refund]["overridden"], per[refund]["not_applied"]) == (["rrf_k"], [])
    # the minmax one keeps its fusion, and no constant: said, not refused
    assert per[reset]["config"]["fusion"] == "minmax" and "rrf_k" not in per[reset]["config"]
    assert (per[reset]["overridden"], per[reset]["not_applied"]) == ([], ["rrf_k"])
    assert out["not_applied"] == [per[reset]["query_id"]]
    assert out["overridden"] == {"rrf_k": 30}
    res = CliRunner().invoke(app, [*base, "--last", "10", "--rrf-k", "30"], env=env)
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert ("note: 1 logged search was replayed with the --rrf-k 30 given instead of what "
            "it was logged with") in flat, res.output
    assert (f"note: --rrf-k did not apply to 1 logged search ('{reset}'), which fuses by "
            "another method (no constant): it was replayed with its own fusion") in flat, \
        res.output
    # a bad value alone is still refused by its flag before anything is searched
    res = CliRunner().invoke(app, [*base, "--last", "10", "--rrf-k", "-1"], env=env)
    assert res.exit_code == 1 and "--rrf-k" in res.output, res.output
    # --queries are searched as `search` searches them (minmax): it needs --fusion rrf
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"query": refund}) + "\n", encoding="utf-8")
    res = CliRunner().invoke(app, [*base, "--queries", str(queries), "--rrf-k", "30"], env=env)
    assert res.exit_code == 1, res.output
    assert "--rrf-k: applies only with --fusion rrf" in " ".join(res.output.split())
    # the Python compare says it the same way
    with connect(sample_db, autocommit=True) as conn:
        cmp = versions.compare(conn, "default", 1, 1, versions.last_searches(
            conn, "default", 10), rrf_k=30)
    said = {d.query: (d.overridden, d.not_applied) for d in cmp.per_query}
    assert said == {refund: (["rrf_k"], []), reset: ([], ["rrf_k"])}, said


def test_compare_last_refuses_weights_that_leave_a_logged_search_no_leg(
        sample_db: str, embedder: Any) -> None:
    # --lexical-weight 0 against a search logged without a query embedding failed one query
    # into the compare, as the search's own "the only one this search can run" error
    from pgfunnel.cli.main import app

    lexical = "refund on an annual plan"
    with Funnel(sample_db, "default", embedder=None) as f:
        f.search(lexical, k=5, trace=True)
    with Funnel(sample_db, "default", embedder=embedder) as f:
        f.search("reset my password", k=5, trace=True)
    base = ["versions", "compare", "1", "1", "--dsn", sample_db]
    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1"}
    res = CliRunner().invoke(app, [*base, "--last", "10", "--lexical-weight", "0"], env=env)
    assert res.exit_code == 1, res.output
    flat = " ".join(res.output.split())
    assert ("--lexical-weight / --dense-weight: [0.0, 0.7] gives weight 0 to the lexical "
            f"leg, the only one 1 logged search ('{lexical}') can run (logged without a "
            "query embedding)") in flat, res.output
    assert "Traceback" not in res.output
    # the hybrid search alone takes it
    res = CliRunner().invoke(app, [*base, "--last", "1", "--lexical-weight", "0", "--json"],
                             env=env)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    assert [q["config"]["weights"] for q in out["per_query"]] == [[0.0, 0.7]], out


def test_compare_help_says_a_logged_search_keeps_its_fusion() -> None:
    # compare took search's --fusion line, "minmax (default)", where --last replays each
    # logged search with its own fusion
    from pgfunnel.cli.main import app

    env = {"COLUMNS": "300"}
    res = CliRunner().invoke(app, ["versions", "compare", "--help"], env=env)
    assert res.exit_code == 0, res.output
    fusion = next(line for line in res.output.splitlines() if "--fusion " in line)
    assert "minmax (default)" not in fusion and "each logged search was logged with" in fusion
    rrf = next(line for line in res.output.splitlines() if "--rrf-k " in line)
    assert "with --last alone, for the logged searches fused with rrf" in rrf, rrf
    # and the weights' lines, which gave search's defaults (1 and 0.7)
    for flag in ("--lexical-weight ", "--dense-weight "):
        line = next(line for line in res.output.splitlines() if flag in line)
        assert "(default 1" not in line and "(default 0.7" not in line, line
        assert "the weights each logged search was logged with" in line, line
    # search's own lines are as they were
    res = CliRunner().invoke(app, ["search", "--help"], env=env)
    assert "minmax (default), rrf or zscore" in res.output, res.output
    assert "Weight of the BM25 leg (default 1;" in res.output, res.output


def test_compare_last_replays_a_search_of_its_own_time_as_of_when_it_ran(
        sample_db: str, embedder: Any) -> None:
    # a search logged with as_of NULL (its own time) was replayed by `--last` as of the
    # time of the compare, and by `explain --search-id` as of the time it ran: a document
    # withdrawn since was found by neither version here, and compared as identical
    import datetime as dt

    from pgfunnel.cli.main import app

    from pgfunnel.explain_log import explain_logged

    with Funnel(sample_db, "default", embedder=embedder) as f:
        resp = f.search("refund on an annual plan", k=5, trace=True)
        assert resp.results and resp.search_id is not None
        time.sleep(0.01)
        withdrawn = dt.datetime.now(dt.UTC)
        time.sleep(0.01)
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("update pgfunnel.document set valid_to = %s", (withdrawn,))
        row = conn.execute("select at, config -> 'as_of' from pgfunnel.search_log "
                           "where id = %s", (resp.search_id,)).fetchone()
        assert row is not None and row[1] is None and row[0] < withdrawn
        (logged,) = versions.last_searches(conn, "default", 10)
        assert logged.as_of == row[0]
        versions.reindex(conn, "default", analyzer="simple_v1")
        other = conn.execute("select d.citekey from pgfunnel.document d where not exists "
                             "(select from pgfunnel.chunk ch where ch.document_id = d.id "
                             "and ch.id = any(%s)) order by d.citekey limit 1",
                             ([c.chunk_id for c in resp.pool],)).fetchone()
        assert other is not None
    # explain's replay of the same search reads the same time: a document it did not log
    # was valid then, so it is not hidden by the as_of
    with Funnel(sample_db, "default", embedder=embedder) as f:
        (e,) = explain_logged(f, resp.search_id, [str(other[0])])
    assert e.replayed_on == 1 and e.verdict != "filtered out or does not exist", e.reason
    res = CliRunner().invoke(app, ["versions", "compare", "1", "2", "--last", "10", "--k",
                                   "5", "--json", "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    cmp = json.loads(res.output[res.output.index("{"):])
    assert (cmp["n_queries"], cmp["empty_in_both"]) == (1, 0), cmp
    assert cmp["per_query"][0]["reader"]["as_of"] == str(logged.as_of)


def test_compare_resolves_a_follow_up_with_the_collections_qualifiers(sample_db: str,
                                                                     embedder: Any) -> None:
    # compare made a judged follow-up stand-alone without the collection's qualifiers,
    # which eval and a search with history use: it searched other text than they did
    from pgfunnel.eval.qrels import JudgedQuery

    history = ("how do refunds work on annual plans?",)
    q = JudgedQuery("f1", "and on monthly plans?", "followup", {"refunds-monthly": 1}, history)
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("update pgfunnel.collection set settings = settings || "
                     "'{\"qualifiers\": [\"annual\", \"monthly\", \"plan\"]}'")
    with Funnel(sample_db, "default", embedder=embedder) as f:
        searched = f.search(q.query, history=list(history), k=5).query
    assert searched == "refunds on monthly plans?"
    with connect(sample_db, autocommit=True) as conn:
        cmp = versions.compare(conn, "default", 1, 1, [q], k=5)
    assert [d.query for d in cmp.per_query] == [searched]


def test_ctrl_c_during_versions_drop_says_whether_the_drop_happened(
        sample_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C landing after the drop's last step and before its report said "interrupted"
    # alone, which read as a drop that had not happened
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1")
        versions.reindex(conn, "default", analyzer="simple_v2")
    real_drop = versions.drop
    steps: list[str] = []

    def interrupted(conn: Any, collection: str, version: int) -> Any:
        if steps.pop(0) == "after":
            real_drop(conn, collection, version)
        raise KeyboardInterrupt

    monkeypatch.setattr(versions, "drop", interrupted)
    for step, version, said in (
            ("after", "2", "interrupted: version 2 of 'default' is dropped; the drop had "
                           "finished"),
            ("before", "3", "interrupted: nothing was dropped; version 3 of 'default' is as "
                            "it was")):
        steps.append(step)
        res = CliRunner().invoke(app, ["versions", "drop", version, "--dsn", sample_db],
                                 env={"COLUMNS": "300"})
        assert res.exit_code == 130
        assert said in " ".join(res.output.split()), res.output
    with connect(sample_db, autocommit=True) as conn:
        assert _state(conn) == {1: "active", 3: "ready"}


def _interrupt_activations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """versions.activate (and rollback, through the _activate both call) made to raise
    KeyboardInterrupt: before the switch, or after it ran, as each step the test appends
    to the returned list says ("before", "after")."""
    real_activate = versions._activate
    steps: list[str] = []

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        if steps.pop(0) == "after":
            real_activate(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(versions, "_activate", interrupted)
    return steps


def test_ctrl_c_during_a_switch_says_whether_it_happened(
        sample_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C during `versions activate` or `rollback` (a long catch-up, a wait for the
    # ingest lock, or after the commit) said "interrupted" alone: switched or not?
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1")
    steps = _interrupt_activations(monkeypatch)
    for step, command, said in (
            ("before", ["activate", "2"], "interrupted: nothing was switched; version 1 of "
             "'default' is still active (chunks indexed for the switch so far are kept: "
             "`pgfunnel versions activate 2 -c default` goes on)"),
            ("after", ["activate", "2"], "interrupted: version 2 of 'default' is active; the "
             "switch had finished"),
            ("before", ["rollback"], "interrupted: nothing was switched; version 2 of "
             "'default' is still active (chunks indexed for the switch so far are kept: "
             "`pgfunnel versions rollback -c default` goes on)"),
            ("after", ["rollback"], "interrupted: version 1 of 'default' is active; the "
             "switch had finished")):
        steps.append(step)
        # (the DSN from PGFUNNEL_DSN: a typed one is added to the hint)
        res = CliRunner().invoke(app, ["versions", *command],
                                 env={"COLUMNS": "300", "PGFUNNEL_DSN": sample_db})
        assert res.exit_code == 130, res.output
        assert said in " ".join(res.output.split()), res.output
    with connect(sample_db, autocommit=True) as conn:
        assert _state(conn) == {1: "active", 2: "retired"}


def test_ctrl_c_in_reindex_activate_names_the_version_it_built(
        sample_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C during `reindex --activate`'s switch (its catch-up, or a wait for the ingest
    # lock) said "no version was made yet; nothing to discard" of a validated version,
    # and running the reindex again built a second one
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    steps = _interrupt_activations(monkeypatch)

    def stop(stage: str, n: int, total: int | None) -> None:
        raise KeyboardInterrupt

    for step, analyzer, said in (
            ("before", "simple_v1", "interrupted: version 2 of 'default' was built and "
             "validated (ready) and is not active: `pgfunnel versions activate 2 -c default` "
             "switches to it (a rerun of this reindex would build another)"),
            ("after", "simple_v2", "interrupted: version 3 of 'default' is active; the switch "
             "had finished"),
            # a run that resumed an interrupted version, interrupted in turn in its switch
            ("before", "simple_v3", "interrupted: version 4 of 'default' was built and "
             "validated (ready) and is not active")):
        if analyzer == "simple_v3":
            with connect(sample_db, autocommit=True) as conn, \
                    pytest.raises(KeyboardInterrupt):
                versions.reindex(conn, "default", analyzer=analyzer, progress=stop)
        steps.append(step)
        # (the DSN from PGFUNNEL_DSN: a typed one is added to the hint)
        res = CliRunner().invoke(app, ["reindex", "--analyzer", analyzer, "--activate"],
                                 env={"COLUMNS": "300", "PGFUNNEL_DSN": sample_db})
        assert res.exit_code == 130, res.output
        assert said in " ".join(res.output.split()), res.output
    with connect(sample_db, autocommit=True) as conn:
        assert _state(conn) == {1: "retired", 2: "ready", 3: "active", 4: "ready"}


def test_ctrl_c_mid_reindex_names_the_reindex_that_resumes_the_build(
        sample_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C while a reindex embedded said "the same `pgfunnel reindex -c default` resumes
    # it": pasted, that asked for the active version's analyzer, so the half-built
    # version was dropped and another begun

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    real_reindex = versions.reindex

    def stopped_mid_build(*args: Any, **kwargs: Any) -> Any:
        batches: list[int] = []

        def stop(stage: str, n: int, total: int | None) -> None:
            if stage == "embedding":
                batches.append(n)
                if len(batches) == 3:  # two batches written and committed
                    raise KeyboardInterrupt
        return real_reindex(*args, **{**kwargs, "progress": stop, "batch_size": 2})

    monkeypatch.setattr(versions, "reindex", stopped_mid_build)
    env = {"COLUMNS": "400", "PGFUNNEL_DSN": sample_db}
    res = CliRunner().invoke(app, ["reindex", "--analyzer", "simple_v2", "--m", "8"], env=env)
    assert res.exit_code == 130, res.output
    said = " ".join(res.output.split())
    with connect(sample_db, autocommit=True) as conn:
        info = {i.version: i for i in versions.list_versions(conn, "default")}
        total = conn.execute("select count(*) from pgfunnel.chunk").fetchone()
    # nothing half-written is active: version 1 still serves
    assert {v: i.state for v, i in info.items()} == {1: "active", 2: "building"}
    assert total is not None
    written = total[0] - info[2].missing_chunks
    assert 0 < written < total[0], (written, total)
    hint = versions.resume_hint("default", info[2])
    assert said.startswith(f"interrupted: version 2 stays 'building', with what it wrote; "
                           f"{hint}"), said
    resume = hint.split("`")[1]
    assert "--analyzer simple_v2" in resume and "--m 8" in resume
    monkeypatch.setattr(versions, "reindex", real_reindex)
    res = CliRunner().invoke(app, shlex.split(resume)[1:] + ["--json"], env=env)
    assert res.exit_code == 0, res.output
    done = json.loads(res.stdout)
    assert (done["version"], done["resumed"], done["state"]) == (2, True, "ready"), done
    assert done["chunks_before"] == written


def test_an_ingest_follows_a_switch_to_another_model_between_its_batches(
        db: str, tiny_model: str, tmp_path: Path) -> None:
    """`versions activate` of a version with another model of the same size, between two
    batches of an ingest that had loaded the old model: the later batches' chunks went
    into the new version with the old model's vectors, unsaid. The ingest loads the
    collection's new model instead; one given its model stops and says why."""
    from pgfunnel.embedder import Embedder
    from pgfunnel.ingest import Ingester, create_version
    from pgfunnel.sources import DEFAULT_EMBED_INPUT, DocumentRecord, chunk_text, embedding_input
    from pgfunnel.tiny_models import build_tiny_bi_encoder

    other = str(build_tiny_bi_encoder(tmp_path / "other", dim=64, seed=1))

    def record(key: str, text: str) -> DocumentRecord:
        return DocumentRecord(citekey=key, title=key, text=text)

    with connect(db, autocommit=True) as conn:
        Ingester(conn, "t", embedder=tiny_model).ingest([record("d0", "refunds of annual plans")])
        coll, analyzer = one_row(conn.execute(
            "select collection_id, analyzer from pgfunnel.index_version "
            "where state = 'active'"))

        def switch_to(model: str) -> Callable[..., None]:
            def tick(stage: str, n: int, total: int | None = None) -> None:
                # after the first batch: the new version is made active (as activate does)
                if stage == "documents" and not conn.execute(
                        "select 1 from pgfunnel.index_version where embedding_model = %s "
                        "and state = 'active'", (model,)).fetchone():
                    with connect(db, autocommit=True) as other_conn, other_conn.transaction():
                        other_conn.execute("update pgfunnel.index_version set state = 'retired' "
                                           "where state = 'active'")
                        create_version(other_conn, coll, model, 64, analyzer, "active")
            return tick

        # the first batch changes d0 (embedded with tiny_model, into version 1), the
        # second adds d1 after the switch
        Ingester(conn, "t", batch_documents=1, prepare_ahead=False,
                 progress=switch_to(other)).ingest(
            [record("d0", "refunds of monthly plans"), record("d1", "invoices and receipts")])
        stored = conn.execute(
            "select e.embedding from pgfunnel.embedding e "
            "join pgfunnel.chunk c on c.id = e.chunk_id "
            "join pgfunnel.document d on d.id = c.document_id join pgfunnel.index_version v "
            "on v.id = e.index_version_id where d.citekey = 'd1' and v.state = 'active'"
        ).fetchone()
        assert stored is not None
        chunk = chunk_text("invoices and receipts")[0]
        text = embedding_input("d1", chunk.text, DEFAULT_EMBED_INPUT, chunk.section_path)
        expected = Embedder(other).embed([text])[0]
        assert np.allclose(np.asarray(stored[0].to_numpy()), expected, atol=1e-3)

        # a model given by the caller is kept, and the switch is refused in its words
        with pytest.raises(ConflictError, match="while this ingest ran with"):
            Ingester(conn, "t", embedder=other, batch_documents=1, prepare_ahead=False,
                     progress=switch_to(tiny_model)).ingest(
                [record("d2", "shipping to Norway"), record("d3", "gift cards")])


@pytest.mark.parametrize("value", ["99999999999999999999", "2147483648", "0"])
def test_a_count_out_of_range_is_refused_before_a_version_is_made(sample_db: str,
                                                                  value: str) -> None:
    """`reindex --batch-size 99999999999999999999` made version 2 ('building'), then
    failed with "bigint out of range", naming no flag; `versions compare --last` with
    such a number said the same. Both name their flag now, and nothing is made."""
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, ["reindex", "--dsn", sample_db, "--batch-size", value],
                             env={"COLUMNS": "300"})
    said = " ".join(res.output.split())
    assert res.exit_code == 1, said
    assert said.startswith("error: --batch-size: must be an integer from 1 to "
                           "2,147,483,647, got "), said
    with connect(sample_db, autocommit=True) as conn:
        assert [v.version for v in versions.list_versions(conn, "default")] == [1]
        with pytest.raises(ConfigError, match="^batch_size: must be an integer from 1"):
            versions.activate(conn, "default", 1, batch_size=int(value) or -1)
    res = CliRunner().invoke(app, ["versions", "compare", "1", "1", "--last", value,
                                   "--dsn", sample_db], env={"COLUMNS": "300"})
    said = " ".join(res.output.split())
    assert res.exit_code == 1 and said.startswith(
        "error: --last: must be an integer from 1 to 2,147,483,647, got "), said


def test_compare_lists_a_query_whose_results_only_moved(db: str, tiny_model: str,
                                                        tmp_path: Path) -> None:
    """`versions compare` counted a query whose top-k held the same results in another
    order as not identical, yet left it out of "most changed queries" (it listed only
    overlap < 1): the counts and the list disagreed. It is now listed, saying "same
    results, different order", with each query's rank shift (`rank_shift`, `identical`
    and the count `reordered` in --json)."""
    from pgfunnel.cli.main import app

    from pgfunnel.embedder import Embedder
    from pgfunnel.tiny_models import build_tiny_bi_encoder

    folder = tmp_path / "docs"
    folder.mkdir()
    texts = {"refund": "Refund a monthly plan within thirty days of billing.",
             "password": "Reset a forgotten password from the sign-in page.",
             "invoice": "Download an invoice for each billing period of a plan.",
             "export": "Export the data of a workspace as a spreadsheet."}
    for name, text in texts.items():
        (folder / f"{name}.md").write_text(f"# {name.title()}\n\n{text}\n")
    runner = CliRunner()
    res = runner.invoke(app, ["ingest", str(folder), "--model", tiny_model, "--dsn", db])
    assert res.exit_code == 0, res.output
    other = build_tiny_bi_encoder(tmp_path / "other", dim=32, seed=7)
    with connect(db, autocommit=True) as conn:
        versions.reindex(conn, "default", model=str(other), embedder=Embedder(str(other)))
    queries = tmp_path / "queries.jsonl"
    asked = ["refund plan", "billing", "password", "workspace data", "monthly invoice",
             "sign in", "plan", "export spreadsheet"]
    queries.write_text("".join(json.dumps({"query": q}) + "\n" for q in asked))
    args = ["versions", "compare", "1", "2", "--queries", str(queries), "--show", "20",
            "--dsn", db]
    js = runner.invoke(app, [*args, "--json"])
    assert js.exit_code == 0, js.output
    cmp = json.loads(js.output[js.output.index("{"):])
    # every query holds all four documents on both versions (k=10): the same results
    assert all(d["overlap"] == 1.0 for d in cmp["per_query"]), cmp["per_query"]
    moved = [d for d in cmp["per_query"] if not d["identical"]]
    assert moved and cmp["reordered"] == len(moved) == cmp["n_queries"] - cmp["identical"]
    assert all(d["rank_shift"] > 0 for d in moved)
    assert all(d["rank_shift"] == 0 for d in cmp["per_query"] if d["identical"])
    # the most moved first
    assert [d["rank_shift"] for d in moved] == sorted(
        (d["rank_shift"] for d in moved), reverse=True)
    shown = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    flat = " ".join(shown.output.split())
    assert (f"{cmp['identical']} identical top-10 ({len(moved)} more with the same results "
            "in a different order)") in flat, shown.output
    assert "most changed queries" in flat, shown.output
    listed = [line for line in shown.output.splitlines()
              if any(d["query"] in line for d in moved)]
    assert len(listed) == len(moved), shown.output
    assert all("same results, different order" in line for line in listed), shown.output


def test_compare_last_replays_a_lexical_only_search_without_an_embedding(
        sample_db: str, embedder: Any, tiny_model: str) -> None:
    # `--last` embedded every logged text: a search logged without a query embedding
    # (--lexical-only, embedder=None) was compared as a hybrid one, and two versions that
    # differ only in their model (which a lexical search never reads) differed for it
    from pgfunnel.cli.main import app

    query = "refund on an annual plan"
    with Funnel(sample_db, "default", embedder=None) as f:
        f.search(query, k=5, trace=True)
    with Funnel(sample_db, "default", embedder=embedder) as f:
        f.search("reset my password", k=5, trace=True)
    with connect(sample_db, autocommit=True) as conn:
        logged = {s.query_text: s for s in versions.last_searches(conn, "default", 10)}
        assert (logged[query].legs, logged[query].legs_guessed) == ("lexical", False)
        assert (logged["reset my password"].legs,
                logged["reset my password"].legs_guessed) == ("both", False)
        versions.reindex(conn, "default", model=tiny_model)  # another model: lists differ
    base = ["versions", "compare", "1", "2", "--last", "10", "--k", "5", "--dsn", sample_db]
    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1"}
    res = CliRunner().invoke(app, [*base, "--json"], env=env)
    assert res.exit_code == 0, res.output
    cmp = json.loads(res.output[res.output.index("{"):])
    by_text = {d["query"]: d for d in cmp["per_query"]}
    # the lexical leg alone reads the same BM25 index on both versions: identical
    assert by_text[query]["legs"] == "lexical" and by_text[query]["identical"], by_text
    assert by_text["reset my password"]["legs"] == "both"
    assert cmp["legs_guessed"] == [] and cmp["notices"] == []

    # a row logged before the record (no query_embedding in its notes): the trace's guess,
    # as explain's replay makes it (no candidate from the dense leg: lexical alone), said
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("update pgfunnel.search_log set notes = notes - 'query_embedding'")
        logged = {s.query_text: s for s in versions.last_searches(conn, "default", 10)}
    assert (logged[query].legs, logged[query].legs_guessed) == ("lexical", True)
    # a hybrid search's trace holds dense ranks: no guess to say
    assert (logged["reset my password"].legs,
            logged["reset my password"].legs_guessed) == ("both", False)
    res = CliRunner().invoke(app, base, env=env)
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert (f"note: 1 logged search ('{query}') was logged before pgfunnel recorded whether "
            "a search had a query embedding; none of the candidates in its trace came from "
            "the dense leg, so it was replayed with the lexical leg alone, a guess: a dense "
            "leg that found nothing visible looks the same") in said, res.output


def test_a_dense_only_eval_search_is_replayed_without_its_text(sample_db: str,
                                                               embedder: Any) -> None:
    # `pgfunnel eval` with a dense-only configuration logged the judged text as query_text
    # although its lexical leg got none: explain's replay and compare --last searched it
    # with both legs
    from pgfunnel.eval.harness import EvalConfig, Harness
    from pgfunnel.eval.qrels import JudgedQuery
    from pgfunnel.explain_log import explain_logged

    query = "refund annual plan"
    judged = JudgedQuery("kw", query, "keyword", {"refunds-annual": 1})
    dense = EvalConfig.from_dict("dense", {"legs": "dense", "dense_depth": 2})
    Harness(sample_db, "default", embedder=embedder, trace=True).run([judged], [dense])
    with connect(sample_db, autocommit=True) as conn:
        row = conn.execute("select id, query_text, notes from pgfunnel.search_log "
                           "order by id desc limit 1").fetchone()
        assert row is not None and row[1] == query
        assert row[2]["query_text_searched"] is False and row[2]["query_embedding"] is True
        sid = int(row[0])
        other = conn.execute("select d.citekey || '#0' from pgfunnel.document d "
                             "where d.citekey like 'refunds-%%' and not exists (select from "
                             "pgfunnel.search_trace t join pgfunnel.chunk ch on "
                             "ch.id = t.chunk_id where t.search_id = %s and "
                             "ch.document_id = d.id) order by 1 limit 1", (sid,)).fetchone()
        assert other is not None
        (logged,) = versions.last_searches(conn, "default", 10)
        assert (logged.legs, logged.legs_guessed) == ("dense", False)
    with Funnel(sample_db, "default", embedder=embedder) as f:
        (e,) = explain_logged(f, sid, [str(other[0])])
    # replayed with its vector alone: the lexical leg did not run
    assert e.lexical_depth is None and e.lexical_rank is None, e
    assert e.dense_depth is not None and e.dense_exact_score is not None, e
    # a Funnel without an embedder cannot replay it: said, not replayed with nothing
    with Funnel(sample_db, "default", embedder=None) as f, \
            pytest.raises(ConfigError, match="searched with its query embedding alone"):
        explain_logged(f, sid, [str(other[0])])
    # the CLI says it in its flag, and does not advise the --lexical-only it was given
    from pgfunnel.cli.main import app

    out = CliRunner().invoke(app, ["explain", "--search-id", str(sid), str(other[0]),
                                   "--lexical-only", "--dsn", sample_db],
                             env={"COLUMNS": "300"})
    assert out.exit_code == 1, out.output
    said = " ".join(out.output.split())
    assert said.startswith(f"error: --search-id: search {sid} searched with its query "
                           "embedding alone"), said
    assert said.endswith("--lexical-only loads no embedding model: explain it without "
                         "--lexical-only"), said
    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1")
        cmp = versions.compare(conn, "default", 1, 2, [logged], k=5)
    # the dense leg alone reads the same vectors on both versions: identical
    assert cmp.per_query[0].legs == "dense" and cmp.per_query[0].identical, cmp


def test_a_version_that_does_not_exist_is_named_as_it_was_given(sample_db: str,
                                                                 tmp_path: Path) -> None:
    """The CLI said "version: collection 'default' has no index version 9", the library's
    parameter; it names the argument as the usage line does (VERSION, VERSION_B), and the
    library names its own parameter (compare's version_b, not version)."""
    from pgfunnel.cli.main import app

    with connect(sample_db, autocommit=True) as conn:
        with pytest.raises(NotFoundError, match="^version: collection 'default' has no index "
                                                "version 9 ") as info:
            versions.retire(conn, "default", 9)
        assert info.value.parameter == "version"
        with pytest.raises(NotFoundError, match="^version_b: collection 'default' has no "
                                                "index version 9 "):
            versions.compare(conn, "default", 1, 9, ["refund"])
    env = {"COLUMNS": "300", "PGFUNNEL_DSN": sample_db}
    for command in (["activate", "9"], ["retire", "9"], ["drop", "9"]):
        res = CliRunner().invoke(app, ["versions", *command], env=env)
        assert res.exit_code == 1, res.output
        assert "error: VERSION: collection 'default' has no index version 9" in res.output
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query": "refund"}\n')
    for pair, named in ((["9", "1"], "VERSION_A"), (["1", "9"], "VERSION_B")):
        res = CliRunner().invoke(app, ["versions", "compare", *pair, "--queries",
                                       str(queries)], env=env)
        assert res.exit_code == 1, res.output
        assert f"error: {named}: collection 'default' has no index version 9" in res.output


def test_dropping_the_active_version_names_the_way_out(sample_db: str) -> None:
    # the refusal said only "activate another one before dropping it", where retire's
    # names `versions rollback`: it now gives the command that switches away
    from pgfunnel.cli.main import app

    with connect(sample_db, autocommit=True) as conn:
        with pytest.raises(ConflictError) as only:
            versions.drop(conn, "default", 1)
        assert str(only.value).endswith(
            "activate another one before dropping it: it is the collection's only version: "
            "`pgfunnel reindex -c default` builds another to switch to"), only.value
        versions.reindex(conn, "default", analyzer="simple_v1", activate_after=True)
        versions.reindex(conn, "default", analyzer="simple_v6")
    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1"}
    res = CliRunner().invoke(app, ["versions", "drop", "2", "--dsn", sample_db], env=env)
    assert res.exit_code == 1, res.output
    said = " ".join(res.stderr.split())
    assert ("version 2 of 'default' is the active version; activate another one before "
            f"dropping it: `pgfunnel versions rollback --dsn {shlex.quote(sample_db)} -c "
            "default` returns to version 1, which it replaced") in said, said
    with connect(sample_db, autocommit=True) as conn:
        # the version it replaced is gone: the latest other one is named instead
        versions.drop(conn, "default", 1)
        with pytest.raises(ConflictError) as other:
            versions.drop(conn, "default", 2)
        assert str(other.value).endswith(
            "`pgfunnel versions activate 3 -c default` switches to version 3 (ready)"), \
            other.value
        assert _state(conn) == {2: "active", 3: "ready"}


def test_retiring_the_active_version_names_the_collection_in_the_way_out(
        sample_db: str) -> None:
    # the refusal said "(or pgfunnel versions rollback)", with no -c: run as given, it
    # rolled back the default collection, not the one whose retire was refused
    from pgfunnel.cli.main import app

    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1", activate_after=True)
        with pytest.raises(ConflictError) as refused:
            versions.retire(conn, "default", 2)
        assert str(refused.value) == (
            "version 2 of 'default' is active; activate another version first: "
            "`pgfunnel versions rollback -c default` returns to version 1, which it "
            "replaced"), refused.value
    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1"}
    res = CliRunner().invoke(app, ["versions", "retire", "2", "--dsn", sample_db], env=env)
    assert res.exit_code == 1, res.output
    said = " ".join(res.stderr.split())
    assert ("version 2 of 'default' is active; activate another version first: "
            f"`pgfunnel versions rollback --dsn {shlex.quote(sample_db)} -c default` "
            "returns to version 1, which it replaced") in said, said
    with connect(sample_db, autocommit=True) as conn:
        assert _state(conn) == {1: "retired", 2: "active"}
