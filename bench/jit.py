#!/usr/bin/env python3
"""funnel_search in a session with JIT on against one with it off, on a server that has JIT.

Postgres compiles a statement to machine code when its estimated cost passes
`jit_above_cost`; a generic plan over a large collection is priced far above what it runs,
so where the server has JIT (on by default before Postgres 19, in most packaged and
managed servers) compiling can cost many times the search. pgfunnel's per-search
functions set `jit = off` for themselves; this script checks that the setting a session
brings changes nothing. The embedded server has no JIT (its build has no LLVM), so point
`--dsn` at one that does (`select pg_jit_available()`):

    python bench/jit.py --dsn "postgresql://postgres@/postgres?host=/tmp/pg15&port=5439"

It builds `bench/perf.py`'s corpus (help-center texts repeated with variation, random unit
vectors) in a database of its own, times each help-center query once per session per
round, in random order, and drops the database. `--functions-inherit-jit` first takes the
setting off pgfunnel's functions, as they were before they set it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import perf  # noqa: E402
from latency_pydocs import pct  # noqa: E402

from pgfunnel import schema  # noqa: E402
from pgfunnel.db import connect  # noqa: E402
from pgfunnel.ingest import Ingester  # noqa: E402

_SEARCH = ("select count(*) from funnel_search(%s, %s, 10, collection => 'perf', "
           "principals => %s)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", required=True, help="a server with JIT (a URL or key=value pairs)")
    ap.add_argument("--size", type=int, default=100_000, help="chunks")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--functions-inherit-jit", action="store_true",
                    help="first take `jit = off` off pgfunnel's functions (as before they set "
                         "it), to see what the setting saves")
    args = ap.parse_args(argv)

    with connect(args.dsn, autocommit=True) as c:
        row = c.execute("select pg_jit_available(), current_setting('server_version')").fetchone()
        assert row is not None
        if not row[0]:
            print(f"this server (Postgres {row[1]}) has no JIT: nothing to measure")
            return 1
    name = f"pgf_jit_{uuid.uuid4().hex[:6]}"
    perf.create_database(args.dsn, name)
    dsn = perf.database_dsn(args.dsn, name)
    try:
        schema.init(dsn)
        records, vectors = perf.make_corpus(args.size)
        with connect(dsn, autocommit=True) as conn:
            Ingester(conn, "perf", embedder=perf._Dims()).ingest(
                records, vectors=vectors)
            if args.functions_inherit_jit:
                # the signatures are spelled by the server (regprocedure quotes them)
                conn.execute(
                    "do $$ declare fn regprocedure; begin for fn in select p.oid "
                    "from pg_catalog.pg_proc p "
                    "where p.pronamespace = 'pgfunnel'::regnamespace "
                    "and 'jit=off' = any (p.proconfig) loop "
                    "execute pg_catalog.format('alter function %s reset jit', fn); "
                    "end loop; end $$")
        qs = perf.queries(97)  # the help-center queries, each once
        sessions: dict[str, Any] = {}
        for mode in ("on", "off"):
            sessions[mode] = connect(dsn, autocommit=True)
            sessions[mode].execute("select pg_catalog.set_config('jit', %s, false)",
                                   (mode,))
        everyone = [perf.VISIBLE_READER, perf.OTHER_READER]
        times: dict[str, list[float]] = {"on": [], "off": []}
        order = random.Random(0)
        for rnd in range(args.rounds + 1):  # the first round warms both sessions
            for text, vec in qs:
                for mode in order.sample(["on", "off"], 2):
                    t = time.perf_counter()
                    sessions[mode].execute(_SEARCH, (text, vec, everyone),
                                           prepare=True).fetchall()
                    if rnd:
                        times[mode].append((time.perf_counter() - t) * 1e3)
        for mode in ("on", "off"):
            t_ = times[mode]
            print(f"session jit = {mode:<3}: p50 {statistics.median(t_):6.1f} ms  "
                  f"p95 {pct(t_, 0.95):6.1f}  mean {statistics.mean(t_):6.1f}")
        ratio = statistics.mean(times["on"]) / statistics.mean(times["off"])
        print(f"on / off, mean: {ratio:.2f}x")
        for s in sessions.values():
            s.close()
    finally:
        perf.drop_database(args.dsn, name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
