#!/usr/bin/env python3
"""Is a long run of paired characters analysed in time linear in its length?

The v4+ analyzers cut a run of Chinese or Japanese characters (Thai, Hangul under the
simple analyzers) into overlapping pairs. Each pair was once cut out with substr(), which
walks the run from its start: a 40,000-character run took some 16 s. This script times
`pgfunnel.analyze` on a run of N and of 4N characters, interleaved, several rounds, and
prints the ratio of their medians against the two expectations: 4x for linear work, 16x
for quadratic. tests/test_analyzer.py checks the pairs themselves (no timing there: the
test machines are shared and noisy).

    python bench/paired_runs.py [--chars 10000] [--rounds 5] [--analyzer simple_v8]

Needs `pgfunnel init` on the database (`--dsn`, `PGFUNNEL_DSN` or the embedded server).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from pgfunnel.db import connect

#: the characters of tests/test_analyzer.py's run: CJK ideographs and one astral one
_ALPHABET = "数据库索引的性能𠮷"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=None, help="default: PGFUNNEL_DSN or the embedded server")
    ap.add_argument("--chars", type=int, default=10_000,
                    help="the short run's length; the long one is 4x (the analyze limit is "
                         "100,000)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--analyzer", default="simple_v8")
    args = ap.parse_args(argv)
    if not 1 <= args.chars <= 25_000:
        ap.error("--chars must be 1 - 25000 (4x it is analysed, up to analyze's 100,000)")
    rng = random.Random(11)
    runs = {n: "".join(rng.choice(_ALPHABET) for _ in range(n))
            for n in (args.chars, 4 * args.chars)}
    times: dict[int, list[float]] = {n: [] for n in runs}
    with connect(args.dsn, autocommit=True) as conn:
        for n, run in runs.items():  # warm-up, and the pairs checked once
            row = conn.execute("select cardinality(pgfunnel.analyze(%s, %s))",
                               (run, args.analyzer)).fetchone()
            if row is None or row[0] != n - 1:
                print(f"{args.analyzer} made {row and row[0]} terms of a run of {n}, not "
                      f"{n - 1} pairs: not a pairing analyzer?")
                return 1
        for rnd in range(args.rounds):
            # alternate the order so drift on a shared machine hits both alike
            for n in (sorted(runs) if rnd % 2 == 0 else sorted(runs, reverse=True)):
                started = time.perf_counter()
                conn.execute("select cardinality(pgfunnel.analyze(%s, %s))",
                             (runs[n], args.analyzer))
                times[n].append(time.perf_counter() - started)
    short, long = (statistics.median(times[n]) for n in sorted(runs))
    print(f"{args.analyzer}, {args.rounds} rounds, median: {args.chars:,} characters "
          f"{short * 1000:.0f} ms, {4 * args.chars:,} characters {long * 1000:.0f} ms")
    print(f"ratio {long / short:.2f}x (linear 4x, quadratic 16x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
