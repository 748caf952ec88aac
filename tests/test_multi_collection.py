"""Several collections in one database, as a service runs them: what one collection's
maintenance does must not hold up or fail another's searches and writes."""

from __future__ import annotations

import contextlib
import shlex
import time
from typing import Any

import numpy as np
import psycopg
import pytest
from funnel_util import doc, ingest, one_row, unit

from pgfunnel.db import connect


def _unit_rows(n: int, dims: int = 16) -> Any:
    rng = np.random.default_rng(7)
    return np.stack([unit(rng, dims) for _ in range(n)])


def test_an_ingest_does_not_wait_for_another_collections_index_build(
        db: str, conn: psycopg.Connection[Any]) -> None:
    # SHARE UPDATE EXCLUSIVE on the shared embedding table is what another collection's
    # CREATE INDEX CONCURRENTLY (a reindex) or DROP INDEX CONCURRENTLY (a version drop)
    # holds for as long as it runs; the end of an ingest used to VACUUM the table and wait
    ingest(conn, [doc("a1", "alpha words here")], collection="a")
    ingest(conn, [doc("b1", "beta words here")], collection="b")
    with connect(db) as builder, connect(db, autocommit=True) as writer:
        builder.execute("lock table pgfunnel.embedding in share update exclusive mode")
        # a wait for the builder's lock lasts until the rollback below, so it ends in the
        # lock timeout's error (LockNotAvailable, or the ConflictError ingest makes of
        # it): lock_timeout counts the wait alone, not the ingest's own work
        writer.execute("set lock_timeout = '20s'")
        ingest(writer, [doc("b2", "more beta words")], collection="b")
        builder.rollback()
    assert conn.execute(
        "select count(*) from pgfunnel.document d join pgfunnel.collection c "
        "on c.id = d.collection_id where c.name = 'b'").fetchone() == (2,)


def _waiting(conn: psycopg.Connection[Any], app: str) -> bool:
    row = conn.execute("select count(*) from pg_stat_activity where application_name = %s "
                       "and wait_event_type = 'Lock'", (app,)).fetchone()
    return bool(row and row[0])


def test_dropping_a_collection_does_not_queue_other_collections_searches(
        db: str, conn: psycopg.Connection[Any]) -> None:
    import threading

    from pgfunnel import versions

    for name in ("a", "b", "c"):
        ingest(conn, [doc(f"{name}1", f"shared words in {name}")], collection=name)
    dropped: list[Any] = []
    with connect(db) as reader, connect(db, autocommit=True) as searcher:
        # a long transaction that read collection b's postings (a report, a search whose
        # rerank holds its snapshot while the model runs)
        reader.execute("select count(*) from pgfunnel.posting p join pgfunnel.index_version v "
                       "on v.id = p.index_version_id join pgfunnel.collection c "
                       "on c.id = v.collection_id where c.name = 'b'")

        def drop() -> None:
            with connect(db, autocommit=True) as c:
                dropped.append(versions.drop_collection(c, "a"))

        thread = threading.Thread(target=drop)
        thread.start()
        app = "pgfunnel versions drop-collection a"  # the drop's application_name
        deadline = time.monotonic() + 60  # ends as soon as the drop waits
        while not _waiting(conn, app) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _waiting(conn, app), "the drop never waited for the open transaction"
        # the drop waits for the reader; a search of collection c must not wait behind it
        searcher.execute("set lock_timeout = '1s'")
        rows = searcher.execute("select citekey from pgfunnel.funnel_search("
                                "'shared words', null, collection => 'c')").fetchall()
        assert rows == [("c1",)]
        reader.rollback()
        thread.join(10)
    assert dropped and dropped[0]["collection"] == "a"
    assert conn.execute("select count(*) from pg_inherits "
                        "where inhparent = 'pgfunnel.posting'::regclass").fetchone() == (2,)
    assert conn.execute("select to_regclass('pgfunnel.posting_v1')").fetchone() == (None,)


def test_a_drop_cut_short_mid_detach_is_finished_by_the_next(
        db: str, conn: psycopg.Connection[Any]) -> None:
    from pgfunnel import versions

    ingest(conn, [doc("a1", "alpha words")], collection="a")
    with connect(db) as reader, connect(db, autocommit=True) as detacher:
        reader.execute("select count(*) from pgfunnel.posting")
        detacher.execute("set statement_timeout = '500ms'")
        # the detach's second phase waits for the reader and is cancelled: it is left pending
        with contextlib.suppress(psycopg.errors.QueryCanceled):
            detacher.execute("alter table pgfunnel.posting detach partition "
                             "pgfunnel.posting_v1 concurrently")
        reader.rollback()
    assert conn.execute("select inhdetachpending from pg_inherits where inhrelid = "
                        "'pgfunnel.posting_v1'::regclass").fetchone() == (True,)
    versions.drop_collection(conn, "a")
    assert conn.execute("select to_regclass('pgfunnel.posting_v1')").fetchone() == (None,)
    assert conn.execute("select count(*) from pgfunnel.collection").fetchone() == (0,)


def test_reindex_of_a_collection_emptied_by_deletes_prints_its_report(
        db: str, conn: psycopg.Connection[Any]) -> None:
    # a tenant's collection whose documents were all deleted: the report crashed on the
    # recall it has no chunk to measure (TypeError on None.__format__)
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.ingest import delete_documents

    ingest(conn, [doc("a1", "alpha words")], collection="a")
    delete_documents(conn, "a", ["a1"])
    res = CliRunner().invoke(app, ["reindex", "-c", "a", "--analyzer", "simple_v1",
                                   "--dsn", db])
    assert res.exit_code == 0, res.output
    assert "validated: index valid, 0 chunks covered, no recall sample" in res.output


def test_one_chunk_and_one_document_are_counted_in_the_singular(
        db: str, conn: psycopg.Connection[Any], tmp_path: Any) -> None:
    # "1 chunks indexed", "1 chunks covered, ... on 1 sample queries", "dropped: 1
    # documents", and ingest --dry-run's "1 words"
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    ingest(conn, [doc("a1", "alpha words")], collection="a")
    res = CliRunner().invoke(app, ["reindex", "-c", "a", "--analyzer", "simple_v1",
                                   "--dsn", db], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert "; 1 chunk indexed (0 embedded, 1 with vectors copied)" in res.output, res.output
    assert "validated: index valid, 1 chunk covered, HNSW recall@10 1.000 on 1 sample " \
           "query" in res.output, res.output
    res = CliRunner().invoke(app, ["versions", "drop-collection", "a", "--yes", "--dsn", db])
    assert res.exit_code == 0 and "collection 'a' dropped: 1 document, versions 1, 2." \
        in res.output, res.output
    page = tmp_path / "one.jsonl"
    page.write_text('{"citekey": "w", "text": "word"}\n')
    res = CliRunner().invoke(app, ["ingest", str(page), "--dry-run"], env={"COLUMNS": "300"})
    assert res.exit_code == 0 and "1 document, 1 chunk, 1 word (dry run" in res.output, \
        res.output


def test_a_reindex_stopped_by_ctrl_c_names_the_version_it_left(
        db: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # it said "`pgfunnel versions drop N` discards it", with N as written
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    import pgfunnel.versions

    ingest(conn, [doc("a1", "alpha words")], collection="a")

    def ctrl_c(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # as if typed while the graph was being built

    monkeypatch.setattr(pgfunnel.versions, "create_hnsw_index", ctrl_c)
    res = CliRunner().invoke(app, ["reindex", "-c", "a", "--analyzer", "simple_v1",
                                   "--dsn", db])
    assert res.exit_code == 130, res.output
    said = " ".join(res.output.split())
    assert "version 2 stays 'building'" in said, said
    assert f"`pgfunnel versions drop --dsn {shlex.quote(db)} 2 -c a` discards it" in said
    assert conn.execute("select state from pgfunnel.index_version where version = 2"
                        ).fetchone() == ("building",)


def test_a_database_error_at_the_end_of_an_ingest_is_a_pgfunnel_error(
        conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # the statistics refresh after the batches escaped as psycopg's LockNotAvailable under
    # a role's lock_timeout, though everything pgfunnel raises is a PgfunnelError
    import pgfunnel.ingest
    from pgfunnel.errors import ConflictError

    ingest(conn, [doc("a1", "alpha words")], collection="a")

    def refresh(c: psycopg.Connection[Any]) -> None:
        c.execute("do $$ begin raise exception using errcode = '55P03', "
                  "message = 'canceling statement due to lock timeout'; end $$")

    monkeypatch.setattr(pgfunnel.ingest, "refresh_table_stats", refresh)
    with pytest.raises(ConflictError, match="lock timeout"):
        ingest(conn, [doc("a2", "more alpha words")], collection="a")


def test_an_ingest_past_statement_timeout_names_the_setting_not_a_search(
        db: str, conn: psycopg.Connection[Any]) -> None:
    from pgfunnel.errors import SearchTimeoutError, StatementTimeoutError
    from pgfunnel.ingest import Ingester

    ingest(conn, [doc("a1", "alpha words here")], collection="a")
    with connect(db) as holder, connect(db, autocommit=True) as writer:
        # a role's statement_timeout meets a table held by a long transaction
        holder.execute("lock table pgfunnel.document in access exclusive mode")
        writer.execute("set statement_timeout = '300ms'")
        ing = Ingester(writer, "a", prepare_ahead=False)
        with pytest.raises(StatementTimeoutError, match="statement_timeout") as caught:
            ing.ingest([doc("a2", "more alpha words")], vectors={"a2": _unit_rows(1)})
        assert not isinstance(caught.value, SearchTimeoutError)
        assert "PGOPTIONS" in str(caught.value)
        holder.rollback()


def test_a_new_small_collection_analyses_its_own_postings_not_every_collections(
        conn: psycopg.Connection[Any]) -> None:
    # ANALYZE of the partitioned posting table analyses every version's partition: the
    # first ingest of each new tenant's collection re-analysed all the others' (2 - 5 s
    # in a database of 170 collections, growing with their number)
    ingest(conn, [doc(f"a{i}", f"alpha words number {i}") for i in range(60)], collection="a")
    ingest(conn, [doc(f"b{i}", f"beta words number {i}") for i in range(60)], collection="b")
    a_part = one_row(conn.execute(
        "select 'pgfunnel.posting_v' || v.id from pgfunnel.index_version v "
        "join pgfunnel.collection c on c.id = v.collection_id "
        "where c.name = 'a'"))[0]
    conn.execute("delete from pg_catalog.pg_statistic where starelid = %s::regclass",
                 (a_part,))
    ingest(conn, [doc("c1", "gamma words here")], collection="c")
    c_part = one_row(conn.execute(
        "select 'pgfunnel.posting_v' || v.id from pgfunnel.index_version v "
        "join pgfunnel.collection c on c.id = v.collection_id "
        "where c.name = 'c'"))[0]
    stats = "select count(*) from pg_catalog.pg_statistic where starelid = %s::regclass"
    assert conn.execute(stats, (a_part,)).fetchone() == (0,)
    assert one_row(conn.execute(stats, (c_part,)))[0] > 0
    # the collection is searchable at once
    assert conn.execute("select count(*) from pgfunnel.funnel_search('gamma', null, "
                        "collection => 'c')").fetchone() == (1,)
