"""HTML ingest keeps a page's main content and drops the site around it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgfunnel.errors import InvalidDocumentError
from pgfunnel.html_text import html_to_text
from pgfunnel.sources import chunk_text, read_path

SPHINX_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8">
<title>os.path — Pathname tools — Example 3.11 documentation</title>
<script>var x = "script text";</script><style>.a{color:red}</style></head>
<body>
<div class="related" role="navigation"><h3>Navigation</h3>
<ul><li>index</li><li>modules |</li></ul></div>
<div class="document"><div class="documentwrapper"><div class="bodywrapper">
<div class="body" role="main">
<section id="os-path"><h1>os.path — Pathname tools<a class="headerlink" href="#os-path">¶</a></h1>
<p>This module implements   useful
   functions on <code>pathnames</code>.</p>
<dl class="py function"><dt class="sig">os.path.join(<em>path</em>, <em>*paths</em>)</dt>
<dd><p>Join one or more path segments.</p></dd></dl>
<div class="highlight"><pre># a comment, not a heading
&gt;&gt;&gt; join("a", "b")
'a/b'</pre></div>
<ul><li><p>First point.</p></li><li>Second point.</li></ul>
<table><tr><th>Operation</th><th>Result</th></tr><tr><td>x | y</td><td>union</td></tr></table>
<p hidden>hidden text</p><span aria-hidden="true">decorative</span>
</section></div></div></div>
<div class="sphinxsidebar" role="navigation"><h3>Previous topic</h3><p>pathlib</p></div>
</div>
<div class="footer">© Copyright 2001-2026. Created using Sphinx.</div>
</body></html>"""



def _page(title: str, body: str) -> str:
    """A page of a Sphinx build: its title as <title> and <h1> above ``body``."""
    return (f"<html><head><title>{title}</title></head><body><div role=\"main\">"
            f"<h1>{title}</h1>{body}</div></body></html>")

def test_sphinx_page_keeps_main_content_only() -> None:
    title, text = html_to_text(SPHINX_PAGE)
    assert title == "os.path — Pathname tools"
    for chrome in ("Navigation", "modules", "Previous topic", "pathlib", "Copyright", "¶",
                   "script text", "color:red", "hidden text", "decorative"):
        assert chrome not in text, chrome
    assert "This module implements useful functions on pathnames." in text
    assert "os.path.join(path, *paths)" in text and "Join one or more path segments." in text
    # code keeps its lines, indented, so its comment does not start a section
    assert "    # a comment, not a heading\n    >>> join(\"a\", \"b\")\n    'a/b'" in text
    assert [c.heading for c in chunk_text(text)] == ["os.path — Pathname tools"]
    assert "- First point." in text and "- Second point." in text
    assert "Operation | Result\nx | y | union" in text


def test_docbook_page_without_main_drops_navigation_classes() -> None:
    page = ("<html><head><title>CREATE INDEX</title></head><body>"
            "<div class='navheader'><table><tr><td>Prev</td><td>Up</td></tr></table></div>"
            "<div class='refentry'><h2>Synopsis</h2><pre>CREATE INDEX name ON table</pre>"
            "<p>Builds an index.</p></div>"
            "<div class='navfooter'>Next: CREATE LANGUAGE</div></body></html>")
    title, text = html_to_text(page)
    assert title == "CREATE INDEX"
    assert text == "## Synopsis\n\n    CREATE INDEX name ON table\n\nBuilds an index."


def test_site_header_and_footer_go_but_an_articles_header_stays() -> None:
    page = ("<body><header><a>Site name</a> Docs Blog</header>"
            "<main><article><header><h1>Release notes</h1></header>"
            "<p>Version 2 adds <b>search</b>.</p><footer>Posted by Ann</footer></article></main>"
            "<footer>Site footer</footer></body>")
    title, text = html_to_text(page)
    assert title == "Release notes"
    assert text == "# Release notes\n\nVersion 2 adds search.\n\nPosted by Ann"


def test_without_any_main_element_the_body_minus_chrome_is_kept() -> None:
    page = ("<html><head><title>Status page</title></head><body><nav>menu</nav>"
            "<header>Acme status</header><h2>Uptime</h2><p>We report uptime monthly.</p>"
            "<aside>Related posts</aside><footer>contact</footer></body></html>")
    title, text = html_to_text(page)
    assert title == "Status page"
    assert text == "## Uptime\n\nWe report uptime monthly."


def test_malformed_html_loses_no_text() -> None:
    page = ("<div><p>unclosed paragraph <b>bold <i>both</div></span><p>second</p>"
            "<li>stray item<p>trailing text")
    _, text = html_to_text(page)
    for words in ("unclosed paragraph bold both", "second", "- stray item", "trailing text"):
        assert words in text, words


def test_two_articles_are_not_taken_for_the_main_content() -> None:
    page = ("<body><p>Intro</p><article><h2>One</h2><p>first</p></article>"
            "<article><h2>Two</h2><p>second</p></article></body>")
    _, text = html_to_text(page)
    assert text == "Intro\n\n## One\n\nfirst\n\n## Two\n\nsecond"


def test_folder_ingest_skips_hidden_paths(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "notes.md").write_text("# Not a document\n")
    (tmp_path / ".draft.md").write_text("# Hidden draft\n")
    (tmp_path / "guide.html").write_text(SPHINX_PAGE)
    docs = list(read_path(tmp_path))
    assert [(d.citekey, d.title) for d in docs] == [("guide", "os.path — Pathname tools")]
    assert "Previous topic" not in docs[0].text


def test_folder_ingest_exclude_patterns(tmp_path: Path) -> None:
    # a Sphinx build: pages, a copy of every source under _sources, index pages
    (tmp_path / "_sources" / "library").mkdir(parents=True)
    (tmp_path / "_sources" / "library" / "os.rst.txt").write_text("os\n==\n")
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "os.html").write_text(SPHINX_PAGE)
    (tmp_path / "genindex-A.html").write_text("<h1>Index – A</h1>")
    (tmp_path / "drafts").mkdir()
    (tmp_path / "drafts" / "wip.md").write_text("# Work in progress\n")
    everything = [d.citekey for d in read_path(tmp_path)]
    assert everything == ["_sources/library/os.rst", "drafts/wip", "genindex-A", "library/os"]
    kept = [d.citekey for d in read_path(tmp_path, exclude=["_sources", "genindex*", "drafts/*"])]
    assert kept == ["library/os"]
    # a pattern is matched relative to the folder, not against the folder's own path
    assert [d.citekey for d in read_path(tmp_path / "library", exclude=["library"])] == ["os"]


def test_files_without_text_are_skipped_in_a_folder_but_an_error_alone(tmp_path: Path) -> None:
    import pytest

    from pgfunnel.errors import InvalidDocumentError
    from pgfunnel.sources import EmptyFileWarning

    (tmp_path / "empty.md").write_text("  \n")
    (tmp_path / "redirect.html").write_text(
        '<html><head><meta http-equiv="refresh" content="0; url=new.html"></head></html>')
    (tmp_path / "real.md").write_text("# Real\n\nSome text.\n")
    with pytest.warns(EmptyFileWarning) as caught:
        docs = list(read_path(tmp_path))
    assert [d.citekey for d in docs] == ["real"]
    assert sorted(str(w.message).split(": ")[0].rsplit("/", 1)[1] for w in caught) == [
        "empty.md", "redirect.html"]
    with pytest.raises(InvalidDocumentError, match=r"empty.md: no text to ingest \(it is empty"):
        list(read_path(tmp_path / "empty.md"))
    with pytest.raises(InvalidDocumentError, match=r"redirect.html: .*no main text"):
        list(read_path(tmp_path / "redirect.html"))


def test_a_page_of_links_in_a_folder_is_left_out_with_a_note(tmp_path: Path) -> None:
    # gtk-doc's api-index-full.html: every symbol of the library as a link to its page;
    # ingested beside those pages, it matched every name it listed
    from pgfunnel.html_text import html_page
    from pgfunnel.sources import EmptyFileWarning

    entries = "".join(f'<dt><a href="page{i // 20}.html#f{i}">g_thing_{i}</a>, function in '
                      f'<a href="page{i // 20}.html">Thing Lists {i // 20}</a></dt>'
                      for i in range(120))
    (tmp_path / "api-index-full.html").write_text(
        f"<html><body><h1>API Index</h1><dl>{entries}</dl></body></html>")
    # a page of text that links as often (a reference page of cross-references) stays
    vocabulary = [f"{a}{b}" for a in ("buf", "sock", "file", "key", "node", "tree")
                  for b in ("er", "ing", "ed", "s", "y", "al", "ic", "ous")]
    prose = "".join(f"<p>Call <a href='x.html#f{i}'>g_thing_{i}</a> after the "
                    f"{vocabulary[i % 48]} and {vocabulary[(7 * i) % 48]} are set up, then "
                    f"check what it returns.</p>" for i in range(120))
    (tmp_path / "guide.html").write_text(f"<html><body><h1>Guide</h1>{prose}</body></html>")
    # a short list of links is not an index either
    (tmp_path / "toc.html").write_text("<html><body><h1>Contents</h1><ul>" + "".join(
        f"<li><a href='c{i}.html'>Chapter {i}</a></li>" for i in range(30)) + "</ul></body></html>")
    index = html_page((tmp_path / "api-index-full.html").read_text())
    assert index.links == 240 and index.link_share > 0.55 and index.is_link_list()
    # gtk-doc's own pages hold fewer link words than that (`asn1_create_element,
    # function in libtasn1`: 40%), and a handful of words besides: glue
    glue_only = html_page("<html><body><h1>API Index</h1><dl>" + "".join(
        f'<dt><a href="p.html#f{i}">g_thing_{i}</a>, function in <a href="p.html">Things</a>'
        f"; since version</dt>" for i in range(120)) + "</dl></body></html>")
    assert glue_only.link_share < 0.5 and glue_only.own_vocabulary < 12
    assert glue_only.is_link_list()
    guide = html_page((tmp_path / "guide.html").read_text())
    assert guide.links == 120 and guide.link_share < 0.2 and not guide.is_link_list()
    with pytest.warns(EmptyFileWarning) as caught:
        docs = list(read_path(tmp_path))
    assert sorted(d.citekey for d in docs) == ["guide", "toc"]
    note = str(caught[0].message)
    assert note.endswith("api-index-full.html: a page of links (240 links, 57% of its words), "
                         "an index or table of contents, skipped"), note
    # given by itself, it is read: the user asked for it
    alone = list(read_path(tmp_path / "api-index-full.html"))
    assert "g_thing_119" in alone[0].text


def _doxygen_page(title: str, contents: str) -> str:
    """A page as Doxygen 1.9 writes it: the project's banner, a header and the contents."""
    return f"""<html><head><meta name="generator" content="Doxygen 1.9.4"/>
<title>json-c: {title}</title></head><body>
<div id="top"><div id="titlearea"><table><tr id="projectrow"><td id="projectalign">
<div id="projectname">json-c<span id="projectnumber">&#160;0.16</span></div></td></tr>
</table></div><div id="main-nav"></div></div>
<div class="header"><div class="headertitle"><div class="title">{title}</div></div></div>
<div class="contents">{contents}</div>
<hr class="footer"/><address class="footer"><small>Generated by doxygen 1.9.4</small>
</address></body></html>"""


def test_a_doxygen_member_index_is_a_page_of_links(tmp_path: Path) -> None:
    # Doxygen's globals_*.html and functions_*.html: each member's name, then the file or
    # struct it belongs to as a link; only a third of the words are links, and each name
    # is a word of its own, so neither rule on links alone caught them
    from pgfunnel.html_text import html_page
    from pgfunnel.sources import EmptyFileWarning

    names = [f"json_object_{verb}_{kind}" for verb in ("get", "set", "new", "put", "is")
             for kind in ("int", "string", "array", "double", "boolean", "object")]
    items = "".join(f'<li>{name}()&#160;:&#160;<a class="el" href="json__object_8h.html#a{i}">'
                    "json_object.h</a></li>" for i, name in enumerate(names))
    (tmp_path / "globals_func.html").write_text(_doxygen_page("Globals", (
        '<div class="textblock">Here is a list of all functions, variables, defines, enums, '
        "and typedefs with links to the files they belong to:</div>"
        f'<h3><a id="index_j" name="index_j"></a>- j -</h3><ul>{items}</ul>')))
    # a short one: three members
    enums = ("json_type", "json_tokener_error", "json_c_visit_userfunc")
    (tmp_path / "globals_enum.html").write_text(_doxygen_page("Globals", (
        '<h3><a id="index_j"></a>- j -</h3><ul>' + "".join(
            f'<li>{name}&#160;:&#160;<a class="el" href="json__types_8h.html#b{i}">'
            "json_types.h</a></li>" for i, name in enumerate(enums)) + "</ul>")))
    # a page whose items are a link and a phrase of its own (Python's urllib package page)
    (tmp_path / "urllib.html").write_text(_doxygen_page("urllib", (
        "<p>urllib is a package that collects several modules for working with URLs:</p><ul>"
        + "".join(f'<li><a href="{m}.html">urllib.{m}</a> for {what}</li>' for m, what in (
            ("request", "opening and reading URLs"), ("error", "the exceptions it raises"),
            ("parse", "parsing URLs into their parts"),
            ("robotparser", "parsing a site's robots.txt file")))
        + "</ul>")))
    # a changelog of short items, each with its issue's link: a page of text, not an index
    # (every item was an entry, so the page was left out of the folder)
    fixes = ("parser crash", "close leak", "docs typo", "exit hang", "tokener race",
             "printbuf overflow")
    (tmp_path / "changes.html").write_text(_doxygen_page("Changes", "<ul>" + "".join(
        f"<li>Fix {what} <a href='https://example.org/issues/{i}'>#{i}</a></li>"
        for i, what in enumerate(fixes * 4)) + "</ul>"))
    # a table of contents: items that are links alone
    (tmp_path / "toc.html").write_text(_doxygen_page("Contents", "<ul>" + "".join(
        f"<li><a href='c{i}.html'>Chapter {i}</a></li>" for i in range(30)) + "</ul>"))
    members = html_page((tmp_path / "globals_func.html").read_text())
    assert members.links == 30 and members.link_share < 0.5
    assert members.own_vocabulary > members.links / 10
    assert members.entries == 30 and members.entry_share > 0.5 and members.is_link_list()
    assert html_page((tmp_path / "globals_enum.html").read_text()).is_link_list()
    # one of 100 links or more that only the entries make a page of links says so too
    (tmp_path / "globals_j.html").write_text(_doxygen_page("Globals", "<ul>" + "".join(
        f'<li>{name}_{n}()&#160;:&#160;<a class="el" href="json__object_8h.html#a{n}">'
        "json_object.h</a></li>" for n in range(4) for name in names) + "</ul>"))
    big = html_page((tmp_path / "globals_j.html").read_text())
    assert big.links == 120 and not big.is_mostly_links() and big.is_entry_index()
    urllib = html_page((tmp_path / "urllib.html").read_text())
    assert urllib.entries == 0 and not urllib.is_link_list()
    toc = html_page((tmp_path / "toc.html").read_text())
    assert toc.entries == 0 and not toc.is_link_list()
    changes = html_page((tmp_path / "changes.html").read_text())
    assert changes.entries == 0 and not changes.is_link_list()
    with pytest.warns(EmptyFileWarning) as caught:
        docs = list(read_path(tmp_path))
    assert sorted(d.citekey for d in docs) == ["changes", "toc", "urllib"]
    notes = sorted(str(w.message) for w in caught)
    assert notes[2].endswith("globals_j.html: a page of links (120 links, 33% of its words; "
                             "120 entries of a link and a few words, 100% of its words), an "
                             "index or table of contents, skipped"), notes
    assert notes[1].endswith("globals_func.html: a page of links (30 links, 27% of its words; "
                             "30 entries of a link and a few words, 80% of its words), an "
                             "index or table of contents, skipped"), notes


def test_doxygen_code_fragment_is_code_without_its_tooltips() -> None:
    # Doxygen writes an example as a <div class="fragment"> of <div class="line">, each
    # linked name's tooltip after the lines (<div class="ttc">: shown on hover)
    lines = [
        '<span class="keyword">struct </span><a class="code hl_struct" href="s.html">'
        "json_object_iterator</a> it;",
        " ",
        '<span class="keywordflow">while</span> (!<a class="code hl_function" href="i.html#a9">'
        "json_object_iter_equal</a>(&amp;it, &amp;itEnd)) {",
        '    printf(<span class="stringliteral">&quot;%s\\n&quot;</span>,',
        '           <a class="code hl_function" href="i.html#ac">json_object_iter_peek_name</a>'
        "(&amp;it));",
        "}",
    ]
    fragment = "".join(f'<div class="line">{line}</div>\n' for line in lines) + (
        '<div class="ttc" id="ai_html_a9"><div class="ttname"><a href="i.html#a9">'
        'json_object_iter_equal</a></div><div class="ttdeci">JSON_EXPORT json_bool '
        "json_object_iter_equal(const struct json_object_iterator *iter1)</div>"
        '<div class="ttdef"><b>Definition:</b> json_object_iterator.h:43</div></div>')
    page = _doxygen_page("json_object_iterator.h File Reference", (
        '<div class="memdoc"><p>Retrieves an iterator to the first pair.</p>'
        f'<div class="fragment">{fragment}</div><!-- fragment --></div>'))
    _, text = html_to_text(page)
    assert "Retrieves an iterator to the first pair.\n\n" \
        "    struct json_object_iterator it;\n" in text, text
    assert "    while (!json_object_iter_equal(&it, &itEnd)) {\n" \
        '        printf("%s\\n",\n' \
        "               json_object_iter_peek_name(&it));\n    }" in text, text
    assert "Definition" not in text and "JSON_EXPORT" not in text
    # each div is a line, with or without a line break between them (minified HTML ran
    # the lines into one)
    assert html_to_text(page.replace("</div>\n", "</div>"))[1] == text
    # a div of that class holding other things is no code block (reveal.js's fragments)
    _, slide = html_to_text('<html><body><main><div class="fragment"><p>First point.</p>'
                            "<p>Second point.</p></div></main></body></html>")
    assert slide == "First point.\n\nSecond point."


def test_generators_banners_and_page_menus_marked_by_id_are_dropped() -> None:
    # pages without a main element whose chrome is marked by id, not by tag or class
    yard = """<html><head><title>Class: Mocha::Sequence — Mocha 1.16.1</title></head><body>
<div class="nav_wrap"><iframe id="nav" src="../class_list.html?1"></iframe></div>
<div id="main" tabindex="-1"><div id="header"><div id="menu">
<a href="../_index.html">Index (S)</a> &raquo; <span class="title"><a href="../Mocha.html">
Mocha</a></span> &raquo; <span class="title">Sequence</span></div>
<div id="search"><a class="full_list_link" href="../class_list.html"></a></div></div>
<div id="content"><h1>Class: Mocha::Sequence</h1><h2>Overview</h2>
<div class="docstring"><p>Used to constrain the order in which expectations can occur.</p>
</div></div>
<div id="footer">Generated by <a href="https://yardoc.org">yard</a> 0.9.28 (ruby-3.1.2).</div>
</div></body></html>"""
    title, text = html_to_text(yard)
    assert title == "Class: Mocha::Sequence"
    assert text == ("# Class: Mocha::Sequence\n\n## Overview\n\n"
                    "Used to constrain the order in which expectations can occur."), text
    # Doxygen: the project's name and number over every page; each member's heading
    # starts with a permalink that shows a diamond
    doxygen = _doxygen_page("printbuf.h File Reference", (
        '<h2 class="groupheader">Function Documentation</h2>'
        '<h2 class="memtitle"><span class="permalink"><a href="#a61f6">&#9670;&nbsp;</a>'
        "</span>sprintbuf()</h2>"
        '<div class="memitem"><div class="memdoc"><p>Formatted print to printbuf.</p>'
        "</div></div>"))
    title, text = html_to_text(doxygen)
    assert title == "json-c: printbuf.h File Reference"
    assert text == ("## Function Documentation\n\n## sprintbuf()\n\n"
                    "Formatted print to printbuf."), text
    # Haddock: the package's line and page menu over every page, and the page's own
    # table of contents
    haddock = """<html><head><title>Data.List.Split</title></head><body>
<div id="package-header"><span class="caption">split-0.2.3.5: Combinator library for
splitting lists.</span><ul class="links" id="page-menu"><li><a href="src/x.html">Source</a>
</li><li><a href="index.html">Contents</a></li><li><a href="doc-index.html">Index</a></li>
</ul></div><div id="content"><div id="module-header"><p class="caption">Data.List.Split</p>
</div><div id="table-of-contents"><div id="contents-list"><p class="caption">Contents</p>
<ul><li><a href="#g:1">Getting started</a></li><li><a href="#g:2">Splitting</a></li></ul>
</div></div><div id="description"><p class="caption">Description</p><div class="doc">
<p>Combinator library for splitting lists.</p></div></div>
<a href="#g:1" id="g:1"><h1>Getting started</h1></a><p>To split a list on a delimiter, use
splitOn.</p></div><div id="footer"><p>Produced by Haddock version 2.25.1</p></div>
</body></html>"""
    _, text = html_to_text(haddock)
    assert text == ("Data.List.Split\n\nDescription\n\nCombinator library for splitting "
                    "lists.\n\n# Getting started\n\nTo split a list on a delimiter, use "
                    "splitOn."), text
    # inside a page's main element, an element with the id "header" is the page's own
    _, text = html_to_text('<html><body><main><div id="header"><h1>Setup</h1><p>Install '
                           "it first.</p></div></main></body></html>")
    assert text == "# Setup\n\nInstall it first."


def test_a_title_written_above_the_first_h1_is_the_title() -> None:
    # Haddock: a module's name is <title> and a caption above its sections, whose
    # headings are <h1>; the page was titled by its first section
    page = """<html><head><title>Data.List.Split.Internals</title></head><body>
<div id="content"><div id="module-header"><table class="info"><tr><th>License</th>
<td>BSD-style</td></tr></table><p class="caption">Data.List.Split.Internals</p></div>
<div id="description"><p class="caption">Description</p><div class="doc"><p>Implementation
module for Data.List.Split.</p></div></div>
<div id="interface"><h1 id="g:1">Types and utilities</h1><p>A splitting strategy.</p>
<h1 id="g:2">Combinators</h1><p>Ways to split a list.</p></div></div></body></html>"""
    title, text = html_to_text(page)
    assert title == "Data.List.Split.Internals"
    assert text.startswith("License | BSD-style\n\nData.List.Split.Internals\n\n"), text
    # a single <h1> names the page: a site's name as <title>, and again above the <h1>
    # as its logo, titled every page by the site's name
    title, _ = html_to_text("<html><head><title>MySite</title></head><body><div "
                            'class="logo">MySite</div><h1>Installation</h1><p>Run pip '
                            "install mysite.</p></body></html>")
    assert title == "Installation"
    # <title> written below the <h1> (a page quoting its own name) leaves the <h1> the title
    title, _ = html_to_text("<html><head><title>Bar</title></head><body><main><h1>Foo</h1>"
                            "<p>Bar</p></main></body></html>")
    assert title == "Foo"
    # nor does <title> that names the <h1> too
    title, _ = html_to_text("<html><head><title>Foo - Bar</title></head><body><main>"
                            "<p>Foo - Bar</p><h1>Foo</h1><p>Text.</p></main></body></html>")
    assert title == "Foo"


def test_javadoc_table_filter_tabs_are_dropped() -> None:
    # javadoc 11 writes a summary table's filters as spans in its caption, 17 as tab
    # buttons: "All Methods Instance Methods Concrete Methods" over every method summary
    javadoc11 = ('<html><body><main role="main"><table class="memberSummary"><caption>'
                 '<span id="t0" class="activeTableTab"><span>All Methods</span><span '
                 'class="tabEnd">&nbsp;</span></span><span id="t2" class="tableTab"><span>'
                 '<a href="javascript:show(2);">Instance Methods</a></span></span>'
                 '<span id="t4" class="tableTab"><span><a href="javascript:show(8);">'
                 "Concrete Methods</a></span></span></caption><tr><th>Modifier and Type</th>"
                 "<th>Method</th></tr><tr><td>java.lang.String</td><td>getString(String dest)"
                 "</td></tr></table></main></body></html>")
    assert html_to_text(javadoc11)[1] == ("All Methods\n\nModifier and Type | Method\n"
                                          "java.lang.String | getString(String dest)")
    javadoc17 = ('<html><body><main role="main"><div class="table-tabs" role="tablist">'
                 '<button role="tab" aria-selected="true" class="active-table-tab">All '
                 'Methods</button><button role="tab" aria-selected="false" '
                 'class="table-tab" onclick="show(2)">Static Methods</button></div>'
                 "<p>Returns the parser.</p></main></body></html>")
    assert html_to_text(javadoc17)[1] == "- All Methods\n\nReturns the parser."


def test_an_item_holding_only_a_list_leaves_no_bare_bullet() -> None:
    # javadoc's class hierarchy: each class an item, its subclass a list inside the next
    # item; the item holding only that list was a line "-" of its own
    _, text = html_to_text(
        '<html><body><main><div class="contentContainer"><ul class="inheritance">'
        "<li>java.lang.Object</li><li><ul class=\"inheritance\">"
        "<li>net.sourceforge.argparse4j.inf.Namespace</li></ul></li></ul>"
        "<p>This class holds attributes.</p></div></main></body></html>")
    assert text == ("- java.lang.Object\n\n  - net.sourceforge.argparse4j.inf.Namespace\n\n"
                    "This class holds attributes."), text
    # an item whose only content is a list: its bullet is not written before the inner one
    assert html_to_text("<main><ul><li><ul><li>x</li></ul></li></ul></main>")[1] == "  - x"
    # an item whose text is a paragraph keeps its bullet
    assert html_to_text("<main><ul><li><p>para</p><ul><li>x</li></ul></li></ul></main>"
                        )[1] == "- para\n\n  - x"
    # a line that is a "-" of the text's own, outside a list, stays (it was taken for such
    # an item's bullet wherever a paragraph had more than one line)
    assert html_to_text("<main><p>Before<br>-<br>After</p></main>")[1] == "Before\n-\nAfter"


def test_a_source_listing_in_a_folder_is_left_out_with_a_note(tmp_path: Path) -> None:
    # Haddock's hyperlinked source (src/Data.List.Split.Internals.html): the module's code
    # as one <pre>, with no title, heading or prose; beside the module's documentation it
    # matched every name that describes
    from pgfunnel.html_text import html_page
    from pgfunnel.sources import EmptyFileWarning

    lines = "".join(f'<span id="line-{i}"></span><span class="hs-identifier">split{i}</span>'
                    f' <span class="hs-glyph">::</span> Splitter a -&gt; [a] -&gt; [[a]]\n'
                    for i in range(60))
    src = tmp_path / "src"
    src.mkdir()
    (src / "Data.List.Split.Internals.html").write_text(
        '<html><head><link rel="stylesheet" href="style.css"/></head><body><pre>'
        f'<span class="hs-comment">-- | Splitting lists.</span>\n{lines}</pre></body></html>')
    # a page of code under its heading and a paragraph (the Python docs' full grammar: 96%)
    grammar = "".join(f"rule_{i}: NAME '=' expression_{i} NEWLINE\n" for i in range(60))
    (tmp_path / "grammar.html").write_text(
        '<html><body><div role="main"><h1>Full Grammar specification</h1><p>This is the '
        "full Python grammar, derived directly from the grammar used to generate the "
        f"parser.</p><pre>{grammar}</pre></div></body></html>")
    listing = html_page((src / "Data.List.Split.Internals.html").read_text())
    assert listing.code_share == 1.0 and listing.is_source_listing()
    page = html_page((tmp_path / "grammar.html").read_text())
    assert 0.9 < page.code_share < 0.99 and not page.is_source_listing()
    # nor is a page of code under its heading alone: a sample configuration file is
    # documentation, and it was left out of a folder's ingest
    sample = "".join(f"option_{i} = value_{i}  # sets knob {i}\n" for i in range(60))
    (tmp_path / "sample-config.html").write_text(
        '<html><body><div role="main"><h1>Sample configuration</h1>'
        f"<pre>{sample}</pre></div></body></html>")
    page = html_page((tmp_path / "sample-config.html").read_text())
    assert page.code_share >= 0.99 and not page.is_source_listing()
    with pytest.warns(EmptyFileWarning) as caught:
        docs = list(read_path(tmp_path))
    assert [d.citekey for d in docs] == ["grammar", "sample-config"]
    assert str(caught[0].message).endswith(
        "Data.List.Split.Internals.html: a source listing (code and nothing else, 100% of "
        "its words), skipped")
    # given by itself, it is read
    assert "split59" in list(read_path(src / "Data.List.Split.Internals.html"))[0].text


def test_cli_ingest_notes_skipped_files(db: str, tmp_path: Path) -> None:
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    (tmp_path / "empty.md").write_text("")
    (tmp_path / "real.md").write_text("# Real\n\nSome text.\n")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", "t", "--dsn", db, "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout)
    assert stats["documents_written"] == 1
    assert any("empty.md: no text, skipped" in note for note in stats["notes"])


def test_root_gives_one_file_the_citekey_it_has_in_its_folder(tmp_path: Path) -> None:
    import pytest

    from pgfunnel.errors import InvalidDocumentError

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "expenses.md").write_text("# Expenses\n\nFile them monthly.\n")
    assert [d.citekey for d in read_path(tmp_path)] == ["sub/expenses"]
    assert [d.citekey for d in read_path(tmp_path / "sub" / "expenses.md")] == ["expenses"]
    assert [d.citekey for d in read_path(tmp_path / "sub" / "expenses.md", root=tmp_path)
            ] == ["sub/expenses"]
    assert [d.citekey for d in read_path(tmp_path / "sub", root=tmp_path)] == ["sub/expenses"]
    with pytest.raises(InvalidDocumentError, match="not inside the root folder"):
        list(read_path(tmp_path / "sub" / "expenses.md", root=tmp_path / "elsewhere"))


def test_a_file_given_beside_its_folder_is_read_once(db: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`pgfunnel ingest docs docs/setup.md` (a changed file named again, or a shell glob)
    gave the file's document twice, and the ingest stopped at "citekey 'setup' appears
    twice in this ingest", after writing the batches before it. The file is read once,
    with the path written either way."""
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.sources import read_paths

    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "setup.md").write_text("# Setup\n\nInstall it first.\n")
    (docs / "sub" / "setup.md").write_text("# Setup again\n\nThe same name, elsewhere.\n")
    monkeypatch.chdir(tmp_path)
    for paths in ([docs, docs / "setup.md"], [Path("docs/setup.md"), docs],
                  [Path("docs"), docs / "sub" / "setup.md"]):
        root = docs if paths[-1] == docs / "sub" / "setup.md" else None
        assert sorted(d.citekey for d in read_paths(paths, root=root)) == [
            "setup", "sub/setup"], paths
    res = CliRunner().invoke(app, ["ingest", "docs", "docs/setup.md", "-c", "t", "--dsn", db,
                                   "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout)
    assert (stats["documents_seen"], stats["documents_written"]) == (2, 2)


def test_a_linked_file_in_a_folder_is_a_document_at_its_own_place(tmp_path: Path) -> None:
    # resolved, a link to a file outside the folder was "not inside the root folder" and
    # stopped the whole ingest, and a link to a file beside it took that file's citekey
    from pgfunnel.sources import read_paths

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "shared.md").write_text("# Shared\n\nKept in another repository.\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\nRead this first.\n")
    (docs / "shared.md").symlink_to(outside / "shared.md")
    (docs / "start.md").symlink_to(docs / "guide.md")
    assert sorted(d.citekey for d in read_path(docs)) == ["guide", "shared", "start"]
    # a folder reached through a link of its own, with --root given as written
    (tmp_path / "alias").symlink_to(docs)
    assert [d.citekey for d in read_path(tmp_path / "alias" / "guide.md", root=docs)
            ] == ["guide"]
    # a JSONL file's lines name their citekeys: --root does not apply to it
    lines = tmp_path / "extra.jsonl"
    lines.write_text('{"citekey": "faq", "text": "Questions and answers."}\n')
    assert sorted(d.citekey for d in read_paths([docs, lines], root=docs)) == [
        "faq", "guide", "shared", "start"]



def test_a_linked_folder_outside_the_folder_is_read_at_the_links_place(tmp_path: Path) -> None:
    # Debian's documentation packages: borgbackup-doc/html -> ../borgbackup/html; not
    # followed, the package held "nothing to ingest"
    package = tmp_path / "borgbackup-doc"
    package.mkdir()
    manual = tmp_path / "borgbackup" / "html"
    (manual / "usage").mkdir(parents=True)
    (manual / "usage" / "create.md").write_text("# borg create\n\nCreate an archive.\n")
    (package / "html").symlink_to(manual)
    (package / "notes.md").write_text("# Notes\n\nPackaging notes.\n")
    # a link back up (a loop), one back to the folder given and one to a folder inside it
    # (read at its own place) are not followed
    (manual / "usage" / "up").symlink_to(manual)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "back").symlink_to(package)
    (package / "other").symlink_to(tmp_path / "other")
    (package / "extra").mkdir()
    (package / "extra" / "faq.md").write_text("# FAQ\n\nQuestions.\n")
    (package / "alias").symlink_to(package / "extra")
    # Debian's python3-pytest: html -> the manual, rst -> the manual's _sources; the
    # sources inside a linked folder are not read a second time
    (manual / "_sources").mkdir()
    (manual / "_sources" / "create.rst.txt").write_text("borg create\n===========\n\nText.\n")
    (package / "rst").symlink_to(manual / "_sources")
    (package / "api").symlink_to(manual / "usage")
    assert sorted(d.citekey for d in read_path(package)) == [
        "extra/faq", "html/_sources/create.rst", "html/usage/create", "notes"]

NODE_STYLE = """<html><head><title>File system | Node.js v20.20.2 Documentation</title></head>
<body><header><h1>Node.js v20.20.2 documentation</h1></header>
<div id="column1" role="main">
<h2>File system<span><a class="mark" href="#file-system" id="file-system">#</a></span></h2>
<p>The <code>node:fs</code> module reads files. See <a href="#promises">#promises</a>.</p>
<h3>fs.readFile(path)<a href="#fs_readfile">¶</a></h3><p>Reads a whole file.</p>
<pre><code class="mjs">import * as fs from 'node:fs';</code><code class="cjs">const fs = \
require('node:fs');</code></pre>
</div></body></html>"""


def test_permalinks_without_a_class_and_the_site_name_in_the_title_are_left_out() -> None:
    title, text = html_to_text(NODE_STYLE)
    # no <h1> in the main content: <title> starts with its first heading, then the site
    assert title == "File system"
    assert "## File system\n" in text + "\n" and "## fs.readFile(path)\n" in text + "\n"
    assert "#\n" not in text and "¶" not in text
    # a link in the text that shows more than a mark stays
    assert "See #promises." in text
    # two listings in one block are two lines
    assert "    import * as fs from 'node:fs';\n    const fs = require('node:fs');" in text


def test_the_title_keeps_what_is_not_a_site_name() -> None:
    page = ("<html><head><title>{}</title></head>"
            "<body><main><h2>Foo</h2><p>x</p></main></body></html>")
    assert html_to_text(page.format("Foo-bar guide"))[0] == "Foo-bar guide"
    assert html_to_text(page.format("Foo - Acme docs"))[0] == "Foo"
    assert html_to_text(page.format("Acme docs | Foo"))[0] == "Acme docs | Foo"


def test_a_banner_h1_on_every_page_does_not_become_every_title() -> None:
    # libxslt's pages: the site's name in an <h1>, the page's own name in <title> and an <h2>
    page = ("<html><head><title>{title}</title></head><body>"
            "<h1>The XSLT C library for GNOME</h1><h2>Writing extensions</h2>"
            "<p>Extensions are bound to a namespace.</p></body></html>")
    assert html_to_text(page.format(title="Writing extensions"))[0] == "Writing extensions"
    # a <title> that names the <h1>, or that is no heading of the page, leaves the <h1>
    for title in ("The XSLT C library for GNOME: extensions", "libxslt"):
        assert html_to_text(page.format(title=title))[0] == "The XSLT C library for GNOME"


def test_two_files_that_would_share_a_citekey_are_refused_with_the_way_out(
        tmp_path: Path) -> None:
    import pytest

    from pgfunnel.errors import InvalidDocumentError

    (tmp_path / "fs.html").write_text("<main><h1>File system</h1><p>x</p></main>")
    (tmp_path / "fs.md").write_text("# File system\n\nx\n")
    (tmp_path / "other.md").write_text("# Other\n\ny\n")
    with pytest.raises(InvalidDocumentError,
                       match=r"fs.html and .*fs.md would both be citekey 'fs': leave one "
                             r"out, e.g. --exclude 'fs.md'"):
        list(read_path(tmp_path))
    # the exclusion it names leaves out that one file, not every .md
    assert sorted(d.citekey for d in read_path(tmp_path, exclude=["fs.md"])) == ["fs", "other"]
    # many pairs (Node.js ships each API page as .md and .html): all said at once, with a
    # pattern that leaves out one kind, and what else it would leave out
    api = tmp_path / "api"
    api.mkdir()
    for name in ("fs", "net", "http"):
        (api / f"{name}.html").write_text(f"<main><h1>{name}</h1><p>x</p></main>")
        (api / f"{name}.md").write_text(f"# {name}\n\nx\n")
    (api / "README.md").write_text("# API\n\nThe pages.\n")
    with pytest.raises(InvalidDocumentError,
                       match=r"api/fs.html and .*api/fs.md would both be citekey 'api/fs', and "
                             r"3 more pairs of files share a citekey \(4 of them a .md beside "
                             r"another format\): leave one kind out, e.g. --exclude '\*.md'; "
                             r"it also leaves out 2 files without a twin$"):
        list(read_path(tmp_path))
    (tmp_path / "fs.md").unlink()
    with pytest.raises(InvalidDocumentError,
                       match=r", and 2 more pairs .* --exclude 'api/\*.md'; it also leaves "
                             r"out 1 file without a twin$"):
        list(read_path(tmp_path))
    assert sorted(d.citekey for d in read_path(tmp_path, exclude=["api/*.md"])) == \
        ["api/fs", "api/http", "api/net", "fs", "other"]
    # two pairs: one more pair, not "1 more pairs of files share"
    three = tmp_path / "three"
    three.mkdir()
    (three / "bom.adoc").write_text("= Bom\n\nx\n")
    (three / "bom.html").write_text("<main><h1>Bom</h1><p>x</p></main>")
    (three / "bom.txt").write_text("x\n")
    with pytest.raises(InvalidDocumentError,
                       match=r"would both be citekey 'bom', and 1 more pair of files shares a "
                             r"citekey \(1 of them a .html beside another format\)"):
        list(read_path(three))


def test_texinfo_navigation_and_manual_name_are_left_out() -> None:
    page = """<html><head><title>Closure Example (libffi: the portable foreign function
interface library)</title></head><body>
<div class="section" id="Closure-Example">
<div class="header"><p>Next: <a href="Thread-Safety.html">Thread Safety</a>, Previous:
<a href="The-Closure-API.html">The Closure API</a>, Up: <a href="Using-libffi.html">Using
libffi</a> &nbsp; [<a href="Index.html">Index</a>]</p></div>
<h3 class="section">2.6 Closure Example</h3>
<p>A trivial example that creates a new <code>puts</code>.</p>
<div class="nav-panel"><p>Next: Thread Safety</p></div>
</div></body></html>"""
    title, text = html_to_text(page)
    assert title == "Closure Example"
    assert text.startswith("### 2.6 Closure Example")
    assert "Next:" not in text and "Previous" not in text and "Index" not in text
    # inside a recognised main element a class named header is content
    main = '<main><div class="header"><p>Card header text</p></div><p>x</p></main>'
    assert "Card header text" in html_to_text(main)[1]


def test_pages_in_a_declared_charset_are_read_in_it(tmp_path: Path) -> None:
    # older manuals (libxslt's) declare ISO-8859-1 and hold Windows-1252 quotes
    (tmp_path / "news.html").write_bytes(
        '<html><head><meta http-equiv="Content-Type" content="text/html; '
        'charset=ISO-8859-1"><title>News</title></head><body><h1>News</h1>'
        '<p>Caf\u00e9 cr\u00e8me \u201cquoted\u201d</p></body></html>'.encode("cp1252"))
    (tmp_path / "euro.html").write_bytes(
        b'<?xml version="1.0" encoding="iso-8859-15"?><html><body><h1>Euro</h1>'
        b"<p>\xa4 sign</p></body></html>")
    # valid UTF-8 is read as UTF-8 whatever the label says
    (tmp_path / "mislabelled.html").write_bytes(
        '<html><meta charset="iso-8859-1"><body><h1>M</h1><p>\u00e9t\u00e9</p></body>'
        "</html>".encode())
    texts = {r.citekey: r.text for r in read_path(tmp_path)}
    assert texts["news"].endswith("Caf\u00e9 cr\u00e8me \u201cquoted\u201d")
    assert texts["euro"].endswith("\u20ac sign")
    assert texts["mislabelled"].endswith("\u00e9t\u00e9")
    # bytes that fit neither are still a named error
    (tmp_path / "broken.html").write_bytes(b'<html><meta charset="utf-8"><p>\xff\xfe</p>')
    with pytest.raises(InvalidDocumentError,
                       match=r"broken.html: not valid UTF-8.*\(byte \d+: .*--exclude"):
        list(read_path(tmp_path / "broken.html"))


def test_a_page_declaring_no_charset_is_read_as_browsers_read_it(tmp_path: Path) -> None:
    # libxslt's manual: no charset, a contributor's name in Latin-1; refused, the ingest
    # of the whole folder stopped at it
    import codecs
    import json
    import warnings

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.sources import GuessedEncodingWarning

    page = (b'<html><head><meta http-equiv="Content-Type" content="text/html"><title>News'
            b"</title></head><body><h1>News</h1><p>Fix typos (Jan Pokorn\xfd), \x93quoted"
            b"\x94 \x81</p></body></html>")
    (tmp_path / "news.html").write_bytes(page)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (rec,) = read_path(tmp_path / "news.html")
    assert rec.text.endswith("Fix typos (Jan Pokorn\u00fd), \u201cquoted\u201d \x81")
    (note,) = [str(w.message) for w in caught
               if issubclass(w.category, GuessedEncodingWarning)]
    first_bad = page.index(b"\xfd")
    assert note.endswith(f"news.html: declares no charset and is not UTF-8 (byte "
                         f"{first_bad}); read as windows-1252, as browsers read it "
                         "(--encoding names another)")
    # the CLI says so among its notes
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    assert any("read as windows-1252" in n for n in json.loads(res.stdout)["notes"])
    # a byte order mark says UTF-16, in any format (PowerShell's Out-File writes it)
    (tmp_path / "notes.md").write_bytes("# Notes\n\nCaf\u00e9 \u2014 done.\n".encode("utf-16"))
    (doc,) = read_path(tmp_path / "notes.md")
    assert (doc.title, doc.text) == ("Notes", "# Notes\n\nCaf\u00e9 \u2014 done.")
    (tmp_path / "odd.md").write_bytes(codecs.BOM_UTF16_LE + b"\x00\xd8")
    with pytest.raises(InvalidDocumentError, match=r"odd.md: starts with a UTF-16 byte order "
                                                   r"mark but is not UTF-16"):
        list(read_path(tmp_path / "odd.md"))
    # a page that declares a charset its bytes do not fit stays an error
    (tmp_path / "news.html").write_bytes(b'<meta charset="shift_jis"><p>\xff\x81</p>')
    with pytest.raises(InvalidDocumentError, match="nor the shift_jis it declares"):
        list(read_path(tmp_path / "news.html"))
    # and so does one that declares the UTF-8 it is not, naming --encoding
    (tmp_path / "news.html").write_bytes(b'<meta charset="utf-8"><p>Pokorn\xfd</p>')
    with pytest.raises(InvalidDocumentError, match=r"not valid UTF-8 \(byte .*--encoding"):
        list(read_path(tmp_path / "news.html"))


def test_docbook_navigation_tables_are_not_content() -> None:
    page = ('<html><head><title>Quick Start</title></head><body>'
            '<div><table class="nav" summary="Navigation header"><tr><td><a href="p.html">'
            '<img src="prev.png" alt="Prev"></a></td><th>User Manual</th></tr></table></div>'
            '<div class="article"><h1>Quick Start</h1><p>Memcheck finds memory errors.</p>'
            '<table summary="Options"><tr><td>--leak-check</td><td>full</td></tr></table></div>'
            '<div><table summary="Navigation footer"><tr><td><a href="p.html">&lt;&lt; '
            'Previous page</a></td><td><a href="index.html">Home</a></td></tr></table></div>'
            '</body></html>')
    title, text = html_to_text(page)
    assert title == "Quick Start"
    assert "User Manual" not in text and "Previous page" not in text and "Home" not in text
    assert "Memcheck finds memory errors." in text and "--leak-check" in text


def test_api_objects_and_glossary_terms_start_sections() -> None:
    from pgfunnel.sources import chunk_text

    page = """<html><head><title>Session API</title></head><body><div role="main">
    <h1>Session API</h1><p>How sessions work.</p>
    <dl class="py class"><dt class="sig sig-object py" id="s.Session">class s.Session(bind)
      <a class="viewcode-link" href="_modules/s.html">[source]</a></dt>
      <dd><p>Manages persistence.</p>
        <dl class="py method"><dt class="sig sig-object py" id="s.Session.merge">
          merge(instance)</dt><dd><p>Copies the state of an instance.</p></dd></dl>
      </dd></dl>
    <dl class="function"><dt id="os.path.join">os.path.join(a, *p)</dt>
      <dd><p>Joins paths.</p></dd></dl>
    <dl class="glossary"><dt id="term-lazy">lazy loading</dt><dd><p>Loads on access.</p></dd></dl>
    <dl class="field-list simple"><dt>Parameters</dt><dd><p>bind</p></dd></dl>
    </div></body></html>"""
    title, text = html_to_text(page)
    assert title == "Session API"
    sections = {c.heading: c.text for c in chunk_text(text)}
    assert sections["class s.Session(bind)"].endswith("Manages persistence.")
    assert "Copies the state" in sections["merge(instance)"]
    assert "Joins paths." in sections["os.path.join(a, *p)"]
    assert "Loads on access." in sections["lazy loading"]
    # a field list is not a list of objects: its terms stay text
    assert "Parameters" not in sections and "[source]" not in text


def test_a_sphinx_members_bare_name_is_qualified_by_its_id() -> None:
    # Sphinx shows a member described inside its class by its bare name; two classes'
    # `url` attributes were one text, and ClientSession's raise_for_status came first
    # for `ClientResponse.raise_for_status`
    page = """<html><head><title>Client</title></head><body><div role="main">
    <h1>Client</h1>
    <dl class="py class"><dt class="sig sig-object py" id="aiohttp.ClientResponse">
      <em class="property"><span class="pre">class</span> </em><span class="sig-prename \
descclassname">aiohttp.</span><span class="sig-name descname">ClientResponse</span></dt>
      <dd><p>A response.</p>
        <dl class="py attribute"><dt class="sig sig-object py" id="aiohttp.ClientResponse.url">
          <span class="sig-name descname"><span class="pre">url</span></span></dt>
          <dd><p>URL that will be used for the request.</p></dd></dl>
        <dl class="py method">
          <dt class="sig sig-object py" id="aiohttp.ClientResponse.raise_for_status">
          <em class="property"><span class="pre">async</span> </em><span class="sig-name \
descname"><span class="pre">raise_for_status</span></span><span class="sig-paren">(</span>\
<span class="sig-paren">)</span></dt>
          <dd><p>Raises for an error status.</p></dd></dl>
        <dl class="py method"><dt class="sig sig-object py" id="aiohttp.ClientResponse.json">
          <span class="sig-prename descclassname">ClientResponse.</span><span class="sig-name \
descname">json</span></dt>
          <dd><p>Reads JSON.</p></dd></dl>
        <dl class="py attribute"><dt class="sig sig-object py" id="id3">
          <span class="sig-name descname"><span class="pre">history</span></span></dt>
          <dd><p>Redirects.</p></dd></dl>
      </dd></dl>
    </div></body></html>"""
    sections = {c.heading: c.text for c in chunk_text(html_to_text(page)[1])}
    assert "A response." in sections["class aiohttp.ClientResponse"]
    assert "URL that will" in sections["ClientResponse.url"]
    assert "Raises" in sections["async ClientResponse.raise_for_status()"]
    # shown qualified already, or an id that is not the dotted name: as shown
    assert "Reads JSON." in sections["ClientResponse.json"]
    assert "Redirects." in sections["history"]


def test_a_module_sphinx_declares_is_written_where_it_is_declared() -> None:
    # Sphinx shows nothing for `.. module::`: a page titled "URL Routing" named its
    # module only in code, and the release notes came first for `module werkzeug.routing`
    page = """<html><head><title>URL Routing</title></head><body><div role="main">
    <section id="module-werkzeug.routing"><span id="url-routing"></span>
    <h1>URL Routing<a class="headerlink" href="#module-werkzeug.routing">¶</a></h1>
    <p>Dispatching requests.</p>
    <span class="target" id="module-werkzeug.extra.lark"></span><section id="lark">
    <h2>hypothesis[lark]</h2><p>Grammars.</p></section>
    <section id="core"><h2>Core strategies</h2><p>The salient functions:</p>
    <span class="target" id="module-hypothesis.strategies"></span>
    <dl class="py function"><dt class="sig sig-object py" id="hypothesis.strategies.binary">
    <span class="sig-prename descclassname">hypothesis.strategies.</span>\
<span class="sig-name descname">binary</span></dt><dd><p>Bytes.</p></dd></dl></section>
    <section id="module-tornado.ioloop"><h2>tornado.ioloop — Main event loop</h2>
    <span class="target" id="module-PIL._imaging"></span>\
<span class="target" id="module-PIL.Image.core"></span>
    <p>The loop.</p></section>
    <span class="target" id="module-not-a-name"></span><p>Trailing.</p>
    <div id="module-header"><p>A site's block.</p></div>
    <div class="section" id="module-old.sphinx"><h2>Old Sphinx</h2><p>Sections as divs.</p>
    </div></section></div></body></html>"""
    title, text = html_to_text(page)
    # the title stays the page's own: it heads every chunk, twice in BM25
    assert title == "URL Routing"
    blocks = text.split("\n\n")
    assert blocks[:3] == ["# URL Routing", "Module werkzeug.routing", "Dispatching requests."]
    # above a section: under its heading; before text: in front of it
    assert blocks[3:5] == ["## hypothesis[lark]", "Module werkzeug.extra.lark"]
    assert blocks.index("Module hypothesis.strategies") == \
        blocks.index("The salient functions:") + 1
    # a heading that names the module is enough; two targets in a row are both written
    assert "Module tornado.ioloop" not in blocks
    assert blocks[blocks.index("## tornado.ioloop — Main event loop") + 1:][:2] == [
        "Module PIL._imaging", "Module PIL.Image.core"]
    # an id that only starts like one names no module, nor a block that is no section
    assert "not-a-name" not in text and "Module header" not in text
    assert blocks[blocks.index("## Old Sphinx") + 1] == "Module old.sphinx"
    sections = {c.heading: c.text for c in chunk_text(text)}
    assert sections["URL Routing"].split("\n\n")[1] == "Module werkzeug.routing"


def test_glossary_terms_over_one_definition_are_one_section() -> None:
    from pgfunnel.sources import chunk_text

    page = """<html><head><title>Glossary</title></head><body><div role="main">
    <h1>Glossary</h1>
    <dl class="glossary simple">
      <dt id="term-expire">expire</dt>
      <dt id="term-expired">expired</dt>
      <dt id="term-expiring">expiring</dt>
      <dd><p>Marks the loaded state of an object as stale.</p></dd>
      <dt id="term-lazy">lazy loading</dt><dd><p>Loads on access.</p></dd>
    </dl></div></body></html>"""
    _, text = html_to_text(page)
    sections = {c.heading: c.text for c in chunk_text(text)}
    # every spelling heads the definition they share; none is a chunk of one word
    assert sections["expire / expired / expiring"].endswith("as stale.")
    assert "Loads on access." in sections["lazy loading"]
    assert not {"expire", "expired", "expiring"} & set(sections)


def test_a_sphinx_build_folder_leaves_out_its_generated_pages(tmp_path: Path) -> None:
    import warnings

    from pgfunnel.sources import OtherFilesWarning, read_path

    build = tmp_path / "html"
    (build / "_sources").mkdir(parents=True)
    (build / "_modules" / "kombu").mkdir(parents=True)
    (build / "_static").mkdir()
    (build / "guide").mkdir()
    (build / "index.html").write_text(_page("Welcome", "<p>Start here.</p>"))
    (build / "guide" / "routing.html").write_text(_page("Routing", "<p>Queues and exchanges.</p>"))
    (build / "_sources" / "index.rst.txt").write_text("Welcome\n=======\n\nStart here.\n")
    (build / "_modules" / "kombu" / "queue.html").write_text(
        _page("kombu.queue", "<p>class Queue</p>"))
    (build / "_static" / "basic.css").write_text("body {}")
    for name in ("genindex.html", "genindex-Q.html", "py-modindex.html", "search.html"):
        (build / name).write_text(_page(name, "<p>Index entries.</p>"))
    # sphinx-notfound-page's, at the root; a page of that name deeper down is content
    (build / "404.html").write_text(_page("Page Not Found", "<p>Unfortunately we couldn't "
                                         "find the content you were looking for.</p>"))
    (build / "guide" / "404.html").write_text(_page("HTTP 404", "<p>When a route is missing.</p>"))
    (build / "objects.inv").write_bytes(b"# Sphinx inventory version 2\n")
    (build / "searchindex.js").write_text("Search.setIndex({})")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        keys = [d.citekey for d in read_path(build)]
    assert keys == ["guide/404", "guide/routing", "index"]
    notes = [str(w.message) for w in caught if issubclass(w.category, OtherFilesWarning)]
    assert any("a Sphinx build; left out its 7 generated pages" in n for n in notes), notes
    # a build inside the folder given is recognised too
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert [d.citekey for d in read_path(tmp_path)] == \
            ["html/guide/404", "html/guide/routing", "html/index"]
    # the same files without the build's inventory are an ordinary folder: all read
    (build / "objects.inv").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert len(list(read_path(build))) == 10
    # a generated folder given by itself is read
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert [d.citekey for d in read_path(build / "_modules")] == ["kombu/queue"]


def test_a_sphinx_build_stripped_of_its_inventory_is_known_by_its_index_table(
        tmp_path: Path) -> None:
    # Debian's packaged manuals (BIND's ARM) drop objects.inv and searchindex.js; the
    # general index is still Sphinx's table, and a project's own domain indexes (Buildbot's
    # bb-cfg.html) sit at the root under names Sphinx does not fix
    import warnings

    from pgfunnel.sources import OtherFilesWarning, read_path

    build = tmp_path / "arm"
    (build / "reference").mkdir(parents=True)
    (build / "index.html").write_text(_page("BIND 9", "<p>The reference manual.</p>"))
    (build / "reference" / "options.html").write_text(
        _page("Options", "<p>The options statement; see the modindextable note.</p>"))
    (build / "genindex.html").write_text(_page("Index", '<table class="indextable '
                                              'genindextable"><tr><td>allow-query</td>'
                                              '</tr></table>'))
    (build / "bb-cfg.html").write_text(_page("Config index", '<table class="indextable '
                                            'modindextable"><tr><td>workers</td></tr>'
                                            '</table>'))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        keys = [d.citekey for d in read_path(build)]
    # a page deeper down that merely names the table class is the author's own
    assert keys == ["index", "reference/options"]
    notes = [str(w.message) for w in caught if issubclass(w.category, OtherFilesWarning)]
    assert any("left out its 2 generated pages" in n for n in notes), notes
    # a genindex.html of the author's own, not Sphinx's table, leaves the folder ordinary
    (build / "genindex.html").write_text(_page("Index", "<p>Our own index of terms.</p>"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert [d.citekey for d in read_path(build)] == \
            ["bb-cfg", "genindex", "index", "reference/options"]


def test_a_paragraph_on_most_pages_is_left_out_as_boilerplate() -> None:
    from pgfunnel.sources import DocumentRecord, chunk_text, drop_repeated_blocks

    banner = ("This document describes the current stable version of Celery (5.2). "
              "For development docs, go here.")
    records = [DocumentRecord(f"p{i}", f"## Page {i}\n\n{banner}\n\nText of page {i} about "
                                       f"topic {i} and nothing else.\n\n    code line\n")
               for i in range(12)]
    # a page whose only paragraph is the banner keeps it (under its heading too): no
    # document is emptied of its text
    records.append(DocumentRecord("only", banner))
    records.append(DocumentRecord("headed", f"# Only banner\n\n{banner}"))
    # repeated below the bar: on 3 of 13 pages
    note = "Note that this paragraph is shared by only three of the pages."
    records = [DocumentRecord(r.citekey, r.text + f"\n\n{note}") if i < 3 else r
               for i, r in enumerate(records)]
    out, notes = drop_repeated_blocks(records)
    assert len(notes) == 1 and "found on 14 of 14 documents" in notes[0]
    assert banner[:40] in notes[0]
    by_key = {r.citekey: r for r in out}
    assert banner not in by_key["p5"].text
    assert "Text of page 5" in by_key["p5"].text and "    code line" in by_key["p5"].text
    assert [c.heading for c in chunk_text(by_key["p5"].text)] == ["Page 5"]
    assert by_key["only"].text == banner
    assert banner in by_key["headed"].text
    assert note in by_key["p0"].text
    # headings and code repeat on every page of a site too, and stay
    same = [DocumentRecord(f"q{i}", f"## Parameters\n\n    import celery\n\nBody {i}.")
            for i in range(12)]
    assert drop_repeated_blocks(same) == (same, [])
    # so does a paragraph of code inside a fenced block, after a blank line in it: left
    # out, it took the block's closing fence and left the rest of the page as code
    fenced = [DocumentRecord(f"f{i}", f"Example {i} of the plotting helpers here:\n\n```python\n"
                             f"import numpy as np\n\ndata = load_data('a', 'b', 'c', 'd', 'e')"
                             f"\nplot(data)\n```\n\nMore words about page {i}.")
              for i in range(12)]
    assert drop_repeated_blocks(fenced) == (fenced, [])
    # too few documents to tell boilerplate from content
    assert drop_repeated_blocks(records[:5]) == (records[:5], [])


def test_the_short_lines_of_a_boilerplate_box_go_with_it() -> None:
    # rsyslog's docs end every page with a help box: its sentences were left out, and its
    # labels ("See also", "Help with configuring/using Rsyslog:") stayed on every page
    from pgfunnel.sources import DocumentRecord, drop_repeated_blocks

    box = ("See also\n\nHelp with configuring:\n\n- Mailing list - best route for general "
           "questions\n\n- GitHub: the source project, for issues and detailed "
           "questions\n\nContributing:\n\n- Documentation: project README")
    records = [DocumentRecord(f"p{i}", f"# Page {i}\n\nExample:\n\n    run --page {i}\n\n"
                                       f"Text of page {i} about topic {i} and nothing else."
                                       f"\n\n{box}") for i in range(12)]
    # "Example:" is on every page too, and introduces the page's own code: it stays, and
    # so does a short line that the page's own text follows
    records.append(DocumentRecord("own", "Page of its own words, long enough to count.\n\n"
                                         "See also\n\nThe page's own list of further reading "
                                         "on this topic.\n\n" + box))
    out, notes = drop_repeated_blocks(records)
    by_key = {r.citekey: r for r in out}
    assert by_key["p3"].text == ("# Page 3\n\nExample:\n\n    run --page 3\n\nText of page 3 "
                                 "about topic 3 and nothing else.")
    assert by_key["own"].text.startswith("Page of its own words, long enough to count.\n\n"
                                         "See also\n\nThe page's own list")
    assert "Contributing" not in by_key["own"].text
    assert notes[-1] == ("left out 4 short lines found on as many documents, beside that "
                         "boilerplate: 'See also', 'Help with configuring:', 'Contributing:', "
                         "'- Documentation: project README'")


def test_a_page_gathering_the_others_whole_is_left_out(tmp_path: Path) -> None:
    # Buildbot ships full.html, its whole manual on one page, beside the manual's pages:
    # ingested, it took a top-3 slot in 584 of 600 queries
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.sources import DocumentRecord, drop_gathering_pages

    def para(page: int, n: int) -> str:
        return f"Paragraph {n} of page {page} explains option number {page * 100 + n} fully."

    pages = [DocumentRecord(f"manual/p{i}", f"# Page {i}\n\n"
                            + "\n\n".join(para(i, n) for n in range(4)))
             for i in range(8)]
    full = DocumentRecord("full", "# Table of contents\n\n" + "\n\n".join(
        rec.text for rec in pages))
    # a large page kept in two versions: each holds the other, neither gathers pages
    big = "\n\n".join(para(50, n) for n in range(30))
    versions = [DocumentRecord("v1/big", big), DocumentRecord("v2/big", big + "\n\nNew.")]
    kept, notes = drop_gathering_pages([*pages, full, *versions])
    assert [r.citekey for r in kept] == [r.citekey for r in [*pages, *versions]]
    assert notes == ["left out 'full': it gathers 8 other documents whole (100% of its "
                     "paragraphs are theirs), as a single-page or print edition does, and "
                     "ranked above each of them; ingest it by itself to index it"]
    # a page quoting a paragraph of each of five pages gathers none of them whole
    digest = DocumentRecord("digest", "\n\n".join(
        [para(i, 0) for i in range(8)] + [para(60, n) for n in range(16)]))
    assert drop_gathering_pages([*pages, digest])[1] == []
    # under five pages gathered, it stays (a chapter page with its sections, say)
    long_pages = [DocumentRecord(f"s{i}", "\n\n".join(para(80 + i, n) for n in range(6)))
                  for i in range(5)]

    def chapter(n: int) -> DocumentRecord:
        return DocumentRecord("chapter", "\n\n".join(r.text for r in long_pages[:n]))
    assert drop_gathering_pages([*long_pages, chapter(4)])[1] == []
    assert len(drop_gathering_pages([*long_pages, chapter(5)])[1]) == 1
    # the CLI says so, and the file given by itself is read
    for rec in [*pages, full]:
        path = tmp_path / f"{rec.citekey}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rec.text)
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    dry = json.loads(res.stdout)
    assert "full" not in [d["citekey"] for d in dry["documents"]]
    assert any(n.startswith("left out 'full': it gathers 8") for n in dry["notes"])
    # a note is one line however narrow the console, for a log to grep
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run"],
                             env={"COLUMNS": "80"})
    assert any(line.startswith("note: left out 'full': it gathers 8") and
               line.endswith("ingest it by itself to index it")
               for line in res.stderr.splitlines()), res.stderr
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "full.md"), "--dry-run", "--json"])
    assert [d["citekey"] for d in json.loads(res.stdout)["documents"]] == ["full"]


def test_files_generators_write_beside_their_pages_are_left_out(tmp_path: Path) -> None:
    # Haddock's Hoogle database (split.txt: each declaration and comment again) and
    # MkDocs' page for a missing page (404.html beside sitemap.xml)
    from pgfunnel.sources import OtherFilesWarning

    haddock = tmp_path / "haddock"
    haddock.mkdir()
    (haddock / "split.txt").write_text(
        "-- Hoogle documentation, generated by Haddock\n-- See Hoogle, "
        "http://www.haskell.org/hoogle/\n\n\n-- | Combinator library for splitting lists.\n"
        "@package split\n@version 0.2.3.5\n\nmodule Data.List.Split\n\n-- | Split on the "
        "given sublist.\nsplitOn :: Eq a => [a] -> [a] -> [[a]]\n")
    (haddock / "Data-List-Split.html").write_text(
        "<html><head><title>Data.List.Split</title></head><body><div id='content'>"
        "<p>splitOn: split on the given sublist.</p></div></body></html>")
    # a text file that quotes the mark later on is the author's own
    (haddock / "notes.txt").write_text("Notes\n\nHaddock writes a database whose first line"
                                       " is: -- Hoogle documentation, generated by Haddock\n")
    mkdocs = tmp_path / "mkdocs"
    mkdocs.mkdir()
    (mkdocs / "sitemap.xml").write_text("<urlset></urlset>")
    page = ('<html><head><meta name="generator" content="mkdocs-1.4.2, mkdocs-material-8.2.5">'
            "<title>{}</title></head><body><article class='md-content__inner'>{}</article>"
            "</body></html>")
    (mkdocs / "404.html").write_text(page.format("mkdocs-literate-nav", "<h1>404 - Not found"
                                                 "</h1>"))
    (mkdocs / "index.html").write_text(page.format("Usage", "<h1>Usage</h1><p>Activate the "
                                                   "plugin.</p>"))
    # a 404 page of another site, or of an MkDocs site without its sitemap, stays
    (tmp_path / "404.html").write_text(page.format("Not found", "<h1>Not found</h1><p>Try "
                                                   "the search.</p>"))
    with pytest.warns(OtherFilesWarning) as caught:
        docs = list(read_path(tmp_path))
    assert sorted(d.citekey for d in docs) == ["404", "haddock/Data-List-Split",
                                               "haddock/notes", "mkdocs/index"]
    notes = [str(w.message) for w in caught]
    assert any(n.endswith("left out 2 files a documentation generator writes beside its "
                          "pages: haddock/split.txt (Haddock's Hoogle database), mkdocs/404.html "
                          "(MkDocs' page for a missing page); give such a file by itself to "
                          "index it") for n in notes), notes
    # given by itself, it is read
    assert "splitOn ::" in list(read_path(haddock / "split.txt"))[0].text


def test_a_javadoc_builds_generated_pages_are_left_out(tmp_path: Path) -> None:
    # javadoc's member index repeats each member's first sentence under its name, and its
    # help page is the same on every site: argparse4j's index-all.html was 35 chunks
    from pgfunnel.sources import OtherFilesWarning

    def page(title: str, body: str) -> str:
        return ("<!DOCTYPE HTML>\n<html><head>\n<!-- Generated by javadoc -->\n"
                f"<title>{title}</title></head><body><main role='main'>{body}</main>"
                "</body></html>")

    api = tmp_path / "api"
    (api / "index-files").mkdir(parents=True)
    (api / "net" / "parse").mkdir(parents=True)
    (api / "element-list").write_text("net.parse\n")
    (api / "index.html").write_text(page("Overview", "<h1>argparse4j API</h1><p>Parsers.</p>"))
    members = "".join(f"<dt>addArgument(String...) - Method in class Parser{i}</dt><dd>Creates "
                      "a new argument and adds it to the parser.</dd>" for i in range(5))
    (api / "index-all.html").write_text(page("Index", f"<dl>{members}</dl>"))
    (api / "index-files" / "index-1.html").write_text(page("A-Index", f"<dl>{members}</dl>"))
    (api / "help-doc.html").write_text(page("API Help", "<h1>How This API Document Is "
                                            "Organized</h1><p>Each package has a page.</p>"))
    (api / "allclasses-index.html").write_text(page("All Classes", "<p>Parser: parses.</p>"))
    (api / "net" / "parse" / "package-tree.html").write_text(
        page("net.parse Class Hierarchy", "<ul><li>Parser</li></ul>"))
    (api / "net" / "parse" / "Parser.html").write_text(page(
        "Parser", "<h1>Class Parser</h1><p>addArgument(String...) creates a new argument "
        "and adds it to the parser.</p>"))
    with pytest.warns(OtherFilesWarning) as caught:
        docs = list(read_path(tmp_path))
    assert sorted(d.citekey for d in docs) == ["api/index", "api/net/parse/Parser"]
    assert any(str(w.message).startswith(f"{api}: a javadoc build; left out its 5 generated "
                                         "pages") for w in caught), [str(w.message) for w in caught]
    # the same names without javadoc's list of packages are pages like any other
    (api / "element-list").unlink()
    assert "api/index-all" in {d.citekey for d in read_path(tmp_path)}
    # given by itself, the member index is read
    assert "Creates a new argument" in list(read_path(api / "index-all.html"))[0].text


def test_the_site_name_all_titles_share_is_taken_off(tmp_path: Path) -> None:
    # Doxygen titles every page "json-c: ...", javadoc each class "Namespace (argparse4j
    # 0.4.4 API)": the site's name headed every chunk
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.sources import DocumentRecord, drop_common_title_parts

    def docs(titles: list[str]) -> list[DocumentRecord]:
        return [DocumentRecord(f"p{i}", f"Text {i}.", title=t) for i, t in enumerate(titles)]

    doxygen = docs([f"json-c: json_object_{i}.h File Reference" for i in range(11)]
                   + ["json-c: Deprecated List", "Main Page"])
    kept, notes = drop_common_title_parts(doxygen)
    assert [r.title for r in kept][10:] == ["json_object_10.h File Reference",
                                            "Deprecated List", "Main Page"]
    assert notes == ["took 'json-c: ' off the 12 titles of 13 documents that begin with it "
                     "(the site's name)"]
    # javadoc: only the class pages carry the name, the others are titled by a heading
    javadoc = docs([f"Class{i} (argparse4j 0.4.4 API)" for i in range(10)]
                   + [f"Uses of Class Class{i}" for i in range(12)])
    kept, notes = drop_common_title_parts(javadoc)
    assert [r.title for r in kept][:2] == ["Class0", "Class1"]
    assert [r.title for r in kept][10:] == [r.title for r in javadoc][10:]
    assert len(notes) == 1 and notes[0].startswith("took ' (argparse4j 0.4.4 API)' off the 10")
    # a part that the pages' own differ in stays (YARD: "Class: " 30, "Module: " 11 of 45)
    yard = docs([f"Class: Mocha::C{i}" for i in range(30)]
                + [f"Module: Mocha::M{i}" for i in range(11)] + ["Top Level Namespace"])
    assert drop_common_title_parts(yard) == (yard, [])
    # so do parts fewer than 10 titles share, and titles that are nothing else
    few = docs(["json-c: A", "json-c: B", "Other"])
    assert drop_common_title_parts(few) == (few, [])
    bare = docs(["Site: Intro"] * 11 + ["Site: "])
    assert [r.title for r in drop_common_title_parts(bare)[0]][-2:] == ["Intro", "Site: "]
    # the CLI does it, with a note
    for i in range(10):
        (tmp_path / f"f{i}.html").write_text(
            f"<html><head><title>json-c: f{i}.h File Reference</title></head><body><div "
            f"class='contents'><p>The functions of file {i}.</p></div></body></html>")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    dry = json.loads(res.stdout)
    assert [d["title"] for d in dry["documents"]][:2] == ["f0.h File Reference",
                                                          "f1.h File Reference"]
    assert "took 'json-c: ' off the 10 titles of 10 documents that begin with it (the " \
        "site's name)" in dry["notes"]
    # a Markdown file's title is its author's first heading: a series' shared part stays
    series = tmp_path / "tutorials"
    series.mkdir()
    for i in range(12):
        (series / f"t{i}.md").write_text(f"# Tutorial: step {i}\n\nWhat step {i} does.\n")
    res = CliRunner().invoke(app, ["ingest", str(series), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    dry = json.loads(res.stdout)
    assert [d["title"] for d in dry["documents"]][:2] == ["Tutorial: step 0",
                                                          "Tutorial: step 1"]
    assert not [n for n in dry["notes"] if "site's name" in n]


def test_a_copy_of_a_page_in_its_folder_is_left_out(tmp_path: Path) -> None:
    # YARD writes the README's page twice, file.README.html and index.html: each search
    # for its words returned both
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.sources import DocumentRecord, drop_copied_pages

    readme = "# Mocha\n\nMocha is a mocking and stubbing library for Ruby."
    pages = [DocumentRecord("docs/file.README", readme), DocumentRecord("docs/index", readme),
             DocumentRecord("docs/Mocha/Mock", "# Mock\n\nTraditional mock object."),
             # the same page in another version's folder stays: it belongs to each
             DocumentRecord("v2/file.README", readme),
             # and so does a page of other text
             DocumentRecord("docs/file.RELEASE", readme + "\n\nRelease notes.")]
    kept, notes = drop_copied_pages(pages)
    assert [r.citekey for r in kept] == ["docs/file.README", "docs/Mocha/Mock",
                                         "v2/file.README", "docs/file.RELEASE"]
    assert notes == ["left out 'docs/index': the same text as 'docs/file.README' in its "
                     "folder, a copy of that page"]
    # the CLI says so
    body = ("<html><head><title>File: README</title></head><body><div id='content'>"
            "<h1>Mocha</h1><p>Mocha is a mocking and stubbing library.</p></div></body></html>")
    (tmp_path / "file.README.html").write_text(body)
    (tmp_path / "index.html").write_text(body)
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    dry = json.loads(res.stdout)
    assert [d["citekey"] for d in dry["documents"]] == ["file.README"]
    assert "left out 'index': the same text as 'file.README' in its folder, a copy of " \
        "that page" in dry["notes"]


def test_copies_for_other_readers_or_tenants_are_each_their_own(tmp_path: Path) -> None:
    # one policy text written once per tenant (or per team) in a JSONL file: the copy
    # rule left out all but the first, which hid the document from the other tenants
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.sources import DocumentRecord, drop_copied_pages

    policy = "Refunds are paid within 14 days of a request."
    records = [DocumentRecord("refunds-acme", policy, tenant="acme"),
               DocumentRecord("refunds-globex", policy, tenant="globex"),
               DocumentRecord("refunds-staff", policy, readers=["staff"]),
               DocumentRecord("refunds-fr", policy, language="fr"),
               DocumentRecord("refunds-eu", policy, metadata={"region": "eu"}),
               # the same text for the same readers is still a copy
               DocumentRecord("refunds-acme-2", policy, tenant="acme")]
    kept, notes = drop_copied_pages(records)
    assert [r.citekey for r in kept] == [r.citekey for r in records[:5]]
    assert notes == ["left out 'refunds-acme-2': the same text as 'refunds-acme' in its "
                     "folder, a copy of that page"]
    lines = [{"citekey": f"refunds-{t}", "text": policy, "tenant": t}
             for t in ("acme", "globex", "initech")]
    (tmp_path / "policies.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "policies.jsonl"), "--dry-run",
                                   "--json"])
    assert res.exit_code == 0, res.output
    assert [d["citekey"] for d in json.loads(res.stdout)["documents"]] == [
        "refunds-acme", "refunds-globex", "refunds-initech"]


def test_jsonl_lines_keep_their_citekeys_and_titles(tmp_path: Path) -> None:
    # the rules for a generator's copies of a page and its site's name in titles are for
    # files: a JSONL line names its own citekey and title, and two lines of one text (a
    # stock answer under two products) were one document, "FAQ: " cut off every title
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    answer = "This item ships within two business days."
    lines = [{"citekey": f"sku-{i}", "title": f"FAQ: shipping of item {i}", "text": answer}
             for i in range(12)]
    (tmp_path / "faq.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    # beside HTML pages in the same folder, which the rules still read
    body = ("<html><head><title>File: README</title></head><body><div id='content'>"
            "<h1>Mocha</h1><p>Mocha is a mocking and stubbing library.</p></div></body></html>")
    (tmp_path / "file.README.html").write_text(body)
    (tmp_path / "index.html").write_text(body)
    for target in (tmp_path / "faq.jsonl", tmp_path):
        res = CliRunner().invoke(app, ["ingest", str(target), "--dry-run", "--json"])
        assert res.exit_code == 0, res.output
        dry = json.loads(res.stdout)
        docs = [d for d in dry["documents"] if d["citekey"].startswith("sku-")]
        assert [d["citekey"] for d in docs] == [x["citekey"] for x in lines]
        assert [d["title"] for d in docs] == [x["title"] for x in lines]
        assert not any("sku-" in note or "FAQ" in note for note in dry["notes"])
    assert [d["citekey"] for d in dry["documents"] if not d["citekey"].startswith("sku-")
            ] == ["file.README"]


def test_a_jsonl_line_is_never_left_out_as_a_gathering_page(tmp_path: Path) -> None:
    # one handbook written whole for one tenant and in sections for another: the whole
    # line was left out as a print edition of the sections, hidden from its tenant
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    def para(section: int, n: int) -> str:
        return f"Rule {n} of section {section} says how claim number {section * 10 + n} is paid."

    sections = [{"citekey": f"globex/s{i}", "tenant": "globex",
                 "text": "\n\n".join(para(i, n) for n in range(4))} for i in range(6)]
    handbook = {"citekey": "acme/handbook", "tenant": "acme",
                "text": "\n\n".join(s["text"] for s in sections)}
    (tmp_path / "policies.jsonl").write_text(
        "\n".join(json.dumps(x) for x in [*sections, handbook]))
    # the same texts as files are still read as a site's pages and its print edition
    for rec in [*sections, handbook]:
        (tmp_path / "site" / f"{rec['citekey']}.md").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "site" / f"{rec['citekey']}.md").write_text(str(rec["text"]))
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    dry = json.loads(res.stdout)
    keys = [d["citekey"] for d in dry["documents"]]
    assert "acme/handbook" in keys
    assert "site/acme/handbook" not in keys
    assert [n for n in dry["notes"] if "gathers" in n] == [
        "left out 'site/acme/handbook': it gathers 6 other documents whole (100% of its "
        "paragraphs are theirs), as a single-page or print edition does, and ranked above "
        "each of them; ingest it by itself to index it"]


def test_paragraphs_jsonl_lines_share_are_not_boilerplate(tmp_path: Path) -> None:
    # one policy written per tenant in a JSONL file, each line with its tenant's own first
    # paragraph: the paragraphs all lines share were left out of every line as a site's
    # boilerplate, so no tenant could find its policy; and the lines counted towards the
    # pages' share, so the banner on the pages beside them stayed
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    shared = ["Employees may work remotely up to three days per week with manager approval.",
              "Expense reports are due within thirty days of the purchase they claim."]
    lines = [{"citekey": f"policy-{i}", "tenant": f"tenant-{i}",
              "text": "\n\n".join([f"The handbook of tenant number {i} and its staff.",
                                    *shared])} for i in range(40)]
    (tmp_path / "policies.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    banner = "You are reading the documentation of an old version of this product."
    for i in range(12):
        (tmp_path / f"page{i}.md").write_text(
            f"# Page {i}\n\n{banner}\n\nPage {i} explains feature number {i} in full.\n")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    dry = json.loads(res.stdout)
    words = {d["citekey"]: d["words"] for d in dry["documents"]}
    assert all(words[x["citekey"]] == 34 for x in lines), words
    assert all(words[f"page{i}"] == 11 for i in range(12)), words
    assert [n for n in dry["notes"] if "boilerplate" in n] == [
        "left out a paragraph found on 12 of 12 documents (site boilerplate): "
        f"{banner!r}"]
    # the JSONL file alone: every line whole, no note
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "policies.jsonl"), "--dry-run",
                                   "--json"])
    assert res.exit_code == 0, res.output
    dry = json.loads(res.stdout)
    assert [d["words"] for d in dry["documents"]] == [34] * 40
    assert dry["notes"] == []


def test_headings_keep_their_level_and_chunks_know_the_sections_they_sit_in() -> None:
    from pgfunnel.sources import chunk_text

    page = """<html><head><title>CLI</title></head><body><div role="main">
    <h1>Command line</h1><p>Every command.</p>
    <h2>worker</h2><p>Starts a worker.</p>
    <dl class="std option"><dt class="sig sig-object std" id="w-Q">-Q, --queues</dt>
      <dd><p>Queues to consume from.</p></dd></dl>
    <h3>Pool options</h3><p>Pool sizes.</p>
    <h2>purge</h2>
    <dl class="std option"><dt class="sig sig-object std" id="p-Q">-Q, --queues</dt>
      <dd><p>Queues to purge.</p></dd></dl>
    <dl class="py class"><dt class="sig sig-object py" id="m.Cluster">class m.Cluster(nodes)</dt>
      <dd><p>A cluster.</p>
        <dl class="py method"><dt class="sig sig-object py" id="m.Cluster.getpids">
          getpids()</dt><dd><p>Process ids.</p></dd></dl></dd></dl>
    </div></body></html>"""
    _, text = html_to_text(page)
    assert "# Command line\n" in text and "\n## worker\n" in text
    assert "\n### Pool options\n" in text
    # an API object's signature heads its section at the lowest level
    assert "\n###### -Q, --queues\n" in text and "\n###### getpids()\n" in text
    paths = [(c.heading, c.section_path) for c in chunk_text(text)]
    # the same option under two commands: each chunk says which command it belongs to
    assert ("-Q, --queues", "Command line > worker") in paths
    assert ("-Q, --queues", "Command line > purge") in paths
    assert ("Pool options", "Command line > worker") in paths
    # an object's signature is never the section of another: a method sits under the
    # page's sections, not under its class's signature
    assert ("getpids()", "Command line > purge") in paths


def test_a_site_banner_h1_named_after_the_page_in_title_is_not_the_title() -> None:
    # Django's theme: the site's name in an <h1> above every page, the page's own <h1>
    # later, and <title> "page — site"
    page = """<html><head><title>FAQ: General &#8212; Django 3.2 documentation</title></head>
    <body><div id="hd"><h1><a href="../index.html">Django 3.2 documentation</a></h1>
    <div id="global-nav">Home | Table of contents | Index | Modules</div></div>
    <div id="bd"><div class="section"><h1>FAQ: General</h1>
    <h2>Why does this project exist?</h2><p>A newspaper needed it.</p></div></div>
    </body></html>"""
    assert html_to_text(page)[0] == "FAQ: General"
    # a Sphinx page whose own <h1> opens <title> keeps it
    sphinx = """<html><head><title>Tasks &#8212; Celery 5.2 documentation</title></head>
    <body><div role="main"><h1>Tasks</h1><h2>Celery 5.2 documentation</h2>
    <p>Tasks are the building blocks.</p></div></body></html>"""
    assert html_to_text(sphinx)[0] == "Tasks"


def test_sphinx_no_title_placeholder_is_not_a_title(tmp_path: Path) -> None:
    from pgfunnel.sources import read_path

    # Sphinx's placeholder for a source with no title names nothing: the first heading
    # there is does; with none the title is left empty, and ingest names the page by its
    # file, as for the other formats
    untitled = """<html><head><title>&lt;no title&gt; &#8212; Buildbot 3.7 documentation
    </title></head><body><div role="main"><h2>Release Notes for 3.7.0</h2>
    <p>Worker fixes.</p></div></body></html>"""
    assert html_to_text(untitled)[0] == "Release Notes for 3.7.0"
    assert html_to_text(untitled.replace("<h2>Release Notes for 3.7.0</h2>", ""))[0] == ""
    page = tmp_path / "release_notes-3.7.html"
    page.write_text(untitled.replace("<h2>Release Notes for 3.7.0</h2>", ""))
    assert [r.title for r in read_path(page)] == ["release notes 3.7"]
    # a title that only begins with the words is the author's
    assert html_to_text(untitled.replace("&lt;no title&gt;", "&lt;no title&gt;s in HTML")
                        )[0].startswith("<no title>s in HTML")


def test_code_line_numbers_are_not_glued_to_the_code() -> None:
    # Pygments' inline numbers (Sphinx's :linenos:), its table column (MkDocs'
    # codehilite) and Chroma's (Hugo) inline and table forms
    page = """<main><h1>Code</h1>
<div class="highlight"><pre><span></span><span class="linenos">1</span><span
class="k">def</span> f(x):
<span class="linenos">2</span>    return x</pre></div>
<table class="highlighttable"><tr><td class="linenos"><div class="linenodiv"><pre>1
2</pre></div></td><td class="code"><div><pre><code>import os
print(os.sep)</code></pre></div></td></tr></table>
<pre class="chroma"><code><span class="line"><span class="ln">1</span><span class="cl">ls -l
</span></span><span class="line"><span class="ln">2</span><span
class="cl">cd /tmp</span></span></code></pre>
<table class="lntable"><tr><td class="lntd"><pre class="chroma"><code><span class="lnt">1
</span></code></pre></td><td class="lntd-code"><pre class="chroma"><code>make all</code></pre></td>
</tr></table>
</main>"""
    _, text = html_to_text(page)
    assert "    def f(x):\n        return x" in text
    assert "    import os\n    print(os.sep)" in text
    assert "    ls -l\n    cd /tmp" in text
    assert "    make all" in text
    assert not any(line.strip() in ("1", "2") or line.lstrip().startswith(("1", "2"))
                   for line in text.splitlines())


def test_a_stripped_sphinx_build_with_its_index_split_by_letter_is_known(
        tmp_path: Path) -> None:
    # Debian's MIT Kerberos manual: no objects.inv nor searchindex.js, and
    # html_split_index, so genindex.html lists the letters and each genindex-X.html
    # holds a plain "indextable"
    import warnings

    build = tmp_path / "krb5"
    build.mkdir()
    (build / "index.html").write_text(_page("MIT Kerberos", "<p>The documentation.</p>"))
    (build / "genindex.html").write_text(_page(
        "Index", '<p>Index pages by letter:</p><div class="genindex-jumpbox"><p>'
        '<a href="genindex-K.html"><strong>K</strong></a></p></div>'))
    (build / "genindex-K.html").write_text(_page(
        "Index – K", '<table class="indextable"><tr><td>krb5_init_context</td></tr>'
        '</table>'))
    (build / "genindex-all.html").write_text(_page("Index", "<p>krb5_init_context</p>"))
    (build / "search.html").write_text(_page("Search", "<p>Please activate JavaScript</p>"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert [d.citekey for d in read_path(build)] == ["index"]


def test_a_table_row_is_one_line_when_its_cells_hold_paragraphs() -> None:
    # Sphinx writes every cell as <td><p>...</p></td> (Python's stdtypes, rsyslog's
    # parameter tables); each cell came out as a line of its own, and the blank line
    # below a table was lost
    page = """<main><h1>Types</h1>
<table class="docutils"><thead><tr><th class="head"><p>Operation</p></th>
<th class="head"><p>Result</p></th></tr></thead>
<tbody><tr><td><p><code>x or y</code></p></td><td><p>if <em>x</em> is false, then
<em>y</em></p><ul><li><p>short-circuits</p></li></ul></td></tr>
<tr><td><p><code>not x</code></p></td><td><p>True if x is false</p></td></tr></tbody></table>
<p>These operators have lower priority.</p>
<table class="highlighttable"><tr><td class="code"><div><pre>print(1)
print(2)</pre></div></td></tr></table>
<p>After the code.</p></main>"""
    _, text = html_to_text(page)
    assert ("Operation | Result\nx or y | if x is false, then y - short-circuits\n"
            "not x | True if x is false\n\nThese operators have lower priority.") in text
    assert "    print(1)\n    print(2)\n\nAfter the code." in text
    chunks = chunk_text(text, chunk_words=20)
    assert any("x or y | if x is false" in c.text for c in chunks)


def test_toctrees_and_tables_of_contents_are_navigation() -> None:
    # the reST reader leaves out `.. toctree::` and `.. contents::`; their rendered lists
    # (every page title, section and API name below) made an index page match them all
    page = """<html><head><title>Client</title></head><body><div role="main">
<section id="client"><h1>Client</h1>
<p>The page contains all information about the Client API:</p>
<div class="toctree-wrapper compound"><ul>
<li class="toctree-l1"><a href="client_quickstart.html">Quickstart</a><ul>
<li class="toctree-l2"><a href="client_quickstart.html#make-a-request">Make a Request</a></li>
</ul></li><li class="toctree-l1"><a href="reference.html">Reference</a><ul>
<li class="toctree-l2"><a href="reference.html#Session.close">Session.close()</a></li>
</ul></li></ul></div>
<div class="contents topic" id="contents"><p class="topic-title">Contents</p>
<ul><li><a href="#overview">Overview</a></li></ul></div>
<section id="overview"><h2>Overview</h2><p>Sessions keep connections open.</p></section>
</section></div></body></html>"""
    title, text = html_to_text(page)
    assert title == "Client"
    assert text == ("# Client\n\nThe page contains all information about the Client API:\n\n"
                    "## Overview\n\nSessions keep connections open.")


def test_a_singlehtml_build_keeps_the_documents_its_toctree_holds() -> None:
    """Sphinx's singlehtml builder writes every document of a manual into the toctree of
    its one page, each after a `<span id="document-NAME">`; dropped as a toctree of
    links, Debian's python-policy.html (88 KB, 5,400 words) was ingested as its 38-word
    abstract, with no note. A toctree of links is still dropped (above). Its title is the
    page's <title>: the first <h1> is the first document's."""
    page = """<html><head><title>Debian Python Policy documentation</title></head><body>
<div class="related" role="navigation"><ul><li><a href="#">Policy</a></li></ul></div>
<div class="body" role="main">
<section id="abstract"><h1>Abstract</h1><p>Packaging Python in Debian.</p></section>
<section id="contents"><h1>Contents</h1>
<div class="toctree-wrapper compound">
<span id="document-copyright"></span><section id="copyright">
<h2><span class="section-number">1. </span>Copyright</h2>
<p>1999-2021, Software in the Public Interest</p></section>
<span id="document-python"></span><section id="python-packaging">
<h2><span class="section-number">2. </span>Python Packaging</h2>
<p>Each Python version is packaged as python3.X.</p>
<div class="toctree-wrapper compound"><ul>
<li class="toctree-l1"><a href="#copyright">Copyright</a></li></ul></div>
</section></div></section></div></body></html>"""
    title, text = html_to_text(page)
    # the manual's name, not its first document's heading ("Abstract" above every chunk)
    assert title == "Debian Python Policy documentation"
    assert text == ("# Abstract\n\nPackaging Python in Debian.\n\n# Contents\n\n"
                    "## 1. Copyright\n\n1999-2021, Software in the Public Interest\n\n"
                    "## 2. Python Packaging\n\nEach Python version is packaged as "
                    "python3.X."), text


def test_a_code_line_ending_in_a_pipe_keeps_it() -> None:
    # the trailing cell separator of a table row was taken off every line of the page,
    # code included: a YAML block scalar, a Django Q expression, a mysql result table
    page = """<main><h1>Config</h1>
<pre>stderr: |
  line one
qs = (Q(a=1) |
      Q(b=2))
+--------+
| user() |
+--------+</pre>
<table><tr><td><p>file</p></td><td><p>the path</p></td><td></td></tr></table></main>"""
    _, text = html_to_text(page)
    assert "    stderr: |\n      line one\n    qs = (Q(a=1) |\n" in text
    assert "    | user() |\n" in text
    assert text.endswith("\n\nfile | the path")


def test_docutils_footnotes_topics_and_sidebars_are_content() -> None:
    # docutils 0.18+ writes them as <aside>, which a theme's sidebar is too
    page = """<html><body><aside class="sidebar-drawer"><p>Site navigation</p></aside>
<div role="main"><h1>Curses</h1>
<aside class="topic"><p class="topic-title">Abstract</p>
<p>This document describes the curses module.</p></aside>
<aside class="sidebar"><p class="sidebar-title">Note</p><p>Group short jobs.</p></aside>
<p>Text with a note<a class="footnote-reference brackets" href="#f1">1</a>.</p>
<aside class="footnote-list brackets"><aside class="footnote brackets" id="f1" role="note">
<span class="label"><span class="fn-bracket">[</span>1<span class="fn-bracket">]</span></span>
<p>Only on Unix.</p></aside></aside>
<aside class="pull-quote"><p>Chrome of the theme.</p></aside>
</div></body></html>"""
    _, text = html_to_text(page)
    for kept in ("Abstract", "This document describes the curses module.", "Group short jobs.",
                 "[1]", "Only on Unix."):
        assert kept in text
    assert "Site navigation" not in text and "Chrome of the theme" not in text


def test_tab_panels_hidden_until_chosen_are_content() -> None:
    # Docusaurus and sphinx-tabs render every tab but the first with `hidden`
    page = """<main><h1>Install</h1>
<ul role="tablist"><li role="tab" aria-selected="true">npm</li><li role="tab">Yarn</li></ul>
<div role="tabpanel" class="tabItem"><pre><code>npm install foo</code></pre></div>
<div role="tabpanel" class="tabItem" hidden=""><pre><code>yarn add foo</code></pre></div>
<div class="sphinx-tabs"><div role="tablist"><button class="sphinx-tabs-tab" role="tab"
aria-selected="true">Linux</button><button class="sphinx-tabs-tab" role="tab">Windows</button>
</div><div class="sphinx-tabs-panel" role="tabpanel"><p>Use apt.</p></div>
<div class="sphinx-tabs-panel" hidden="true" role="tabpanel"><p>Use the installer.</p></div>
</div><p hidden>Not shown.</p><button class="copybtn">Copy</button></main>"""
    _, text = html_to_text(page)
    for kept in ("    npm install foo", "    yarn add foo", "- Linux\n- Windows", "Use apt.",
                 "Use the installer."):
        assert kept in text
    assert "Not shown" not in text and "Copy" not in text


def test_end_tags_a_page_leaves_out_are_implied_and_nesting_is_bounded() -> None:
    # 1,200 paragraphs opened with <p> and never closed (valid HTML) nested 1,200 deep and
    # stopped the ingest with a RecursionError; so did thousands of unclosed <font> tags
    faq = "<html><body><h1>FAQ</h1>" + "".join(
        f"<p>Answer {i}.\n" for i in range(1200)) + "</body></html>"
    _, text = html_to_text(faq)
    assert text.startswith("# FAQ\n\nAnswer 0.\n\nAnswer 1.\n\n")
    assert text.endswith("Answer 1199.")
    _, text = html_to_text("<body>" + "<font size=2>" * 5000 + "deep text</body>")
    assert text == "deep text"
    _, text = html_to_text("<body><ul><li>a<li>b<ul><li>c<li>d</ul><li>e</ul>"
                           "<dl><dt>term<dd>its text<dt>next<dd>more</dl>"
                           "<table><tr><td>1<td>2<tr><td>3<td>4</table></body>")
    assert text == "- a\n- b\n\n  - c\n  - d\n\n- e\n\nterm\nits text\nnext\nmore\n\n1 | 2\n3 | 4"


def test_links_left_open_inside_links_read_in_linear_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # `<a href="#s1">One<a>`: each link's own text decides whether it is a permalink,
    # and reading it again at every level of nesting doubled the work per level: 40 such
    # links in a 2.5 KB page hung an ingest. Each element's text is now read once.
    from pgfunnel import html_text

    reads: list[int] = []
    read = html_text._read_raw_text

    def counted(element: object) -> list[str]:
        reads.append(1)
        return read(element)  # type: ignore[arg-type]

    monkeypatch.setattr(html_text, "_read_raw_text", counted)
    page = ("<html><body><main><p>" + "".join(f'<a href="#s{i}">Section {i}<a>, '
                                               for i in range(40))
            + "</p><p>Body text.</p></main></body></html>")
    _, text = html_to_text(page)
    assert "Section 39" in text and "Body text." in text
    assert len(reads) <= 80  # one read per link element (2^40 before)
    monkeypatch.undo()  # the counter's own frames would take the depth the tree may use
    deep = "<html><body><main><p>x" + '<a href="#">' * 50_000 + "y</p></main></body></html>"
    _, deep_text = html_to_text(deep)
    assert "x" in deep_text and "y" in deep_text


def test_the_end_of_a_page_is_read_as_browsers_read_it() -> None:
    # a comment left open runs to the end of the page and hides the rest: its words
    # were indexed (Python's parser gives an open comment back as text)
    _, text = html_to_text("<html><body><p>Shown.</p><!-- draft: the secret plan</p>"
                           "<p>also hidden</p></body></html>")
    assert text == "Shown."
    # a closed comment hides only itself
    _, text = html_to_text("<p>a<!-- note --> b</p><p>c</p>")
    assert text == "a b\n\nc"
    # a declaration or a tag left open at the end is not text either; a bare "<" is
    for page, expected in (("<p>a b</p><a href=\"x", "a b"), ("<p>x</p><?php echo 1", "x"),
                           ("<p>x</p><!DOCTYPE", "x"), ("<p>a < b</p>", "a < b"),
                           ("<p>x</p><script>var a = '<!--';", "x")):
        assert html_to_text(page)[1] == expected, page
    # a NUL in the text is dropped, as browsers drop it: it read as a line break
    _, text = html_to_text("<p>ab\x00cd and <b>e\x00f</b></p>")
    assert text == "abcd and ef"


def test_text_that_starts_like_a_heading_or_a_fence_is_text() -> None:
    # a root prompt written in a paragraph (`# systemctl ...`) started a section, and a
    # paragraph opening with three backticks made the rest of the page code to the
    # chunker, its headings with it
    page = ("<html><body><h1>Restart</h1><p># systemctl restart nginx</p>"
            "<p>```python is how Markdown opens code</p><h2>Check</h2><p>Look.</p>"
            "</body></html>")
    _, text = html_to_text(page)
    chunks = chunk_text(text)
    assert [c.heading for c in chunks] == ["Restart", "Check"]
    assert chunks[0].text == ("Restart\n\n# systemctl restart nginx\n\n"
                              "```python is how Markdown opens code")


def test_a_nested_list_stays_nested() -> None:
    # an item of a list inside another's item was written at the margin, an item of the
    # outer list; a list inside a table cell stays one line of the row
    page = ("<html><body><h1>Setup</h1><ul><li>Install<ul><li>on Linux</li>"
            "<li>on macOS<ol><li>update brew</li></ol></li></ul></li><li>Configure</li></ul>"
            "<table><tr><td>Cell<ul><li>x<ul><li>y</li></ul></li></ul></td><td>z</td></tr>"
            "</table></body></html>")
    _, text = html_to_text(page)
    (chunk,) = chunk_text(text)
    assert chunk.text == ("Setup\n\n- Install\n\n  - on Linux\n  - on macOS\n\n"
                          "    - update brew\n\n- Configure\n\nCell - x - y | z")


def test_an_item_whose_text_is_a_paragraph_keeps_its_bullet_after_a_plain_item() -> None:
    # `<li>a</li><li><p>b</p></li>`: the second item's bullet was dropped with the bare
    # "-" of javadoc's hierarchy, and its text read as a paragraph after the list
    _, text = html_to_text("<main><ul><li>Install</li><li><p>Configure it.</p></li></ul>"
                           "<p>x<br>-</p><p>After.</p></main>")
    assert text == "- Install\n\n- Configure it.\n\nx\n-\n\nAfter."
