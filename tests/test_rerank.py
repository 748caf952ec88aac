"""Reranker and tiny models: CPU only, no database, no downloads."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgfunnel.errors import ConfigError, InvalidInputError, ModelLoadError, RerankError
from pgfunnel.rerank import (
    Reranker,
    checked_ranking,
    default_batch_size,
    make_snippet,
    resolve_device,
    should_skip,
)
from pgfunnel.tiny_models import build_tiny_bi_encoder, build_tiny_cross_encoder

DOCS = [
    "Refunds for monthly plans are issued within 14 days of the request.",
    "The annual plan includes a levy that is billed once a year.",
    "ERR-4029 means the payment provider rejected the card.",
    "Our office is closed on public holidays.",
]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing in these tests may reach the network, whatever the test does.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_ce(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-ce"))


@pytest.fixture(scope="session")
def reranker(tiny_ce: Path) -> Reranker:
    return Reranker(str(tiny_ce), device="cpu", local_files_only=True)


def _record_predict(monkeypatch: pytest.MonkeyPatch, r: Reranker, scores: Any = None) -> list[Any]:
    """Replace the inner CrossEncoder.predict; record what it was asked to score."""
    calls: list[Any] = []

    def fake(pairs: Any, **kwargs: Any) -> Any:
        calls.append(list(pairs))
        if scores is not None:
            return scores(pairs)
        return [float(len(b)) for _, b in pairs]

    monkeypatch.setattr(r._model, "predict", fake)
    return calls


# -- tiny models --------------------------------------------------------------------------


def test_tiny_cross_encoder_loads_through_crossencoder(tiny_ce: Path, tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder

    a = CrossEncoder(str(tiny_ce), device="cpu", local_files_only=True)
    pairs = [("refund policy", d) for d in DOCS]
    sa = [float(x) for x in a.predict(pairs, show_progress_bar=False)]
    assert len(sa) == len(DOCS) and all(math.isfinite(x) for x in sa)
    # Same seed, same weights, same scores; another seed, other scores.
    again = build_tiny_cross_encoder(tmp_path / "again")
    sb = [float(x) for x in CrossEncoder(str(again), device="cpu").predict(pairs)]
    assert sa == pytest.approx(sb)
    other = build_tiny_cross_encoder(tmp_path / "other", seed=1)
    sc = [float(x) for x in CrossEncoder(str(other), device="cpu").predict(pairs)]
    assert sa != pytest.approx(sc)


@pytest.mark.parametrize("name", ["build_tiny_cross_encoder", "build_minilm_l6_cross_encoder",
                                  "build_tiny_bi_encoder"])
def test_tiny_model_builders_are_typed_to_take_a_string_path(name: str,
                                                               tmp_path: Path) -> None:
    """`build_tiny_cross_encoder("/tmp/ce")` ran, but its `path: Path` annotation made it
    an arg-type error under mypy --strict, where the Reranker it feeds takes a string."""
    import typing

    import pgfunnel.tiny_models as tiny_models

    hint = typing.get_type_hints(getattr(tiny_models, name))["path"]
    assert str in typing.get_args(hint), hint
    if name == "build_tiny_cross_encoder":
        built = tiny_models.build_tiny_cross_encoder(str(tmp_path / "ce"))
        assert built == tmp_path / "ce" and isinstance(built, Path)
        assert Reranker(str(built), device="cpu").predict("refund", ["a refund"])


def test_tiny_bi_encoder_has_requested_dimension(tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    path = build_tiny_bi_encoder(tmp_path / "bi", dim=48)
    model = SentenceTransformer(str(path), device="cpu")
    emb = model.encode(["hello world", "refund policy"])
    assert emb.shape == (2, 48)


# -- construction and validation ----------------------------------------------------------


def test_reranker_attributes(reranker: Reranker, tiny_ce: Path) -> None:
    assert reranker.device == "cpu"
    assert reranker.model_name == str(tiny_ce)
    assert reranker.fp16 is False  # full precision unless asked (on CUDA too)
    assert reranker.batch_size == 32
    assert reranker.tokenizer is not None


@pytest.mark.parametrize(("device", "expected"),
                         [("cpu", 32), ("mps", 32), ("cuda", 64), ("cuda:1", 64)])
def test_default_batch_size_is_one_pass_for_a_pool_of_50_on_cuda_only(
        device: str, expected: int) -> None:
    assert default_batch_size(device) == expected


def test_given_batch_size_is_kept(tiny_ce: Path) -> None:
    assert Reranker(str(tiny_ce), device="cpu", batch_size=7).batch_size == 7


def test_numpy_integers_are_taken_as_search_parameters_take_them(tiny_ce: Path) -> None:
    # a batch size, snippet length, top_k or rerank_depth read from a numpy array (a sweep
    # of settings) was refused as "must be a positive integer, got np.int64(8)", while
    # Funnel.search takes k=np.int64(5)
    # (numpy integers are not int to mypy: the arguments below are off-type on purpose)
    from pgfunnel.search import Funnel

    r = Reranker(str(tiny_ce), device="cpu", batch_size=np.int64(8),  # type: ignore[arg-type]
                 max_length=np.int32(64), snippet_chars=np.int64(200))  # type: ignore[arg-type]
    assert (r.batch_size, r.max_length, r.snippet_chars) == (8, 64, 200)
    assert all(type(v) is int for v in (r.batch_size, r.max_length, r.snippet_chars))
    rows = r.rank("refund", ["a refund", "a password", "an invoice"],
                  top_k=np.int64(2), batch_size=np.int64(1))  # type: ignore[arg-type]
    assert len(rows) == 2
    funnel = Funnel("postgresql:///unused", reranker=r,
                    rerank_depth=np.int64(5))  # type: ignore[arg-type]
    assert funnel.rerank_depth == 5 and type(funnel.rerank_depth) is int
    bads: list[Any] = [np.float64(8), np.bool_(True), True]
    for bad in bads:
        with pytest.raises(ConfigError):
            Reranker(str(tiny_ce), device="cpu", batch_size=bad)


def test_device_auto_falls_back_to_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"


def test_device_auto_prefers_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda"


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "CPU", ""])
def test_bad_device_names_parameter(device: str) -> None:
    with pytest.raises(ConfigError) as exc:
        resolve_device(device)
    assert exc.value.parameter == "device"


def test_unavailable_cuda_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="CUDA is not available"):
        resolve_device("cuda:0")


def test_fp16_on_cpu_is_config_error(tiny_ce: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        Reranker(str(tiny_ce), device="cpu", fp16=True)
    assert exc.value.parameter == "fp16"
    # "yes" was taken as a request for half precision (and said it was not supported)
    with pytest.raises(ConfigError, match=r"^fp16: must be True, False or None"):
        Reranker(str(tiny_ce), device="cpu", fp16="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"max_length": -1}, "max_length"),
        ({"snippet_chars": 0}, "snippet_chars"),
        ({"backend": "tensorrt"}, "backend"),
    ],
)
def test_invalid_settings_name_parameter(
    tiny_ce: Path, kwargs: dict[str, Any], parameter: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        Reranker(str(tiny_ce), device="cpu", **kwargs)
    assert exc.value.parameter == parameter


def test_unknown_model_id_fails_loudly_without_asking_the_hub_offline() -> None:
    # fast because nothing is asked of the network (the loaders retry a download for
    # about a minute): offline, the loader is given local_files_only, and the failure is
    # the cache lookup's, not a download's
    from huggingface_hub.errors import LocalEntryNotFoundError

    with pytest.raises(ModelLoadError) as exc:
        Reranker("pgfunnel-test/no-such-cross-encoder", device="cpu")
    causes: list[BaseException] = []
    cause: BaseException | None = exc.value
    while cause is not None and len(causes) < 10:
        causes.append(cause)
        cause = cause.__cause__ or cause.__context__
    assert any(isinstance(c, LocalEntryNotFoundError) for c in causes), causes
    assert "running offline (HF_HUB_OFFLINE / local_files_only)" in str(exc.value)
    assert exc.value.setting == "rerank_model"
    assert exc.value.model == "pgfunnel-test/no-such-cross-encoder"
    msg = str(exc.value)
    assert "rerank_model" in msg and "pgfunnel-test/no-such-cross-encoder" in msg
    assert "locally" in msg


def test_nonexistent_path_fails_loudly(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    with pytest.raises(ModelLoadError) as exc:
        Reranker(missing, device="cpu")
    assert exc.value.setting == "rerank_model"
    assert missing in str(exc.value)


def test_bi_encoder_is_refused_as_rerank_model(tmp_path: Path) -> None:
    path = build_tiny_bi_encoder(tmp_path / "bi", dim=32)
    with pytest.raises(ModelLoadError, match="not a cross-encoder"):
        Reranker(str(path), device="cpu")
    # the bundled embedding model by its name: refused at once, not looked up on the hub
    for name in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
        with pytest.raises(ModelLoadError, match="embedding model .*bi-encoder.*not a "
                                                 "cross-encoder") as exc:
            Reranker(name, device="cpu")
        assert exc.value.setting == "rerank_model" and exc.value.model == name


def test_a_path_object_is_accepted_as_the_model(tiny_ce: Path, tmp_path: Path) -> None:
    # what build_tiny_cross_encoder returns; it was refused as "not a local path"
    r = Reranker(tiny_ce, device="cpu", local_files_only=True)
    assert r.model_name == str(tiny_ce)
    assert len(r.predict("refund", DOCS)) == len(DOCS)
    # a path object is a path even when it does not look like one: never tried as a hub id
    with pytest.raises(ModelLoadError, match="no such directory"):
        Reranker(Path("no-such-dir") / "model", device="cpu")


@pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is not None, reason="ONNX extra is installed"
)
def test_onnx_backend_without_extra_says_how_to_install(tiny_ce: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"pip install 'pgfunnel\[onnx\]'"):
        Reranker(str(tiny_ce), device="cpu", backend="onnx")


# -- scoring ------------------------------------------------------------------------------


def test_rank_sorts_by_score_with_real_model(reranker: Reranker) -> None:
    rows = reranker.rank("how are refunds issued", DOCS, return_documents=True)
    assert sorted(r["corpus_id"] for r in rows) == list(range(len(DOCS)))
    scores = [r["score"] for r in rows]
    assert scores == sorted(scores, reverse=True)
    assert all(r["text"] == DOCS[r["corpus_id"]] for r in rows)
    # Deterministic: same input, same output.
    assert reranker.rank("how are refunds issued", DOCS, return_documents=True) == rows
    assert [r["score"] for r in rows] == [
        reranker.predict("how are refunds issued", DOCS)[r["corpus_id"]] for r in rows
    ]
    # CrossEncoder.rank's batch_size and show_progress_bar are taken, as code written for
    # it passes them; the batch size does not change the scores
    again = reranker.rank("how are refunds issued", DOCS, return_documents=True,
                          batch_size=1, show_progress_bar=False)
    assert [r["corpus_id"] for r in again] == [r["corpus_id"] for r in rows]
    assert [r["score"] for r in again] == pytest.approx(scores, abs=1e-5)
    with pytest.raises(ConfigError, match="batch_size"):
        reranker.rank("q", DOCS, batch_size=0)


def test_rank_ties_break_by_corpus_id_and_top_k(
    reranker: Reranker, monkeypatch: pytest.MonkeyPatch
) -> None:
    _record_predict(monkeypatch, reranker, scores=lambda pairs: [1.0, 3.0, 1.0, 3.0])
    rows = reranker.rank("q", ["a", "b", "c", "d"])
    assert [r["corpus_id"] for r in rows] == [1, 3, 0, 2]
    assert "text" not in rows[0]
    assert [r["corpus_id"] for r in reranker.rank("q", ["a", "b", "c", "d"], top_k=2)] == [1, 3]
    with pytest.raises(ConfigError):
        reranker.rank("q", ["a"], top_k=0)


def test_zero_texts_never_calls_the_model(
    reranker: Reranker, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _record_predict(monkeypatch, reranker)
    assert reranker.predict("q", []) == []
    assert reranker.rank("q", []) == []
    assert calls == []


def test_score_count_mismatch_is_rerank_error(
    reranker: Reranker, monkeypatch: pytest.MonkeyPatch
) -> None:
    _record_predict(monkeypatch, reranker, scores=lambda pairs: [0.5] * (len(pairs) - 1))
    with pytest.raises(RerankError, match="2 scores for 3 texts"):
        reranker.predict("q", ["a", "b", "c"])


def test_non_finite_score_is_rerank_error(
    reranker: Reranker, monkeypatch: pytest.MonkeyPatch
) -> None:
    _record_predict(monkeypatch, reranker, scores=lambda pairs: [0.5, float("nan")])
    with pytest.raises(RerankError, match="non-finite"):
        reranker.predict("q", ["a", "b"])


def test_the_snippet_is_what_is_scored(tiny_ce: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = Reranker(str(tiny_ce), device="cpu", snippet_chars=20)
    calls = _record_predict(monkeypatch, r)
    long_text = "alpha beta gamma delta epsilon zeta eta theta"
    rows = r.rank("greek letters", [long_text, "short"], return_documents=True)
    scored = [b for _, b in calls[0]]
    assert scored == [r.snippet(long_text), "short"]
    assert scored[0] == "alpha beta gamma"
    # What the caller shows is exactly what was scored.
    assert {row["text"] for row in rows} == set(scored)
    assert all(q == "greek letters" for q, _ in calls[0])


def test_make_snippet_cuts_at_word_boundary() -> None:
    assert make_snippet("short text", 100) == "short text"
    assert make_snippet("alpha beta gamma", 10) == "alpha beta"  # cut lands on a space
    assert make_snippet("alpha beta gamma", 12) == "alpha beta"
    assert make_snippet("supercalifragilistic", 5) == "super"  # one long word: hard cut
    assert len(make_snippet("word " * 1000, 1000)) <= 1000



def test_a_snippet_counts_a_run_of_whitespace_once_and_keeps_it() -> None:
    code = "def f():\n        return 1\n\nmore words here"
    # "def f(): return 1 more" is 22 characters: the indentation does not use the budget
    assert make_snippet(code, 22) == "def f():\n        return 1\n\nmore"
    assert make_snippet(code, 21) == "def f():\n        return 1"
    assert make_snippet("   supercalifragilistic", 5) == "super"


@given(st.text(alphabet=st.sampled_from("ab \n\t"), max_size=60), st.integers(1, 80))
def test_a_text_within_the_budget_is_its_own_snippet(text: str, max_chars: int) -> None:
    snippet = make_snippet(text, max_chars)
    # a snippet is a prefix of the text (a hard cut of a first long word: of the text with
    # its leading whitespace dropped) within the budget once whitespace runs count as one
    assert text.startswith(snippet) or text.lstrip().startswith(snippet)
    assert len(" ".join(snippet.split())) <= max_chars
    if len(text) <= max_chars:
        assert snippet == text

# -- gate ---------------------------------------------------------------------------------


def test_should_skip_gate() -> None:
    assert should_skip([0.9, 0.2], None) is False  # off by default
    assert should_skip([0.9], 0.1) is False  # one candidate: nothing to decide
    assert should_skip([], 0.1) is False
    assert should_skip([1.0, 0.5, 0.25], 0.5) is True  # gap exactly the margin
    assert should_skip([0.9, 0.6], 0.4) is False
    assert should_skip([0.2, 0.9, 0.3], 0.5) is True  # unsorted input
    with pytest.raises(ConfigError):
        should_skip([0.9, 0.1], -1.0)
    # numpy numbers, as before (off-type to mypy on purpose)
    assert should_skip([0.9, 0.1], np.float32(0.5)) is True  # type: ignore[arg-type]
    # 0 is not a gate: every top score leads the second by at least 0
    for bad in (0, 0.0, float("nan"), True, "0.1"):
        with pytest.raises(ConfigError, match="margin: must be a finite number > 0"):
            should_skip([0.9, 0.1], bad)  # type: ignore[arg-type]


# -- inputs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "documents", "match"),
    [
        (None, ["a"], r"^query: must be a str, got NoneType$"),
        (b"q", ["a"], r"^query: must be a str, got bytes$"),
        ("q", ["a", None], r"^documents: item 1 must be a str, got NoneType$"),
        ("q", "abc", r"^documents: must be a sequence of str, not one str: pass \['abc'\]$"),
        ("q", 3, r"^documents: must be a sequence of str, got int$"),
        # a dict iterates its keys: they were what got ranked
        ("q", {"k1": "refunds"}, r"^documents: must be a sequence of str, got dict$"),
    ],
)
def test_bad_inputs_are_refused_before_the_model(
    reranker: Reranker, monkeypatch: pytest.MonkeyPatch, query: Any, documents: Any, match: str
) -> None:
    calls = _record_predict(monkeypatch, reranker)
    for method in (reranker.rank, reranker.predict):
        with pytest.raises(InvalidInputError, match=match):
            method(query, documents)
    assert calls == []


# -- a reranker's output, as the search consumes it ------------------------------------------


def test_checked_ranking_accepts_a_permutation() -> None:
    rows = [{"corpus_id": 2, "score": 3.0}, {"corpus_id": 0, "score": 2}, {"corpus_id": 1,
            "score": -1.5}]
    assert checked_ranking(rows, 3) == [(2, 3.0), (0, 2.0), (1, -1.5)]
    assert checked_ranking([], 0) == []
    assert checked_ranking([{"corpus_id": np.int64(0), "score": np.float32(0.5)}], 1) == [
        (0, 0.5)]


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ([{"corpus_id": 0, "score": 1.0}], r"^reranker returned 1 scores for 2 candidates$"),
        ([{"corpus_id": 0, "score": 1.0}, {"corpus_id": 2, "score": 0.5}],
         r"^reranker returned corpus_id 2 for 2 candidates \(expected 0\.\.1\)$"),
        ([{"corpus_id": 0, "score": 1.0}, {"corpus_id": -1, "score": 0.5}],
         r"^reranker returned corpus_id -1 for 2 candidates \(expected 0\.\.1\)$"),
        ([{"corpus_id": 1, "score": 1.0}, {"corpus_id": 1, "score": 0.5}],
         r"^reranker returned corpus_id 1 more than once$"),
        ([{"corpus_id": 0, "score": 1.0}, {"corpus_id": 1, "score": float("nan")}],
         r"^reranker returned score nan for corpus_id 1 \(scores must be finite numbers\)$"),
        ([{"corpus_id": 0, "score": float("inf")}, {"corpus_id": 1, "score": 0.5}],
         r"^reranker returned score inf for corpus_id 0"),
        ([{"corpus_id": 0, "score": "high"}, {"corpus_id": 1, "score": 0.5}],
         r"^reranker returned score 'high' for corpus_id 0"),
        ([{"corpus_id": 0, "score": 1.0}, {"corpus_id": 1.0, "score": 0.5}],
         r"^reranker returned corpus_id 1\.0, not an integer$"),
        ([{"corpus_id": 0, "score": 1.0}, {"score": 0.5}],
         r"^reranker returned row 2 without corpus_id and score: \{'score': 0\.5\}$"),
        ([{"corpus_id": 0, "score": 1.0}, (1, 0.5)],
         r"^reranker returned row 2 without corpus_id and score: \(1, 0\.5\)$"),
    ],
)
def test_checked_ranking_refuses_what_it_cannot_trust(rows: Any, match: str) -> None:
    with pytest.raises(RerankError, match=match):
        checked_ranking(rows, 2)


def test_a_model_the_hub_cannot_send_fails_at_once_naming_the_way_out() -> None:
    """Offline, a hub id that is not in the cache used to retry its downloads for about a
    minute before failing; one request to the hub says the same at once. The hub here is
    an address that refuses connections."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"
    code = ("from pgfunnel.errors import ModelLoadError\n"
            "from pgfunnel.rerank import Reranker\n"
            "from pgfunnel.embedder import Embedder\n"
            "for load, setting in ((lambda: Reranker('pgfunnel-test/not-cached', device='cpu'),"
            " 'rerank_model'), (lambda: Embedder('pgfunnel-test/not-cached'), "
            "'embedding_model')):\n"
            "    try:\n"
            "        load()\n"
            "    except ModelLoadError as exc:\n"
            "        assert exc.setting == setting, exc\n"
            "        print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2, done.stdout
    for line in lines:
        assert "model hub cannot be reached" in line and "HF_HUB_OFFLINE=1" in line, line
    # no download was attempted, so none was retried
    assert "Retrying" not in done.stderr, done.stderr


# -- max_length and the model's own limit -----------------------------------------------


@pytest.fixture(scope="session")
def short_ce(tiny_ce: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny cross-encoder with 64 position embeddings (its tokenizer says 512)."""
    import shutil

    from transformers import AutoConfig, AutoModelForSequenceClassification

    path = tmp_path_factory.mktemp("short-ce")
    shutil.copytree(tiny_ce, path, dirs_exist_ok=True)
    config = AutoConfig.from_pretrained(str(tiny_ce))
    config.max_position_embeddings = 64
    # transformers leaves from_config unannotated
    model = AutoModelForSequenceClassification.from_config(config)  # type: ignore[no-untyped-call]
    model.save_pretrained(str(path))
    return path


def test_default_max_length_follows_a_shorter_model(short_ce: Path) -> None:
    # 512 tokens would overrun the model's 64 positions: torch failed on the first long
    # pair, in the middle of a search
    r = Reranker(str(short_ce), device="cpu", snippet_chars=100_000, local_files_only=True)
    assert r.max_length == 64
    scores = r.predict("refund", ["word " * 2000, "short"])
    assert len(scores) == 2 and all(math.isfinite(s) for s in scores)


def test_max_length_over_the_model_limit_is_config_error(short_ce: Path, tiny_ce: Path) -> None:
    with pytest.raises(ConfigError, match="64 tokens") as exc:
        Reranker(str(short_ce), device="cpu", max_length=128, local_files_only=True)
    assert exc.value.parameter == "max_length"
    with pytest.raises(ConfigError) as exc:
        Reranker(str(tiny_ce), device="cpu", max_length=100_000, local_files_only=True)
    assert exc.value.parameter == "max_length"


def test_explicit_max_length_truncates(tiny_ce: Path) -> None:
    r = Reranker(str(tiny_ce), device="cpu", max_length=16, snippet_chars=100_000,
                 local_files_only=True)
    assert r.max_length == 16
    # the same first 16 tokens, whatever follows: truncation happened
    a, b = r.predict("refund", ["word " * 50, "word " * 50 + "levy " * 500])
    assert a == pytest.approx(b, abs=1e-5)


def test_lone_surrogate_is_invalid_input_naming_where(reranker: Reranker) -> None:
    # the tokenizer said only "TypeError: TextInputSequence must be str"
    with pytest.raises(InvalidInputError, match=r"documents: item 1 is not valid Unicode"):
        reranker.rank("refund", ["fine", "bad \ud800 text"])
    with pytest.raises(InvalidInputError, match=r"query: is not valid Unicode"):
        reranker.predict("bad \udfff", ["fine"])


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "gpu", "cpu\n", None])
def test_the_embedder_checks_its_device_as_the_reranker_does(
        monkeypatch: pytest.MonkeyPatch, device: Any) -> None:
    # Embedder(device="cuda") on a machine without CUDA was a ModelLoadError naming the
    # embedding model ("AssertionError: Torch not compiled with CUDA enabled"), and
    # "gpu" torch's list of device types; "cpu\n" passed the reranker's check
    import torch

    from pgfunnel.embedder import Embedder

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a CPU-only machine
    for make in (lambda: Embedder(device=device), lambda: resolve_device(device)):
        with pytest.raises(ConfigError) as exc:
            make()
        assert exc.value.parameter == "device"
        if device in ("cuda", "cuda:0"):
            assert "CUDA is not available" in str(exc.value)


@pytest.mark.parametrize("batch_size", [2.5, "16", True, np.float64(8)])
def test_the_embedders_batch_size_must_be_an_integer(batch_size: Any) -> None:
    # 2.5 was taken and failed at the first embed (mid-ingest) with "'float' object
    # cannot be interpreted as an integer"; "16" raised a raw TypeError; True embedded
    # one text per batch
    from pgfunnel.embedder import Embedder

    with pytest.raises(ConfigError, match="^batch_size: must be an integer") as exc:
        Embedder(device="cpu", batch_size=batch_size)
    assert exc.value.parameter == "batch_size"
    assert Embedder(device="cpu",
                    batch_size=np.int64(8)).batch_size == 8  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["no", "false", 0, 1])
def test_local_files_only_must_be_a_bool(tiny_ce: Path, value: Any) -> None:
    # "no" was taken as true: the model was looked up offline only, and a missing one
    # failed saying it was "running offline (HF_HUB_OFFLINE / local_files_only)"
    with pytest.raises(ConfigError) as exc:
        Reranker(str(tiny_ce), device="cpu", local_files_only=value)
    assert exc.value.parameter == "local_files_only"
    assert Reranker(str(tiny_ce), device="cpu", local_files_only=False).local_files_only is False


def test_a_local_bi_encoder_is_refused_before_it_loads(tmp_path: Path,
                                                       capfd: pytest.CaptureFixture[str]) -> None:
    """A bi-encoder folder given as the rerank model was loaded first: sentence-transformers
    printed 'Converting SentenceTransformer model ... to CrossEncoder' and transformers a
    load report of 'newly initialized' head weights ('Consider training on your downstream
    task') above the ModelLoadError, as if the model had loaded and needed training. Its
    config.json names its architecture: refused from that, nothing printed."""
    path = build_tiny_bi_encoder(tmp_path / "bi", dim=32)
    capfd.readouterr()
    with pytest.raises(ModelLoadError, match="checkpoint architecture BertModel is not a "
                                             "cross-encoder") as exc:
        Reranker(str(path), device="cpu")
    assert exc.value.setting == "rerank_model"
    out, err = capfd.readouterr()
    assert out + err == "", out + err
