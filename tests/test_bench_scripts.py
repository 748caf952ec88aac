"""The bench scripts run as the docs write them: `bench/perf.py --size 10000 ...`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

_ROOT = Path(__file__).resolve().parents[1]
_SCRIPTS = sorted(p for p in (_ROOT / "bench").glob("*.py")
                  if 'if __name__ == "__main__":' in p.read_text(encoding="utf-8"))


def test_every_bench_script_is_a_command() -> None:
    # the README and bench/README.md name them as commands (`bench/perf.py --size 10000
    # --size 100000`), which the shell refused: "Permission denied", no shebang either
    assert len(_SCRIPTS) >= 10
    for script in _SCRIPTS:
        assert script.read_text(encoding="utf-8").startswith("#!/usr/bin/env python3\n"), script
        assert os.access(script, os.X_OK), script


@pytest.mark.parametrize("name", ["perf.py", "pydocs.py"])
def test_a_bench_script_typed_as_written_prints_its_help(name: str) -> None:
    # in an activated virtual environment: its python3 first on the PATH
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    res = subprocess.run([f"bench/{name}", "--help"], cwd=_ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage:"), res.stdout


def test_many_collections_probes_each_filled_count_once() -> None:
    # `--collections 3` probed the same 5 collections at checkpoints 60, 120 and 170 too
    from funnel_util import load_module

    many = load_module("bench_many_collections", _ROOT / "bench" / "many_collections.py")
    assert many.checkpoint_counts("0,60,120,170", 3) == [0, 3]
    assert many.checkpoint_counts("0,60,120,170", 170) == [0, 60, 120, 170]
    assert many.checkpoint_counts("60,0", 400) == [0, 60]


def test_doc_rank_fusion_gives_each_leg_document_positions() -> None:
    # bench/doc_rank_fusion.py's variants, against positions worked out by hand: the
    # lexical leg ranks changelog chunks 1 and 2, then page p (3), then the changelog (4);
    # the dense leg ranks p first
    from funnel_util import load_module

    from pgfunnel.search import Candidate

    drf = load_module("bench_doc_rank_fusion", _ROOT / "bench" / "doc_rank_fusion.py")

    def chunk(cid: int, citekey: str, lex: int | None, den: int | None) -> Candidate:
        return Candidate(cid, citekey, "", "", "", cid, {}, lex, None if lex is None
                         else 10.0 - lex, den, None if den is None else 1.0 - den / 10,
                         0, 0.0)

    pool = [chunk(1, "changes", 1, None), chunk(2, "changes", 2, None),
            chunk(3, "p", 3, 1), chunk(4, "changes", 4, None)]
    k = drf.RRF_K
    rrf = {v: drf._contrib(pool, "rrf", 4, v)[:, 0].tolist() for v in ("refit", "A", "B")}
    assert rrf["refit"] == [1 / (k + 1), 1 / (k + 2), 1 / (k + 3), 1 / (k + 4)]
    # A: one citekey above chunks 2 and 3 (position 2), two above chunk 4 (position 3)
    assert rrf["A"] == [1 / (k + 1), 1 / (k + 2), 1 / (k + 2), 1 / (k + 3)]
    # B: the changelog's later chunks get the leg's fill; p keeps its own rank
    assert rrf["B"] == [1 / (k + 1), 0.0, 1 / (k + 3), 0.0]
    # min-max under A reads the leg's own curve at the position: scores 9, 8, 7, 6 over a
    # full list (depth 4), so (s - 6) / 3 at rows 1, 2, 2, 3
    minmax_a = drf._contrib(pool, "minmax", 4, "A")[:, 0].tolist()
    assert minmax_a == pytest.approx([1.0, 2 / 3, 2 / 3, 1 / 3])
    # the dense leg holds p alone: it scales to 1 under every variant
    assert drf._contrib(pool, "minmax", 4, "B")[:, 1].tolist() == [0.0, 0.0, 1.0, 0.0]


def test_explain_cost_times_the_wide_pool_explain_reads(conn: psycopg.Connection[Any]) -> None:
    """bench/explain_cost.py timed the second funnel run of _explain_chunks with that run's
    k and overfetch worked out again in Python, a copy that could drift from the SQL;
    both take them from pgfunnel._wide_pool now. The bench's run holds, for each chunk,
    the fused rank explain reports, past a list of 1,000 rows (k 1000, overfetch 2)."""
    from funnel_util import doc, ingest, load_module

    bench = load_module("bench_explain_cost", _ROOT / "bench" / "explain_cost.py")
    vectors = ingest(conn, [doc(f"d{i}", f"a quasar part {i}") for i in range(1200)],
                     collection="bench", dims=8)
    params = {**bench.search_params(vectors["d7"][0]), "lexical_depth": 1000,
              "dense_depth": 1000}
    wide, wide_k = bench.wide_pool_params(conn, params)
    assert (wide_k, wide["overfetch"], wide["refill"]) == (1000, 2, False)
    [(ids, ranks)] = conn.execute(
        psycopg.sql.SQL("select p.chunk_ids, p.fused_ranks from ({}) p").format(
            bench.call("_pool", wide)), wide).fetchall()
    assert len(ids) > 1000 and ranks == list(range(1, len(ids) + 1))
    every = [r[0] for r in conn.execute("select id from pgfunnel.chunk order by id")]
    explained = {row[0]: row[1] for row in conn.execute(
        psycopg.sql.SQL("select e.chunk_id, e.fused_rank from ({}) e").format(
            bench.call("_explain_chunks", {**params, "chunk_ids": every})),
        {**params, "chunk_ids": every})}
    assert {i: r for i, r in explained.items() if r is not None} == dict(
        zip(ids, ranks, strict=True))
