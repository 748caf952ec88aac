"""Several collections in one database, as a service runs them: what one collection's
maintenance does must not hold up or fail another's searches and writes."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from funnel_util import doc, ingest

from pgfunnel.db import connect


def test_an_ingest_does_not_wait_for_another_collections_index_build(
        db: str, conn: psycopg.Connection[Any]) -> None:
    # SHARE UPDATE EXCLUSIVE on the shared embedding table is what another collection's
    # CREATE INDEX CONCURRENTLY (a reindex) or DROP INDEX CONCURRENTLY (a version drop)
    # holds for as long as it runs; the end of an ingest used to VACUUM the table and wait
    ingest(conn, [doc("a1", "alpha words here")], collection="a")
    ingest(conn, [doc("b1", "beta words here")], collection="b")
    with connect(db) as builder, connect(db, autocommit=True) as writer:
        builder.execute("lock table pgfunnel.embedding in share update exclusive mode")
        writer.execute("set lock_timeout = '1s'")
        started = time.monotonic()
        ingest(writer, [doc("b2", "more beta words")], collection="b")
        assert time.monotonic() - started < 1
        builder.rollback()
    assert conn.execute(
        "select count(*) from pgfunnel.document d join pgfunnel.collection c "
        "on c.id = d.collection_id where c.name = 'b'").fetchone() == (2,)
