"""Tests of bench/pgdocs.py on inline DocBook HTML (no dependency on the installed docs)."""

from __future__ import annotations

from pathlib import Path

from funnel_util import load_module

_BENCH = Path(__file__).resolve().parents[1] / "bench"


pgdocs = load_module("bench_pgdocs", _BENCH / "pgdocs.py")

PAGE = """<html><head><title>CREATE INDEX</title></head><body id="docContent">
<div class="navheader"><table><tr><th>NAVHEADER</th></tr></table></div>
<div class="refentry" id="SQL-CREATEINDEX"><div class="titlepage"></div>
<h2>CREATE INDEX</h2><p>CREATE INDEX — define a new index</p>
<div class="refsect1"><h2>Synopsis</h2><pre class="synopsis">CREATE INDEX name
    ON table</pre><p>Builds an index on the specified column(s).</p></div></div>
<div class="navfooter"><table><tr><td>NAVFOOTER</td></tr></table></div></body></html>"""

BOOKINDEX = """<div class="index"><div class="indexdiv"><h3>A</h3><dl>
<dt id="e1">abbrev, <a class="indexterm" href="functions-net.html">Network Functions</a></dt>
<dt id="e2">administration tools</dt><dd><dl>
<dt>externally maintained, <a class="indexterm" href="external-admin-tools.html">Tools</a></dt>
</dl></dd>
<dt id="e3">age, <a class="indexterm" href="functions-datetime.html">Date/Time</a>,
<a class="indexterm" href="functions-info.html#X">Info</a></dt>
<dt id="e4">pg_stat_activity, <a class="indexterm" href="monitoring-stats.html">Stats</a></dt>
</dl></div></div>"""


def test_docbook_page_keeps_the_content_without_navigation() -> None:
    parser = pgdocs.DocBookPageParser()
    parser.feed(PAGE)
    parser.close()
    text = parser.text()
    assert "NAVHEADER" not in text and "NAVFOOTER" not in text
    assert "## CREATE INDEX" in text and "## Synopsis" in text
    assert "    CREATE INDEX name" in text  # code stays indented, never a heading
    assert "Builds an index on the specified column(s)." in text


def test_bookindex_entries_links_and_subentries() -> None:
    entries = pgdocs.parse_bookindex(BOOKINDEX)
    assert [e.name for e in entries] == ["abbrev", "administration tools", "age",
                                         "pg_stat_activity"]
    assert entries[2].links == ["functions-datetime.html", "functions-info.html#X"]
    assert entries[1].links == []
    assert [(s.name, s.links) for s in entries[1].subs] == [
        ("externally maintained", ["external-admin-tools.html"])]
    keys = {"functions-net", "external-admin-tools", "functions-datetime", "functions-info",
            "monitoring-stats"}
    cands = pgdocs.pydocs.candidates_from_index(entries, keys)
    assert cands["identifier"] == {"pg_stat_activity": ["monitoring-stats"]}
    assert cands["keyword"]["age"] == ["functions-datetime", "functions-info"]
    assert cands["subentry"] == {"administration tools externally maintained":
                                 ["external-admin-tools"]}
