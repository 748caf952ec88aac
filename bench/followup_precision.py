#!/usr/bin/env python3
"""Precision of the default follow-up resolver: self-contained queries must come through.

A chat app sends the history with every turn, so :class:`pgfunnel.transform.FollowupResolver`
sees self-contained queries far more often than follow-ups. This script counts, per slice:

* false positives: self-contained benchmark queries that the resolver changes when each is
  paired with an unrelated earlier turn (chosen deterministically: a turn that shares no
  content word with the query, picked by a stable hash, from the same benchmark's
  queries; ``pydocs+q`` rows pair the pydocs queries with the help-center's questions);
* true positives: the help-center ``followup`` slice, with its own history, and how many
  of those it resolves (carries a topic into).

Sources: the help-center benchmark from pgfunnel's generator (always), and the pydocs
queries when the Python HTML docs are installed (every usable entry of the general index,
as ``bench/pydocs.py`` makes them, not its sample of 150 a slice; skipped otherwise,
nothing is downloaded). Pure Python, no database, a second.

    python bench/followup_precision.py [--show]
"""

from __future__ import annotations

import argparse
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pgfunnel.eval.synthetic import build_corpus, build_queries
from pgfunnel.transform import FollowupResolver, _singular, content_words

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _key(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def unrelated_turn(query: str, pool: Sequence[str]) -> str:
    """A turn of *pool* sharing no content word with *query*, picked by a stable hash."""
    mine = {_singular(w) for w in content_words(query)}
    start = _key(query) % len(pool)
    for i in range(len(pool)):
        turn = pool[(start + i) % len(pool)]
        if turn != query and not mine & {_singular(w) for w in content_words(turn)}:
            return turn
    return pool[start]


def helpcenter() -> tuple[list[dict[str, Any]], list[str]]:
    queries = build_queries(build_corpus())
    # the earlier turns of the benchmark: the topic questions its follow-ups come after
    pool = sorted({str(t) for q in queries for t in q["history"]})
    return queries, pool


def pydocs_queries() -> list[dict[str, object]] | None:
    try:
        import pydocs  # bench/pydocs.py
    except ImportError:
        return None
    root = pydocs.find_docs_root()
    if root is None:
        return None
    keys = {pydocs.citekey_for(p.relative_to(root).as_posix())
            for p in pydocs.iter_page_paths(root)}
    entries = []
    for page in pydocs.genindex_files(root):
        entries.extend(pydocs.parse_genindex(page.read_text(encoding="utf-8",
                                                            errors="replace")))
    # every usable index entry, not the benchmark's sample of 150 a slice: the more
    # self-contained queries, the more false positives show
    result: list[dict[str, object]] = pydocs.build_queries(entries, keys, per_slice=10**6)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--show", action="store_true", help="print each changed query")
    args = ap.parse_args(argv)
    resolver = FollowupResolver()
    rows: list[tuple[str, str, int, int]] = []
    shown: list[str] = []

    def self_contained(bench: str, queries: list[dict[str, object]], pool: list[str]) -> None:
        slices = sorted({str(q["slice"]) for q in queries} - {"followup"})
        for s in slices:
            items = [str(q["query"]) for q in queries if q["slice"] == s]
            changed = 0
            for text in items:
                prev = unrelated_turn(text, pool)
                res = resolver.resolve([prev], text)
                if res.query != text:
                    changed += 1
                    shown.append(f"  FP {bench}/{s}: {text!r} after {prev!r} -> {res.query!r}"
                                 f" ({res.reason})")
            rows.append((bench, s, len(items), changed))

    hc, pool = helpcenter()
    self_contained("helpcenter", hc, pool)
    follow = [q for q in hc if q["slice"] == "followup"]
    resolved = 0
    for q in follow:
        res = resolver.resolve(list(q["history"]), str(q["query"]))
        if res.carried_terms:
            resolved += 1
        else:
            shown.append(f"  FN helpcenter/followup: {q['query']!r} ({res.reason})")
    py = pydocs_queries()
    if py is None:
        print("pydocs: Python HTML docs not installed; skipped", file=sys.stderr)
    else:
        # after another keyword search of the same docs, and after a question (a chat)
        self_contained("pydocs", py, sorted({str(q["query"]) for q in py}))
        self_contained("pydocs+q", py, pool)
    print("pgdocs: skipped (its queries need the PostgreSQL docs package; see bench/pgdocs.py)",
          file=sys.stderr)

    print(f"{'benchmark':<11} {'slice':<11} {'queries':>7} {'changed':>7}  kind")
    for bench, s, n, changed in rows:
        print(f"{bench:<11} {s:<11} {n:>7} {changed:>7}  self-contained (false positives)")
    print(f"{'helpcenter':<11} {'followup':<11} {len(follow):>7} {resolved:>7}  "
          "follow-ups (resolved = true positives)")
    fp = sum(r[3] for r in rows)
    total = sum(r[2] for r in rows)
    print(f"false positives: {fp} of {total} self-contained; "
          f"true positives: {resolved} of {len(follow)} follow-ups")
    if args.show:
        print("\n".join(shown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
