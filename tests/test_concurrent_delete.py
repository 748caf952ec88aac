"""Plain DELETEs from two sessions at once: the deletion trigger locks term rows in one
order, so concurrent deleters wait for each other instead of deadlocking."""

from __future__ import annotations

import random
import threading
from typing import Any

import psycopg
import pytest
from funnel_util import doc, ingest
from test_bm25 import _recount, _stored

from pgfunnel.db import connect


def test_concurrent_plain_deletes_neither_deadlock_nor_drift(db: str,
                                                             conn: psycopg.Connection[Any]) -> None:
    rng = random.Random(11)
    vocab = [f"t{i}x" for i in range(60)]
    # every document holds most of the vocabulary, so two deletes share most term rows
    docs = [doc(f"d{i}", " ".join(rng.sample(vocab, 45))) for i in range(240)]
    ingest(conn, docs)
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def deleter(keys: list[str]) -> None:
        try:
            with connect(db, autocommit=True) as c:
                start.wait()
                for i in range(0, len(keys), 6):
                    # two documents per statement, in a shuffled order per session
                    c.execute("delete from pgfunnel.document where citekey = any(%s)",
                              (keys[i:i + 6],))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    keys = [d.citekey for d in docs]
    rng.shuffle(keys)
    # 220 of the 240 go; the rest are checked against a recount
    threads = [threading.Thread(target=deleter, args=(keys[:110],)),
               threading.Thread(target=deleter, args=(keys[110:220],))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert _stored(conn, "t") == _recount(conn, "t")


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


def test_plain_deletes_beside_an_ingest_that_replaces(db: str,
                                                      conn: psycopg.Connection[Any]) -> None:
    # an ingest's replacement deletes chunks and then adds postings in one transaction; a
    # web app deletes other documents meanwhile. Both lock the version row first.
    from pgfunnel.ingest import Ingester

    rng = random.Random(12)
    vocab = [f"t{i}x" for i in range(60)]
    docs = [doc(f"d{i}", " ".join(rng.sample(vocab, 45))) for i in range(200)]
    vectors = ingest(conn, docs)
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def reingest() -> None:
        try:
            with connect(db, autocommit=True) as c:
                start.wait()
                for i in range(0, 100, 5):
                    changed = [doc(d.citekey, " ".join(rng.sample(vocab, 45)))
                               for d in docs[i:i + 5]]
                    Ingester(c, "t", batch_documents=5, prepare_ahead=False).ingest(
                        changed, vectors={d.citekey: vectors[d.citekey] for d in changed})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def delete() -> None:
        try:
            with connect(db, autocommit=True) as c:
                start.wait()
                for i in range(100, 190, 3):
                    c.execute("delete from pgfunnel.document where citekey = any(%s)",
                              ([d.citekey for d in docs[i:i + 3]],))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reingest), threading.Thread(target=delete)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert _stored(conn, "t") == _recount(conn, "t")
    assert conn.execute("select count(*) from pgfunnel.document").fetchone() == (110,)
