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
from pydocs import log  # noqa: E402

from pgfunnel.html_text import html_to_text  # noqa: E402

DOC_PACKAGE = "python-django-doc"
DOC_ROOT = Path("/usr/share/doc/python-django-doc/html")


def ensure_docs(explicit: Path | None) -> Path:
    root = explicit or DOC_ROOT
    if not (root / "genindex.html").is_file():
        raise SystemExit(f"Django HTML docs not found under {root}; install them with: "
                         f"sudo apt-get install -y {DOC_PACKAGE} (or pass --docs DIR)")
    return root


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
    log(f"index: {len(entries)} top-level entries")
    pydocs.write_jsonl(out_dir / "corpus.jsonl", docs)
    pydocs.write_jsonl(out_dir / "queries.jsonl", queries)
    counts = {"docs": len(docs), "index_entries": len(entries), "queries": len(queries),
              "chunks_estimate": sum(pydocs.estimate_chunks(str(d["text"])) for d in docs)}
    for s in pydocs.SLICES:
        counts[f"queries_{s}"] = sum(1 for q in queries if q["slice"] == s)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser, _ = pydocs.bench_parser("djangodocs", __doc__.split("\n\n")[0],
                                    "the Django docs")
    args = parser.parse_args(argv)
    if args.command == "run":
        print(pydocs.run(args.data, args.out, dsn=args.dsn, collection="djangodocs", k=args.k))
        return 0
    for key, value in build(args.out, args.per_slice, args.seed, args.docs).items():
        log(f"  {key:<24} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
