"""AsciiDoc pages (.adoc) read the way their rendered page reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from pgfunnel.asciidoc_text import asciidoc_to_text
from pgfunnel.sources import chunk_text, read_path

PAGE = """= Getting Started Guide
Jane Doe <jane@example.com>
v2.0, 2026-01-01
:toc: left

// a comment line
This guide shows how to *install* the CLI. See https://example.com/docs[the docs] and
<<config,Configuring>>; an array[0] index stays as written.

[[install]]
== Install

.Install with apt
[source,bash]
----
# a comment, not a heading
apt install widget
----

NOTE: Run it as root.
+
Then log in.

////
a block comment
////

[#config]
=== Configure

Download link:downloads/report.pdf[the report] or read xref:guide.adoc[the guide].

image::diagram.png[Architecture diagram]

include::partials/footer.adoc[]

ifdef::backend-html5[]
|===
| Name | Value
| retries | 3
|===
endif::[]
"""


def test_asciidoc_page_reads_as_rendered() -> None:
    title, text = asciidoc_to_text(PAGE)
    assert title == "Getting Started Guide"
    for gone in ("Jane Doe", "v2.0", ":toc:", "a comment line", "[[install]]", "[source",
                 "block comment", "[#config]", "include::", "footer", "ifdef", "endif",
                 "https://example.com", "<<config", "link:", "xref:", "image::", "|==="):
        assert gone not in text, gone
    for kept in ("See the docs and\nConfiguring; an array[0] index stays as written.",
                 "## Install", "Install with apt",
                 "```bash\n# a comment, not a heading\napt install widget\n```",
                 "NOTE: Run it as root.\nThen log in.", "### Configure",
                 "Download the report or read the guide.", "Architecture diagram",
                 "| retries | 3"):
        assert kept in text, kept
    assert [c.heading for c in chunk_text(text)] == [
        "Getting Started Guide", "Install", "Configure"]


def test_adoc_files_are_ingested_with_their_title(tmp_path: Path) -> None:
    (tmp_path / "guide.adoc").write_text(PAGE)
    (tmp_path / "notes.asciidoc").write_text("Plain text without a title.\n")
    docs = {d.citekey: d for d in read_path(tmp_path)}
    assert docs["guide"].title == "Getting Started Guide"
    assert docs["notes"].title == "notes" and docs["notes"].text == "Plain text without a title."


def test_an_unclosed_listing_stays_code_to_the_end() -> None:
    _, text = asciidoc_to_text("== Run\n\n----\n# not a heading\n")
    assert text.endswith("```\n# not a heading\n\n```") or text.endswith(
        "```\n# not a heading\n```")
    assert [c.heading for c in chunk_text(text)] == ["Run"]


def test_a_listing_with_a_longer_delimiter_stays_code() -> None:
    _, text = asciidoc_to_text("== Run\n\n------\n# code, not a heading\n------\n\nAfter.")
    assert text == "## Run\n\n```\n# code, not a heading\n```\n\nAfter."
    assert [c.heading for c in chunk_text(text)] == ["Run"]


def test_two_line_titles_start_sections() -> None:
    # `Section` over `-------` (AsciiDoc's older titles, which Asciidoctor reads) opened a
    # listing block: the rest of the page was one block of code, and there was no title
    title, text = asciidoc_to_text(
        "Upgrade Guide\n=============\nJane Doe\n\nIntro.\n\nBefore you start\n"
        "----------------\n\nBack up the data.\n\nRollback\n~~~~~~~~\n\nRestore it.\n\n"
        "Run this\n----\n$ upgrade --all\n----\n")
    assert title == "Upgrade Guide"
    assert text == ("# Upgrade Guide\n\nIntro.\n\n## Before you start\n\nBack up the data.\n\n"
                    "### Rollback\n\nRestore it.\n\nRun this\n```\n$ upgrade --all\n```")
    assert [c.heading for c in chunk_text(text)] == ["Upgrade Guide", "Before you start",
                                                     "Rollback"]


def test_attribute_references_read_as_their_values() -> None:
    # `{product}` was indexed as written wherever the page showed "Acme Cloud", and the
    # title `= {product} Guide` was "{product} Guide"
    title, text = asciidoc_to_text("""= {product} Guide
Jane Doe
:product: Acme Cloud
:site: https://acme.example/{version}
:version: 2

Welcome to {product}{nbsp}{version}, see {site}[the site]. Not {undefined}; \\{product}.

== Install {product}

----
echo {product}
----

:product!:
:edition: Pro
Now {product} {edition}.
""")
    assert title == "Acme Cloud Guide"
    assert "Welcome to Acme Cloud\u00a02, see the site. Not {undefined}; {product}." in text
    assert "## Install Acme Cloud" in text
    assert "echo {product}" in text  # a listing block is as written
    assert "Now {product} Pro." in text and ":edition:" not in text


def test_backtick_fences_are_listing_blocks_and_other_such_lines_are_text() -> None:
    # Asciidoctor reads a ``` fenced block as a listing: its `# comment` was a section
    # title, its `// note` and `[1, 2]` lines were left out; an indented ``` line (a
    # literal paragraph) or a `~~~` line opened a code block to the chunker, which hid
    # the sections below it
    src = """= Doc

Text.

```bash
# install it
// not a comment
[1, 2]
```

  ```a literal paragraph
~~~ a line of text

== Next

After.
"""
    _, text = asciidoc_to_text(src)
    assert "```bash\n# install it\n// not a comment\n[1, 2]\n```" in text
    chunks = chunk_text(text)
    assert [c.heading for c in chunks] == ["Doc", "Next"]
    # shown as written: the escape that kept it prose is no part of the document
    assert "  ```a literal paragraph\n~~~ a line of text" in chunks[0].text
    assert chunks[1].text == "Next\n\nAfter."


def test_text_that_starts_with_a_hash_at_the_margin_is_no_heading() -> None:
    # a line that is no section title but reads `# ...` once its anchor is gone (or a
    # block title `.# ...`) was a heading to the chunker: the reader escaped a `#` only
    # on an indented line
    _, text = asciidoc_to_text("= Doc\n\n[[top]]# 1 is the loneliest number\n\n.# of retries\n"
                               "Three.\n")
    chunks = chunk_text(text)
    assert [c.heading for c in chunks] == ["Doc"]
    assert "# 1 is the loneliest number\n\n# of retries\nThree." in chunks[0].text


def test_a_nested_list_stays_nested() -> None:
    # `** sub` was a line of its own at the margin, and `. first` no list item at all
    src = """= Doc

* Install
** on Linux
*** with apt
** on macOS
* Configure

// a comment parts two lists

. first
.. nested
. second
"""
    _, text = asciidoc_to_text(src)
    (chunk,) = chunk_text(text)
    # items numbered as written are one list, its items siblings
    assert asciidoc_to_text("= D\n\n1. a\n** b\n2. c\n10. d\n")[1] == (
        "# D\n\n1. a\n   * b\n2. c\n10. d")
    assert chunk.text == """Doc

* Install
  * on Linux
    * with apt
  * on macOS
* Configure


1. first
   1. nested
1. second"""


def test_an_attribute_value_over_several_lines_is_read_whole() -> None:
    # a value that ends in ` \` goes on on the next line: it was cut there, and the lines
    # it goes on over were indexed as the page's text (or, in the header, left out)
    src = (":product: Acme \\\n  Cloud Platform\n"
           "= {product} Guide\n"
           ":description: A guide to {product}, \\\n"
           "its installation + \\\n"
           "and upkeep.\n"
           "\n"
           "{description}\n"
           "\n"
           ":note: first part \\\n"
           "second part\n"
           ":legacy: as the older +\n"
           "AsciiDoc wrote it\n"
           "Read: {note}, {legacy}.\n")
    title, text = asciidoc_to_text(src)
    assert title == "Acme Cloud Platform Guide"
    assert text == ("# Acme Cloud Platform Guide\n\n"
                    "A guide to Acme Cloud Platform, its installation and upkeep.\n\n"
                    "Read: first part second part, as the older AsciiDoc wrote it.")


def test_counters_read_as_their_values() -> None:
    # `{counter:step}` showed as written in the titles and text
    src = """= Doc

== Step {counter:step}: Install

Step {counter:step} comes next.{counter2:step} Then step {step}.

.Figure {counter:figure:A}
Then figure {counter:figure}; `{counter:x}` is 1, and a comment counts nothing.
// {counter:x}
////
{counter:x}
////
{counter:x}
"""
    _, text = asciidoc_to_text(src)
    assert text == ("# Doc\n\n## Step 1: Install\n\nStep 2 comes next. Then step 3.\n\n"
                    "Figure A\nThen figure B; `1` is 1, and a comment counts nothing.\n2")


def test_a_listing_that_shows_backtick_fences_stays_one_block() -> None:
    # its ``` line closed the block written around it, and the fence closing the listing
    # opened another: the sections below were code to the chunker
    src = """= Doc

[source,markdown]
----
```python
print(1)
```
----

== Next

After.
"""
    _, text = asciidoc_to_text(src)
    assert "````markdown\n```python\nprint(1)\n```\n````" in text
    chunks = chunk_text(text)
    assert [c.heading for c in chunks] == ["Doc", "Next"]
    assert chunks[1].text == "Next\n\nAfter."


def test_emphasis_reads_as_its_words() -> None:
    # `_word_` was stored as written, so analyzer v8, which keeps underscore-bounded
    # names, indexed `_word_`, `_a` and `phrase_`: terms no query holds
    page = """= Emphasis _guide_

This is _very_ important: read _a whole phrase_ (_twice_), "_quoted_" and __two words__.
Names stay: __init__, _thread, sys.__stdout__, author__name, snake_case_name.
So do `_mono_`, `__init__`, +_passed_+, pass:[_raw_], https://example.com/_static_/x
and link:https://example.com/_a_[_the_ docs].

  a literal paragraph keeps _this_

* an item _one_
** nested _two_

.Block _title_
----
code _kept_ = __x__
----
"""
    title, text = asciidoc_to_text(page)
    assert title == "Emphasis guide"
    # as in Asciidoctor, `_` opening a name and `_` closing another on the same line make
    # emphasis of what stands between them
    assert asciidoc_to_text("Use _id and name_ here.\n")[1] == "Use id and name here."
    assert text == """# Emphasis guide

This is very important: read a whole phrase (twice), "quoted" and two words.
Names stay: __init__, _thread, sys.__stdout__, author__name, snake_case_name.
So do `_mono_`, `__init__`, +_passed_+, pass:[_raw_], https://example.com/_static_/x
and the docs.

  a literal paragraph keeps _this_

* an item one
  * nested two

Block title
```
code _kept_ = __x__
```"""


def test_emphasis_indexes_no_stray_term(conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    from funnel_util import ingest, make_collection

    (tmp_path / "guide.adoc").write_text(
        "= Guide\n\nIt is _critical_ to read _the release notes_; call `__init__`.\n")
    make_collection(conn, "t", 8, analyzer="english_v8")
    ingest(conn, list(read_path(tmp_path)), dims=8)
    terms = {t for (t,) in conn.execute("select distinct term from pgfunnel.posting")}
    assert {"critic", "releas", "note", "__init__"} <= terms, terms
    assert not [t for t in terms if t.startswith("_") != t.endswith("_")
                or t in ("_critical_", "_critic_")], terms
