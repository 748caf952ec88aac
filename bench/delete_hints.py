#!/usr/bin/env python3
"""Time what `pgfunnel delete` and `pgfunnel ingest` look up beyond their own work on a
large collection: the hints for citekeys not found (``_citekey_hints``) and the files
stored under a longer path (``moved_files``).

Both read only ``pgfunnel.document``'s citekeys, so the collection is made of document
rows alone (no chunks, no vectors: seconds for 100,000), citekeys shaped as a folder's
paths two and three levels deep, one in ten with an accent written decomposed, as a Mac
names files. It is made in a database of its own, dropped at the end.

    python bench/delete_hints.py [--size 100000] [--repeat 7] [--dsn DSN]

Prints the median and the fastest of each lookup in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgfunnel import schema
from pgfunnel.db import connect
from pgfunnel.ingest import (
    _citekey_hints,
    delete_documents_report,
    get_or_create_collection,
    moved_files,
)


def fill(conn: Any, coll: int, size: int) -> None:
    conn.execute(
        "insert into pgfunnel.document (collection_id, citekey, is_public, content_hash) "
        "select %s, 'area-' || (i %% 50) || '/topic-' || (i %% 997) || '/' "
        "|| case when i %% 3 = 0 then 'sub/' else '' end "
        "|| case when i %% 10 = 0 then 'Re' || chr(769) || 'sume' || chr(769) || '-' "
        "else 'page-' end || i, true, 'h' from generate_series(1, %s) i", (coll, size))
    conn.execute("analyze pgfunnel.document")


def timed(label: str, fn: Callable[[], object], repeat: int) -> None:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    print(f"| {label} | {statistics.median(times):,.1f} | {min(times):,.1f} |", flush=True)


def run(dsn: str, size: int, repeat: int) -> None:
    with connect(dsn, autocommit=True) as conn:
        coll = get_or_create_collection(conn, "hints")
        t0 = time.perf_counter()
        fill(conn, coll, size)
        print(f"{size:,} documents in {time.perf_counter() - t0:.1f} s\n", file=sys.stderr)
        print("| lookup | median ms | fastest ms |\n|---|---:|---:|")
        missing = ["typo-1", "page-12", "R\u00e9sum\u00e9-30", "sub/page-33", "no/such"]
        timed("_citekey_hints, 1 citekey", lambda: _citekey_hints(conn, coll, missing[:1]),
              repeat)
        timed("_citekey_hints, 5 citekeys", lambda: _citekey_hints(conn, coll, missing),
              repeat)
        timed("delete_documents_report, 5 missing",
              lambda: delete_documents_report(conn, "hints", missing), repeat)
        root = Path("/docs")
        for files in (1, 1_000, 10_000):
            # each file read by itself, its name as citekey, the collection holding it
            # under its path from /docs
            origins = {f"page-{i}": root / f"area-{i % 50}/topic-{i % 997}/page-{i}.md"
                       for i in range(1, 3 * files, 3)}
            timed(f"moved_files, {files:,} file{'s' if files > 1 else ''}",
                  partial(moved_files, conn, "hints", origins), repeat)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--size", type=int, default=100_000,
                    help="documents in the collection (default: %(default)s)")
    ap.add_argument("--repeat", type=int, default=7,
                    help="runs of each lookup (default: %(default)s)")
    ap.add_argument("--dsn", default=os.environ.get("PGFUNNEL_DSN"),
                    help="Postgres server to create the benchmark's database on "
                         "(default: PGFUNNEL_DSN, else the embedded one)")
    args = ap.parse_args(argv)
    if args.size < 1 or args.repeat < 1:
        ap.error("--size and --repeat: 1 or more")
    from pgfunnel.db import resolve_dsn
    from pgfunnel.errors import PgfunnelError

    try:
        server = resolve_dsn(args.dsn)
        name = f"pgfunnel_bench_hints_{uuid.uuid4().hex[:8]}"
        with connect(server, autocommit=True) as c:
            c.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        try:
            dsn = make_conninfo(server, dbname=name)
            schema.init(dsn)
            run(dsn, args.size, args.repeat)
        finally:
            with connect(server, autocommit=True) as c:
                c.execute(sql.SQL("drop database if exists {} with (force)").format(
                    sql.Identifier(name)))
    except PgfunnelError as exc:
        print(f"error: {exc} (--dsn, else PGFUNNEL_DSN, else the embedded Postgres)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
