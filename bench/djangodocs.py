#!/usr/bin/env python3
"""Third docs benchmark, from Django 3.2's documentation (Debian ``python-django-doc``).

Built like ``bench/pydocs.py`` (a Sphinx ``genindex.html`` gives the queries, each judged
relevant to the pages its entry links to; the same four slices and dev/test split), with
two differences that make it a check of the product rather than of the benchmark code:
the pages are read by pgfunnel's own HTML main-content extraction (``pgfunnel ingest``
of an HTML folder does the same), and nothing of this corpus was used to choose any
default. Django's index is mostly API names: the keyword and question slices are small
(tens of queries), so read their numbers with that in mind.

    python bench/djangodocs.py build [--out bench/data/djangodocs] [--docs DIR]
    python bench/djangodocs.py run [--data bench/data/djangodocs] [--out bench/out]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pydocs  # noqa: E402

from pgfunnel.html_text import html_to_text  # noqa: E402

DOC_PACKAGE = "python-django-doc"
DOC_ROOT = Path("/usr/share/doc/python-django-doc/html")


def ensure_docs(explicit: Path | None) -> Path:
    return pydocs.docs_root_with("genindex.html", explicit, DOC_ROOT, DOC_PACKAGE,
                                 "Django HTML docs")


def build(out_dir: Path, per_slice: int = 150, seed: int = 0,
          docs_root: Path | None = None) -> dict[str, int]:
    """Write ``corpus.jsonl`` and ``queries.jsonl`` under ``out_dir``; return counts."""
    root = ensure_docs(docs_root)
    out_dir.mkdir(parents=True, exist_ok=True)
    docs = [d for d in pydocs.build_corpus(root, seed=seed, parse=html_to_text)
            if not str(d["citekey"]).startswith(("genindex", "py-modindex", "search"))]
    keys = {str(d["citekey"]) for d in docs}
    entries = pydocs.parse_genindex((root / "genindex.html").read_text(encoding="utf-8"))
    # the question templates name the product
    templates = tuple(t.replace("in python", "in django") for t in pydocs.QUESTION_TEMPLATES)
    queries = pydocs.build_queries(entries, keys, per_slice=per_slice, seed=seed,
                                   templates=templates)
    return pydocs.write_benchmark(out_dir, docs, entries, queries)


def main(argv: list[str] | None = None) -> int:
    return pydocs.docs_bench_main("djangodocs", __doc__.split("\n\n")[0], "the Django docs", build,
                                  argv)


if __name__ == "__main__":
    sys.exit(main())
