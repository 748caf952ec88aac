"""Index builds beside other sessions: two builds of one index, a build beside other
collections' writers, and an invalid index that is being built versus one left by a
build that was cut short. Each runs real sessions on one Postgres."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import psycopg
import pytest
from funnel_util import active, doc, ingest, lexical, unit, wait_for_lock_wait

from pgfunnel.db import connect
from pgfunnel.ingest import (
    Ingester,
    create_hnsw_index,
    create_posting_index,
    hnsw_index_name,
    index_state,
    posting_index_name,
)
from pgfunnel.versions import cleanup_invalid_indexes

THREAD_SESSION = "index-build-test"


def _in_thread(db: str, job: Callable[[psycopg.Connection[Any]], object]
               ) -> tuple[threading.Thread, list[BaseException], list[int]]:
    """Start ``job`` on an autocommit connection of its own, named ``THREAD_SESSION``;
    (thread, what it raised, its backend pid once connected)."""
    errors: list[BaseException] = []
    pids: list[int] = []

    def run() -> None:
        try:
            with connect(db, autocommit=True) as c:
                c.execute("select set_config('application_name', %s, false)",
                          (THREAD_SESSION,))
                pids.append(c.info.backend_pid)
                job(c)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors, pids


def _built_while_another_build_is_uncommitted(db: str, build: Any) -> list[BaseException]:
    """What a second session's build raised when it started while the first session's
    build of the same index was done but not yet committed (two first ingests of one new
    collection reaching their index builds together)."""
    with connect(db) as first:
        with first.transaction():
            build(first)
            thread, errors, _ = _in_thread(db, build)
            # long enough for the second build to reach the catalog (or the lock)
            time.sleep(1.5)
        thread.join(60)
    assert not thread.is_alive()
    return errors


def test_a_second_session_building_the_same_hnsw_index_waits_and_finds_it_built(
        db: str, conn: psycopg.Connection[Any]) -> None:
    ingest(conn, [doc(f"d{i}", f"text number {i}") for i in range(50)])
    vid, _, dims = active(conn, "t")
    conn.execute(f"drop index pgfunnel.{hnsw_index_name(vid)}")
    errors = _built_while_another_build_is_uncommitted(
        db, lambda c: create_hnsw_index(c, vid, dims))
    # without the build lock: UniqueViolation on pg_class_relname_nsp_index
    assert not errors, errors
    assert index_state(conn, hnsw_index_name(vid)) is True


def test_a_second_session_building_the_same_posting_index_waits_and_finds_it_built(
        db: str, conn: psycopg.Connection[Any]) -> None:
    ingest(conn, [doc(f"d{i}", f"text number {i}") for i in range(50)])
    vid, _, _ = active(conn, "t")
    conn.execute(f"drop index pgfunnel.{posting_index_name(vid)}")
    built: list[bool] = []
    errors = _built_while_another_build_is_uncommitted(
        db, lambda c: built.append(create_posting_index(c, vid)))
    assert not errors, errors
    # the first session built it; the second found it there
    assert built == [True, False]
    assert lexical(conn, "number", "t")


def _open_write(db: str, collection: str) -> psycopg.Connection[Any]:
    """A session in the middle of a write to a collection's embeddings (a web app's
    delete, say), its transaction left open."""
    writer = connect(db)
    writer.execute("delete from pgfunnel.document d using pgfunnel.collection c "
                   "where c.id = d.collection_id and c.name = %s and d.citekey = 'd0'",
                   (collection,))
    return writer


def test_the_first_graph_of_a_collection_sharing_the_table_lets_other_writes_pass(
        db: str, conn: psycopg.Connection[Any]) -> None:
    for name in ("a", "c"):
        ingest(conn, [doc(f"d{i}", f"text number {i}") for i in range(40)], collection=name)
    writer = _open_write(db, "c")
    try:
        # collection b's first ingest reaches its graph build, which waits for the
        # open write of collection c to end (every index build does)
        thread, errors, pids = _in_thread(db, lambda c: ingest(
            c, [doc(f"b{i}", f"other words {i}") for i in range(40)], collection="b", seed=1))
        wait_for_lock_wait(conn, THREAD_SESSION, "create index", timeout_s=60)
        # a plain CREATE INDEX, queued for its SHARE lock, made this write of
        # collection a wait for the whole build
        with connect(db, autocommit=True) as other:
            other.execute("set lock_timeout = '2s'")
            # a tenth of the database: enough for the ingest to refresh the shared tables
            added = [doc(f"a-new{i}", f"a document added meanwhile {i}") for i in range(20)]
            stats = Ingester(other, "a").ingest(
                added, vectors={d.citekey: unit_rows(1) for d in added})
        # its closing VACUUM ANALYZE skipped the table being built on instead of waiting
        assert any("pgfunnel.embedding" in n and "autovacuum" in n for n in stats.notes), \
            stats.notes
    finally:
        writer.rollback()
        writer.close()
    thread.join(120)
    assert not errors, errors
    vid, _, _ = active(conn, "b")
    assert index_state(conn, hnsw_index_name(vid)) is True
    assert [cid for cid, *_ in lexical(conn, "meanwhile", "a")]


@contextmanager
def _a_concurrent_build_kept_waiting(
        db: str, conn: psycopg.Connection[Any]
) -> Iterator[tuple[str, threading.Thread, list[BaseException], list[int]]]:
    """Collection a's graph dropped and built again concurrently by another session (a
    reindex or an activation), which waits for an open write of collection a with its
    index made and still invalid; the write ends with the block. Yields the index name
    and the builder's thread, errors and pid."""
    ingest(conn, [doc(f"d{i}", f"text number {i}") for i in range(40)], collection="a")
    vid, _, dims = active(conn, "a")
    name = hnsw_index_name(vid)
    conn.execute(f"drop index pgfunnel.{name}")
    writer = _open_write(db, "a")
    try:
        thread, errors, pids = _in_thread(
            db, lambda c: create_hnsw_index(c, vid, dims, concurrently=True))
        wait_for_lock_wait(conn, THREAD_SESSION, "create index", timeout_s=60)
        yield name, thread, errors, pids
    finally:
        writer.rollback()
        writer.close()


def test_an_invalid_graph_that_another_session_is_building_is_not_cleaned_up(
        db: str, conn: psycopg.Connection[Any]) -> None:
    with _a_concurrent_build_kept_waiting(db, conn) as (name, thread, errors, _):
        assert index_state(conn, name) is False
        # another collection's reindex starts by cleaning up invalid graphs: it used to
        # wait for this build to end and then drop the finished graph (here the build
        # waits for the open write, so the wait is cut short instead)
        conn.execute("set lock_timeout = '3s'")
        assert cleanup_invalid_indexes(conn) == []
    thread.join(120)
    assert not errors, errors
    assert index_state(conn, name) is True


def test_a_graph_whose_concurrent_build_was_cut_short_is_built_again_by_the_next_ingest(
        db: str, conn: psycopg.Connection[Any]) -> None:
    with _a_concurrent_build_kept_waiting(db, conn) as (name, thread, errors, pids):
        conn.execute("select pg_cancel_backend(%s)", (pids[0],))
        thread.join(60)
    assert errors and isinstance(errors[0], psycopg.errors.QueryCanceled), errors
    assert index_state(conn, name) is False
    # the next ingest finds the invalid graph with nobody building it, and rebuilds it
    ingest(conn, [doc("d-late", "one more text")], collection="a", seed=3)
    assert index_state(conn, name) is True
    # and a reindex's clean-up drops such a leftover, with nobody building it
    conn.execute("update pg_index set indisvalid = false where indexrelid = %s::regclass",
                 (f"pgfunnel.{name}",))
    assert cleanup_invalid_indexes(conn) == [name]


def unit_rows(n: int, dims: int = 16) -> Any:
    rng = np.random.default_rng(5)
    return np.stack([unit(rng, dims) for _ in range(n)])


@pytest.mark.parametrize("shared", [False, True])
def test_a_first_ingest_builds_a_valid_graph_either_way(
        db: str, conn: psycopg.Connection[Any], shared: bool) -> None:
    if shared:
        ingest(conn, [doc("x", "another collection")], collection="other")
    ingest(conn, [doc(f"d{i}", f"text number {i}") for i in range(30)], collection="t")
    vid, _, _ = active(conn, "t")
    assert index_state(conn, hnsw_index_name(vid)) is True


def _maintenance_counts(conn: psycopg.Connection[Any], table: str) -> tuple[int, int]:
    conn.execute("select pg_stat_clear_snapshot()")
    row = conn.execute("select vacuum_count + autovacuum_count, analyze_count "
                       "from pg_stat_user_tables where schemaname = 'pgfunnel' "
                       "and relname = %s", (table,)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_small_ingest_vacuums_its_partition_and_leaves_the_shared_statistics(
        conn: psycopg.Connection[Any]) -> None:
    # ANALYZE of the shared tables costs about a second on a 100k-chunk database: ten
    # times a one-document ingest, which used to pay it every time
    conn.execute("alter table pgfunnel.embedding set (autovacuum_enabled = off)")
    ingest(conn, [doc(f"d{i}", f"text number {i}") for i in range(100)], collection="a")
    vid, _, _ = active(conn, "a")
    partition = f"posting_v{vid}"
    shared_before = _maintenance_counts(conn, "embedding")
    partition_before = _maintenance_counts(conn, partition)
    stats = Ingester(conn, "a").ingest([doc("one", "one more text")],
                                       vectors={"one": unit_rows(1)})
    assert stats.chunks_written == 1
    assert _maintenance_counts(conn, "embedding") == shared_before
    assert _maintenance_counts(conn, partition)[0] == partition_before[0] + 1
    # its postings' pages are all-visible: the lexical leg's scan reads no heap page
    plan = "\n".join(str(r[0]) for r in conn.execute(
        "explain (analyze, costs off) select chunk_id from pgfunnel.posting "
        "where index_version_id = %s and term = 'one'", (vid,)).fetchall())
    assert "Index Only Scan" in plan and "Heap Fetches: 0" in plan, plan
    # a tenth of the version or more refreshes the shared tables' statistics
    more = [doc(f"m{i}", f"more text {i}") for i in range(15)]
    Ingester(conn, "a").ingest(more, vectors={d.citekey: unit_rows(1) for d in more})
    assert _maintenance_counts(conn, "embedding")[1] == shared_before[1] + 1


def _queued_behind_a_waiting_build(db: str, conn: psycopg.Connection[Any],
                                   build: Callable[[psycopg.Connection[Any]], Any],
                                   queued: Callable[[psycopg.Connection[Any]], Any]) -> None:
    """``build`` (a graph build on the embedding table) in a session of its own, kept
    waiting by an open write of collection a, then ``queued`` in another, given 1.5 s to
    reach its wait behind it; the write then ends, and both must finish without error."""
    writer = _open_write(db, "a")
    try:
        first = _in_thread(db, build)
        wait_for_lock_wait(conn, THREAD_SESSION, "create index", timeout_s=60)
        second = _in_thread(db, queued)
        time.sleep(1.5)  # the second reaches its wait
    finally:
        writer.rollback()
        writer.close()
    for thread, errors, _ in (first, second):
        thread.join(120)
        assert not errors, errors


def test_concurrent_builds_of_two_collections_graphs_queue_instead_of_deadlocking(
        db: str, conn: psycopg.Connection[Any]) -> None:
    # Two reindexes of two collections (or a reindex beside another collection's first
    # ingest or activation) build their graphs concurrently on the one embedding table.
    # The second CREATE INDEX CONCURRENTLY queued for the table's lock in a transaction
    # with a snapshot, and the first, once built, waited for every older snapshot to end:
    # a deadlock, one of the builds cancelled and its index left invalid.
    names = []
    for i, name in enumerate(("a", "b")):
        ingest(conn, [doc(f"d{j}", f"text number {j}") for j in range(40)], collection=name,
               seed=i)
        vid, _, dims = active(conn, name)
        conn.execute(f"drop index pgfunnel.{hnsw_index_name(vid)}")
        names.append((hnsw_index_name(vid), vid, dims))
    # a's build waits for the open write (before it builds), b's for a's build
    _queued_behind_a_waiting_build(
        db, conn, lambda c: create_hnsw_index(c, names[0][1], names[0][2], concurrently=True),
        lambda c: create_hnsw_index(c, names[1][1], names[1][2], concurrently=True))
    assert [index_state(conn, name) for name, _, _ in names] == [True, True]


def _spare_version(conn: psycopg.Connection[Any], collection: str, graph: bool) -> int:
    """A second, 'ready' version of a collection (empty), with its posting partition and,
    with ``graph``, its HNSW index: one for a drop to remove."""
    from pgfunnel.ingest import create_version

    _, coll, dims = active(conn, collection)
    vid = create_version(conn, coll, "random-unit", dims, "english_v1", "ready")
    if graph:
        create_hnsw_index(conn, vid, dims, concurrently=True)
    return vid


def test_a_drop_beside_another_collections_build_waits_instead_of_deadlocking(
        db: str, conn: psycopg.Connection[Any]) -> None:
    # `versions drop` (or drop-collection) of collection b while a reindex of collection a
    # builds its graph: the DROP INDEX CONCURRENTLY queued for the embedding table's lock
    # held a snapshot that the build waited for, as a second build did
    from pgfunnel.versions import drop_version_rows

    for i, name in enumerate(("a", "b")):
        ingest(conn, [doc(f"d{j}", f"text number {j}") for j in range(40)], collection=name,
               seed=i)
    spare = _spare_version(conn, "b", graph=True)
    vid, _, dims = active(conn, "a")
    conn.execute(f"drop index pgfunnel.{hnsw_index_name(vid)}")
    _queued_behind_a_waiting_build(
        db, conn, lambda c: create_hnsw_index(c, vid, dims, concurrently=True),
        lambda c: drop_version_rows(c, spare))
    assert index_state(conn, hnsw_index_name(vid)) is True
    assert index_state(conn, hnsw_index_name(spare)) is None
    assert conn.execute("select count(*) from pgfunnel.index_version where id = %s",
                        (spare,)).fetchone() == (0,)


def _spare_versions_of_two_collections(conn: psycopg.Connection[Any]) -> list[int]:
    """Collections a and b of ten documents each, and an inactive version (no graph) of
    each to drop."""
    spares = []
    for i, name in enumerate(("a", "b")):
        ingest(conn, [doc(f"d{j}", f"text number {j}") for j in range(10)], collection=name,
               seed=i)
        spares.append(_spare_version(conn, name, graph=False))
    return spares


def test_two_collections_versions_dropped_at_once_both_go(
        db: str, conn: psycopg.Connection[Any]) -> None:
    # Postgres keeps one partition of a table pending detach at a time: while a drop's
    # DETACH ... CONCURRENTLY waited for a transaction reading the postings, another
    # collection's drop failed with 'partition ... already pending detach'
    from pgfunnel.versions import drop_version_rows

    spares = _spare_versions_of_two_collections(conn)
    with connect(db) as reader:
        # a search's transaction, still open: the first detach waits for it to end
        reader.execute("select count(*) from pgfunnel.posting")
        first = _in_thread(db, lambda c: drop_version_rows(c, spares[0]))
        wait_for_lock_wait(conn, THREAD_SESSION, "detach partition", timeout_s=60)
        second = _in_thread(db, lambda c: drop_version_rows(c, spares[1]))
        time.sleep(1.5)  # the second drop reaches its detach
        reader.rollback()
    for thread, errors, _ in (first, second):
        thread.join(120)
        assert not errors, errors
    assert conn.execute("select count(*) from pgfunnel.index_version where id = any(%s)",
                        (spares,)).fetchone() == (0,)


def test_a_drop_cut_short_in_its_detach_does_not_block_other_collections_drops(
        db: str, conn: psycopg.Connection[Any]) -> None:
    # Ctrl-C of `versions drop` in collection a while its detach waited left a's partition
    # pending detach, and every other collection's drop then failed ('already pending
    # detach') until someone ran a's drop again
    from pgfunnel.versions import drop_version_rows

    spares = _spare_versions_of_two_collections(conn)
    with connect(db) as reader:
        reader.execute("select count(*) from pgfunnel.posting")
        cut, errors, pids = _in_thread(db, lambda c: drop_version_rows(c, spares[0]))
        wait_for_lock_wait(conn, THREAD_SESSION, "detach partition", timeout_s=60)
        conn.execute("select pg_cancel_backend(%s)", (pids[0],))
        cut.join(60)
        reader.rollback()
    assert errors and isinstance(errors[0], psycopg.errors.QueryCanceled), errors
    with connect(db, autocommit=True) as other:
        drop_version_rows(other, spares[1])
        # and a's drop, run again, finishes
        drop_version_rows(other, spares[0])
    assert conn.execute("select count(*) from pgfunnel.index_version where id = any(%s)",
                        (spares,)).fetchone() == (0,)


def test_the_hnsw_build_bounds_reindex_checks_are_pgvectors(
        conn: psycopg.Connection[Any]) -> None:
    """reindex checks m and ef_construction before it embeds anything (pgvector refuses
    them only at the build, after every chunk was embedded): with bounds of its own, a
    value pgvector takes would be refused, or one it refuses found out at the end."""
    import re

    from psycopg import sql

    from pgfunnel import defaults as d
    from pgfunnel.errors import ConfigError
    from pgfunnel.versions import reindex

    row = conn.execute("select extnamespace::regnamespace::text from pg_extension "
                       "where extname = 'vector'").fetchone()
    assert row is not None
    vector = sql.Identifier(row[0])
    conn.execute(sql.SQL("create temp table hnsw_bounds (v {}.halfvec(3))").format(vector))
    conn.execute("insert into hnsw_bounds values ('[1,0,0]'), ('[0,1,0]'), ('[0,0,1]')")

    def pgvector_refusal(m: int, ef_construction: int) -> str | None:
        try:
            with conn.transaction(force_rollback=True):
                conn.execute(sql.SQL(
                    "create index on hnsw_bounds using hnsw (v {}.halfvec_cosine_ops) "
                    "with (m = {}, ef_construction = {})").format(
                        vector, sql.Literal(m), sql.Literal(ef_construction)))
        except psycopg.Error as exc:
            return str(exc)
        return None

    def reindex_refusal(m: int, ef_construction: int) -> str | None:
        try:
            # refused before the collection is looked up: there is none
            reindex(conn, "no such collection", m=m, ef_construction=ef_construction)
        except ConfigError as exc:
            return str(exc)
        except Exception:  # past the checks: the collection is missing
            return None
        return None

    m_lo, m_hi = d.HNSW_M_LEAST, d.HNSW_M_MOST
    ef_lo, ef_hi = d.HNSW_EF_CONSTRUCTION_LEAST, d.HNSW_EF_CONSTRUCTION_MOST
    taken = [(m_lo, max(ef_lo, 2 * m_lo)), (m_hi, ef_hi), (d.HNSW_M, d.HNSW_EF_CONSTRUCTION),
             (m_lo, 2 * m_lo)]
    for m, ef in taken:
        assert pgvector_refusal(m, ef) is None, (m, ef)
        assert reindex_refusal(m, ef) is None, (m, ef)
    refused = {(m_lo - 1, ef_hi): "m", (m_hi + 1, ef_hi): "m",
               (m_lo, ef_lo - 1): "ef_construction", (m_lo, ef_hi + 1): "ef_construction",
               (d.HNSW_M, 2 * d.HNSW_M - 1): "ef_construction"}
    for (m, ef), name in refused.items():
        said = pgvector_refusal(m, ef)
        assert said is not None and re.search(rf"\b{name}\b", said), (m, ef, said)
        ours = reindex_refusal(m, ef)
        assert ours is not None and ours.startswith(f"{name}:"), (m, ef, ours)
    assert "2 * m" in str(pgvector_refusal(d.HNSW_M, 2 * d.HNSW_M - 1))
