"""The CUDA paths: half-precision rerank and GPU embedding, checked against the CPU.

They run only where torch sees a CUDA device. This project's CI has none, so there every
test here is skipped and says why; `bench/gpu_check.sh` is what runs them on a GPU
machine (see bench/README.md, "On a GPU").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (this machine has none)")

from pgfunnel.embedder import Embedder  # noqa: E402
from pgfunnel.rerank import Reranker  # noqa: E402
from pgfunnel.search import Funnel  # noqa: E402
from pgfunnel.tiny_models import (  # noqa: E402
    build_minilm_l6_cross_encoder,
    build_tiny_bi_encoder,
    build_tiny_cross_encoder,
)

QUERY = "how do I get a refund for the annual plan"
# distinct texts of mixed length, so padding and truncation differ across one batch
DOCS = [
    "Refunds for monthly plans are issued within 14 days of the request.",
    "The annual plan includes a levy that is billed once a year.",
    "ERR-4029 means the payment provider rejected the card.",
    "Our office is closed on public holidays.",
    "To cancel, open Billing, choose the plan and press Cancel; the refund follows. " * 8,
    "Invoices are emailed to the account owner on the first of each month.",
    "A refund of the annual plan is prorated by the months left in the term.",
    "Two-factor authentication can be turned on under Security settings.",
    "Exports run nightly; large workspaces may take several hours to export. " * 20,
    "Contact support with your invoice number to dispute a charge.",
    "Plans can be upgraded at any time; downgrades apply at the next renewal.",
    "The API rate limit is 600 requests per minute per token.",
]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny_ce(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-ce-cuda"))


def _first_parameter(reranker: Reranker) -> Any:
    return next(reranker._model.model.parameters())


def _assert_same_order_where_decided(reference: list[float], other: list[float],
                                     margin: float) -> None:
    """Every pair of documents the reference separates by more than ``margin`` keeps its
    order; closer pairs may swap, which is all a lower precision can promise."""
    for i in range(len(reference)):
        for j in range(len(reference)):
            if reference[i] - reference[j] > margin:
                assert other[i] > other[j], (i, j, reference[i], reference[j], other[i], other[j])


def test_auto_device_picks_cuda_in_full_precision(tiny_ce: Path) -> None:
    reranker = Reranker(tiny_ce, device="auto", local_files_only=True)
    assert reranker.device == "cuda" and reranker.fp16 is False
    assert reranker.batch_size == 64  # a pool of 50 in one forward pass
    weight = _first_parameter(reranker)
    assert weight.device.type == "cuda" and weight.dtype == torch.float32


def test_fp16_true_casts_the_model_to_half(tiny_ce: Path) -> None:
    reranker = Reranker(tiny_ce, device="cuda", fp16=True, local_files_only=True)
    assert reranker.fp16 is True
    assert _first_parameter(reranker).dtype == torch.float16


def test_fp32_on_cuda_scores_as_the_cpu_does(tiny_ce: Path) -> None:
    cpu = Reranker(tiny_ce, device="cpu", local_files_only=True).predict(QUERY, DOCS)
    gpu_model = Reranker(tiny_ce, device="cuda", local_files_only=True)
    assert _first_parameter(gpu_model).dtype == torch.float32
    gpu = gpu_model.predict(QUERY, DOCS)
    assert np.max(np.abs(np.array(cpu) - np.array(gpu))) < 1e-4


def test_fp16_rank_agrees_with_cpu_fp32(tiny_ce: Path) -> None:
    cpu = Reranker(tiny_ce, device="cpu", local_files_only=True)
    half = Reranker(tiny_ce, device="cuda", fp16=True, local_files_only=True)
    reference = cpu.predict(QUERY, DOCS)
    scores = half.predict(QUERY, DOCS)
    assert np.max(np.abs(np.array(reference) - np.array(scores))) < 1e-2
    _assert_same_order_where_decided(reference, scores, margin=2e-2)
    # rank() is the same function of those scores on either device
    ranked = half.rank(QUERY, DOCS, top_k=5)
    assert [r["corpus_id"] for r in ranked] == sorted(
        range(len(DOCS)), key=lambda i: (-scores[i], i))[:5]
    # the spread of the random model is what makes the order check mean something
    assert max(reference) - min(reference) > 0.1


def test_minilm_shape_in_fp16_stays_finite_at_full_length(tmp_path: Path) -> None:
    # 512-token pairs through six layers: where fp16 overflow would show as inf or NaN
    path = build_minilm_l6_cross_encoder(tmp_path / "minilm")
    long_docs = [d * 30 for d in DOCS]
    cpu = Reranker(path, device="cpu", local_files_only=True).predict(QUERY, long_docs)
    half = Reranker(path, device="cuda", fp16=True, local_files_only=True, max_length=512)
    scores = half.predict(QUERY, long_docs)
    assert all(np.isfinite(scores))
    assert np.max(np.abs(np.array(cpu) - np.array(scores))) < 1e-2


def test_search_reranked_on_cuda_returns_the_cpu_order(
        sample_conn: psycopg.Connection[Any], embedder: Any, tiny_ce: Path) -> None:
    query = "refund annual plan"
    cpu = Funnel(sample_conn, embedder=embedder,
                 reranker=Reranker(tiny_ce, device="cpu", local_files_only=True))
    gpu = Funnel(sample_conn, embedder=embedder,
                 reranker=Reranker(tiny_ce, device="cuda", local_files_only=True))
    on_cpu = cpu.search(query, k=8, principals=[])
    on_gpu = gpu.search(query, k=8, principals=[])
    assert on_cpu.reranked and on_gpu.reranked and len(on_gpu.results) == 8
    assert [r.chunk_id for r in on_gpu.results] == [r.chunk_id for r in on_cpu.results]
    half = Funnel(sample_conn, embedder=embedder,
                  reranker=Reranker(tiny_ce, device="cuda", fp16=True,
                                    local_files_only=True))
    on_half = half.search(query, k=8, principals=[])
    assert on_half.reranked and len(on_half.results) == 8
    assert all(r.rerank_score is not None and np.isfinite(r.rerank_score)
               for r in on_half.results)


def test_embedder_on_cuda_gives_the_cpu_vectors(tmp_path: Path) -> None:
    path = build_tiny_bi_encoder(tmp_path / "bi", dim=64)
    cpu = Embedder(str(path), device="cpu").embed(DOCS)
    on_gpu = Embedder(str(path), device="cuda")
    assert on_gpu.device == "cuda"
    gpu = on_gpu.embed(DOCS)
    assert gpu.shape == cpu.shape and gpu.dtype == np.float32
    # both unit length, so the dot product is the cosine
    assert float(np.min(np.sum(cpu * gpu, axis=1))) > 0.9999
