"""Cross-encoder reranking of the fused candidate pool.

The search layer runs the candidate query, hands the pool's texts to :class:`Reranker`,
and passes the new order to the final query (which applies the per-source cap). This
module never touches the database.

Two rules shape it:

* **Fail loudly.** A rerank model that cannot be loaded raises
  :class:`~pgfunnel.errors.ModelLoadError` naming the ``rerank_model`` setting and the
  model id. Un-reranked results would look perfectly normal, so silently falling back
  would hide the misconfiguration.
* **Score what is shown.** The model scores :meth:`Reranker.snippet` of each text, the
  same string the user sees, so the evidence a ranking was based on is visible.
"""

from __future__ import annotations

import importlib.util
import math
import numbers
import operator
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast

from pgfunnel.embedder import (
    BUNDLED_ALIASES,
    hub_unreachable,
    looks_like_path,
    pick_device,
    quiet_local_loading,
    saved_architectures,
)
from pgfunnel.errors import (
    ConfigError,
    InvalidInputError,
    ModelLoadError,
    RerankError,
    model_load_detail,
    positive_int,
    shown,
    text_value_problem,
)

__all__ = [
    "DEFAULT_RERANK_MODEL",
    "Reranker",
    "checked_ranking",
    "default_batch_size",
    "make_snippet",
    "reranker_name",
    "resolve_device",
    "should_skip",
]

DEFAULT_RERANK_MODEL = "cross-encoder/ms-marco-MiniLM-L6-v2"
# tokens per (query, snippet) pair when max_length is not given (or the model's own
# limit, if smaller)
DEFAULT_MAX_LENGTH = 512
# a tokenizer without a limit reports a huge sentinel as its model_max_length
_NO_LIMIT = 1_000_000

Backend = Literal["torch", "onnx"]

_TRUTHY = {"1", "true", "yes", "on"}


def default_batch_size(device: str) -> int:
    """Pairs per forward pass when none is given: 64 on CUDA, 32 elsewhere.

    On a GPU a MiniLM-sized cross-encoder waits on kernel launches, not arithmetic, so a
    pool of 50 in one pass instead of two took 0.81x the time (an H200, fp32, scores
    identical; bench/rerank_precision.py --compare batch). On a CPU the larger batch pads
    more pairs to its longest one: 1.06x there.
    """
    return 64 if device.startswith("cuda") else 32


def _offline_env() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUTHY


def resolve_device(device: str) -> str:
    """Turn ``"auto"`` into CUDA, then MPS, then CPU; check an explicit device exists
    (a ConfigError naming ``device`` otherwise). The same check as the embedder's."""
    return pick_device(device)


def make_snippet(text: str, max_chars: int) -> str:
    """The start of *text* up to *max_chars* characters, cut back to the last word boundary.

    A run of whitespace counts as one character: the model reads it as one separator,
    and the indentation of a code block would otherwise take the words' place. The text
    is returned as written, line breaks and all. A first word longer than *max_chars*
    is cut hard, because returning nothing would give the reranker an empty passage to
    score.
    """
    if len(text) <= max_chars:
        # what the loop counts (words, one per whitespace run) is never more than the
        # text's length: the whole text fits, and most chunks are this short
        return text
    used = end = 0
    for word in _WORD.finditer(text):
        cost = len(word.group()) + (1 if end else 0)
        if used + cost > max_chars:
            break
        used += cost
        end = word.end()
    else:
        return text
    if end == 0:
        return text.lstrip()[:max_chars]
    return text[:end]


_WORD = re.compile(r"\S+")


def check_gate_margin(margin: object, parameter: str = "margin") -> float | None:
    """A rerank gate's margin: None (no gate) or a finite number > 0, else a ConfigError
    naming ``parameter``. A margin of 0 would skip the reranker on every search (the top
    score always leads the second by at least 0)."""
    if margin is None:
        return None
    refused = ConfigError(parameter, "must be a finite number > 0, or None for no gate (0 "
                          "would skip the reranker on every search), got "
                          f"{shown(margin, 60)}")
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real):
        raise refused
    try:
        value = float(margin)
    except OverflowError:
        # an integer past double precision: math.isfinite raised it raw
        raise refused from None
    if not math.isfinite(value) or value <= 0:
        raise refused
    return value


def should_skip(fused_scores: Sequence[float], margin: float | None) -> bool:
    """Optional rerank gate: skip the reranker when the fused top score is decisive.

    True only when *margin* is set, there are at least two scores, and the best fused
    score leads the second best by at least *margin*. Off by default (``margin=None``):
    fused scores are not calibrated, so a margin has to be tuned on labelled queries.
    """
    margin = check_gate_margin(margin)
    if margin is None or len(fused_scores) < 2:
        return False
    # The caller may pass the pool in any order; the gate is about the two best scores.
    top, second = sorted((float(s) for s in fused_scores), reverse=True)[:2]
    return top - second >= margin


def _checked_inputs(query: object, documents: object) -> tuple[str, list[str]]:
    """The query and the documents as a list, or an InvalidInputError naming which is
    wrong. One string is refused as the documents: iterated, ``"abc"`` would be three
    one-character documents."""
    if (problem := text_value_problem(query, "a str")) is not None:
        raise InvalidInputError(f"query: {problem}")
    if isinstance(documents, (str, bytes)):
        raise InvalidInputError(f"documents: must be a sequence of str, not one "
                                f"{type(documents).__name__}: pass [{documents!r}]")
    if not isinstance(documents, Iterable) or isinstance(documents, Mapping):
        # a dict iterates its keys: ranked by them, the scores would answer another question
        raise InvalidInputError(f"documents: must be a sequence of str, got "
                                f"{type(documents).__name__}")
    texts = list(documents)
    for i, text in enumerate(texts):
        if (problem := text_value_problem(text, "a str")) is not None:
            raise InvalidInputError(f"documents: item {i} {problem}")
    return cast(str, query), texts  # a str: text_value_problem found nothing wrong


def checked_ranking(ranked: object, count: int) -> list[tuple[int, float]]:
    """A reranker's ``rank()`` output for *count* candidates as ``(corpus_id, score)``
    pairs in its order, or a :class:`RerankError` saying what it returned wrong: not one
    row per candidate, a row without ``corpus_id``/``score``, a ``corpus_id`` out of range
    or given twice, a score that is not a finite number. A custom reranker's mistake would
    otherwise surface as an IndexError, as an error about an argument the caller never
    passed, or as a NaN score in the results."""
    try:
        rows = list(ranked)  # type: ignore[call-overload]
    except TypeError:
        raise RerankError(f"reranker returned {type(ranked).__name__}, not a list of rows "
                          "with corpus_id and score") from None
    if len(rows) != count:
        raise RerankError(f"reranker returned {len(rows)} scores for {count} candidates")
    out: list[tuple[int, float]] = []
    seen: set[int] = set()
    for pos, row in enumerate(rows, start=1):
        if not isinstance(row, Mapping) or "corpus_id" not in row or "score" not in row:
            raise RerankError(f"reranker returned row {pos} without corpus_id and score: "
                              f"{row!r}")
        raw_id, raw_score = row["corpus_id"], row["score"]
        try:
            if isinstance(raw_id, bool):
                raise TypeError
            corpus_id = operator.index(raw_id)
        except TypeError:
            raise RerankError(f"reranker returned corpus_id {raw_id!r}, not an integer") from None
        if not 0 <= corpus_id < count:
            raise RerankError(f"reranker returned corpus_id {corpus_id} for {count} candidates"
                              f" (expected 0..{count - 1})")
        if corpus_id in seen:
            raise RerankError(f"reranker returned corpus_id {corpus_id} more than once")
        seen.add(corpus_id)
        try:
            score = float(raw_score) if not isinstance(raw_score, (str, bytes, bool)) else None
        except (TypeError, ValueError):
            score = None
        if score is None or not math.isfinite(score):
            raise RerankError(f"reranker returned score {raw_score!r} for corpus_id {corpus_id}"
                              " (scores must be finite numbers)")
        out.append((corpus_id, score))
    return out


def _half_precision_cuda(model: Any) -> None:  # pragma: no cover - needs a CUDA device
    """Cast the loaded cross-encoder to fp16.

    This is the only CUDA-specific step and it cannot run on CPU-only CI; there the tests
    cover the decision (``fp16`` resolution and validation), and tests/test_cuda.py, run
    on a GPU machine by bench/gpu_check.sh, covers the cast.
    """
    model.half()


def reranker_name(reranker: Any) -> str | None:
    """The name a trace records for a reranker (``search_log.config->>'rerank_model'``):
    its ``model_name`` (a :class:`Reranker`'s), else the ``name_or_path`` of the model
    inside it (a sentence-transformers ``CrossEncoder`` passed as it is, whose model is a
    Hugging Face one), else None."""
    name = getattr(reranker, "model_name", None)
    if isinstance(name, str) and name:
        return name
    for owner in (getattr(reranker, "model", None), getattr(reranker, "config", None)):
        for attr in ("name_or_path", "_name_or_path"):
            value = getattr(owner, attr, None)
            if isinstance(value, str) and value:
                return value
    return None


class Reranker:
    """Cross-encoder reranker with the shape of ``CrossEncoder.rank``.

    The model is loaded at construction so a bad ``rerank_model`` fails before the first
    search, not in the middle of one.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] = DEFAULT_RERANK_MODEL,
        *,
        device: str = "auto",
        batch_size: int | None = None,
        max_length: int | None = None,
        fp16: bool | None = None,
        backend: Backend = "torch",
        snippet_chars: int = 1000,
        local_files_only: bool | None = None,
        onnx_file_name: str | None = None,
    ) -> None:
        # a path object (what pgfunnel.tiny_models builds) is a local path, whatever it
        # looks like: never retried as a hub id
        self._is_path = isinstance(model, os.PathLike)
        if self._is_path:
            model = os.fspath(model)
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("rerank_model", "must be a model id (str) or a local path (str or"
                              f" os.PathLike), got {model!r}")
        if batch_size is not None:
            batch_size = positive_int("batch_size", batch_size)
        # None: DEFAULT_MAX_LENGTH, or the model's own limit when that is smaller (set
        # once the model is loaded and its limit known)
        self.max_length = (DEFAULT_MAX_LENGTH if max_length is None
                           else positive_int("max_length", max_length))
        self._max_length_given = max_length is not None
        self.snippet_chars = positive_int("snippet_chars", snippet_chars)
        if backend not in ("torch", "onnx"):
            raise ConfigError("backend", f"expected 'torch' or 'onnx', got {backend!r}")
        self.backend: Backend = backend
        self.model_name = model
        self.device = resolve_device(device)
        self.batch_size = (default_batch_size(self.device) if batch_size is None
                           else batch_size)
        self.fp16 = self._resolve_fp16(fp16)
        if local_files_only is not None and not isinstance(local_files_only, bool):
            # "no" is a true value: the model was looked up offline only, and a missing one
            # failed saying it was "running offline"
            raise ConfigError("local_files_only", "must be True, False or None (True when "
                              f"HF_HUB_OFFLINE=1), got {shown(local_files_only, 60)}")
        if local_files_only is None:
            # Offline mode means "never wait on the network"; make the loader agree up front.
            local_files_only = _offline_env()
        self.local_files_only: bool = local_files_only
        self._model = self._load(onnx_file_name)

    # -- construction ---------------------------------------------------------------------

    def _resolve_fp16(self, fp16: bool | None) -> bool:
        if fp16 is not None and not isinstance(fp16, bool):
            # "yes" or 1 read as a request for half precision, and on CPU its error said so
            raise ConfigError("fp16", f"must be True, False or None (full precision), got {fp16!r}")
        if fp16 is None:
            # Full precision on every device, CUDA too. On an H200 the MiniLM-L6
            # cross-encoder ran no faster in fp16 for pools of 20 and 50 pairs (paired
            # 1.00x, 1.01x), and each padded batch shape it met for the first time cost
            # 45 ms p50 / 505 ms p95 against 8 / 12 ms in fp32 (bench/rerank_precision.py).
            return False
        if fp16 and self.device == "cpu":
            raise ConfigError("fp16", "half precision is not supported on CPU; use fp16=False")
        if fp16 and self.backend != "torch":
            raise ConfigError("fp16", "fp16 applies to the torch backend only")
        return bool(fp16)

    def _failure(self, cause: BaseException | str) -> ModelLoadError:
        if isinstance(cause, str):
            # Our own diagnosis is already specific; no generic hint needed.
            return ModelLoadError("rerank_model", self.model_name, cause)
        return ModelLoadError("rerank_model", self.model_name, model_load_detail(
            cause, self.model_name, offline=self.local_files_only or _offline_env()))

    def _load(self, onnx_file_name: str | None) -> Any:
        is_path = self._is_path or looks_like_path(self.model_name)
        if is_path and not Path(self.model_name).expanduser().exists():
            # A path that does not exist must not be retried as a hub id.
            raise self._failure(f"no such directory: {self.model_name}")
        # loaded without max_length: sentence-transformers then reports the model's own
        # limit (its tokenizer's, capped at its position embeddings), checked below
        kwargs: dict[str, Any] = {
            "device": self.device,
            "local_files_only": self.local_files_only,
            "backend": self.backend,
        }
        if self.backend == "onnx":
            if not _onnx_available():
                raise self._failure(
                    "backend='onnx' needs the optional ONNX extra;"
                    " install it with: pip install 'pgfunnel[onnx]'"
                )
            if onnx_file_name is not None:
                # e.g. "onnx/model_qint8_avx512.onnx" picks the int8 export of a model.
                kwargs["model_kwargs"] = {"file_name": onnx_file_name}
        elif onnx_file_name is not None:
            raise ConfigError("onnx_file_name", "only meaningful with backend='onnx'")
        if self.model_name.lower() in BUNDLED_ALIASES:
            # the bundled embedding model by name: refused here, where it would otherwise
            # be looked up on the hub as a cross-encoder (a network wait, then a generic
            # failure) instead of being recognised as the bi-encoder it is
            raise self._failure(
                f"{self.model_name!r} is pgfunnel's embedding model (a bi-encoder), not a "
                "cross-encoder; pass a cross-encoder such as "
                "cross-encoder/ms-marco-MiniLM-L6-v2, or a local directory of one")
        if not self.local_files_only and (unreachable := hub_unreachable(self.model_name)):
            raise self._failure(unreachable)
        local = Path(self.model_name).expanduser()
        if archs := saved_architectures(local / "config.json"):
            # a local folder names its architecture: a bi-encoder is refused before it
            # loads, where sentence-transformers printed its conversion to a cross-encoder
            # and a table of "newly initialized" head weights ("Consider training on your
            # downstream task") above the error
            self._refuse_architectures(archs)
        try:
            from sentence_transformers import CrossEncoder

            target = str(local) if local.exists() else self.model_name
            with quiet_local_loading(target):
                model = CrossEncoder(target, **kwargs)
        except Exception as exc:
            raise self._failure(exc) from exc
        loaded = getattr(
            getattr(getattr(model, "model", None), "config", None), "architectures", None
        )
        if loaded:
            self._refuse_architectures(loaded)
        num_labels = getattr(model, "num_labels", 1)
        if num_labels != 1:
            # A bi-encoder or classifier loads "successfully" with a fresh head; refuse it.
            raise self._failure(
                f"expected a cross-encoder with a single relevance output, got {num_labels}"
                " labels (is this a bi-encoder?)"
            )
        self._apply_max_length(model)
        if self.fp16:
            _half_precision_cuda(model)
        return model

    def _refuse_architectures(self, archs: Sequence[Any]) -> None:
        if not any(str(a).endswith("ForSequenceClassification") for a in archs):
            # sentence-transformers quietly turns a bi-encoder into a cross-encoder with a
            # random head; its scores would be noise that looks like a ranking.
            raise self._failure(
                f"checkpoint architecture {', '.join(map(str, archs))} is not a cross-encoder"
                " (a sequence-classification model); is this a bi-encoder?"
            )

    def _apply_max_length(self, model: Any) -> None:
        """Set the model's truncation length to ``max_length``. A length past the model's
        own limit (its position embeddings) is refused here: torch would otherwise fail in
        the middle of a search, on the first pair long enough to reach it."""
        limit = _model_token_limit(model)
        if limit is not None and self.max_length > limit:
            if self._max_length_given:
                raise ConfigError(
                    "max_length", f"{self.max_length} is more than the {limit} tokens "
                    f"model {self.model_name!r} can read; use max_length <= {limit}")
            self.max_length = limit
        if isinstance(getattr(type(model), "max_seq_length", None), property):
            model.max_seq_length = self.max_length  # sentence-transformers >= 5
        else:
            model.max_length = self.max_length

    # -- public API -----------------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer, e.g. for :func:`pgfunnel.packing.tokenizer_counter`."""
        return self._model.tokenizer

    def snippet(self, text: str) -> str:
        """The exact text shown to the user and scored by the model."""
        return make_snippet(text, self.snippet_chars)

    def predict(self, query: str, texts: Sequence[str]) -> list[float]:
        """One relevance score per text (higher is better), in input order."""
        query, texts = _checked_inputs(query, texts)
        return self._predict(query, texts)

    def _predict(self, query: str, texts: list[str], batch_size: int | None = None,
                 show_progress_bar: bool = False) -> list[float]:
        if not texts:
            return []
        pairs = [(query, self.snippet(t)) for t in texts]
        raw = self._model.predict(
            pairs,
            batch_size=batch_size or self.batch_size,
            show_progress_bar=show_progress_bar,
            convert_to_numpy=True,
        )
        try:
            scores = [float(s) for s in _flatten(raw)]
        except (TypeError, ValueError) as exc:
            raise RerankError(f"reranker returned non-numeric scores: {exc}") from exc
        if len(scores) != len(texts):
            raise RerankError(
                f"reranker returned {len(scores)} scores for {len(texts)} texts"
                f" (model {self.model_name!r})"
            )
        bad = [i for i, s in enumerate(scores) if not math.isfinite(s)]
        if bad:
            # NaN breaks sorting silently; fp16 overflow is the usual cause.
            raise RerankError(f"reranker returned non-finite scores at positions {bad[:5]}")
        return scores

    def rank(
        self,
        query: str,
        documents: Sequence[str],
        top_k: int | None = None,
        return_documents: bool = False,
        batch_size: int | None = None,
        show_progress_bar: bool | None = None,
    ) -> list[dict[str, Any]]:
        """Documents sorted by score (desc), ties by ``corpus_id`` (asc).

        Each row has ``corpus_id`` (index into *documents*) and ``score``; with
        ``return_documents=True`` also ``text``, the snippet that was scored.
        ``batch_size`` (default: the Reranker's) and ``show_progress_bar`` are
        ``CrossEncoder.rank``'s, so code written for it runs unchanged.
        """
        if top_k is not None:
            top_k = positive_int("top_k", top_k)
        if batch_size is not None:
            batch_size = positive_int("batch_size", batch_size)
        query, documents = _checked_inputs(query, documents)
        scores = self._predict(query, documents, batch_size, bool(show_progress_bar))
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        if top_k is not None:
            order = order[:top_k]
        rows: list[dict[str, Any]] = []
        for i in order:
            row: dict[str, Any] = {"corpus_id": i, "score": scores[i]}
            if return_documents:
                row["text"] = self.snippet(documents[i])
            rows.append(row)
        return rows

    def __repr__(self) -> str:
        return (
            f"Reranker(model={self.model_name!r}, device={self.device!r}, backend={self.backend!r},"
            f" fp16={self.fp16}, batch_size={self.batch_size}, max_length={self.max_length},"
            f" snippet_chars={self.snippet_chars})"
        )


def _model_token_limit(model: Any) -> int | None:
    """The most tokens a loaded cross-encoder can read: its tokenizer's
    ``model_max_length``, capped at the config's ``max_position_embeddings``; None when
    neither says."""
    limits: list[int] = []
    tokenizer_limit = getattr(getattr(model, "tokenizer", None), "model_max_length", None)
    config = getattr(getattr(model, "model", None), "config", None)
    positions = getattr(config, "max_position_embeddings", None)
    for value in (tokenizer_limit, positions):
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < _NO_LIMIT:
            limits.append(value)
    return min(limits) if limits else None


def _onnx_available() -> bool:
    for name in ("onnxruntime", "optimum.onnxruntime"):
        try:
            if importlib.util.find_spec(name) is None:
                return False
        except ModuleNotFoundError:
            # find_spec imports the parent package; a missing parent means missing extra.
            return False
    return True


def _flatten(raw: Any) -> list[Any]:
    if hasattr(raw, "tolist"):
        raw = raw.tolist()
    out: list[Any] = []
    stack = [raw] if not isinstance(raw, list) else list(reversed(raw))
    while stack:
        item = stack.pop()
        if hasattr(item, "tolist"):
            item = item.tolist()
        if isinstance(item, list | tuple):
            stack.extend(reversed(item))
        else:
            out.append(item)
    return out
