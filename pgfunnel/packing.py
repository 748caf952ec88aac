"""Lay ranked passages into a prompt: drop near-duplicates, respect a token budget,
put the strongest passages at the edges.

Input order is rank order (best first), e.g. the reranked final list. Every passage that
does not make it is returned with the reason, so the trace can say why a retrieved chunk
never reached the model.

Token counting: pass ``count_tokens`` -- ideally :func:`tokenizer_counter` around the
tokenizer of the model that will read the prompt. Without one, the estimate is
``ceil(whitespace_words * 1.3)``, a rough average for English text under WordPiece/BPE
tokenizers; it over-counts plain prose a little and under-counts code and identifiers,
so leave some headroom in the budget when relying on it.
"""

from __future__ import annotations

import math
import numbers
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pgfunnel.errors import ConfigError, InvalidInputError

__all__ = [
    "PackResult",
    "estimate_tokens",
    "jaccard",
    "pack_context",
    "shingles",
    "tokenizer_counter",
]

P = TypeVar("P")

_ID_KEYS = ("id", "chunk_id", "corpus_id", "citekey")
# scripts written without spaces between words (Han, kana, Thai, Lao, Myanmar, Khmer):
# each character counts as a word, or a whole paragraph would be one word -- a 2-token
# estimate for 800 characters of Chinese, and one shingle that no near-duplicate shares
_UNSPACED = ("\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf"
             "\u4e00-\u9fff\uf900-\ufaff")
_UNSPACED_RE = re.compile(f"[{_UNSPACED}]")
_SHINGLE_WORD_RE = re.compile(f"[{_UNSPACED}]|[^\\W{_UNSPACED}]+")


@dataclass
class PackResult(Generic[P]):
    """Passages to put in the prompt, in prompt order, and the ones left out (with why)."""

    kept: list[P]
    dropped: list[tuple[P, str]] = field(default_factory=list)
    tokens_used: int = 0


def estimate_tokens(text: str) -> int:
    """Whitespace words x 1.3, rounded up (integer arithmetic, so 10 words is 13), plus
    one token per character of a script written without spaces (Chinese, Japanese, Thai,
    ...), which tokenizers split into about a token per character or more."""
    unspaced = len(_UNSPACED_RE.findall(text))
    words = len(_UNSPACED_RE.sub(" ", text).split()) if unspaced else len(text.split())
    return (words * 13 + 9) // 10 + unspaced


def tokenizer_counter(tokenizer: Any) -> Callable[[str], int]:
    """Token counter from a Hugging Face tokenizer (e.g. ``Reranker(...).tokenizer``).

    Special tokens are left out: they are added once per prompt, not once per passage.
    """
    encode = getattr(tokenizer, "encode", None)
    if not callable(encode):
        raise ConfigError("count_tokens", "tokenizer has no encode() method")

    # verbose=False: a Hugging Face tokenizer otherwise warns, for a passage longer than
    # its model reads, that "running this sequence through the model will result in
    # indexing errors"; counting runs no model. A tokenizer without the keyword is called
    # without it.
    quiet = True

    def count(text: str) -> int:
        nonlocal quiet
        if quiet:
            try:
                return len(encode(text, add_special_tokens=False, verbose=False))
            except TypeError:
                quiet = False
        return len(encode(text, add_special_tokens=False))

    return count


def shingles(text: str, size: int = 3) -> frozenset[tuple[str, ...]]:
    """Word *size*-grams of *text*, lowercased; texts shorter than *size* give one shingle."""
    words = [w.casefold() for w in _SHINGLE_WORD_RE.findall(text)]
    if not words:
        return frozenset()
    if len(words) < size:
        return frozenset({tuple(words)})
    return frozenset(tuple(words[i : i + size]) for i in range(len(words) - size + 1))


def jaccard(a: frozenset[Any], b: frozenset[Any]) -> float:
    if not a and not b:
        # Two empty texts are the same (empty) text.
        return 1.0
    return len(a & b) / len(a | b)


def _text_of(passage: Any, index: int) -> str:
    text = passage.get("text") if isinstance(passage, Mapping) else getattr(passage, "text", None)
    if not isinstance(text, str):
        raise InvalidInputError(f"passage at position {index} has no 'text' string")
    return text


def _passage_list(passages: object) -> list[Any]:
    """The passages as a list, read once: a generator was used up by reading the texts,
    and the drop reasons then failed to index it (TypeError); None and a string (its
    characters) are refused by name."""
    if passages is None or isinstance(passages, (str, bytes, Mapping)):
        raise InvalidInputError("passages: must be a sequence of passages (dicts or objects "
                                f"with 'text'), got {type(passages).__name__}")
    try:
        items = iter(passages)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidInputError("passages: must be a sequence of passages, got "
                                f"{type(passages).__name__}") from None
    return list(items)


def _id_of(passage: Any, index: int) -> str:
    for key in _ID_KEYS:
        value = passage.get(key) if isinstance(passage, Mapping) else getattr(passage, key, None)
        if value is not None:
            return str(value)
    # No id field: the rank position is the only stable name the caller can map back.
    return f"#{index}"


def _checked_count(value: object) -> int:
    """A token count from ``count_tokens``: an integer >= 0 (a finite float is rounded
    up), else a ConfigError. NaN compared as "fits" with any budget, so every passage was
    kept; None failed with a bare TypeError."""
    not_a_count = ConfigError("count_tokens", f"returned {value!r}, not a token count")
    if isinstance(value, (bool, str, bytes)):
        raise not_a_count
    try:
        count = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise not_a_count from None
        if not math.isfinite(number):
            raise not_a_count from None
        count = math.ceil(number)
    if count < 0:
        raise ConfigError("count_tokens", f"returned a negative count ({value!r})")
    return count


def _edges(items: list[P]) -> list[P]:
    # Ranks 1,3,5,... fill from the front and 2,4,6,... from the back, so the two best sit
    # at the two ends and the weakest end up in the middle, where long prompts are read
    # least reliably.
    return items[0::2] + items[1::2][::-1]


def pack_context(
    passages: Iterable[P],
    *,
    token_budget: int,
    count_tokens: Callable[[str], int] | None = None,
    near_duplicate_threshold: float = 0.9,
    order: Literal["edges", "rank"] = "edges",
) -> PackResult[P]:
    """Pack ranked *passages* (best first) into at most *token_budget* tokens.

    1. Near-duplicates: a passage whose word-3-gram Jaccard similarity with a better-ranked
       passage already kept (one the budget left out does not count) is
       >= *near_duplicate_threshold* is dropped
       (``"near-duplicate of <id>"``; id from ``id``/``chunk_id``/``corpus_id``/``citekey``,
       else ``#<rank position>``).
    2. Budget: passages are taken in rank order while they fit; one that does not fit is
       dropped (``"over token budget"``) and smaller, lower-ranked ones may still fill the
       remaining room.
    3. Order: ``"edges"`` puts the best first and the second best last; ``"rank"`` keeps
       rank order.
    """
    if isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget < 0:
        raise ConfigError("token_budget", f"must be an integer >= 0, got {token_budget!r}")
    if isinstance(near_duplicate_threshold, bool) or \
            not isinstance(near_duplicate_threshold, numbers.Real) or \
            not 0.0 < near_duplicate_threshold <= 1.0:
        raise ConfigError(
            "near_duplicate_threshold", f"must be in (0, 1], got {near_duplicate_threshold!r}"
        )
    if order not in ("edges", "rank"):
        raise ConfigError("order", f"expected 'edges' or 'rank', got {order!r}")
    if count_tokens is not None and not callable(count_tokens):
        raise ConfigError("count_tokens", "must be a callable str -> int (e.g. tokenizer_counter"
                          f"(tokenizer)) or None, got {type(count_tokens).__name__}")
    counter = count_tokens if count_tokens is not None else estimate_tokens
    passages = _passage_list(passages)

    texts = [_text_of(p, i) for i, p in enumerate(passages)]
    dropped: list[tuple[int, str]] = []
    # one pass in rank order: a passage is compared with the passages kept so far, and
    # only those. Deduplicating first against every better-ranked passage dropped a
    # passage as the near-duplicate of one that the budget then left out, so neither
    # reached the prompt (the longer one over budget, the shorter one that fitted named
    # its duplicate)
    kept: list[int] = []
    kept_shingles: list[frozenset[tuple[str, ...]]] = []
    used = 0
    for i, text in enumerate(texts):
        sh = shingles(text)
        twin = next(
            (
                j
                for j, other in zip(kept, kept_shingles, strict=True)
                if jaccard(sh, other) >= near_duplicate_threshold
            ),
            None,
        )
        if twin is not None:
            dropped.append((i, f"near-duplicate of {_id_of(passages[twin], twin)}"))
            continue
        cost = _checked_count(counter(text))
        if used + cost > token_budget:
            dropped.append((i, "over token budget"))
            continue
        kept.append(i)
        kept_shingles.append(sh)
        used += cost

    ordered = _edges(kept) if order == "edges" else kept
    dropped.sort(key=lambda d: d[0])
    return PackResult(
        kept=[passages[i] for i in ordered],
        dropped=[(passages[i], reason) for i, reason in dropped],
        tokens_used=used,
    )
