"""The legs check visibility on their best rows one by one (_visible_prefix): the cost
must follow the rows checked, not the collection. In a collection of 2,000 documents that
all have readers, its generic plan drove from the documents the readers index matched
(estimated at 1%, all 2,000 in fact) and compared each checked id against all of them:
funnel_search read 4,000 document rows for 10 results, and took 3 - 5x as long on 2,000
chunks as on 5,000 (bench/perf.py --size 2000)."""

from __future__ import annotations

from typing import Any

import psycopg
from funnel_util import active, doc, ingest


def _document_rows_read(conn: psycopg.Connection[Any]) -> int:
    """Document rows this session has read and not yet reported (a delta within one
    transaction is what a statement read)."""
    row = conn.execute(
        "select coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
        "from pg_stat_xact_user_tables where schemaname = 'pgfunnel' and relname = 'document'"
    ).fetchone()
    return int(row[0]) if row is not None else 0


def test_checking_rows_reads_those_rows_not_every_readable_document(
        conn: psycopg.Connection[Any]) -> None:
    ingest(conn, [doc(f"d{i}", f"note {i} about refunds on the monthly plan",
                      readers=["staff"]) for i in range(2000)])
    version_id, coll_id, dims = active(conn, "t")
    ids = [int(r[0]) for r in conn.execute(
        "select id from pgfunnel.chunk order by id desc limit 40")]
    with conn.transaction(force_rollback=True):
        before = _document_rows_read(conn)
        row = conn.execute(
            "select cardinality(chunk_ids) from pgfunnel._visible_prefix("
            "%s, array_fill(0::float8, array[40]), 40, '{staff,other}', null, null, now(), "
            "null, %s)", (ids, coll_id)).fetchone()
        assert row is not None and row[0] == 40
        read = _document_rows_read(conn) - before
    assert read <= 80, f"checking 40 chunks read {read} document rows"

    with conn.transaction(force_rollback=True):
        before = _document_rows_read(conn)
        rows = conn.execute(
            "select count(*) from pgfunnel.funnel_search('refunds monthly', "
            "(select e.embedding from pgfunnel.embedding e where e.index_version_id = %s "
            "limit 1), k => 10, collection => 't', principals => '{staff}')",
            (version_id,)).fetchone()
        assert rows is not None and rows[0] == 10
        read = _document_rows_read(conn) - before
    assert read <= 400, f"a search of k = 10 read {read} document rows"
