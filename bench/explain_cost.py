#!/usr/bin/env python3
"""What explaining a whole document costs: pgfunnel._explain_chunks over a document of 100
and of 1,000 chunks, against the funnel runs inside it, measured in one run.

    python bench/explain_cost.py [--dsn DSN] [--rounds 15] [--baseline-sql FILE]

A database of its own (dropped at the end): one document of 100 chunks, one of 1,000 and
300 others of 1 - 4 chunks, random unit vectors (384 dims, no model), the query word in
0 - 6 of each chunk's ~150 words, so that chunks meet most verdicts. Three slices: the
default depths (40 a leg, a fused list of about 80 rows), depths of 500 a leg (about
1,000 rows), where a per-chunk lookup in the fused list costs the most, and a query of
four words at the default depths (each exact BM25 score a sum of four shares).

Per round, interleaved so that machine drift hits every row alike: ``pool`` (the search's
own _pool, as explain runs it first), ``wide pool`` (the second _pool explain reads all
leg rows from), and ``_explain_chunks`` for each document; with ``--baseline-sql FILE``
(an sql/050_explain.sql of another commit, e.g. from ``git show REF:sql/050_explain.sql``)
its _explain_chunks too, installed under another name, and the rows of both are compared.
Prints medians over rounds (the first round warms caches and is not counted) and the
ratios: explain against its two funnel runs, and the baseline against this one.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
warnings.simplefilter("ignore")

DIMS = 384
QUERY = "quasar part"
SLICES: dict[str, dict[str, Any]] = {
    "default depths": {},
    "depths 500": {"lexical_depth": 500, "dense_depth": 500},
    # four words: an exact BM25 score sums four shares, in an order the sum must keep
    "four words": {"query_text": "quasar part filler words"},
}


def _paragraphs(n: int, salt: int) -> str:
    # one chunk each: the chunker splits paragraphs of ~150 words
    return "\n\n".join(
        f"part {i} " + " ".join(["quasar"] * ((i + salt) % 7) + ["filler", "words"] * 70)
        for i in range(n))


def _baseline_function(path: Path, vector_schema: str) -> str:
    """The _explain_chunks of another release's sql/050_explain.sql, renamed."""
    from pgfunnel.schema import render_sql

    text = render_sql(path.read_text(), vector_schema)
    found = re.search(r"create or replace function pgfunnel\._explain_chunks\(.*?\n\$\$;",
                      text, re.S)
    if found is None:
        raise SystemExit(f"{path} holds no pgfunnel._explain_chunks")
    # its body names its parameters by the function's name too
    return found.group(0).replace("_explain_chunks", "_explain_chunks_baseline")


def search_params(vector: Any, collection: str = "bench") -> dict[str, Any]:
    """explain's defaults for a search of QUERY and ``vector``, every one named: _pool
    takes no defaults."""
    return {"query_text": QUERY, "query_embedding": vector, "k": 10,
            "collection": collection, "principals": [], "tenant": None, "language": None,
            "metadata_filter": None, "fusion": "minmax", "rrf_k": 60.0, "weights": None,
            "lexical_depth": None, "dense_depth": None, "overfetch": 4, "per_source_cap": 3,
            "ef_search": 100, "k1": 1.2, "b": 0.75}


def call(function: str, values: dict[str, Any]) -> sql.Composed:
    """``select * from pgfunnel.<function>(...)``, each of ``values`` passed by name, and
    ``as_of => now()``."""
    return sql.SQL("select * from {}.{}({})").format(
        sql.Identifier("pgfunnel"), sql.Identifier(function), sql.SQL(", ").join([
            *(sql.SQL("{} => {}").format(sql.Identifier(k), sql.Placeholder(k))
              for k in values),
            sql.SQL("as_of => now()")]))


def wide_pool_params(conn: psycopg.Connection[Any],
                     params: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The second funnel run _explain_chunks makes for a search of ``params``, as _pool's
    parameters: the depths the search used, every leg row and no widening, its k and
    overfetch from pgfunnel._wide_pool as _explain_chunks takes them (so they cannot
    drift apart); and that k."""
    used = conn.execute(sql.SQL("select lexical_depth_used, dense_depth_used from ({}) p")
                        .format(call("_pool", params)), params).fetchone()
    assert used is not None
    lex_d, den_d = used
    row = conn.execute("select k, overfetch from pgfunnel._wide_pool(%s, %s)",
                       (lex_d, den_d)).fetchone()
    assert row is not None
    wide_k, overfetch = row
    return ({**params, "lexical_depth": lex_d, "dense_depth": den_d, "k": wide_k,
             "overfetch": overfetch, "refill": False}, wide_k)


def main() -> None:
    from funnel_util import doc, ingest

    from pgfunnel import schema
    from pgfunnel.db import connect, resolve_dsn

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=None)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--baseline-sql", type=Path, default=None)
    args = ap.parse_args()
    server = resolve_dsn(args.dsn)
    name = f"bench_explain_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    dsn = psycopg.conninfo.make_conninfo(server, dbname=name)
    try:
        schema.init(dsn)
        with connect(dsn, autocommit=True) as conn:
            _run(conn, args, doc, ingest)
    finally:
        with psycopg.connect(server, autocommit=True) as c:
            c.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(name)))


def _run(conn: psycopg.Connection[Any], args: argparse.Namespace, doc: Any,
         ingest: Any) -> None:
    from pgfunnel.schema import require_vector_schema

    docs = [doc("long100", _paragraphs(100, 0)), doc("long1000", _paragraphs(1000, 3))]
    docs += [doc(f"other{i}", _paragraphs(1 + i % 4, i)) for i in range(300)]
    print(f"ingesting {len(docs)} documents ...", file=sys.stderr)
    vecs = ingest(conn, docs, collection="bench", dims=DIMS)
    ids = {key: [r[0] for r in conn.execute(
        "select ch.id from pgfunnel.chunk ch join pgfunnel.document d on d.id = ch.document_id "
        "where d.citekey = %s order by ch.ordinal", (key,))] for key in ("long100", "long1000")}
    assert [len(v) for v in ids.values()] == [100, 1000], [len(v) for v in ids.values()]
    conn.execute("analyze")
    vector = vecs["long100"][5]
    has_baseline = args.baseline_sql is not None
    if has_baseline:
        conn.execute(_baseline_function(args.baseline_sql, require_vector_schema(conn)))

    for slice_name, depths in SLICES.items():
        params = {**search_params(vector), **depths}
        wide, wide_k = wide_pool_params(conn, params)
        lex_d, den_d = wide["lexical_depth"], wide["dense_depth"]
        runs: dict[str, tuple[sql.Composed, dict[str, Any]]] = {
            "pool": (call("_pool", params), params), "wide pool": (call("_pool", wide), wide)}
        for key, chunk_ids in ids.items():
            for fn in ("_explain_chunks", *(["_explain_chunks_baseline"] if has_baseline
                                            else [])):
                label = f"{fn.removeprefix('_explain_chunks').lstrip('_') or 'explain'} {key}"
                values = {**params, "chunk_ids": chunk_ids}
                runs[label] = (call(fn, values), values)
        if has_baseline:
            for key in ids:
                new = conn.execute(*runs[f"explain {key}"]).fetchall()
                old = conn.execute(*runs[f"baseline {key}"]).fetchall()
                assert new == old, f"{slice_name} {key}: the rows differ from the baseline's"
                verdicts: dict[str, int] = {}
                for r in new:
                    verdicts[r[1]] = verdicts.get(r[1], 0) + 1
                print(f"{slice_name}, {key}: rows identical to the baseline's; {verdicts}")
        times: dict[str, list[float]] = {label: [] for label in runs}
        for rnd in range(args.rounds + 1):
            for label, (statement, values) in runs.items():
                t0 = time.perf_counter()
                conn.execute(statement, values).fetchall()
                if rnd:
                    times[label].append((time.perf_counter() - t0) * 1000)
        med = {label: statistics.median(v) for label, v in times.items()}
        funnel_runs = med["pool"] + med["wide pool"]
        print(f"\n### {slice_name} ({args.rounds} rounds; depths used {lex_d}/{den_d}, "
              f"wide list of up to {wide_k})\n")
        print("| run | median ms | / the two funnel runs |\n|---|---|---|")
        for label, value in med.items():
            print(f"| {label} | {value:.1f} | {value / funnel_runs:.2f} |")
        if has_baseline:
            for key in ids:
                print(f"baseline / this, {key}: "
                      f"{med[f'baseline {key}'] / med[f'explain {key}']:.2f}x")


if __name__ == "__main__":
    main()
