#!/usr/bin/env python3
"""Performance benchmark: pgfunnel against its peers, in one run, on the same data.

Corpus: a base of chunk texts repeated with variation (a few words swapped for words of
other chunks, plus a per-copy token) up to ``--size`` chunks, one chunk per document, with
random unit vectors (real embeddings of 100k chunks take hours on 2 cores; the embedding
cost is measured separately on a sample and reported as chunks/s). Two bases
(``--base``), each with its own queries:

- ``helpcenter`` (default, always at hand): the 224 chunks of the synthetic help-center
  sample and its queries. A small vocabulary: at 100k chunks each text has ~450 near
  copies and a query of four common words matches half the corpus, the hardest case for
  exact BM25, whose cost follows the query terms' posting lists.
- ``pydocs``: the 9,622 chunks of the Python 3.11 documentation (real text, built by
  ``bench/pydocs.py build``) and its index-entry queries. At 100k each text has ~10 near
  copies.

Peers, per query, at 1 and 4 client connections (threads, one connection each):

- ``lexical``: funnel_search with text only (the BM25 leg alone, then cap and cut);
- ``dense``: funnel_search with the vector only (the HNSW leg alone);
- ``python-fusion``: the two legs fetched in two round trips and fused by RRF in Python;
- ``supabase-hybrid``: the documented RRF ``hybrid_search`` shape (bench/peers.py);
- ``funnel_search``: both legs, fusion, cap, in one call;
- ``funnel_search 1% visible``: the same, as a reader who can see 1% of the documents.

Also: ingest throughput (database side with precomputed vectors: COPY + analyzer +
statistics; then the HNSW build) and index sizes per 100k chunks.

    python bench/perf.py --size 10000 --size 100000 [--base pydocs] [--queries 200]
        [--out bench/out]

Prints a markdown table (ratios to funnel_search first) and writes PNG plots.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from psycopg import sql
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402

from pgfunnel.db import connect  # noqa: E402
from pgfunnel.embedder import Embedder  # noqa: E402
from pgfunnel.ingest import Ingester  # noqa: E402
from pgfunnel.sources import DocumentRecord, chunk_text  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "pgfunnel" / "data"
DIM = 384
VISIBLE_READER = "alice"
OTHER_READER = "bob"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


BASES = ("helpcenter", "pydocs")
PYDOCS_DATA = Path(__file__).resolve().parent / "data" / "pydocs"


def _base_files(base: str) -> tuple[Path, Path]:
    """The base's documents and its queries (JSONL, ``text`` and ``query`` fields)."""
    if base == "helpcenter":
        return DATA / "helpcenter.jsonl", DATA / "helpcenter_queries.jsonl"
    if base == "pydocs":
        corpus, judged = PYDOCS_DATA / "corpus.jsonl", PYDOCS_DATA / "queries.jsonl"
        if not corpus.exists() or not judged.exists():
            raise SystemExit(f"{corpus} is missing: build it first with "
                             "`python bench/pydocs.py build` (needs python3.11-doc)")
        return corpus, judged
    raise SystemExit(f"unknown --base {base!r}: one of {', '.join(BASES)}")


def base_chunks(base: str = "helpcenter") -> list[str]:
    texts: list[str] = []
    docs, _ = _base_files(base)
    for line in docs.read_text(encoding="utf-8").splitlines():
        if line.strip():
            texts += [c.text for c in chunk_text(json.loads(line)["text"])]
    return texts


def make_corpus(size: int, seed: int = 0, base: str = "helpcenter"
                ) -> tuple[list[DocumentRecord], dict[str, Any]]:
    """``size`` one-chunk documents; 1% readable by alice, the rest by bob."""
    rng = random.Random(seed)
    texts = base_chunks(base)
    vocab = sorted({w for t in texts for w in t.split() if w.isalpha() and len(w) > 3})
    nrng = np.random.default_rng(seed)
    records: list[DocumentRecord] = []
    vectors: dict[str, Any] = {}
    for i in range(size):
        words = texts[i % len(texts)].split()[:150]
        for _ in range(max(1, len(words) // 12)):  # vary ~8% of the words per copy
            words[rng.randrange(len(words))] = rng.choice(vocab)
        key = f"d{i}"
        reader = VISIBLE_READER if i % 100 == 0 else OTHER_READER
        records.append(DocumentRecord(citekey=key, title=f"copy {i}",
                                      text=" ".join(words) + f" copy{i}", readers=[reader]))
        v = nrng.standard_normal(DIM).astype(np.float32)
        vectors[key] = (v / np.linalg.norm(v))[None, :]
    return records, vectors


def queries(n: int, seed: int = 1, base: str = "helpcenter") -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    _, judged = _base_files(base)
    texts = [json.loads(line)["query"] for line in
             judged.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = [t for t in texts if t.strip()]
    if base != "helpcenter":
        # a spread of the base's queries, the same ones in every run
        texts = random.Random(seed).sample(texts, min(len(texts), n))
    out = []
    for i in range(n):
        v = rng.standard_normal(DIM).astype(np.float32)
        out.append((texts[i % len(texts)], v / np.linalg.norm(v)))
    return out


_FS = ("select chunk_id, citekey from pgfunnel.funnel_search(query_text => %s, "
       "query_embedding => %s, k => %s, collection => %s, principals => %s, "
       "per_source_cap => %s)")


def _set_reader(conn: Any, principals: list[str]) -> None:
    conn.execute("select set_config('pgfunnel.principals', %s, false)", (json.dumps(principals),))


def run_peer(conn: Any, peer: str, text: str, vec: np.ndarray, coll: str, k: int) -> int:
    everyone = [VISIBLE_READER, OTHER_READER]
    if peer == "lexical":
        rows = conn.execute(_FS, (text, None, k, coll, everyone, 3), prepare=True).fetchall()
    elif peer == "dense":
        rows = conn.execute(_FS, (None, vec, k, coll, everyone, 3), prepare=True).fetchall()
    elif peer == "python-fusion":
        depth = max(4 * k, 40)
        lex = conn.execute(_FS, (text, None, depth, coll, everyone, 10_000),
                           prepare=True).fetchall()
        den = conn.execute(_FS, (None, vec, depth, coll, everyone, 10_000),
                           prepare=True).fetchall()
        scores: dict[int, float] = {}
        for ranked in (lex, den):
            for r, row in enumerate(ranked, start=1):
                scores[row[0]] = scores.get(row[0], 0.0) + 1.0 / (60 + r)
        rows = sorted(scores.items(), key=lambda kv: -kv[1])[:k]
    elif peer == "supabase-hybrid":
        rows = peers.hybrid_search(conn, text, vec, k)
    elif peer == "funnel_search":
        rows = conn.execute(_FS, (text, vec, k, coll, everyone, 3), prepare=True).fetchall()
    elif peer == "funnel_search 1% visible":
        rows = conn.execute(_FS, (text, vec, k, coll, [VISIBLE_READER], 3),
                            prepare=True).fetchall()
    else:
        raise ValueError(peer)
    return len(rows)


PEERS = ("lexical", "dense", "python-fusion", "supabase-hybrid", "funnel_search",
         "funnel_search 1% visible")


def measure(dsn: str, peer: str, qs: list[tuple[str, np.ndarray]], coll: str, k: int,
            clients: int) -> dict[str, float]:
    lat: list[float] = []
    counts: list[int] = []
    lock = threading.Lock()

    def worker(part: list[tuple[str, np.ndarray]]) -> None:
        with connect(dsn, autocommit=True) as conn:
            for text, vec in part[:3]:  # warm the plan cache and the buffers
                run_peer(conn, peer, text, vec, coll, k)
            for text, vec in part:
                t0 = time.perf_counter()
                n = run_peer(conn, peer, text, vec, coll, k)
                dt = (time.perf_counter() - t0) * 1000
                with lock:
                    lat.append(dt)
                    counts.append(n)

    parts = [qs[i::clients] for i in range(clients)]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(p,)) for p in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    q = np.percentile(lat, [50, 95, 99])
    return {"p50": float(q[0]), "p95": float(q[1]), "p99": float(q[2]),
            "qps": len(lat) / wall, "min_results": float(min(counts)),
            "mean_results": statistics.fmean(counts)}


def index_sizes(conn: Any, coll: str) -> dict[str, float]:
    row = conn.execute("select v.id from pgfunnel.index_version v join pgfunnel.collection c "
                       "on c.id = v.collection_id where c.name = %s and v.state = 'active'",
                       (coll,)).fetchone()
    vid = int(row[0])
    out: dict[str, float] = {}
    for label, rel in (("posting (table+indexes)", "pgfunnel.posting"),
                       ("lexical (table+indexes)", "pgfunnel.lexical"),
                       ("term_stat", "pgfunnel.term_stat"),
                       ("chunk (table+indexes)", "pgfunnel.chunk"),
                       ("embedding (table+indexes)", "pgfunnel.embedding")):
        # a partitioned table (posting) holds nothing itself: sum its partitions
        r = conn.execute("select coalesce((select sum(pg_total_relation_size(relid)) "
                         "from pg_partition_tree(%s::regclass)), "
                         "pg_total_relation_size(%s::regclass))", (rel, rel)).fetchone()
        out[label] = float(r[0])
    r = conn.execute("select pg_relation_size(%s::regclass)",
                     (f"pgfunnel.embedding_hnsw_v{vid}",)).fetchone()
    out["hnsw index"] = float(r[0])
    return out


def embed_rate(sample: int = 128) -> float:
    """MiniLM chunks/s on this machine, from a sample (the model part of ingest)."""
    from pgfunnel.embedder import Embedder

    texts = base_chunks()[:sample]
    emb = Embedder()
    emb.embed(texts[:8])
    t0 = time.perf_counter()
    emb.embed(texts)
    return len(texts) / (time.perf_counter() - t0)


def database_dsn(server: str, name: str) -> str:
    """``server``'s DSN (a URL or ``key=value`` pairs, any database) with database
    ``name``: the host, port, user and options such as sslmode kept."""
    return make_conninfo(server, dbname=name)


def create_database(server: str, name: str) -> None:
    """A new database ``name`` on ``server``, for a run of its own."""
    with connect(server, autocommit=True) as c:
        c.execute(sql.SQL("create database {}").format(sql.Identifier(name)))


def drop_database(server: str, name: str) -> None:
    """Drop database ``name`` on ``server``, its sessions ended, if it is there."""
    with connect(server, autocommit=True) as c:
        c.execute(sql.SQL("drop database if exists {} with (force)").format(
            sql.Identifier(name)))


def bench_size(server: str, size: int, n_queries: int, k: int, clients: list[int],
               base: str = "helpcenter") -> dict[str, Any]:
    from pgfunnel import schema

    name = f"pgf_perf_{size}_{uuid.uuid4().hex[:6]}"
    create_database(server, name)
    dsn = database_dsn(server, name)
    try:
        schema.init(dsn)
        records, vectors = make_corpus(size, base=base)
        with connect(dsn, autocommit=True) as conn:
            t0 = time.perf_counter()
            # the vectors are given, so no model is loaded; the version needs its dims
            ing = Ingester(conn, "perf", embedder=_Dims())
            stats = ing.ingest(records, vectors=vectors)
            total = time.perf_counter() - t0
            log(f"[{size}] ingest: {stats.chunks_written} chunks, db {stats.db_seconds:.1f}s, "
                f"total with HNSW build {total:.1f}s")
            sizes = index_sizes(conn, "perf")
            peers.build_peer(conn, "perf")
        qs = queries(n_queries, base=base)
        results: dict[str, dict[int, dict[str, float]]] = {}
        for peer in PEERS:
            results[peer] = {}
            for c in clients:
                results[peer][c] = measure(dsn, peer, qs, "perf", k, c)
                r = results[peer][c]
                log(f"[{size}] {peer:<26} x{c}: p50 {r['p50']:.1f} ms p95 {r['p95']:.1f} "
                    f"p99 {r['p99']:.1f} qps {r['qps']:.1f} min results {r['min_results']:.0f}")
        return {"size": size, "base": base, "k": k, "queries": n_queries,
                "ingest": {"chunks": stats.chunks_written,
                           "db_seconds": stats.db_seconds,
                           "total_seconds": total,
                           "hnsw_and_stats_seconds": total - stats.db_seconds},
                "index_bytes": sizes, "latency": results}
    finally:
        drop_database(server, name)


class _Dims(Embedder):
    """Stands in for the embedder when every vector is given: only its name and size
    are read."""

    def __init__(self) -> None:
        # Embedder.__init__ would load a model; a subclass all the same, so Ingester
        # takes it as the Embedder it is typed for
        self.model_name = "random-unit-384"
        self.dimensions = DIM

    def embed(self, texts: Sequence[str],
              progress: Callable[[int], None] | None = None) -> np.ndarray:
        raise RuntimeError("perf corpus vectors are precomputed; nothing should be embedded")


def _cell(value: float | None) -> str:
    """A table cell; '-' for a figure not measured (no --clients 4 run)."""
    return "-" if value is None else f"{value:.1f}"


def to_markdown(runs: list[dict[str, Any]], embed_cps: float | None) -> str:
    bases = sorted({run.get("base", "helpcenter") for run in runs})
    lines = [f"# pgfunnel performance (corpus base: {', '.join(bases)})", ""]
    # a column pair per client count measured: the table read only 4, so the figures of
    # --clients 8 were measured, logged, and left out of it as '-'
    many = sorted({c for run in runs for by_c in run["latency"].values() for c in by_c
                   if c != 1})
    for run in runs:
        size = run["size"]
        lat = run["latency"]
        base = lat["funnel_search"][1]["p50"]
        # how many queries stand behind each p50: --queries 20 and the default 200 read
        # the same
        measured = f" ({run['queries']} queries)" if "queries" in run else ""
        lines += [f"## {size:,} chunks{measured}", "",
                  "| peer | p50 ms | p95 ms | p99 ms | QPS x1 | "
                  + "".join(f"QPS x{c} | p50 x{c} ms | " for c in many)
                  + "p50 / funnel_search | min results |",
                  "|---|" + "---:|" * (6 + 2 * len(many))]
        for peer, by_c in lat.items():
            one = by_c[1]
            cells = [f"{one['p50']:.1f}", f"{one['p95']:.1f}", f"{one['p99']:.1f}",
                     f"{one['qps']:.1f}"]
            for c in many:
                cells += [_cell(by_c.get(c, {}).get("qps")), _cell(by_c.get(c, {}).get("p50"))]
            cells += [f"{one['p50'] / base:.2f}", f"{one['min_results']:.0f}"]
            lines.append(f"| {peer} | " + " | ".join(cells) + " |")
        # the table's names are read without bench/README.md at hand
        lines += ["", "Latency in ms, lower is better; QPS, queries per second, higher is "
                  "better. xN: with N client connections at once (x1: one). p50 / "
                  "funnel_search: the peer's p50 over funnel_search's, both with one client "
                  "(above 1: the peer is slower). min results: the fewest rows one query got "
                  f"(k = {run.get('k', 10)})."]
        ing = run["ingest"]
        lines += ["", f"Ingest (precomputed vectors): database side (COPY, analyzer, "
                  f"statistics) {ing['chunks'] / ing['db_seconds']:,.0f} chunks/s; with the "
                  f"HNSW build and ANALYZE {ing['chunks'] / ing['total_seconds']:,.0f} chunks/s.",
                  ""]
        scale = 100_000 / size
        lines += ["| index | MiB per 100k chunks |", "|---|---:|"]
        for label, b in run["index_bytes"].items():
            lines.append(f"| {label} | {b * scale / 2**20:.1f} |")
        lines.append("")
        f1 = lat["funnel_search 1% visible"][1]["p50"]
        got = lat["funnel_search 1% visible"][1]["min_results"]
        lines.append(f"1% visible: p50 {f1:.1f} ms = {f1 / base:.2f}x unfiltered "
                     f"(target <= 3x), min results {got:.0f}")
        lines.append("")
    if len(runs) >= 2:
        a, b = runs[0], runs[-1]
        lines += [f"## Growth {a['size']:,} -> {b['size']:,} chunks (p50 ratio, target <= 3x "
                  "for funnel_search)", "", "| peer | growth |", "|---|---:|"]
        for peer in PEERS:
            growth = b["latency"][peer][1]["p50"] / a["latency"][peer][1]["p50"]
            lines.append(f"| {peer} | {growth:.2f}x |")
        lines.append("")
    if embed_cps is not None:
        lines.append(f"Embedding (all-MiniLM-L6-v2, CPU, this machine): {embed_cps:.1f} chunks/s.")
    return "\n".join(lines) + "\n"


def plot(runs: list[dict[str, Any]], out: Path) -> Any:
    """Write ``perf_latency.png`` to ``out``; return the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FormatStrFormatter

    fig = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / max(1, len(runs))
    for i, run in enumerate(runs):
        xs = [j - 0.4 + width * (i + 0.5) for j in range(len(PEERS))]
        ax.bar(xs, [run["latency"][p][1]["p50"] for p in PEERS], width=width,
               label=f"{run['size']:,} chunks")
    ax.set_xticks(range(len(PEERS)))
    ax.set_xticklabels(PEERS, rotation=25, ha="right", fontsize="small")
    # on a linear axis the peer's 100k bar (hundreds of ms) flattened every 10k bar to a
    # few pixels: the growth the benchmark is about could not be read off the plot
    ax.set_yscale("log")
    # bars start at a power of ten, the ticks read 1, 10, 100 rather than 10^0, 10^1
    lowest = min(run["latency"][p][1]["p50"] for run in runs for p in PEERS)
    ax.set_ylim(bottom=10 ** math.floor(math.log10(max(lowest, 1e-3))))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.set_ylabel("p50 latency, 1 client (ms, log scale)")
    bases = sorted({run.get("base", "helpcenter") for run in runs})
    ax.set_title(f"p50 latency per peer (lower is better; corpus base: {', '.join(bases)})",
                 fontsize="medium")
    ax.legend()
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(str(out / "perf_latency.png"), format="png")
    return fig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # --help showed no defaults: how long a run takes and where it writes were guesswork
    ap.add_argument("--size", type=int, action="append",
                    help="chunks (repeatable; default 10000 and 100000)")
    ap.add_argument("--queries", type=int, default=200,
                    help="queries measured per peer and size (default: %(default)s)")
    ap.add_argument("--k", type=int, default=10,
                    help="results per search (default: %(default)s)")
    ap.add_argument("--clients", type=int, action="append",
                    help="client connections (repeatable; default 1 and 4); one client is "
                         "always measured, the tables and the plot read it")
    ap.add_argument("--dsn", default=os.environ.get("PGFUNNEL_DSN"),
                    help="Postgres server to create the benchmark's databases on "
                         "(default: PGFUNNEL_DSN, else the embedded one)")
    ap.add_argument("--out", type=Path, default=Path("bench/out"),
                    help="folder for perf.md, perf.json and perf_latency.png "
                         "(default: %(default)s)")
    ap.add_argument("--base", choices=BASES, default="helpcenter",
                    help="the texts the corpus repeats, and their queries "
                         "(default: %(default)s)")
    ap.add_argument("--no-embed", action="store_true", help="skip the embedding-rate sample")
    args = ap.parse_args(argv)
    # checked before the server starts: --size 0 built a database, ingested nothing and
    # ended in a TypeError traceback from the index sizes; --queries 0 in numpy's
    if any(s < 1 for s in args.size or []):
        ap.error("--size: a number of chunks, 1 or more")
    if args.queries < 1:
        ap.error("--queries: a number of queries, 1 or more")
    if not 1 <= args.k <= 1000:
        ap.error("--k: between 1 and 1000, as funnel_search takes it")
    if any(c < 1 for c in args.clients or []):
        ap.error("--clients: a number of connections, 1 or more")
    from pgfunnel.db import resolve_dsn
    from pgfunnel.errors import PgfunnelError

    sizes = args.size or [10_000, 100_000]
    clients = sorted({1, *(args.clients or [4])})
    try:
        server = resolve_dsn(args.dsn)
        runs = [bench_size(server, s, args.queries, args.k, clients, args.base) for s in sizes]
    except PgfunnelError as exc:
        # a server it cannot reach ended in a 20-line traceback with the cause at its foot
        print(f"error: {exc} (--dsn, else PGFUNNEL_DSN, else the embedded Postgres)",
              file=sys.stderr)
        return 1
    embed_cps = None if args.no_embed else embed_rate()
    md = to_markdown(runs, embed_cps)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "perf.md").write_text(md)
    (args.out / "perf.json").write_text(json.dumps(runs, indent=2, default=str))
    plot(runs, args.out)
    print(md)
    # the tables scroll past the per-size lines; say where they are kept
    log(f"wrote {args.out / 'perf.md'}, perf.json and perf_latency.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
