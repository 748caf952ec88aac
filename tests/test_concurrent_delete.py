"""Plain DELETEs from two sessions at once, and beside an ingest: every writer of a
version's statistics locks the version row before any term row, so concurrent writers
wait for each other instead of deadlocking."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from funnel_util import active, doc, ingest, wait_for_lock_wait
from test_bm25 import _recount, _stored

from pgfunnel.db import connect

# what a job returns is not looked at
Job = Callable[[psycopg.Connection[Any]], object]


def _together(db: str, *jobs: Job) -> list[BaseException]:
    """Run each job on a connection of its own, all starting at once; what they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(jobs))

    def run(job: Job) -> None:
        try:
            with connect(db, autocommit=True) as c:
                start.wait()
                job(c)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _deleter(keys: list[str], per_statement: int) -> Job:
    def job(c: psycopg.Connection[Any]) -> None:
        for i in range(0, len(keys), per_statement):
            c.execute("delete from pgfunnel.document where citekey = any(%s)",
                      (keys[i:i + per_statement],))
    return job


def test_concurrent_plain_deletes_neither_deadlock_nor_drift(db: str,
                                                             conn: psycopg.Connection[Any]) -> None:
    rng = random.Random(11)
    vocab = [f"t{i}x" for i in range(60)]
    # every document holds most of the vocabulary, so two deletes share most term rows
    docs = [doc(f"d{i}", " ".join(rng.sample(vocab, 45))) for i in range(240)]
    ingest(conn, docs)
    keys = [d.citekey for d in docs]
    rng.shuffle(keys)
    # 220 of the 240 go, six per statement; the rest are checked against a recount
    errors = _together(db, _deleter(keys[:110], 6), _deleter(keys[110:220], 6))
    assert not errors, errors
    assert _stored(conn, "t") == _recount(conn, "t")


def test_plain_deletes_beside_an_ingest_that_replaces(db: str,
                                                      conn: psycopg.Connection[Any]) -> None:
    # an ingest's replacement deletes chunks and then adds postings in one transaction; a
    # web app deletes other documents meanwhile
    from pgfunnel.ingest import Ingester

    rng = random.Random(12)
    vocab = [f"t{i}x" for i in range(60)]
    docs = [doc(f"d{i}", " ".join(rng.sample(vocab, 45))) for i in range(200)]
    vectors = ingest(conn, docs)

    def reingest(c: psycopg.Connection[Any]) -> None:
        for i in range(0, 100, 5):
            changed = [doc(d.citekey, " ".join(rng.sample(vocab, 45))) for d in docs[i:i + 5]]
            Ingester(c, "t", batch_documents=5, prepare_ahead=False).ingest(
                changed, vectors={d.citekey: vectors[d.citekey] for d in changed})

    errors = _together(db, reingest, _deleter([d.citekey for d in docs[100:190]], 3))
    assert not errors, errors
    assert _stored(conn, "t") == _recount(conn, "t")
    assert conn.execute("select count(*) from pgfunnel.document").fetchone() == (110,)


def test_writers_of_one_version_queue_on_its_row(db: str, conn: psycopg.Connection[Any]) -> None:
    # what keeps them from deadlocking: each takes the version row before any term row
    docs = [doc(f"d{i}", f"shared words here and unique{i}x") for i in range(4)]
    ingest(conn, docs)
    with connect(db) as first, connect(db) as second:
        first.execute("delete from pgfunnel.document where citekey = 'd0'")
        second.execute("set lock_timeout = '200ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            second.execute("delete from pgfunnel.document where citekey = 'd1'")
        second.rollback()
        first.commit()
        second.execute("delete from pgfunnel.document where citekey = 'd1'")
        second.commit()
    assert _stored(conn, "t") == _recount(conn, "t")
    assert {r[0] for r in conn.execute("select citekey from pgfunnel.document")} == {"d2", "d3"}


def test_plain_delete_of_a_document_an_ingest_is_replacing(db: str,
                                                           conn: psycopg.Connection[Any]) -> None:
    # An ingest that replaces d0 has deleted its old chunks and waits (here for the version
    # row, held by a third session) before it writes d0's row; a web app deletes d0
    # meanwhile: its cascade waits for the ingest's chunk locks while the ingest would wait
    # for the app's lock on d0 (a deadlock, one of them failed), unless the ingest locks
    # the document before its chunks, as the app's DELETE does.
    from pgfunnel.ingest import Ingester

    docs = [doc(f"d{i}", f"shared words here and unique{i}x") for i in range(3)]
    vectors = ingest(conn, docs)
    vid, _, _ = active(conn, "t")
    changed = doc("d0", "changed words and more of them")
    errors: list[BaseException] = []

    def run(name: str, job: Job) -> threading.Thread:
        def target() -> None:
            try:
                with connect(db, autocommit=True) as c:
                    c.execute("select set_config('application_name', %s, false)", (name,))
                    job(c)
            except BaseException as exc:  # noqa: BLE001 - asserted below
                errors.append(exc)
        thread = threading.Thread(target=target)
        thread.start()
        return thread

    with connect(db) as holder:
        holder.execute("select 1 from pgfunnel.index_version where id = %s for update", (vid,))
        writer = run("race-ingest", lambda c: Ingester(c, "t", prepare_ahead=False).ingest(
            [changed], vectors={"d0": vectors["d0"]}))
        wait_for_lock_wait(conn, "race-ingest")
        deleter = run("race-delete", lambda c: c.execute(
            "delete from pgfunnel.document where citekey = 'd0'"))
        wait_for_lock_wait(conn, "race-delete")
        holder.commit()
        writer.join(30)
        deleter.join(30)
    assert not errors, errors
    # the delete came second: d0 is gone with the chunks the ingest wrote
    assert {r[0] for r in conn.execute("select citekey from pgfunnel.document")} == {"d1", "d2"}
    assert conn.execute("select count(*) from pgfunnel.chunk").fetchone() == (2,)
    assert _stored(conn, "t") == _recount(conn, "t")
