"""bench/latency_pydocs.py on a fresh machine: what it needs and what it says is missing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from funnel_util import doc, load_module

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
    assert vid == sample_conn.execute(
        "select v.id from pgfunnel.index_version v join pgfunnel.collection c "
        "on c.id = v.collection_id where c.name = 'default' and v.state = 'active'"
    ).fetchone()[0]
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
