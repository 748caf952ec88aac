#!/usr/bin/env python3
"""Offline experiment: would BM25 gain from terms for adjacent word pairs (a proximity signal)?

Not part of the product. It answers one question before anyone builds it into the
analyzer: if every pair of neighbouring plain words of a chunk (`context manager`) were
indexed as a term of its own and a query's pairs were searched with a weight w beside its
words, how would nDCG@10 move, per slice, for the lexical leg and for the default fusion?

Everything but the pairs is pgfunnel's: chunks from `pgfunnel.sources.chunk_text`, terms
from the database's analyzer (`TermAnalyzer` for chunks, `pgfunnel.analyze_tokens` for
queries), BM25 with k1 1.2 and b 0.75 and the chunk length counted in words' terms only.
A pair is two neighbouring whitespace-separated words that are each one kept term, with
no punctuation between them (`manager,` ends a run) and no stop word (`file of format`
makes no pair); a query is split at punctuation the same way.

The fused figures are an approximation of `funnel_search`, computed here: min-max over
each leg's top 40, weights {1, 0.7} ({1, 0.2} for a one-identifier query), the pool of
40 capped at 3 chunks per citekey, k = 10; the dense leg is an exact cosine scan of the
chunks' all-MiniLM-L6-v2 vectors (embedded under their title, as ingest does), and the
query-coverage and best-match rules are left out. Compare its rows with each other, not
with `pgfunnel eval`'s.

    python bench/pydocs.py build --out bench/data/pydocs
    python bench/adjacent_pairs.py bench/data/pydocs [--weights 0.15 0.25] [--lexical-only]

Embedding a corpus of 10k chunks takes 10 - 20 minutes on two cores; the vectors are
kept next to the data (`pairs_vectors.npz`) for the next run. Needs `pgfunnel init` on
the default database (`PGFUNNEL_DSN` or the embedded server).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from pgfunnel.db import connect
from pgfunnel.ingest import TermAnalyzer
from pgfunnel.sources import chunk_text, embedding_input

K1, B = 1.2, 0.75
DEPTH, POOL, CAP, K = 40, 40, 3, 10
# a query is cut into runs at punctuation; a chunk's word ending in one of these ends a run
QUERY_BREAK = re.compile(r"[,;:()!?\[\]]|\.(?:\s|$)")
WORD_END_BREAK = tuple(",.;:!?)]")
WORD_START_BREAK = ("(", "[")


def head(terms: tuple[str, ...]) -> str:
    # a compound yields its whole form and its parts: the whole form is the longest
    return max(terms, key=len)


def chunk_pairs(words: Sequence[tuple[str, tuple[str, ...]]]) -> list[str]:
    """Pair terms of a chunk given as (raw word, its terms) in order."""
    pairs: list[str] = []
    previous: str | None = None
    for raw, terms in words:
        if raw.startswith(WORD_START_BREAK) or not terms:
            previous = None
        if not terms:
            continue
        term = head(terms)
        if previous is not None:
            pairs.append(f"{previous} {term}")
        previous = None if raw.endswith(WORD_END_BREAK) else term
    return pairs


def query_pairs(runs: Sequence[Sequence[tuple[str, ...]]]) -> list[str]:
    """Pair terms of a query given as runs (split at punctuation) of per-position terms."""
    pairs: list[str] = []
    for run in runs:
        previous: str | None = None
        for terms in run:
            if not terms:  # a stop word or question word breaks the run
                previous = None
                continue
            term = head(terms)
            if previous is not None:
                pairs.append(f"{previous} {term}")
            previous = term
    return pairs


class Index:
    """Postings of one kind of term (words, or pairs) with the words' chunk lengths."""

    def __init__(self, per_chunk: Iterable[Counter[str]], norm: np.ndarray) -> None:
        lists: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for chunk, counts in enumerate(per_chunk):
            for term, tf in counts.items():
                lists[term].append((chunk, tf))
        self.postings = {t: (np.array([c for c, _ in p]), np.array([f for _, f in p], float))
                         for t, p in lists.items()}
        self.norm = norm
        self.n = len(norm)
        self.size = sum(len(p) for p in lists.values())

    def add_scores(self, terms: Iterable[str], scores: np.ndarray, weight: float = 1.0) -> None:
        for term in set(terms):
            if (found := self.postings.get(term)) is None:
                continue
            chunks, tf = found
            idf = math.log(1 + (self.n - len(chunks) + 0.5) / (len(chunks) + 0.5))
            scores[chunks] += weight * idf * tf * (K1 + 1) / (tf + self.norm[chunks])


def ndcg(docs: Sequence[str], relevant: dict[str, int], k: int = K) -> float:
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(docs[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    return dcg / sum(g / math.log2(i + 2) for i, g in enumerate(ideal))


def distinct_citekeys(order: Iterable[int], citekeys: Sequence[str]) -> list[str]:
    seen: list[str] = []
    for i in order:
        if citekeys[i] not in seen:
            seen.append(citekeys[i])
    return seen


def top(scores: np.ndarray, n: int) -> list[int]:
    return [int(i) for i in np.argsort(-scores, kind="stable")[:n]]


def minmax(ids: Sequence[int], scores: np.ndarray, floor: float | None = None) -> dict[int, float]:
    if not ids:
        return {}
    values = scores[list(ids)]
    lo = values.min() if floor is None else floor
    hi = values.max()
    return {i: float((scores[i] - lo) / (hi - lo)) if hi > lo else 1.0 for i in ids}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="a folder with corpus.jsonl and queries.jsonl")
    ap.add_argument("--weights", type=float, nargs="+", default=[0.1, 0.15, 0.25, 0.5])
    ap.add_argument("--analyzer", default="english_v6")
    ap.add_argument("--lexical-only", action="store_true", help="skip the embedding and fusion")
    args = ap.parse_args()

    corpus = [json.loads(line) for line in (args.data / "corpus.jsonl").read_text().splitlines()]
    # queries with no answer have no nDCG; follow-ups are searched as typed (no history)
    queries = [q for line in (args.data / "queries.jsonl").read_text().splitlines()
               if (q := json.loads(line))["relevant"]]
    chunks = [(d, c) for d in corpus for c in chunk_text(d["text"])]
    citekeys = [d["citekey"] for d, _ in chunks]
    with connect(None, autocommit=True) as conn:
        analyzer = TermAnalyzer(conn, args.analyzer)
        analyzer.prepare(c.text for _, c in chunks)
        chunk_words = [[(w, analyzer.cache[w]) for w in c.text.split()] for _, c in chunks]
        query_runs: list[list[list[tuple[str, ...]]]] = []
        for q in queries:
            runs = []
            for part in QUERY_BREAK.split(q["query"]):
                by_position: dict[int, list[str]] = defaultdict(list)
                for position, term in conn.execute(
                        "select token_position, term from pgfunnel.analyze_tokens(%s, %s, true)",
                        (part, args.analyzer)).fetchall():
                    if term is not None:
                        by_position[position].append(term)
                    else:
                        by_position.setdefault(position, [])
                runs.append([tuple(by_position[p]) for p in sorted(by_position)])
            query_runs.append(runs)
        one_identifier: list[bool] = []
        for q in queries:
            row = conn.execute("select pgfunnel._identifier_query(%s)",
                               (q["query"],)).fetchone()
            # a select without a from clause yields one row; None here is a broken schema
            if row is None:
                raise SystemExit("pgfunnel._identifier_query returned no row: "
                                 "run pgfunnel init on this database")
            one_identifier.append(bool(row[0]))

    word_counts = [Counter(t for _, terms in words for t in terms) for words in chunk_words]
    lengths = np.array([sum(c.values()) for c in word_counts], float)
    norm = K1 * (1 - B + B * lengths / lengths.mean())
    words = Index(word_counts, norm)
    pairs = Index((Counter(chunk_pairs(w)) for w in chunk_words), norm)
    print(f"{args.data.name}: {len(chunks)} chunks, {len(queries)} queries; postings: "
          f"{words.size} of words, {pairs.size} of pairs ({pairs.size / words.size:.2f}x)")

    dense: np.ndarray | None = None
    query_vectors: np.ndarray | None = None
    if not args.lexical_only:
        cache = args.data / "pairs_vectors.npz"
        if cache.exists():
            stored = np.load(cache)
            dense, query_vectors = stored["chunks"], stored["queries"]
        else:
            from pgfunnel.embedder import Embedder

            embedder = Embedder()
            query_vectors = np.asarray(embedder.embed([q["query"] for q in queries]), np.float32)
            dense = np.asarray(embedder.embed(
                [embedding_input(d["title"], c.text, "title", c.section_path) for d, c in chunks]),
                np.float32)
            np.savez(cache, chunks=dense, queries=query_vectors)

    def evaluate(weight: float) -> dict[str, dict[str, list[float]]]:
        results: dict[str, dict[str, list[float]]] = {"lexical": defaultdict(list),
                                                       "fused": defaultdict(list)}
        for qi, (query, runs) in enumerate(zip(queries, query_runs, strict=True)):
            scores = np.zeros(len(chunks))
            words.add_scores([t for run in runs for terms in run for t in terms], scores)
            if weight:
                pairs.add_scores(query_pairs(runs), scores, weight)
            lexical = [i for i in top(scores, DEPTH) if scores[i] > 0]
            slices = (query["slice"], f"{query['slice']} ({query.get('split', '-')})", "all",
                      f"all ({query.get('split', '-')})")
            value = ndcg(distinct_citekeys(lexical, citekeys), query["relevant"])
            for s in slices:
                results["lexical"][s].append(value)
            if dense is None or query_vectors is None:
                continue
            similarity = dense @ query_vectors[qi]
            nearest = top(similarity, DEPTH)
            dense_weight = 0.2 if one_identifier[qi] else 0.7
            fused: dict[int, float] = defaultdict(float)
            # a short lexical list holds every match: the chunks below it score 0
            for i, v in minmax(lexical, scores, None if len(lexical) == DEPTH else 0.0).items():
                fused[i] += v
            for i, v in minmax(nearest, similarity).items():
                fused[i] += dense_weight * v
            per_source: Counter[str] = Counter()
            kept: list[int] = []
            for i in sorted(fused, key=lambda c: (-fused[c], c))[:POOL]:
                if per_source[citekeys[i]] < CAP:
                    per_source[citekeys[i]] += 1
                    kept.append(i)
            value = ndcg(distinct_citekeys(kept[:K], citekeys), query["relevant"])
            for s in slices:
                results["fused"][s].append(value)
        return results

    table: dict[float, dict[str, dict[str, list[float]]]] = {
        w: evaluate(w) for w in [0.0, *args.weights]}
    for kind in ("lexical", "fused"):
        names = sorted(table[0.0][kind])
        if not names:
            continue
        print(f"\n{kind}, nDCG@10 (pair weight 0 = as pgfunnel is)")
        print("| slice | n | " + " | ".join(f"w {w:g}" for w in table) + " |")
        print("|---|---:|" + "---:|" * len(table))
        for name in names:
            cells = [f"{np.mean(table[w][kind][name]):.3f}" for w in table]
            print(f"| {name} | {len(table[0.0][kind][name])} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
