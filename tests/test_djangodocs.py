"""Tests of bench/djangodocs.py on an inline Sphinx tree (no dependency on the installed docs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from funnel_util import load_module

_BENCH = Path(__file__).resolve().parents[1] / "bench"

djangodocs = load_module("bench_djangodocs", _BENCH / "djangodocs.py")

WORDS = " ".join(["Django querysets are lazy and evaluated when iterated."] * 8)
PAGE = """<html><head><title>{title} | Django documentation</title></head><body>
<div id="s-nav" role="navigation"><a href="index.html">Home</a> NAVIGATION</div>
<div role="main"><h1>{title}</h1><p>{words}</p></div>
<div class="footer">FOOTER</div></body></html>"""
GENINDEX = """<html><body><table class="indextable genindextable"><tr><td><ul>
<li><a href="ref/models/querysets.html#django.db.models.query.QuerySet">QuerySet (class in
django.db.models.query)</a></li>
<li>lazy evaluation<ul><li><a href="topics/db/queries.html#lazy">querysets</a></li></ul></li>
</ul></td></tr></table></body></html>"""


def test_build_reads_pages_with_pgfunnels_extraction(tmp_path: Path) -> None:
    root = tmp_path / "html"
    for rel, title in (("ref/models/querysets.html", "QuerySet API reference"),
                       ("topics/db/queries.html", "Making queries")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(PAGE.format(title=title, words=WORDS))
    (root / "genindex.html").write_text(GENINDEX)
    counts = djangodocs.build(tmp_path / "out", per_slice=5, docs_root=root)
    assert counts["docs"] == 2 and counts["index_entries"] == 2
    docs = [json.loads(line) for line in (tmp_path / "out" / "corpus.jsonl").open()]
    by_key = {d["citekey"]: d for d in docs}
    assert set(by_key) == {"ref/models/querysets", "topics/db/queries"}
    page = by_key["topics/db/queries"]
    assert page["title"] == "Making queries"
    assert "NAVIGATION" not in page["text"] and "FOOTER" not in page["text"]
    queries = [json.loads(line) for line in (tmp_path / "out" / "queries.jsonl").open()]
    assert {"QuerySet": ["ref/models/querysets"]}.items() <= {
        q["query"]: list(q["relevant"]) for q in queries if q["slice"] == "identifier"}.items()
    assert all("python" not in q["query"] for q in queries if q["slice"] == "question")


def test_missing_docs_name_the_package(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="python-django-doc"):
        djangodocs.build(tmp_path / "out", docs_root=tmp_path)
