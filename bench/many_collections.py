#!/usr/bin/env python3
"""Many collections in one database: what grows with the number of collections.

One database fills with ``--collections`` collections of 50 - 3,000 chunks (sizes
log-uniform) and one of ``--large`` chunks; a second database holds one collection
only. At checkpoints the same probes run in both, and each figure is reported with its
ratio to the one-collection database:

- the first ingest of a new 1,000-chunk collection (split: rows, HNSW build, statistics);
- a one-document ingest into an existing 500-chunk collection;
- funnel_search on a small and the large collection: the first search of a new
  connection and the median of the steady state;
- doctor, versions list, drop-collection, init, migrate (library calls, in process).

Vectors are random unit vectors (as bench/perf.py); texts the help-center chunks varied.

    python bench/many_collections.py [--collections 170] [--large 20000] [--out bench/out]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf import DIM, _Dims, base_chunks, database_dsn, queries  # noqa: E402

import pgfunnel.ingest as ingest_mod  # noqa: E402
from pgfunnel.db import connect  # noqa: E402
from pgfunnel.ingest import Ingester  # noqa: E402
from pgfunnel.sources import DocumentRecord  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


_TEXTS: list[str] = []
_VOCAB: list[str] = []


def corpus(size: int, seed: int) -> tuple[list[DocumentRecord], dict[str, Any]]:
    global _TEXTS, _VOCAB
    if not _TEXTS:
        _TEXTS = base_chunks()
        _VOCAB = sorted({w for t in _TEXTS for w in t.split() if w.isalpha() and len(w) > 3})
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    vecs = nrng.standard_normal((size, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    records, vectors = [], {}
    for i in range(size):
        words = _TEXTS[(i + seed) % len(_TEXTS)].split()[:150]
        for _ in range(max(1, len(words) // 12)):
            words[rng.randrange(len(words))] = rng.choice(_VOCAB)
        key = f"d{i}"
        records.append(DocumentRecord(citekey=key, title=f"copy {i}",
                                      text=" ".join(words) + f" copy{i}", readers=["alice"]))
        vectors[key] = vecs[i][None, :]
    return records, vectors


# phase timers around the finishing step of an ingest
_PHASES: dict[str, float] = {}


def _timed(name: str, fn: Any) -> Any:
    def wrapper(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            _PHASES[name] = _PHASES.get(name, 0.0) + time.perf_counter() - t
    return wrapper


ingest_mod.create_hnsw_index = _timed("hnsw", ingest_mod.create_hnsw_index)
ingest_mod.refresh_stats_after_write = _timed("stats", ingest_mod.refresh_stats_after_write)
ingest_mod.vacuum_posting_partition = _timed("stats", ingest_mod.vacuum_posting_partition)


def ingest(dsn: str, name: str, size: int, seed: int) -> dict[str, float]:
    records, vectors = corpus(size, seed)
    _PHASES.clear()
    with connect(dsn, autocommit=True) as conn:
        t = time.perf_counter()
        Ingester(conn, name, embedder=_Dims()).ingest(
            records, vectors=vectors)
        total = time.perf_counter() - t
    return {"total": total, **_PHASES}


def one_doc(dsn: str, name: str, i: int) -> float:
    rng = np.random.default_rng(10_000 + i)
    v = rng.standard_normal(DIM).astype(np.float32)
    v /= np.linalg.norm(v)
    rec = DocumentRecord(citekey=f"extra{i}", title="extra", text=f"an extra note {i} about "
                         "refunds and invoices", readers=["alice"])
    with connect(dsn, autocommit=True) as conn:
        t = time.perf_counter()
        Ingester(conn, name, embedder=_Dims()).ingest(
            [rec], vectors={rec.citekey: v[None, :]})
        return time.perf_counter() - t


_FS = ("select * from pgfunnel.funnel_search(query_text => %s, query_embedding => %s, "
       "k => 10, collection => %s, principals => '{alice}')")


def search(dsn: str, coll: str, n: int = 40) -> dict[str, float]:
    qs = queries(n + 5, seed=7)
    firsts = []
    for j in range(3):
        with connect(dsn, autocommit=True) as conn:
            conn.execute("select 1")
            text, vec = qs[j]
            t = time.perf_counter()
            conn.execute(_FS, (text, vec, coll)).fetchall()
            firsts.append(time.perf_counter() - t)
    with connect(dsn, autocommit=True) as conn:
        for text, vec in qs[:5]:
            conn.execute(_FS, (text, vec, coll)).fetchall()
        times = []
        for text, vec in qs[5:]:
            t = time.perf_counter()
            conn.execute(_FS, (text, vec, coll)).fetchall()
            times.append(time.perf_counter() - t)
        cached = conn.execute(
            "select (pgfunnel._hnsw_walk(v.id, %s, 1)).cached from pgfunnel.index_version v "
            "join pgfunnel.collection c on c.id = v.collection_id "
            "where c.name = %s and v.state = 'active'", (qs[0][1], coll)).fetchone()
    return {"first_ms": 1000 * statistics.median(firsts),
            "steady_ms": 1000 * statistics.median(times),
            "cached": bool(cached and cached[0])}


def admin(dsn: str, drop_name: str | None) -> dict[str, float]:
    from pgfunnel import schema, versions
    from pgfunnel.doctor import run_checks

    out: dict[str, float] = {}
    with connect(dsn, autocommit=True) as conn:
        t = time.perf_counter()
        run_checks(conn)
        out["doctor"] = time.perf_counter() - t
        row = conn.execute("select name from pgfunnel.collection order by id limit 1"
                           ).fetchone()
        if row is None:
            raise SystemExit("no collection to list the versions of: the admin timings "
                             "run after the collections are ingested")
        name = row[0]
        t = time.perf_counter()
        versions.list_versions(conn, name)
        out["versions_list"] = time.perf_counter() - t
        if drop_name:
            t = time.perf_counter()
            versions.drop_collection(conn, drop_name)
            out["drop_collection"] = time.perf_counter() - t
    t = time.perf_counter()
    schema.init(dsn)
    out["init"] = time.perf_counter() - t
    t = time.perf_counter()
    schema.migrate(dsn)
    out["migrate"] = time.perf_counter() - t
    return out


def make_db(server: str, name: str) -> str:
    from pgfunnel import schema

    with connect(server, autocommit=True) as c:
        c.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    dsn = database_dsn(server, name)
    schema.init(dsn)
    return dsn


def probe(dsn: str, tag: str, n_colls: int, new_dsn: str | None = None,
          large_dsn: str | None = None) -> dict[str, Any]:
    """The probes of one checkpoint; leaves the database as it found it (the probe
    collection is dropped again). ``new_dsn``: where the new collection goes (the
    baseline's is an empty database); ``large_dsn``: where the large one is."""
    res: dict[str, Any] = {"db": tag, "collections": n_colls}
    new_dsn = new_dsn or dsn
    res["first_ingest_1000"] = ingest(new_dsn, "probe_new", 1000, seed=99)
    res["one_doc"] = statistics.median(one_doc(new_dsn, "probe_new", i) for i in range(5))
    res["search_small"] = search(dsn, "probe_small")
    res["search_large"] = search(large_dsn or dsn, "probe_large")
    res["admin"] = admin(new_dsn, "probe_new")
    log(json.dumps(res))
    return res


def checkpoint_counts(spec: str, collections: int) -> list[int]:
    """The filled collections to probe at, from ``--checkpoints`` (``0,60,120,170``).

    A checkpoint past ``--collections`` would probe the same filled database again (with
    ``--collections 3`` three probes of the same 5 collections, each reported as a
    checkpoint): it is probed once, at ``--collections``."""
    return sorted({min(int(c), collections) for c in spec.split(",")})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--collections", type=int, default=170)
    ap.add_argument("--large", type=int, default=20_000)
    ap.add_argument("--checkpoints", default="0,60,120,170")
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    ap.add_argument("--keep", action="store_true", help="keep the databases")
    args = ap.parse_args(argv)
    from pgfunnel.db import resolve_dsn

    server = resolve_dsn(os.environ.get("PGFUNNEL_DSN"))
    tag = uuid.uuid4().hex[:6]
    many = make_db(server, f"pgf_many_{tag}")
    single_s = make_db(server, f"pgf_one_s_{tag}")
    single_l = make_db(server, f"pgf_one_l_{tag}")
    single_n = make_db(server, f"pgf_one_n_{tag}")
    rng = random.Random(5)
    sizes = [int(math.exp(rng.uniform(math.log(50), math.log(3000))))
             for _ in range(args.collections)]
    checkpoints = checkpoint_counts(args.checkpoints, args.collections)
    results: list[dict[str, Any]] = []
    fills: list[dict[str, Any]] = []
    # both databases: a small collection to search (and one-doc ingest), the large one in
    # its own one-collection database and, early, in the many-collection database
    ingest(single_s, "probe_small", 500, seed=1)
    ingest(single_l, "probe_large", args.large, seed=2)
    ingest(many, "probe_small", 500, seed=1)
    ingest(many, "probe_large", args.large, seed=2)
    results.append(probe(single_s, "single", 1, new_dsn=single_n, large_dsn=single_l))
    done = 0
    for cp in checkpoints:
        while done < min(cp, len(sizes)):
            t = ingest(many, f"tenant_{done:04d}", sizes[done], seed=100 + done)
            fills.append({"i": done, "size": sizes[done], **t})
            if done % 10 == 0:
                log(f"fill {done}: {sizes[done]} chunks {t}")
            done += 1
        results.append(probe(many, "many", done + 2))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "many_collections.json").write_text(json.dumps(
        {"probes": results, "fills": fills}, indent=1))
    if not args.keep:
        with connect(server, autocommit=True) as c:
            for name in (f"pgf_many_{tag}", f"pgf_one_s_{tag}", f"pgf_one_l_{tag}",
                         f"pgf_one_n_{tag}"):
                c.execute(sql.SQL("drop database if exists {} with (force)").format(
                    sql.Identifier(name)))
    else:
        log(f"kept: {many} {single_s} {single_l} {single_n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
