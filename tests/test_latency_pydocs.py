"""bench/latency_pydocs.py on a fresh machine: what it needs and what it says is missing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from funnel_util import doc, load_module, one_row

_BENCH = Path(__file__).resolve().parents[1] / "bench"

latency = load_module("bench_latency_pydocs", _BENCH / "latency_pydocs.py")
sys.path.insert(0, str(_BENCH))
import peers  # noqa: E402


def test_without_a_built_benchmark_it_says_to_build_and_run_it(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as err:
        latency.load_query_texts(tmp_path / "pydocs", "pydocs", 150)
    msg = str(err.value)
    assert "queries.jsonl not found" in msg
    assert "python bench/pydocs.py build --out" in msg and "bench/pydocs.py run" in msg
    with pytest.raises(SystemExit) as err:
        latency.load_query_texts(tmp_path / "pgdocs", "pgdocs", 150)
    assert "python bench/pgdocs.py build" in str(err.value)


def test_a_database_without_the_schema_says_to_run_the_benchmark(empty_db: str) -> None:
    with psycopg.connect(empty_db, autocommit=True) as conn, \
            pytest.raises(SystemExit, match=r"no pgfunnel schema.*python bench/pydocs.py run"):
        latency.active_version(conn, "pydocs", Path("bench/data/pydocs"))


def test_a_missing_collection_says_to_run_the_benchmark(
        conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(SystemExit, match=r"no collection 'pydocs'.*bench/pydocs.py run"):
        latency.active_version(conn, "pydocs", Path("bench/data/pydocs"))


def test_the_peer_must_be_there_and_built_from_the_collection(
        sample_conn: psycopg.Connection[Any], embedder: Any) -> None:
    from pgfunnel.ingest import Ingester

    data = Path("bench/data/pydocs")
    with pytest.raises(SystemExit, match=r"no Supabase-style peer.*bench/pydocs.py run"):
        latency.active_version(sample_conn, "default", data)
    rows = peers.build_peer(sample_conn, "default")
    vid, _cid, _analyzer, n_chunks = latency.active_version(sample_conn, "default", data)
    assert n_chunks == rows > 0
    assert vid == one_row(sample_conn.execute(
        "select v.id from pgfunnel.index_version v join pgfunnel.collection c "
        "on c.id = v.collection_id where c.name = 'default' and v.state = 'active'"
    ))[0]
    # another collection: the peer holds 'default's chunks, not its own
    Ingester(sample_conn, "other", embedder=embedder).ingest(
        [doc("n1", "a note about refunds in another collection")])
    with pytest.raises(SystemExit, match=r"does not hold collection 'other'"):
        latency.active_version(sample_conn, "other", data)
    # the collection changed since the peer was built from it
    Ingester(sample_conn, "default", embedder=embedder).ingest(
        [doc("new-note", "a new note about invoices")])
    with pytest.raises(SystemExit, match=r"does not hold collection 'default'"):
        latency.active_version(sample_conn, "default", data)


def test_another_collection_reads_its_own_queries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # --collection pgdocs alone timed pgdocs with the pydocs queries when those were built
    (tmp_path / "bench" / "data" / "pydocs").mkdir(parents=True)
    (tmp_path / "bench" / "data" / "pydocs" / "queries.jsonl").write_text(
        '{"query": "dumps"}\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as err:
        latency.main(["--collection", "pgdocs"])
    assert str(err.value).startswith(str(Path("bench/data/pgdocs/queries.jsonl")))


def test_the_run_is_read_against_the_readmes_targets() -> None:
    # a run like the README's slower hours: p50 just over 3 ms, everything else met
    p50 = {"funnel_search": 3.22, "lexical leg": 1.07, "dense leg": 1.80,
           latency.PEER: 27.38}
    rows = latency.target_rows(p50, funnel_p95=4.42, legs_p50=2.98)
    assert rows[0] == "| target | this run | met |"
    met = {r.split(" | ")[0].lstrip("| "): r.rsplit(" | ", 1)[1].rstrip(" |") for r in rows[2:]}
    assert met == {"funnel_search p50 <= 3 ms": "no", "funnel_search p95 <= 10 ms": "yes",
                   ">= 6x faster than hybrid_search (p50)": "yes",
                   "lexical leg p50 <= 2 ms": "yes",
                   "funnel_search <= 1.3x (lexical leg + dense leg) (p50)": "yes"}
    assert "| funnel_search p50 <= 3 ms | 3.22 ms | no |" in rows
    assert "| >= 6x faster than hybrid_search (p50) | 8.50x | yes |" in rows
    # each target the README's table lists is one of these rows
    readme = (_BENCH.parent / "README.md").read_text()
    for target in ("`funnel_search` p50 <= 3 ms", "`funnel_search` p95 <= 10 ms",
                   ">= 6x faster than the Supabase-style `hybrid_search`",
                   "lexical leg p50 <= 2 ms", "`funnel_search` <= 1.3x (lexical leg + dense leg)"):
        assert f"| {target}" in readme, target
    fast = latency.target_rows({**p50, "funnel_search": 2.9}, funnel_p95=4.0, legs_p50=2.98)
    assert "| funnel_search p50 <= 3 ms | 2.90 ms | yes |" in fast
