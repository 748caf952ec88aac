#!/usr/bin/env python3
"""Searches while the active index version flips: every answer wholly old or wholly new?

A second process runs N searches in a loop (funnel_search through the Python API) while
this process switches the collection's active version back and forth (``activate``,
then ``rollback`` repeatedly; each switch is one transaction). The two versions differ
in analyzer, so their BM25 scores differ and every answer can be attributed: before the
run, each query's answer is computed on each version (pinned, in rolled-back
transactions). During the run every answer must equal one of the two exactly.

    python bench/switch_under_load.py [--dsn DSN] [--collection demo] [--searches 500]

Counts: errors, empty (no rows), mixed (equal to neither version's answer), answers of
version A and of B, ambiguous (queries whose two answers are identical), switches
committed during the searches, search latency while switching. Writes
bench/out/switch_under_load.png and prints a markdown table. No model is loaded: the
queries are the vectors of sample chunks with the first words of their text.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out"


def _signature(results: list[Any]) -> list[list[Any]]:
    """The answer's scores, in order. Chunk ids are left out on purpose: the sample has
    chunks with identical text (identical vectors and BM25 scores), and which of several
    exactly tied chunks an index scan keeps at the cut is arbitrary within one version.
    The versions differ in analyzer, so their BM25 scores tell the versions apart."""
    return [[None if r.lexical_score is None else round(float(r.lexical_score), 9),
             None if r.dense_score is None else round(float(r.dense_score), 9)]
            for r in results]


def prepare(dsn: str, collection: str) -> tuple[int, int]:
    """The active version A and a second version B of another analyzer (built if needed)."""
    from pgfunnel import versions
    from pgfunnel.db import connect

    with connect(dsn, autocommit=True) as conn:
        infos = versions.list_versions(conn, collection)
        active = next(v for v in infos if v.state == "active")
        other = next((v for v in infos if v.state in ("ready", "retired")
                      and v.analyzer != active.analyzer
                      and v.embedding_model == active.embedding_model), None)
        if other is None:
            analyzer = "simple_v1" if active.analyzer != "simple_v1" else "english_v1"
            res = versions.reindex(conn, collection, analyzer=analyzer)
            return active.version, res.version
        return active.version, other.version


def sample_queries(dsn: str, collection: str, n: int) -> list[tuple[str, list[float]]]:
    from pgfunnel.db import connect

    with connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "select c.text, e.embedding from pgfunnel.chunk c "
            "join pgfunnel.collection k on k.id = c.collection_id and k.name = %s "
            "join pgfunnel.index_version v on v.collection_id = k.id and v.state = 'active' "
            "join pgfunnel.embedding e on e.index_version_id = v.id and e.chunk_id = c.id "
            "order by hashint8(c.id) limit %s", (collection, n)).fetchall()
    from pgfunnel.versions import as_array

    return [(" ".join(str(t).split()[:6]), as_array(v).tolist()) for t, v in rows]


def expected_answers(dsn: str, collection: str, version: int,
                     queries: list[tuple[str, list[float]]], k: int,
                     ef_search: int = 100) -> list[list[list[Any]]]:
    import numpy as np

    from pgfunnel import versions
    from pgfunnel.db import connect
    from pgfunnel.search import Funnel

    with connect(dsn, autocommit=True) as conn:
        coll = conn.execute("select id from pgfunnel.collection where name = %s",
                            (collection,)).fetchone()
        if coll is None:
            raise SystemExit(f"no collection {collection!r}: ingest it first")
        coll_id = int(coll[0])
        ver = conn.execute("select id from pgfunnel.index_version where collection_id = %s "
                           "and version = %s", (coll_id, version)).fetchone()
        if ver is None:
            raise SystemExit(f"collection {collection!r} has no version {version}")
        vid = int(ver[0])
        funnel = Funnel(conn, collection, embedder=None)
        import warnings

        with versions.pinned(conn, coll_id, vid), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # notices about stop words not searched
            return [_signature(funnel.search(q, query_embedding=np.asarray(v, dtype=np.float32),
                                             k=k, ef_search=ef_search).results)
                    for q, v in queries]


def searcher(spec_path: str, out_path: str) -> None:
    """The second process: run the searches, record each answer and when it ran."""
    import warnings

    import numpy as np

    from pgfunnel.search import Funnel

    warnings.simplefilter("ignore")
    spec = json.loads(Path(spec_path).read_text())
    queries = spec["queries"]
    funnel = Funnel(spec["dsn"], spec["collection"], embedder=None)
    records = []
    Path(out_path + ".started").write_text("1")
    for i in range(spec["searches"]):
        qi = i % len(queries)
        text, vec = queries[qi]
        t0 = time.time()
        try:
            res = funnel.search(text, query_embedding=np.asarray(vec, dtype=np.float32),
                                k=spec["k"], ef_search=spec["ef_search"])
            records.append({"i": i, "q": qi, "sig": _signature(res.results), "error": None,
                            "t0": t0, "t1": time.time()})
        except Exception as exc:  # every error is counted, none may happen
            records.append({"i": i, "q": qi, "sig": None, "error": repr(exc), "t0": t0,
                            "t1": time.time()})
    funnel.close()
    Path(out_path).write_text(json.dumps(records))


def run(dsn: str, collection: str, searches: int = 500, k: int = 10,
        n_queries: int = 40, ef_search: int = 100) -> dict[str, Any]:
    """``ef_search`` at least the collection's chunk count makes the dense leg exhaustive,
    so answers carry no approximate-search variation and any difference is a mix."""
    from pgfunnel import versions
    from pgfunnel.db import connect

    version_a, version_b = prepare(dsn, collection)
    queries = sample_queries(dsn, collection, n_queries)
    # Fresh statistics first: on a small table the planner may switch the dense leg from
    # the HNSW index to an exact scan once autovacuum analyzes the new version's rows, and
    # an approximate and an exact answer of the same version differ in their tail.
    with connect(dsn, autocommit=True) as conn:
        conn.execute("analyze pgfunnel.embedding, pgfunnel.chunk, pgfunnel.document, "
                     "pgfunnel.posting, pgfunnel.lexical, pgfunnel.term_stat")
    exp_a = expected_answers(dsn, collection, version_a, queries, k, ef_search)
    exp_b = expected_answers(dsn, collection, version_b, queries, k, ef_search)
    with tempfile.TemporaryDirectory(prefix="pgfunnel-switch-") as tmp:
        spec = Path(tmp) / "spec.json"
        result_path = Path(tmp) / "records.json"
        spec.write_text(json.dumps({"dsn": dsn, "collection": collection, "queries": queries,
                                    "searches": searches, "k": k,
                                    "ef_search": ef_search}))
        env = dict(os.environ)
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--searcher",
                                 str(spec), str(result_path)], env=env)
        started = Path(str(result_path) + ".started")
        while not started.exists() and proc.poll() is None:
            time.sleep(0.05)
        switches: list[float] = []
        switch_ms: list[float] = []
        with connect(dsn, autocommit=True) as conn:
            act = versions.activate(conn, collection, version_b)
            switches.append(time.time())
            while proc.poll() is None:
                t0 = time.perf_counter()
                act = versions.rollback(conn, collection)
                switch_ms.append((time.perf_counter() - t0) * 1000)
                switches.append(time.time())
                time.sleep(0.01)
            # leave the collection as it was found
            if act.activated != version_a:
                versions.activate(conn, collection, version_a)
        if proc.returncode != 0:
            raise RuntimeError(f"searcher process failed with exit code {proc.returncode}")
        records = json.loads(result_path.read_text())
    counts = {"searches": len(records), "errors": 0, "empty": 0, "mixed": 0, "version_a": 0,
              "version_b": 0, "ambiguous": 0}
    errors: list[str] = []
    mixed_examples: list[dict[str, Any]] = []
    for rec in records:
        if rec["error"] is not None:
            counts["errors"] += 1
            errors.append(rec["error"])
            continue
        sig = rec["sig"]
        if not sig:
            counts["empty"] += 1
            continue
        is_a, is_b = sig == exp_a[rec["q"]], sig == exp_b[rec["q"]]
        if is_a and is_b:
            counts["ambiguous"] += 1
        elif is_a:
            counts["version_a"] += 1
        elif is_b:
            counts["version_b"] += 1
        else:
            counts["mixed"] += 1
            mixed_examples.append({"query": rec["q"], "got": sig, "version_a": exp_a[rec["q"]],
                                   "version_b": exp_b[rec["q"]]})
    t_first = min(r["t0"] for r in records)
    t_last = max(r["t1"] for r in records)
    during = [s for s in switches if t_first <= s <= t_last]
    lat = sorted((r["t1"] - r["t0"]) * 1000 for r in records)
    # the tallies stay ints while counting; the summary around them mixes types
    summary: dict[str, Any] = {
        **counts,
        "version_a_number": version_a, "version_b_number": version_b,
        "switches_during_searches": len(during),
        "first_mixed": mixed_examples[:3],
        "seconds": round(t_last - t_first, 2),
        "search_ms_p50": round(lat[len(lat) // 2], 2),
        "search_ms_p99": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2),
        "switch_ms_p50": round(sorted(switch_ms)[len(switch_ms) // 2], 2) if switch_ms else None,
        "first_errors": errors[:3],
    }
    _plot(records, switches, t_first)
    return summary


def _plot(records: list[dict[str, Any]], switches: list[float], t0: float) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # plotting is optional
        return
    OUT.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.plot([r["t0"] - t0 for r in records], [(r["t1"] - r["t0"]) * 1000 for r in records],
            ".", markersize=3, label="search latency (ms)")
    for s in switches:
        if s >= t0:
            ax.axvline(s - t0, color="red", alpha=0.15, linewidth=0.8)
    ax.set_xlabel("seconds (red lines: a switch committed)")
    ax.set_ylabel("ms")
    ax.set_title("searches while the active index version flips")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(OUT / "switch_under_load.png", dpi=120)
    plt.close(fig)


def to_markdown(c: dict[str, Any]) -> str:
    rows = [("searches", c["searches"]), ("errors", c["errors"]), ("empty answers", c["empty"]),
            ("mixed answers", c["mixed"]),
            (f"answers wholly from version {c['version_a_number']}", c["version_a"]),
            (f"answers wholly from version {c['version_b_number']}", c["version_b"]),
            ("same answer on both versions", c["ambiguous"]),
            ("switches committed during the searches", c["switches_during_searches"]),
            ("search latency p50 / p99 (ms)", f"{c['search_ms_p50']} / {c['search_ms_p99']}"),
            ("switch transaction p50 (ms)", c["switch_ms_p50"])]
    return "| measure | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--searcher":
        searcher(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=None, help="Postgres DSN (default: PGFUNNEL_DSN or the "
                        "embedded server)")
    parser.add_argument("--collection", default="demo",
                        help="Collection to use (run `pgfunnel demo` first for 'demo').")
    parser.add_argument("--searches", type=int, default=500)
    parser.add_argument("--json", action="store_true", help="Print the counts as JSON.")
    args = parser.parse_args()
    from pgfunnel.db import resolve_dsn

    counts = run(resolve_dsn(args.dsn), args.collection, args.searches)
    if args.json:
        print(json.dumps(counts, indent=2))
    else:
        print(to_markdown(counts))
    bad = counts["errors"] + counts["empty"] + counts["mixed"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
