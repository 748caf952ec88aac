"""Query transformations the caller opts into, each returning a record for the trace.

None of these runs by default. Each one fixes a specific failure and has its own way to
go wrong, so each returns what it did and why, and the search layer stores that next to
the result:

* :func:`multi_query` + :func:`rrf_merge` -- several phrasings of *one* need; agreement
  between their lists is meaningful, so rank fusion is the right merge.
* :func:`decompose` + :func:`round_robin_merge` -- *several* needs in one query; each
  sub-query gets its share of the final list. RRF would reward compromise chunks that
  half-match both parts, which is the wrong signal across different intents.
* :class:`GuardedRewriter` -- a model's rewrite is only a proposal; a deterministic check
  keeps identifiers, numbers, quoted text and qualifiers, and the original query wins on
  any failure (missing token, exception, timeout, empty output).
* :class:`FollowupResolver` -- a rule-based stand-alone rewrite for follow-up turns that
  lack a topic, so it works offline with no model.

Everything here is pure Python and deterministic.
"""

from __future__ import annotations

import math
import numbers
import re
import threading
import time
import unicodedata
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from pgfunnel import defaults
from pgfunnel.errors import ConfigError, InvalidInputError, positive_int, shown, string_list

__all__ = [
    "STOPWORDS",
    "Decomposition",
    "FollowupResolver",
    "GuardedRewriter",
    "MultiQuery",
    "Resolution",
    "RewriteResult",
    "content_words",
    "decompose",
    "multi_query",
    "protected_tokens",
    "round_robin_merge",
    "rrf_merge",
]

K = TypeVar("K", bound=Hashable)

# Function words, interrogatives and generic verbs: words that say how something is asked,
# not what it is about. Kept small on purpose; a word missing here only makes the rules
# below more conservative (a part or a turn looks like it has a topic).
_STOPWORD_TEXT = """
    a about above after again against all also am an and any are as at be been before being
    below between both but by can could did do does doing done down during each either else
    few for from further get gets getting got had has have having he her here hers him his
    how i if in into is it its itself just me more most my no nor not now of off on once only
    or other our ours out over own same she should so some such than that the their theirs
    them then there these they this those through to too under until up very was we were what
    when where which while who whom whose why will with would you your yours
    work works working happen happens mean means use used using need needs want wants know
    tell explain show please thanks thank ok okay hi hello
    compare comparison difference versus vs between
    i'm i've i'd i'll it's that's what's how's where's there's let's don't doesn't didn't
    can't isn't aren't won't
    much many one ones question questions
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())


def _combining_marks() -> str:
    """The combining marks (Unicode categories Mn, Mc, Me) of the blocks where scripts
    write vowel signs, viramas and tone marks, as the inside of a bracket expression:
    Python's \\w leaves them out, and cut हिन्दी into ह, न and द."""
    marks = [cp for lo, hi in ((0x0300, 0x036F), (0x0483, 0x0489), (0x0591, 0x07FF),
                               (0x0900, 0x109F), (0x1700, 0x1DFF), (0x20D0, 0x20FF),
                               (0xA800, 0xABFF), (0xFE00, 0xFE2F))
             for cp in range(lo, hi + 1) if unicodedata.category(chr(cp)).startswith("M")]
    return "".join(f"\\u{cp:04x}" for cp in marks)


_MARKS = _combining_marks()
# letters, digits and marks of any script: an ASCII-only pattern cut "Rückerstattung"
# into "R" and "ckerstattung", and found no word at all in a Greek or Russian query (which
# then counted as a follow-up with no topic of its own)
_WORD_RE = re.compile(rf"[^\W_](?:[\w.'\-{_MARKS}]*(?:[^\W_]|[{_MARKS}]))?")
_QUOTE_RE = re.compile(r"\"([^\"]+)\"|“([^”]+)”|`([^`]+)`")


def _words(text: str) -> list[str]:
    return _WORD_RE.findall(text)


def _norm_word(word: str) -> str:
    return word.casefold()


def _is_identifier(word: str) -> bool:
    """Identifiers and numbers: digits, ``_``, inner ``.``/``-``, or ALLCAPS (2+ letters)."""
    if any(ch.isdigit() for ch in word) or "_" in word:
        return True
    if re.search(r"[A-Za-z0-9][.\-][A-Za-z0-9]", word):
        return True
    letters = [ch for ch in word if ch.isalpha()]
    return len(letters) >= 2 and all(ch.isupper() for ch in letters)


def _singular(word: str) -> str:
    # Enough to let "plan" match "plans"; not a stemmer.
    w = word.casefold()
    if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        return w[:-1]
    return w


def content_words(text: str, *, extra_stopwords: Iterable[str] = ()) -> list[str]:
    """Words of *text* that carry content, in order, lowercased (identifiers kept whole)."""
    stop = STOPWORDS | {_norm_word(w) for w in extra_stopwords}
    out: list[str] = []
    for w in _words(text):
        lw = _norm_word(w)
        if _is_identifier(w) or (lw not in stop and len(lw) > 1):
            out.append(lw)
    return out


# -- multi-query + RRF --------------------------------------------------------------------


@dataclass(frozen=True)
class MultiQuery:
    """Phrasings to search, after dropping empties and duplicates (original first)."""

    queries: list[str]
    dropped: list[str] = field(default_factory=list)
    reason: str = ""


def multi_query(phrasings: Sequence[str], *, max_queries: int | None = None) -> MultiQuery:
    """Clean up a list of phrasings of one need; the caller searches each and calls
    :func:`rrf_merge` on the result lists.

    Duplicates are detected case- and whitespace-insensitively, so a paraphraser that
    echoes the query does not double its vote in the fusion.
    """
    if max_queries is not None:
        max_queries = positive_int("max_queries", max_queries)
    # one string iterated as its characters, None searched as the text "None"
    phrasings = string_list(phrasings, "phrasings")
    seen: set[str] = set()
    kept: list[str] = []
    dropped: list[str] = []
    for p in phrasings:
        key = " ".join(str(p).split()).casefold()
        if not key or key in seen or (max_queries is not None and len(kept) >= max_queries):
            dropped.append(p)
            continue
        seen.add(key)
        kept.append(str(p).strip())
    if not kept:
        reason = "no usable phrasing"
    elif dropped:
        reason = f"{len(kept)} phrasing(s) kept, {len(dropped)} dropped (empty, duplicate or cap)"
    else:
        reason = f"{len(kept)} phrasing(s) kept"
    return MultiQuery(queries=kept, dropped=dropped, reason=reason)


#: the largest RRF constant, as funnel_search's rrf_k (a far larger one, as an int past
#: double precision, made 1 / (k + rank) raise a raw OverflowError)
MAX_RRF_K = defaults.RRF_K_MOST


def check_rrf_constant(parameter: str, k: object) -> int:
    """An RRF constant: an integer from 1 to MAX_RRF_K, else a ConfigError naming
    ``parameter``."""
    value = positive_int(parameter, k)
    if value > MAX_RRF_K:
        raise ConfigError(parameter, f"must be at most {MAX_RRF_K:,} (funnel_search's limit "
                                     f"for rrf_k), got {shown(value)}")
    return value


def rrf_merge(
    ranked_lists: Sequence[Sequence[K]],
    k: int = 60,
    weights: Sequence[float] | None = None,
) -> list[tuple[K, float]]:
    """Reciprocal rank fusion: ``score(d) = sum_i w_i / (k + rank_i(d))``, ranks from 1.

    Use it to merge lists that are views of *one* need (multi-query). A key repeated inside
    one list counts once, at its best rank. Equal scores keep the order in which keys are
    first met scanning rank by rank (rank 1 of every list in list order, then rank 2, ...),
    so the result does not depend on set or dict iteration order.
    """
    k = check_rrf_constant("rrf_k", k)
    if weights is None:
        weights = [1.0] * len(ranked_lists)
    if len(weights) != len(ranked_lists):
        raise ConfigError(
            "weights", f"got {len(weights)} weight(s) for {len(ranked_lists)} ranked list(s)"
        )
    for w in weights:
        try:
            finite = not isinstance(w, bool) and isinstance(w, numbers.Real) \
                and math.isfinite(w)
        except OverflowError:  # an int past double precision: math.isfinite raised it raw
            finite = False
        if not finite or w < 0:
            raise ConfigError("weights", "each weight must be a finite number >= 0, got "
                                         f"{shown(w)}")
    scores: dict[K, float] = {}
    first_seen: dict[K, int] = {}
    depth = max((len(lst) for lst in ranked_lists), default=0)
    counted: list[set[K]] = [set() for _ in ranked_lists]
    for rank in range(depth):
        for li, lst in enumerate(ranked_lists):
            if rank >= len(lst):
                continue
            key = lst[rank]
            if key in counted[li]:
                continue
            counted[li].add(key)
            first_seen.setdefault(key, len(first_seen))
            scores[key] = scores.get(key, 0.0) + weights[li] / (k + rank + 1)
    return sorted(scores.items(), key=lambda kv: (-kv[1], first_seen[kv[0]]))


# -- decomposition + round-robin ----------------------------------------------------------


@dataclass(frozen=True)
class Decomposition:
    """Sub-queries to search separately; a single part means "not split"."""

    parts: list[str]
    reason: str

    @property
    def split(self) -> bool:
        return len(self.parts) > 1


_STRONG_SPLIT_RE = re.compile(r"(?<=\?)\s+|\s*;\s*")
_AND_RE = re.compile(r",?\s+and\s+", re.IGNORECASE)


def _mask_quotes(text: str) -> tuple[str, list[str]]:
    """Replace quoted spans by placeholders so separators inside quotes never split."""
    spans: list[str] = []

    def repl(m: re.Match[str]) -> str:
        spans.append(m.group(0))
        return f"\x00{len(spans) - 1}\x00"

    return _QUOTE_RE.sub(repl, text), spans


def _unmask(text: str, spans: list[str]) -> str:
    return re.sub(r"\x00(\d+)\x00", lambda m: spans[int(m.group(1))], text)


def _part_profile(part: str, qualifiers: frozenset[str]) -> tuple[list[str], list[str]]:
    topics: list[str] = []
    quals: list[str] = []
    for w in content_words(part):
        (quals if _singular(w) in qualifiers or w in qualifiers else topics).append(w)
    return topics, quals


def decompose(query: str, max_parts: int = 3, *, qualifiers: Iterable[str] = ()) -> Decomposition:
    """Split *query* into sub-queries only where its structure shows several needs.

    Separators: ``?`` between questions and ``;`` (each side needs one content word), and
    ``and`` between clauses (each side needs two topic words, or a topic word plus a
    qualifier from *qualifiers*, e.g. plan names). "terms and conditions" therefore stays
    whole. When exactly one distinct qualifier appears in the query, parts that have none
    get it appended ("refund policy and fees on annual plans" -> the first part is about
    annual plans too). More than *max_parts* parts: the tail is merged into the last part.
    """
    max_parts = positive_int("max_parts", max_parts)
    if not isinstance(query, str):
        raise InvalidInputError(f"query: must be a str, got {type(query).__name__}")
    qualifiers = string_list(qualifiers, "qualifiers")
    text = " ".join(query.split())
    if not text:
        return Decomposition(parts=[query], reason="empty query; not split")
    qual_set = frozenset(_singular(q) for q in qualifiers) | frozenset(
        q.casefold() for q in qualifiers
    )
    masked, spans = _mask_quotes(text)

    parts: list[str] = []
    reasons: list[str] = []
    strong = [p for p in _STRONG_SPLIT_RE.split(masked) if p.strip()]
    if len(strong) > 1 and all(content_words(_unmask(p, spans)) for p in strong):
        reasons.append(f"{len(strong)} questions/clauses separated by '?' or ';'")
    else:
        strong = [masked]
    for piece in strong:
        pieces = [p for p in _AND_RE.split(piece) if p.strip()]
        if len(pieces) > 1:
            profiles = [_part_profile(_unmask(p, spans), qual_set) for p in pieces]
            ok = all(len(t) >= 2 or (len(t) >= 1 and q) for t, q in profiles)
            if ok:
                reasons.append(f"'and' joins {len(pieces)} clauses that each have their own topic")
                parts.extend(pieces)
                continue
            reasons.append("'and' joins words, not clauses; kept together")
        parts.append(piece)

    parts = [_unmask(p, spans).strip(" ,") for p in parts]
    if len(parts) <= 1:
        why = "; ".join(reasons) if reasons else "no multi-part structure detected"
        return Decomposition(parts=[query], reason=f"not split: {why}")

    if len(parts) > max_parts:
        head, tail = parts[: max_parts - 1], parts[max_parts - 1 :]
        parts = [*head, " and ".join(tail)] if max_parts > 1 else [text]
        reasons.append(f"capped at max_parts={max_parts}")
        if len(parts) == 1:
            return Decomposition(parts=[query], reason="not split: max_parts=1")

    quals_per_part = [_part_profile(p, qual_set)[1] for p in parts]
    distinct = {_singular(q) for qs in quals_per_part for q in qs}
    if len(distinct) == 1:
        shared = next(q for qs in quals_per_part for q in qs)
        missing = [i for i, qs in enumerate(quals_per_part) if not qs]
        for i in missing:
            parts[i] = f"{parts[i]} {shared}"
        if missing:
            reasons.append(f"shared qualifier {shared!r} added to {len(missing)} part(s)")
    return Decomposition(parts=parts, reason="split: " + "; ".join(reasons))


def round_robin_merge(lists: Sequence[Sequence[K]], k: int | None = None) -> list[K]:
    """Interleave the sub-query lists so each keeps its share of the first *k* slots.

    Round r takes, from each list in turn, its best item not already taken; a list whose
    next item was already taken by another list skips ahead instead of losing its turn.
    Use it for :func:`decompose`: the parts ask for different things, so agreement between
    their lists is not a signal and each part should be guaranteed a place.
    """
    if k is not None:
        k = positive_int("k", k)
    limit = k if k is not None else sum(len(lst) for lst in lists)
    pointers = [0] * len(lists)
    seen: set[K] = set()
    out: list[K] = []
    while len(out) < limit:
        progressed = False
        for li, lst in enumerate(lists):
            if len(out) >= limit:
                break
            while pointers[li] < len(lst) and lst[pointers[li]] in seen:
                pointers[li] += 1
            if pointers[li] < len(lst):
                item = lst[pointers[li]]
                pointers[li] += 1
                seen.add(item)
                out.append(item)
                progressed = True
        if not progressed:
            break
    return out


# -- guarded rewrite ----------------------------------------------------------------------


@dataclass(frozen=True)
class RewriteResult:
    """What :meth:`GuardedRewriter.rewrite` decided, for the trace."""

    query: str
    original: str
    used_rewrite: bool
    reason: str
    proposed: str | None = None
    protected: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    elapsed_s: float = 0.0


def _squash(text: str) -> str:
    """Spelling-normalise for comparison: casefold and drop separators."""
    return re.sub(r"[\W_]+", "", text.casefold())


def protected_tokens(query: str, protected_terms: Iterable[str] = ()) -> list[str]:
    """Tokens a rewrite must keep: quoted text, identifiers, numbers, ALLCAPS words, and
    any of *protected_terms* (e.g. plan names) that occur in *query*. Order of first
    appearance, no duplicates."""
    out: list[str] = []
    for m in _QUOTE_RE.finditer(query):
        phrase = next(g for g in m.groups() if g is not None).strip()
        if phrase:
            out.append(f'"{phrase}"')
    unquoted = _QUOTE_RE.sub(" ", query)
    terms = {_singular(t) for t in protected_terms} | {t.casefold() for t in protected_terms}
    for w in _words(unquoted):
        if _is_identifier(w) or w.casefold() in terms or _singular(w) in terms:
            out.append(w)
    seen: set[str] = set()
    unique: list[str] = []
    for t in out:
        key = t.casefold()
        if key not in seen:
            seen.add(key)
            unique.append(t)
    return unique


def _kept(token: str, rewrite: str) -> bool:
    if token.startswith('"') and token.endswith('"') and len(token) > 1:
        phrase = " ".join(token[1:-1].split()).casefold()
        return phrase in " ".join(rewrite.split()).casefold()
    target = _squash(token)
    words = _words(rewrite)
    # Accept re-spacings of an identifier ("ERR 4029", "err4029") by also comparing
    # runs of up to three adjacent words; plain substring matching would let "4029"
    # pass inside "40290".
    forms: set[str] = set()
    for i in range(len(words)):
        for n in (1, 2, 3):
            if i + n <= len(words):
                forms.add(_squash("".join(words[i : i + n])))
    return target in forms or _singular(token) in {_singular(w) for w in words}


class GuardedRewriter:
    """Wrap a query rewriter (e.g. a model call) so a bad rewrite can never reach search.

    The rewrite is used only when it is non-empty, came back within *timeout_s*, and keeps
    every protected token of the original. Otherwise the original query is searched and
    the reason is recorded.
    """

    def __init__(
        self,
        rewriter: Callable[[str], str],
        *,
        timeout_s: float = 2.0,
        protected_terms: Sequence[str] = (),
    ) -> None:
        if not callable(rewriter):
            raise ConfigError("rewriter", "must be callable")
        if isinstance(timeout_s, bool) or not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ConfigError("timeout_s", f"must be a positive number, got {timeout_s!r}")
        self.rewriter = rewriter
        self.timeout_s = float(timeout_s)
        self.protected_terms = tuple(string_list(protected_terms, "protected_terms"))

    def _call(self, query: str) -> tuple[object, BaseException | None, bool]:
        box: dict[str, object] = {}

        def target() -> None:
            try:
                box["value"] = self.rewriter(query)
            except BaseException as exc:  # noqa: BLE001 - reported, never raised
                box["error"] = exc

        # A daemon thread: a rewriter stuck past the timeout is abandoned, and it must not
        # keep the process alive at exit. Python cannot kill it, only stop waiting.
        worker = threading.Thread(target=target, name="pgfunnel-rewrite", daemon=True)
        worker.start()
        worker.join(self.timeout_s)
        if worker.is_alive():
            return None, None, True
        err = box.get("error")
        if isinstance(err, BaseException):
            return None, err, False
        return box.get("value"), None, False

    def rewrite(self, query: str) -> RewriteResult:
        if not isinstance(query, str):
            raise InvalidInputError(f"query: must be a str, got {type(query).__name__}")
        protected = tuple(protected_tokens(query, self.protected_terms))
        start = time.monotonic()
        returned, error, timed_out = self._call(query)
        elapsed = time.monotonic() - start
        proposed = returned if isinstance(returned, str) else None

        def fallback(reason: str, missing: tuple[str, ...] = ()) -> RewriteResult:
            return RewriteResult(
                query=query,
                original=query,
                used_rewrite=False,
                reason=f"fallback: {reason}",
                proposed=proposed,
                protected=protected,
                missing=missing,
                elapsed_s=elapsed,
            )

        if timed_out:
            return fallback(f"rewriter timed out after {self.timeout_s:g}s")
        if error is not None:
            return fallback(f"rewriter raised {type(error).__name__}: {str(error)[:200]}")
        if proposed is None:
            # what it returned instead, by type: None, bytes or a list were all "no text"
            return fallback("rewriter returned None, not a str" if returned is None else
                            f"rewriter returned {type(returned).__name__}, not a str")
        candidate = " ".join(proposed.split())
        if not candidate:
            return fallback("rewriter returned an empty query")
        from pgfunnel.errors import PgfunnelError
        from pgfunnel.search import check_query_text

        try:
            # text the search would refuse (a NUL, over the length limit) is no rewrite
            check_query_text(candidate)
        except PgfunnelError as exc:
            return fallback(f"rewrite is not a usable query ({exc})")
        missing = tuple(t for t in protected if not _kept(t, candidate))
        if missing:
            return fallback("rewrite lost protected token(s) " + ", ".join(missing), missing)
        if candidate == " ".join(query.split()):
            return RewriteResult(
                query=query,
                original=query,
                used_rewrite=False,
                reason="rewrite identical to the original",
                proposed=proposed,
                protected=protected,
                elapsed_s=elapsed,
            )
        return RewriteResult(
            query=candidate,
            original=query,
            used_rewrite=True,
            reason="rewritten; all protected tokens kept" if protected else "rewritten",
            proposed=proposed,
            protected=protected,
            elapsed_s=elapsed,
        )


# -- follow-up resolution -----------------------------------------------------------------


@dataclass(frozen=True)
class Resolution:
    """What :meth:`FollowupResolver.resolve` did, for the trace."""

    query: str
    original: str
    carried_terms: list[str]
    reason: str


_FOLLOWUP_CUES = (
    "what about",
    "how about",
    "what if",
    "same for",
    # a question that opens with "and" ("and for teams?", "and what about refunds?")
    # continues the previous one
    "and",
)

# openings whose pronoun points back to the previous turn ("is it different for ...",
# "does that apply to ..."); they count as a cue only when the query names at most
# _ANAPHORA_MAX_TOPICS topic words itself, because "is it possible to export invoices"
# is a question of its own
_ANAPHORA_CUES = (
    "is it", "is that", "is this", "are they", "are those",
    "does it", "does that", "does this", "do they", "do those",
    "can it", "can they", "will it", "would it", "should it", "how does it", "how does that",
)
_ANAPHORA_MAX_TOPICS = 2

# a fragment that continues the last question with a qualifier of its own ("for
# teams?", "on mobile?", "same question for monthly"): a cue, as the openings above
# are, only for a query of at most _ANAPHORA_MAX_TOPICS topic words
_FRAGMENT_CUES = ("for", "on", "in", "with", "without", "under", "from", "during", "via",
                  "same")

# what a turn may open with before its cue ("Thanks! And on mobile?", "ok, what about
# teams?"): looked past when the cue is sought, and not counted as the query's topic
_FILLER_RE = re.compile(
    r"^\s*(?:(?:ok(?:ay)?|thanks|thank you|thx|great|cool|sure|alright|all right|got it|"
    r"i see|hmm+|yes|yeah|no|nope|right|perfect|nice|and also|also)(?=\W)[\s,.!;:\-]*)+",
    re.IGNORECASE)

# pronouns that point back to the previous turn wherever they stand ("how do I undo it",
# "how long does it take?", "can I export them?"), and those that do only as the last
# word ("can I undo that?": elsewhere "that" and "this" are mostly "plans that renew",
# "this plan"); a cue, as the openings above are, only for a query of at most
# _ANAPHORA_MAX_TOPICS topic words of its own
_PRONOUNS = frozenset({"it", "them", "they"})
_FINAL_PRONOUNS = frozenset({"that", "this", "those", "these"})

# words that open the object of a preposition used as one ("on the enterprise plan",
# "with a free account"): a preposition named as a keyword ("for loop syntax", "with
# statement") is followed by the words it is named with, never by one of these
_DETERMINERS = frozenset({
    "the", "a", "an", "my", "our", "your", "their", "his", "her", "its", "this", "that",
    "these", "those", "each", "every", "all", "any", "some", "no"})

# question words that stand for a whole question after another one ("why?", "how")
_INTERROGATIVES = frozenset({
    "why", "how", "what", "when", "where", "which", "who", "whom", "whose"})

# words that compare with something said before instead of naming a topic
_RELATIONAL_WORDS = frozenset({
    "different", "difference", "differ", "same", "similar", "possible", "also", "too", "else",
    "other", "instead", "still", "otherwise", "again"})


# the fragment cues that are prepositions ("same" refers back by itself)
_PREPOSITION_CUES = frozenset(_FRAGMENT_CUES) - {"same"}
# cues that continue the previous question with a fragment of it
_CONTINUATION_CUES = _PREPOSITION_CUES | {"and"}
# words that, alone as a turn, point back to an earlier one ("why", "it", "same", "more")
_POINTS_BACK = _INTERROGATIVES | _PRONOUNS | _FINAL_PRONOUNS | _RELATIONAL_WORDS | {"more"}


def _reads_as_question(turn: str) -> bool:
    """Whether *turn* is phrased as a question or sentence (a "?" or any function word),
    not as bare keywords ("HAS_TLSv1", "object slice")."""
    if turn.rstrip().endswith("?"):
        return True
    return any(w.casefold() in STOPWORDS for w in _words(turn))


def _names_a_term(fragment: str) -> bool:
    """Whether the words after a fragment's opening preposition read as one term ("loop
    syntax", "import statement"): lower-case, the last one singular, none a determiner,
    a name (a capital), a number or an identifier. A qualifying phrase has one of those
    ("the enterprise plan", "monthly plans", "Windows 11")."""
    after = _words(fragment)[1:]
    if not after or after[0].casefold() in _DETERMINERS:
        return False
    if any(_is_identifier(w) or not w.islower() for w in after):
        return False
    last = after[-1].casefold()
    return not (len(last) > 3 and last.endswith("s") and not last.endswith("ss"))


# the longest word the analyzer indexes or searches (longer ones are dropped and reported)
_MAX_TERM_CHARS = 100

#: the most characters of all the turns of a follow-up's history together: ten turns as
#: long as a search's query may be. A turn may be longer than a query (a pasted blob,
#: which the resolver reads past), but reading is linear in the text: a megabyte turn
#: took 1.3 s. A history is the user's own latest turns, which a chat app can cut
MAX_HISTORY_CHARS = 100_000
#: and the most turns (a million empty ones took 3 s to look through)
MAX_HISTORY_TURNS = 1_000


def check_history(history: Sequence[str]) -> None:
    """An InvalidInputError naming the history with more than MAX_HISTORY_TURNS turns or
    more than MAX_HISTORY_CHARS characters in all, or the turn (``history[i]``) that is
    longer than that alone."""
    if len(history) > MAX_HISTORY_TURNS:
        raise InvalidInputError(
            f"history: has {len(history):,} turns; the limit is {MAX_HISTORY_TURNS:,} "
            "(pass the latest turns)")
    total = 0
    for i, turn in enumerate(history):
        if len(turn) > MAX_HISTORY_CHARS:
            raise InvalidInputError(
                f"history[{i}]: is {len(turn):,} characters long; a history holds at most "
                f"{MAX_HISTORY_CHARS:,} in all")
        total += len(turn)
    if total > MAX_HISTORY_CHARS:
        raise InvalidInputError(
            f"history: holds {total:,} characters in {len(history):,} turns; the limit is "
            f"{MAX_HISTORY_CHARS:,} in all (pass the latest turns)")


class FollowupResolver:
    """Deterministic stand-alone rewrite for follow-up turns.

    A query needs context when it has no topic word, or when it opens with a follow-up
    cue ("what about ...", "how about ..."). Then the topic words of the latest earlier
    turn that has any are put in front of it. A self-contained query that only looks like
    a fragment comes through unchanged, as a chat app sends the history with every turn:
    one word that is no question ("Any"), a preposition naming a term ("for loop syntax?")
    and a fragment without a "?" after keywords ("with statement" after "HAS_TLSv1").
    The cues and stopwords are English only. A topic word is a content word that is not
    a stopword and not one of *qualifiers*; when *topic_terms* is given, only those words
    count as topics (a domain vocabulary makes the rule stricter and safer).
    """

    def __init__(
        self,
        topic_terms: Iterable[str] | None = None,
        *,
        qualifiers: Iterable[str] = (),
        max_terms: int = 4,
    ) -> None:
        max_terms = positive_int("max_terms", max_terms)
        self.topic_terms: frozenset[str] | None = (
            None if topic_terms is None
            else frozenset(_singular(t) for t in string_list(topic_terms, "topic_terms"))
        )
        self.qualifiers = frozenset(_singular(q) for q in string_list(qualifiers, "qualifiers"))
        self.max_terms = max_terms

    def topic_words(self, text: str) -> list[str]:
        out: list[str] = []
        for w in content_words(text):
            if len(w) > _MAX_TERM_CHARS:
                # the analyzer searches no word this long; carried into a follow-up it
                # would only make the query too long to search at all
                continue
            s = _singular(w)
            if s in self.qualifiers or w in _RELATIONAL_WORDS:
                continue
            if self.topic_terms is not None and s not in self.topic_terms:
                continue
            if w not in out:
                out.append(w)
        return out

    def resolve(self, history: Sequence[str], query: str) -> Resolution:
        # one string was read as turns of one character each (no topic found, silently)
        history = string_list(history, "history")
        check_history(history)
        if not isinstance(query, str):
            raise InvalidInputError(f"query: must be a str, got {type(query).__name__}")
        filler = _FILLER_RE.match(query)
        rest = query[filler.end():] if filler and filler.end() < len(query) else query
        own = self.topic_words(rest)
        lowered = " ".join(rest.casefold().split())
        cue = next((c for c in _FOLLOWUP_CUES if lowered.startswith(c + " ")), None)
        if cue in ("and", "what if") and len(own) > _ANAPHORA_MAX_TOPICS:
            # "And how do I export invoices as CSV?" and "what if I exceed my storage
            # quota?" ask a question of their own: the previous turn's topic put in
            # front of it searched for both
            cue = None
        if cue is None and len(own) <= _ANAPHORA_MAX_TOPICS:
            cue = next((c for c in (*_ANAPHORA_CUES, *_FRAGMENT_CUES)
                        if lowered.startswith(c + " ")), None)
            if cue in _PREPOSITION_CUES and len(own) > 1 and _names_a_term(rest):
                # "for loop syntax?", "from import statement": a preposition followed by
                # two topic words that read as one term names a thing of its own; a
                # fragment that continues a question qualifies it with one word ("for
                # teams?", "on mobile?") or with a phrase ("on the enterprise plan?",
                # "for monthly plans?", "on Windows 11?")
                cue = None
        if cue is None and own and len(own) <= _ANAPHORA_MAX_TOPICS:
            words = [w.casefold() for w in _words(query)]
            pronoun = next((w for w in words if w in _PRONOUNS), None)
            if pronoun is None and words and words[-1] in _FINAL_PRONOUNS:
                pronoun = words[-1]
            cue = None if pronoun is None else f"pronoun {pronoun!r}"
        if own and cue is None:
            return Resolution(query, query, [], "has its own topic; unchanged")
        if cue is None:
            words = [w.casefold() for w in _words(rest)]
            if len(words) == 1 and not rest.rstrip().endswith("?") \
                    and words[0] not in _POINTS_BACK and not content_words(rest):
                # one word that is no question, pronoun or comparison ("Any", "X",
                # "__all__", "with") is a keyword searched for itself: a chat app sends
                # the history with every turn, and an earlier turn's topic put in front of
                # it searched for that topic instead. A content word that is no topic (a
                # qualifier, "annual"; one outside topic_terms) qualifies the last one
                return Resolution(query, query, [], "one word of its own, not a question "
                                  "or a word that points back; unchanged")
        body = query
        if cue == "and":
            # "and on the enterprise plan?" continues the last question: left in after
            # the carried topic ("deleted projects and on the enterprise plan?") its "and"
            # joins two clauses that decompose() would search apart (and so would a
            # "Thanks!" before it)
            body = rest.split(None, 1)[1]
        present = {_singular(w) for w in content_words(query)}
        for turn in reversed(history):
            carried = [w for w in self.topic_words(turn) if _singular(w) not in present]
            carried = carried[: self.max_terms]
            if carried and cue in _CONTINUATION_CUES and not query.rstrip().endswith("?") \
                    and not _reads_as_question(turn):
                # "with statement" after "HAS_TLSv1": keywords after keywords are two
                # searches; a fragment continues a question, or asks one itself ("and for
                # teams?" after "refund policy")
                return Resolution(query, query, [], f"follow-up cue {cue!r}, but neither "
                                  "the query nor the earlier turn with a topic is phrased as "
                                  "a question; unchanged")
            if carried:
                from pgfunnel.search import MAX_QUERY_CHARS

                resolved = f"{' '.join(carried)} {body}".strip()
                if len(resolved) > MAX_QUERY_CHARS and len(query) <= MAX_QUERY_CHARS:
                    # a query the search takes was made one it refuses ("query_text: at
                    # most 10,000 characters"), for text the caller never wrote
                    return Resolution(query, query, [], "follow-up, but the carried words "
                                      f"would make it over {MAX_QUERY_CHARS:,} characters; "
                                      "unchanged")
                why = ("no topic word in the query" if not cue
                       else cue if cue.startswith("pronoun ") else f"follow-up cue {cue!r}")
                return Resolution(
                    query=resolved,
                    original=query,
                    carried_terms=carried,
                    reason=f"{why}; carried {', '.join(carried)} from an earlier turn",
                )
        return Resolution(query, query, [], "no earlier turn has a topic word; unchanged")
