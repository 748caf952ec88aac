#!/usr/bin/env python3
"""Judged sets in French and German from the system's translated man pages.

``python bench/manpages.py build --lang fr --out bench/out/manpages`` renders every page
under /usr/share/man/LANG/man{1,5,7,8} with groff and writes ``corpus-LANG.jsonl`` (one
document per page, ``language`` set to LANG) and ``queries-LANG.jsonl``.

Nobody here wrote the queries: each page's NAME line (``NOM`` / ``BEZEICHNUNG``) gives
its one-line description, which is the query, and the page is the relevant document. The
NAME section is left out of the indexed text and the title is the page's name alone
(``apropos(1)``), so the query is not a copy of a line the page holds: the page has to
be found by what its body says, in its own words and inflections. Slices, all from the
same descriptions:

- ``description``: the description as the page gives it.
- ``question``: wrapped in a question of the language (a template chosen by a stable
  hash of the description, as bench/pydocs.py wraps its keyword entries).
- ``unaccented``: the description typed without accents (French: é -> e, à -> a, ç -> c,
  œ -> oe; German: the usual transliteration, ä -> ae, ö -> oe, ü -> ue, ß -> ss), as a
  keyboard without them writes it.

Pages whose rendered text has fewer than MIN_WORDS words, and copies of a page under
another name (the same text), are left out.

The rule, set before any measurement: a language's analyzer (``french_v8`` on the French
set, ``german_v8`` on the German one) is worth offering if, all queries pooled, the
lexical configuration's nDCG@10 under it is at least 0.02 above its nDCG@10 under each of
``english_v8`` (the default) and ``simple_v8``, and no slice of the lexical or the
default configuration is more than 0.005 below the better of those two. It is never a
default: a collection chooses it (``pgfunnel reindex --analyzer``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

MAN_ROOT = Path("/usr/share/man")
SECTIONS = ("man1", "man5", "man7", "man8")
MIN_WORDS = 60
NAME_HEADINGS = {"fr": "NOM", "de": "BEZEICHNUNG"}
SLICES = ("description", "question", "unaccented")

# question templates per language; {x} is the description, its first letter lower-cased
QUESTION_TEMPLATES: dict[str, tuple[str, ...]] = {
    "fr": (
        "comment {x} ?",
        "quelle commande pour {x} ?",
        "je cherche : {x}",
    ),
    "de": (
        "wie kann ich {x}?",
        "welcher Befehl für {x}?",
        "ich suche: {x}",
    ),
}

_HEADING = re.compile(r"^[^\s].*$")
_WS = re.compile(r"[ \t]+")


def stable_hash(text: str) -> int:
    return int(hashlib.sha1(text.encode("utf-8")).hexdigest()[:12], 16)


def make_query_id(slice_name: str, page: str) -> str:
    return f"{slice_name}-{page}"


def assign_split(page: str) -> str:
    """dev/test by a hash of the page, so the slices of one page share a split."""
    return "dev" if stable_hash(page) % 2 == 0 else "test"


def render(path: Path) -> str:
    """The page as text: groff's UTF-8 output without overstriking or colour."""
    with gzip.open(path, "rb") as fh:
        source = fh.read()
    out = subprocess.run(
        ["groff", "-k", "-man", "-Tutf8", "-P-cbou", "-rLL=2000n"],
        input=source, capture_output=True, check=False)
    return out.stdout.decode("utf-8", errors="replace")


def parse_page(rendered: str, lang: str) -> tuple[str | None, str]:
    """(the NAME line's description, the page's text as Markdown without its NAME section)."""
    lines = rendered.splitlines()
    # groff's header and footer: the first and last non-empty lines
    body = [ln.rstrip() for ln in lines]
    while body and not body[0].strip():
        body.pop(0)
    if body:
        body.pop(0)
    while body and not body[-1].strip():
        body.pop()
    if body:
        body.pop()
    description: str | None = None
    out: list[str] = []
    section = ""
    for ln in body:
        if not ln.strip():
            out.append("")
            continue
        if _HEADING.match(ln):
            section = ln.strip()
            if section != NAME_HEADINGS[lang]:
                out.append(f"\n## {section}\n")
            continue
        text = _WS.sub(" ", ln.strip())
        if section == NAME_HEADINGS[lang]:
            if description is None and " - " in text:
                description = text.split(" - ", 1)[1].strip()
            elif description is not None:
                description += " " + text
            continue
        out.append(text)
    joined = "\n".join(out)
    joined = re.sub(r"\n{3,}", "\n\n", joined).strip()
    return description, joined


def strip_accents(text: str, lang: str) -> str:
    """The text as a keyboard without accents types it."""
    if lang == "de":
        for a, b in (("ä", "ae"), ("ö", "oe"), ("ü", "ue"), ("Ä", "Ae"), ("Ö", "Oe"),
                     ("Ü", "Ue"), ("ß", "ss")):
            text = text.replace(a, b)
    text = text.replace("œ", "oe").replace("Œ", "Oe").replace("æ", "ae")
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize(
        "NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))


def wrap_question(description: str, lang: str) -> str:
    templates = QUESTION_TEMPLATES[lang]
    x = description.rstrip(" .")
    # a French description opens with a capital for the sentence; a German one may open
    # with a noun, which keeps it
    if lang == "fr" and x[:1].isupper() and not x[1:2].isupper():
        x = x[0].lower() + x[1:]
    return templates[stable_hash(description) % len(templates)].format(x=x)


def build(lang: str, out_dir: Path) -> tuple[int, int]:
    root = MAN_ROOT / lang
    docs: list[dict[str, Any]] = []
    queries: list[dict[str, Any]] = []
    seen_text: set[str] = set()
    for section in SECTIONS:
        for path in sorted((root / section).glob("*.gz")):
            name = path.name[:-3]                       # apropos.1
            page = f"{name.rsplit('.', 1)[0]}({name.rsplit('.', 1)[1]})"
            description, text = parse_page(render(path), lang)
            if not description or len(text.split()) < MIN_WORDS:
                continue
            digest = hashlib.sha1(text.encode("utf-8")).hexdigest()
            if digest in seen_text:
                continue
            seen_text.add(digest)
            citekey = f"{lang}/{name}"
            docs.append({"citekey": citekey, "title": page, "text": text, "language": lang,
                         "metadata": {"section": section}})
            texts = {
                "description": description,
                "question": wrap_question(description, lang),
                "unaccented": strip_accents(description, lang),
            }
            for s in SLICES:
                if s == "unaccented" and texts[s] == description:
                    continue                            # nothing to strip
                queries.append({"query_id": make_query_id(s, citekey), "query": texts[s],
                                "slice": s, "relevant": {citekey: 1}, "history": [],
                                "split": assign_split(citekey)})
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / f"corpus-{lang}.jsonl").open("w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps(d, ensure_ascii=False) + "\n")
    with (out_dir / f"queries-{lang}.jsonl").open("w", encoding="utf-8") as fh:
        for q in queries:
            fh.write(json.dumps(q, ensure_ascii=False) + "\n")
    return len(docs), len(queries)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="render the pages, write corpus and queries")
    b.add_argument("--lang", choices=sorted(NAME_HEADINGS), required=True)
    b.add_argument("--out", type=Path, default=Path("bench/out/manpages"))
    args = ap.parse_args(argv)
    if not (MAN_ROOT / args.lang).is_dir():
        print(f"no man pages in {MAN_ROOT / args.lang}", file=sys.stderr)
        return 1
    n_docs, n_queries = build(args.lang, args.out)
    print(f"{args.lang}: {n_docs} pages, {n_queries} queries -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
