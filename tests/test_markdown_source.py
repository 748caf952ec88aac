"""Markdown files: front matter, and code fences that hold '#' lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pgfunnel.sources import chunk_text, read_path

GUIDE = """---
title: "Install the CLI"
sidebar_position: 2
tags:
  - setup
---
Intro text.

```bash
# install the dependencies first
pip install pgfunnel
```

## Configure

Set the DSN.

~~~text
## not a heading either
~~~

# Later heading
"""


def test_front_matter_gives_the_title_and_is_not_content(tmp_path: Path) -> None:
    (tmp_path / "install.md").write_text(GUIDE)
    (doc,) = read_path(tmp_path / "install.md")
    assert doc.title == "Install the CLI"
    assert "sidebar_position" not in doc.text and not doc.text.startswith("---")
    assert doc.text.startswith("Intro text.")


def test_front_matter_in_toml_or_with_a_value_over_lines_gives_the_title(
        tmp_path: Path) -> None:
    # Hugo's TOML front matter was indexed as the page's text, its title unread; a YAML
    # title written as a block scalar was the title ">", one over two lines its first
    # line; a quote doubled inside single quotes stayed doubled
    (tmp_path / "hugo.md").write_text('+++\ntitle = "Install on Linux"\ndate = 2024-01-01\n'
                                      'tags = ["a"]\n+++\n\n# Install\n\nRun the script.\n')
    (tmp_path / "folded.md").write_text("---\ntitle: >-\n  Configure the\n  server\n"
                                        "description: |\n  Two\n  lines\n---\n# C\n\nText.\n")
    (tmp_path / "plain.md").write_text("---\ntitle: Configure the\n  client\nweight: 3\n---\n"
                                       "Text.\n")
    (tmp_path / "quoted.md").write_text("---\ntitle: 'It''s \"done\"'\ntags:\n  - x\n---\n"
                                        "Text.\n")
    (tmp_path / "double.md").write_text('---\ntitle: "Say \\"hi\\""\n---\nText.\n')
    docs = {d.citekey: d for d in read_path(tmp_path)}
    assert {k: d.title for k, d in docs.items()} == {
        "hugo": "Install on Linux", "folded": "Configure the server",
        "plain": "Configure the client", "quoted": "It's \"done\"", "double": 'Say "hi"'}
    assert docs["hugo"].text.strip() == "# Install\n\nRun the script."
    assert docs["folded"].text == "# C\n\nText."


def test_hash_lines_in_code_fences_are_not_headings(tmp_path: Path) -> None:
    chunks = chunk_text(GUIDE.split("---\n", 2)[2])
    assert [c.heading for c in chunks] == ["", "Configure", "Later heading"]
    assert "# install the dependencies first" in chunks[0].text
    assert "## not a heading either" in chunks[1].text


def test_a_headings_closing_hashes_are_not_its_text(tmp_path: Path) -> None:
    # `# Title #` was the title "Title #", and each section's heading and path kept its `##`
    (tmp_path / "closed.md").write_text("# Setup #\n\nIntro.\n\n## Install ##\n\nRun it.\n\n"
                                        "### C# ###\n\nCode.\n\n## Issue \\#\n\nEscaped.\n")
    (doc,) = read_path(tmp_path / "closed.md")
    assert doc.title == "Setup"
    assert [(c.heading, c.section_path, c.text.split("\n")[0]) for c in chunk_text(doc.text)] == [
        ("Setup", "", "Setup"), ("Install", "Setup", "Install"),
        ("C#", "Setup > Install", "C#"), ("Issue \\#", "Setup", "Issue \\#")]


def test_a_heading_indented_up_to_three_spaces_is_a_heading(tmp_path: Path) -> None:
    # CommonMark reads `  ## Install` as a heading (four spaces or more are indented
    # code); it was a line of the section above, and ` # Guide` was not the title
    (tmp_path / "indented.md").write_text(
        " # Guide\n\nIntro.\n\n  ## Install\n\nRun it.\n\n   ### Check ###\n\nLook.\n\n"
        "    # code, not a heading\n\n```\n  ## in a fence\n```\n")
    (doc,) = read_path(tmp_path / "indented.md")
    assert doc.title == "Guide"
    chunks = chunk_text(doc.text)
    assert [(c.heading, c.section_path) for c in chunks] == [
        ("Guide", ""), ("Install", "Guide"), ("Check", "Guide > Install")]
    assert "    # code, not a heading" in chunks[2].text
    assert "  ## in a fence" in chunks[2].text
    # what other formats write as text keeps its `#` from reading as a heading
    (tmp_path / "text.rst").write_text("Text\n====\n\n# not a heading\n\n#include\n")
    (tmp_path / "text.adoc").write_text("= Text\n\n  # a literal paragraph\n")
    for name, line in (("text.rst", "# not a heading"), ("text.adoc", "# a literal paragraph")):
        (doc,) = read_path(tmp_path / name)
        (chunk,) = chunk_text(doc.text)
        assert chunk.heading == "Text", name
        # and the chunk holds the `#` as written, not the escape that kept it text
        assert line in chunk.text.splitlines() or f"  {line}" in chunk.text.splitlines(), name
        assert "\\#" not in chunk.text, name
    # an author's own `\#` is a `#` as read, too; in code it stays as written
    chunks = chunk_text("# A\n\n\\# 1 is the first\n\n```\n\\# kept\n```\n")
    assert chunks[0].text.splitlines()[2] == "# 1 is the first"
    assert "\\# kept" in chunks[0].text


def test_title_is_the_first_h1_outside_code_else_the_file_name(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("```\n# comment\n```\n\n# Real title\n\ntext\n")
    (tmp_path / "b_notes.md").write_text("```\n# only a comment\n```\n")
    (tmp_path / "c.md").write_text("---\nauthor: x\n---\n# From the heading\n")
    titles = {d.citekey: d.title for d in read_path(tmp_path)}
    assert titles == {"a": "Real title", "b_notes": "b notes", "c": "From the heading"}


def test_a_thematic_break_is_not_front_matter(tmp_path: Path) -> None:
    (tmp_path / "d.md").write_text("# Title\n\nabove\n\n---\n\nbelow\n")
    (doc,) = read_path(tmp_path / "d.md")
    assert doc.title == "Title" and "above" in doc.text and "below" in doc.text


README = """Project name
============

Intro line
that wraps.

Usage
-----

- a list item
---

```sh
not a heading
-------------
```

Text, then a rule:

---

More text.
"""


def test_underlined_headings_start_sections(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(README)
    (doc,) = read_path(tmp_path / "README.md")
    assert doc.title == "Project name"
    chunks = chunk_text(doc.text)
    assert [c.heading for c in chunks] == ["Project name", "Usage"]
    usage = chunks[1].text
    # a list item, code and a rule after a blank line are not headings
    assert "- a list item\n---\n" in usage and "not a heading\n-------------\n" in usage
    assert "More text." in usage and "=====" not in doc.text


MDX_PAGE = """---
title: Getting started
---
import Tabs from '@theme/Tabs';
import {
  TabItem,
} from '@theme/TabItem';

# Install

Install the CLI with npm. {/* a JSX comment */}

<Tabs groupId="pm">
  <TabItem value="npm" label="npm">

```bash
# a comment, not a heading
npm install -g widgetctl
```

  </TabItem>
</Tabs>

:::tip[Log in first]
Run `widgetctl login` before anything else.
:::

export const meta = {
  draft: false,
};

A List<String> stays in prose.
"""


def test_mdx_keeps_the_text_and_drops_imports_components_and_admonition_markers(
        tmp_path: Path) -> None:
    (tmp_path / "intro.mdx").write_text(MDX_PAGE)
    [doc] = read_path(tmp_path)
    assert doc.citekey == "intro" and doc.title == "Getting started"
    for gone in ("import", "@theme", "TabItem", "<Tabs", "groupId", "JSX comment", ":::",
                 "export", "draft"):
        assert gone not in doc.text, gone
    for kept in ("Install the CLI with npm.", "npm install -g widgetctl",
                 "# a comment, not a heading", "Log in first", "Run `widgetctl login`",
                 "A List<String> stays in prose."):
        assert kept in doc.text, kept
    # the code block's comment line starts no section
    assert [c.heading for c in chunk_text(doc.text)] == ["Install"]


def test_mdx_components_and_comments_over_several_lines_are_not_text(tmp_path: Path) -> None:
    # Docusaurus' tabs with their values over lines, an image's attributes, an editor's
    # remark: each line but a lone `<Tabs` was indexed as the page's text
    (tmp_path / "fruit.mdx").write_text("""# Fruit

<Tabs
  defaultValue="apple"
  values={[
    {label: 'Apple', value: 'apple'},
    {label: 'Orange', value: 'orange'},
  ]}>
<TabItem value="apple">

An apple a day keeps the doctor away.

</TabItem>
</Tabs>

<Image
  src="/img/orchard.png"
  alt="Orchard"
/>

{/*
  TODO: editors, add pears
*/}

Oranges ripen in winter.

<Button onClick={() => pick()}
  label="Pick">
Pick one
""")
    [doc] = read_path(tmp_path / "fruit.mdx")
    for gone in ("defaultValue", "label: 'Apple'", "]}>", "orchard.png", "/>", "TODO", "*/}"):
        assert gone not in doc.text, gone
    assert [p.strip() for p in doc.text.split("\n\n") if p.strip()] == [
        "# Fruit", "An apple a day keeps the doctor away.", "Oranges ripen in winter.",
        # a tag with a `>` inside it (an arrow function) is left as written
        "<Button onClick={() => pick()}\n  label=\"Pick\">\nPick one"]


def test_files_of_other_types_in_a_folder_are_named_not_silently_skipped(
        tmp_path: Path) -> None:
    import warnings

    from pgfunnel.sources import OtherFilesWarning

    (tmp_path / "a.md").write_text("# A\n\ntext\n")
    (tmp_path / "b.tex").write_text("\\section{B}\n")
    (tmp_path / "img").mkdir()
    for name in ("x.png", "y.png", "Makefile"):
        (tmp_path / "img" / name).write_text("x")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        docs = list(read_path(tmp_path))
    assert [d.citekey for d in docs] == ["a"]
    [warning] = [w for w in caught if issubclass(w.category, OtherFilesWarning)]
    assert warning.filename == __file__
    note = str(warning.message)
    assert "left out 4 files of other types (.png 2, .tex 1, (no suffix) 1)" in note
    assert ".mdx" in note  # what it does read


def test_cli_ingest_of_a_folder_with_nothing_to_read_is_an_error(db: str,
                                                                 tmp_path: Path) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    (tmp_path / "guide.tex").write_text("\\section{Guide}\nText.\n")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", "t", "--dsn", db])
    assert res.exit_code == 1
    text = " ".join(res.output.split())
    assert "nothing to ingest: no document in" in text
    assert "left out 1 file of other types (.tex 1)" in text


def test_what_the_rendered_page_does_not_show_is_not_indexed(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text(
        "# Page {#top}\n\n"
        "## Install {: #install .wide }\n\nSteps.\n{: .note}\n\n"
        "A set {a, b} is shown.\n\n"
        "!!! warning \"Back up first\"\n    Copy the data.\n\n"
        "=== \"Linux\"\n\n    apt install x\n\n--8<-- \"includes/abbreviations.md\"\n\n"
        "Shown <!-- todo: hidden-one --> text.\n"
        "<!-- markdownlint-disable\nhidden-two\n-->\n"
        "Use `<!--` to open a comment in HTML.\n"
        "In prose, a lone <!-- that never closes is text.\n\n"
        "See [the guide][guide].\n\n"
        "[guide]: https://example.com/hidden-three-path \"Guide\"\n"
        "[^1]: A footnote is shown.\n\n"
        "```html\n<!-- shown: code -->\n[ref]: https://shown.example\n```\n")
    [doc] = read_path(tmp_path)
    assert doc.title == "Page"
    assert [c.heading for c in chunk_text(doc.text)][:2] == ["Page", "Install"]
    for gone in ("hidden-one", "hidden-two", "markdownlint", "hidden-three", "todo",
                 "{#top}", "#install", ".wide", ".note", "!!!", "===", "8<",
                 "abbreviations"):
        assert gone not in doc.text, gone
    for kept in ("Shown  text.", "Use `<!--` to open a comment in HTML.",
                 "A set {a, b} is shown.", "Back up first\n    Copy the data.",
                 "Linux\n\n    apt install x",
                 "In prose, a lone <!-- that never closes is text.",
                 "See [the guide][guide].", "[^1]: A footnote is shown.",
                 "<!-- shown: code -->", "[ref]: https://shown.example"):
        assert kept in doc.text, kept


MYST_PAGE = """(getting-started)=
# Getting started

```{toctree}
---
maxdepth: 2
hidden:
---
install
usage
```

Read {doc}`the install guide <install>` and call {py:func}`~pkg.run`.

````{note} Before you start
:class: tip
Configure it first.

```{code-block} python
# a comment, not a heading
run()
```
````

```{versionadded} 2.0
```

```{r}
# R Markdown code stays code
x <- 1
```

```{.python .numberLines}
# pandoc attributes: code too
```
"""


def test_myst_reads_as_its_rendered_page(tmp_path: Path) -> None:
    (tmp_path / "start.md").write_text(MYST_PAGE)
    [doc] = read_path(tmp_path)
    for gone in ("(getting-started)=", "toctree", "maxdepth", "install\nusage", "{doc}",
                 "{py:func}", "{note}", ":class:", "{code-block}", "{versionadded}"):
        assert gone not in doc.text, gone
    for kept in ("Read the install guide and call pkg.run.", "Before you start",
                 "Configure it first.", "```python\n# a comment, not a heading\nrun()\n```",
                 "New in version 2.0.", "# R Markdown code stays code",
                 "```{.python .numberLines}"):
        assert kept in doc.text, kept
    # code comments start no section, inside a directive or not
    assert [c.heading for c in chunk_text(doc.text)] == ["Getting started"]
    # a code directive whose code holds a fence stays one block
    (tmp_path / "start.md").write_text(
        "# Fences\n\n````{code-block} markdown\n```python\n# not a heading\n```\n````\n")
    [doc] = read_path(tmp_path)
    assert "````markdown\n```python\n# not a heading\n```\n````" in doc.text
    assert [c.heading for c in chunk_text(doc.text)] == ["Fences"]
    # a target's label may hold spaces (pip's docs); it is no text either
    (tmp_path / "start.md").write_text(
        "(SSL Certificate Verification)=\n\n# HTTPS Certificates\n\nBy default pip "
        "verifies certificates.\n\n```{note}\nUse --cert.\n```\n\n"
        "(see the note)= is text inside a paragraph.\n")
    [doc] = read_path(tmp_path)
    assert "SSL Certificate Verification" not in doc.text
    assert "(see the note)= is text inside a paragraph." in doc.text


def test_a_notebook_reads_as_its_markdown_and_code_without_outputs(tmp_path: Path) -> None:
    import json

    import pytest

    from pgfunnel.errors import InvalidDocumentError

    notebook = {
        "metadata": {"kernelspec": {"name": "python3", "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# Fitting a model\n", "\n",
                                                                 "Load the data first."]},
            {"cell_type": "code", "metadata": {}, "execution_count": 1,
             "source": "# a comment, not a heading\ndf = load()",
             "outputs": [{"output_type": "stream", "name": "stdout",
                          "text": ["OUTPUT-ONLY-TEXT\n"]}]},
            {"cell_type": "raw", "metadata": {}, "source": "raw cell"},
            {"cell_type": "markdown", "metadata": {}, "source": "## Plotting\n\nThen plot."},
        ],
    }
    (tmp_path / "fit.ipynb").write_text(json.dumps(notebook))
    [doc] = read_path(tmp_path)
    assert doc.citekey == "fit" and doc.title == "Fitting a model"
    assert "```python\n# a comment, not a heading\ndf = load()\n```" in doc.text
    assert "OUTPUT-ONLY-TEXT" not in doc.text and "raw cell" not in doc.text
    assert [c.heading for c in chunk_text(doc.text)] == ["Fitting a model", "Plotting"]
    (tmp_path / "fit.ipynb").write_text("{not json")
    with pytest.raises(InvalidDocumentError, match=r"fit.ipynb: not a valid notebook"):
        list(read_path(tmp_path / "fit.ipynb"))


def test_ingest_dry_run_lists_what_would_be_read_without_a_database(tmp_path: Path) -> None:
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    (tmp_path / "guide.md").write_text("# Guide\n\n" + "word " * 450 + "\n\n## Next\n\nMore.\n")
    (tmp_path / "logo.png").write_bytes(b"\x89PNG")
    # a DSN that cannot be reached: the dry run must not try it
    env = {"PGFUNNEL_DSN": "postgresql://nobody@127.0.0.1:1/none"}
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run", "--json"], env=env)
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    [doc] = plan["documents"]
    assert doc["citekey"] == "guide" and doc["title"] == "Guide" and doc["chunks"] == 4
    assert plan["chunks"] == 4 and doc["words"] == plan["words"] == 455
    assert any("left out 1 file of other types (.png 1)" in n for n in plan["notes"])
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run"], env=env)
    assert res.exit_code == 0 and "1 document, 4 chunks, 455 words (dry run" in res.output


def test_ingest_dry_run_stops_where_the_ingest_would(tmp_path: Path) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"citekey":"b1","text":"one"}\n{"citekey":"b1","text":"two"}\n')
    env = {"PGFUNNEL_DSN": "postgresql://nobody@127.0.0.1:1/none"}
    res = CliRunner().invoke(app, ["ingest", str(dup), "--dry-run"], env={**env,
                                                                           "COLUMNS": "200"})
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    # within one file the line is named; across files both files are
    assert f"{dup}:2: citekey 'b1' is already on line 1" in " ".join(res.output.split())
    (tmp_path / "b1.md").write_text("# B1\n\nthe same citekey from a file")
    dup.write_text('{"citekey":"b1","text":"one"}\n')
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run"],
                             env={**env, "COLUMNS": "400"})
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    said = " ".join(res.output.split())
    assert f"{tmp_path / 'b1.md'} and {dup} both give citekey 'b1'" in said, said


def test_chinese_and_japanese_text_is_cut_to_size_by_character() -> None:
    # written without spaces, a paragraph of them was one word to str.split: a whole
    # section came out as one chunk, past what the embedder and the reranker read
    sentence = "数据库索引的性能取决于索引类型。"
    chunks = chunk_text("# 索引\n\n" + sentence * 40, chunk_words=200)
    bodies = [c.text.split("\n\n", 1)[1] for c in chunks]
    assert len(chunks) == 4 and "".join(bodies) == sentence * 40
    assert all(c.text.startswith("索引\n\n") for c in chunks)
    # each character is a word (a full stop too): 200 a chunk, under its heading
    assert [len(b) for b in bodies] == [200, 200, 200, 40]
    assert [c.token_count for c in chunks] == [202, 202, 202, 42]
    japanese = chunk_text("インデックスを作成すると検索が速くなります。" * 30, chunk_words=100)
    assert [len(c.text) for c in japanese] == [100] * 6 + [60]
    # beside other text, a character is a word and a run of other letters is one
    from pgfunnel.sources import count_words

    assert count_words("PostgreSQL数据库 is fast") == 6


def test_text_without_chinese_or_japanese_counts_and_cuts_as_split_does() -> None:
    import random
    import re

    from pgfunnel.sources import _WORD, count_words

    rng = random.Random(5)
    alphabet = "ab c\tdé\n fü-ß.  Ω\u00a0x1\u2003 ëя 한국"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        assert count_words(text) == len(text.split())
        assert [m.span() for m in _WORD.finditer(text)] == \
            [m.span() for m in re.finditer(r"\S+", text)]


def _is_mark(char: str) -> bool:
    import unicodedata

    return unicodedata.category(char).startswith("M")


def test_thai_text_is_cut_to_size_by_character_cluster() -> None:
    # Thai has no spaces between words either: a paragraph of it was one word, so a whole
    # section came out as one chunk, past the embedder's window, and could not be cut
    sentence = "ฐานข้อมูลสำหรับการค้นหาเอกสารที่"  # 7 + 5 + 7 + 6 + 1 clusters
    chunks = chunk_text("# การค้นหา\n\n" + sentence * 40, chunk_words=200)
    bodies = [c.text.split("\n\n", 1)[1] for c in chunks]
    assert "".join(bodies) == sentence * 40
    assert all(c.text.startswith("การค้นหา\n\n") for c in chunks)
    # a cut falls between clusters: never between a letter and its vowel signs or tone marks
    assert not any(_is_mark(b[0]) for b in bodies)
    from pgfunnel.sources import count_words

    assert [count_words(b) for b in bodies] == [200] * 5 + [40]
    assert [c.token_count for c in chunks] == [207] * 5 + [47]


def test_a_character_cluster_counts_as_one_word() -> None:
    from pgfunnel.sources import count_words

    # ฐ า น ข้ อ มู ล: า is a letter of its own (Lo), the tone mark ้ and the vowel ู are not
    assert count_words("ฐานข้อมูล") == 7
    assert count_words("ที่") == 1 and count_words("สำหรับ") == 5
    assert count_words("ສະບາຍດີ") == 6  # Lao
    # a consonant stacked under Myanmar's virama or Khmer's coeng is in the cluster above
    assert count_words("မန္တလေး") == 3  # မ န္တ လေး
    assert count_words("သင်္ချိုင်း") == 3  # kinzi: the asat, virama and ခ join င
    assert count_words("ភាសាខ្មែរ") == 4  # ភា សា ខ្មែ រ
    assert count_words("អក្សរ") == 3  # អ ក្ស រ
    # beside other text, a cluster is a word and a run of other letters is one
    assert count_words("PostgreSQL ฐานข้อมูล is fast") == 10
    assert count_words("pgfunnelการค้นหา, fast.") == 10  # the comma too


def test_myanmar_and_khmer_stacks_are_never_cut_inside() -> None:
    for text in ("မန္တလေးဗုဒ္ဓသင်္ချိုင်း" * 30, "ស្វែងរកឯកសារអក្សរសង្ខេប" * 30):
        chunks = chunk_text(text, chunk_words=20)
        assert len(chunks) > 5 and "".join(c.text for c in chunks) == text
        for c in chunks:
            assert c.token_count <= 20
            assert not _is_mark(c.text[0]) and c.text[-1] not in "\u1039\u17d2"


def test_clusters_in_mixed_text_and_english_words_as_before() -> None:
    import random
    import re

    from pgfunnel.sources import _WORD

    # an English word keeps its span beside Thai text
    text = "Index ฐานข้อมูล with pgfunnel: การค้นหา then rerank."
    english = [m.span() for m in re.finditer(r"\S+", text) if m.group().isascii()]
    assert set(english) <= {m.span() for m in _WORD.finditer(text)}
    rng = random.Random(9)
    letters = "กขฐเาำ\u0e31\u0e48\u0e39 ကန\u1039\u103a\u1031 ក\u17d2ម\u17b6 ab-é\n 中"
    virama = "\u1039\u17d2"
    for _ in range(300):
        text = "".join(rng.choice(letters) for _ in range(rng.randint(0, 60)))
        spans = [m.span() for m in _WORD.finditer(text)]
        starts = {a for a, _ in spans}
        assert "".join(text[a:b] for a, b in spans) == "".join(text.split())
        for i, char in enumerate(text):
            follows = text[i - 1] if i else " "
            if not "\u0e00" <= char <= "\u17ff":  # none of the four scripts
                continue
            if not _is_mark(char) and follows not in virama:
                assert i in starts, (text, i)  # each cluster starts a word
            else:
                # a mark or a stacked letter stays with the letter before it
                assert i not in starts or follows.isspace() or follows == "中", (text, i)


def test_cluster_marks_are_the_combining_marks_of_those_scripts() -> None:
    import re
    import unicodedata

    from pgfunnel.sources import _CLUSTER_MARKS, _CLUSTER_SCRIPTS

    blocks = re.compile(f"[{_CLUSTER_SCRIPTS}]")
    marks = re.compile(f"[{_CLUSTER_MARKS}]")
    for code in range(0x0E00, 0xAA80):
        char = chr(code)
        category = unicodedata.category(char)
        if blocks.match(char) and category in ("Mn", "Mc"):
            assert marks.match(char), f"U+{code:04X} is a mark ({category})"
        if marks.match(char):
            # written out as of Unicode 15.1: a mark added since is unassigned here
            assert blocks.match(char) and category in ("Mn", "Mc", "Cn"), f"U+{code:04X}"
    # a mark of those blocks not written out would change chunks with Python's Unicode
    # version; the Thai tone marks, Myanmar's virama and Khmer's coeng are among them
    assert all(marks.match(c) for c in "\u0e48\u0e49\u0e4a\u0e4b\u1039\u17d2\u0ece")


def test_broken_symbolic_links_in_a_folder_are_noted_not_silently_skipped(
        db: str, tmp_path: Path) -> None:
    import warnings

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.sources import OtherFilesWarning

    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.md").write_text("# A\n\ntext\n")
    (docs / "gone.md").symlink_to(tmp_path / "missing.md")
    (docs / "sub" / "old.rst").symlink_to(tmp_path / "nowhere" / "old.rst")
    (docs / ".hidden.md").symlink_to(tmp_path / "missing.md")  # hidden: left out quietly
    (docs / "skip.md").symlink_to(tmp_path / "missing.md")  # excluded below
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = list(read_path(docs, exclude=["skip.md"]))
    assert [d.citekey for d in found] == ["a"]
    [warning] = [w for w in caught if issubclass(w.category, OtherFilesWarning)]
    assert warning.filename == __file__
    assert str(warning.message) == (f"{docs}: left out 2 broken symbolic links (the target "
                                    "does not exist, or the link loops): gone.md, sub/old.rst")
    res = CliRunner().invoke(app, ["ingest", str(docs), "-c", "t", "--dsn", db,
                                   "--exclude", "skip.md"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "left out 2 broken symbolic links (the target does not exist, or the link " \
           "loops): gone.md, sub/old.rst" in text


def test_gzip_compressed_files_are_read_as_the_format_under_gz(tmp_path: Path) -> None:
    # Debian compresses every document over a few kilobytes in /usr/share/doc: zstd's
    # README.md.gz and CONTRIBUTING.md.gz were counted as files of other types (.gz 2)
    # and left out, so the package's main documents were never searchable
    import gzip
    import warnings

    from pgfunnel.sources import OtherFilesWarning

    (tmp_path / "TESTING.md").write_text("# Testing\n\nRun the fuzzers.\n")
    (tmp_path / "README.md.gz").write_bytes(
        gzip.compress(b"# Zstandard\n\nA fast lossless compression algorithm.\n"))
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "setup.rst.gz").write_bytes(
        gzip.compress(b"Set up\n======\n\nUse :func:`zstd.compress` here.\n"))
    (tmp_path / "guide" / "page.HTML.GZ").write_bytes(
        gzip.compress(b"<html><body><main><p>Decompression speed.</p></main></body></html>"))
    (tmp_path / "changelog.gz").write_bytes(gzip.compress(b"zstd (1.5.4) unstable\n"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        docs = {d.citekey: d for d in read_path(tmp_path)}
    assert sorted(docs) == ["README", "TESTING", "guide/page", "guide/setup"]
    assert docs["README"].title == "Zstandard"
    assert "lossless compression" in docs["README"].text
    assert docs["guide/setup"].title == "Set up"
    assert "zstd.compress here" in docs["guide/setup"].text  # read as reST: the role went
    assert docs["guide/page"].title == "page" and docs["guide/page"].text == \
        "Decompression speed."
    # a .gz file whose name gives no format pgfunnel reads is still one of another type
    [warning] = [w for w in caught if issubclass(w.category, OtherFilesWarning)]
    assert "left out 1 file of other types (.gz 1)" in str(warning.message)
    assert ".md.gz" in str(warning.message)
    # given by itself, its citekey is its name without both suffixes
    [alone] = read_path(tmp_path / "README.md.gz")
    assert alone.citekey == "README" and alone.title == "Zstandard"


def test_a_damaged_gzip_file_is_an_error_naming_it(tmp_path: Path) -> None:
    import gzip

    import pytest

    from pgfunnel.errors import InvalidDocumentError

    (tmp_path / "a.md").write_text("# A\n\ntext\n")
    (tmp_path / "notes.txt.gz").write_bytes(gzip.compress(b"some notes\n" * 50)[:30])
    with pytest.raises(InvalidDocumentError, match=r"notes\.txt\.gz: cannot be read as "
                       r"gzip-compressed .*--exclude"):
        list(read_path(tmp_path))


def test_cli_dry_run_lists_a_compressed_file_under_its_citekey(tmp_path: Path) -> None:
    import gzip
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.eval.harness import citekey_of_file_name

    (tmp_path / "README.md.gz").write_bytes(gzip.compress(b"# Zstandard\n\nFast.\n"))
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    listed = json.loads(res.stdout)["documents"]
    assert [(d["citekey"], d["title"]) for d in listed] == [("README", "Zstandard")]
    # a judgment that names the file finds the document ingest made of it
    assert citekey_of_file_name("docs/README.md.gz#2") == "docs/README#2"
    assert citekey_of_file_name("changelog.gz") == "changelog.gz"
    # and the help says what it reads
    res = CliRunner().invoke(app, ["ingest", "--help"], env={"COLUMNS": "300"})
    assert "and each of these compressed with gzip: README.md.gz" in res.output, res.output


def test_a_file_of_no_format_given_alone_says_how_to_ingest_it(tmp_path: Path) -> None:
    # /usr/share/doc holds hundreds of plain-text README, NEWS and README.Debian files;
    # given one, the error read "unsupported file type ''" (use .md, ...)": a type named
    # as nothing, and a suffix to "use" on a file its owner had no way to give one
    import pytest

    from pgfunnel.errors import InvalidDocumentError

    cases = {"README": r"README: no suffix, and the suffix is what says a file's format; "
                       r"it reads \.md, .*copy or link it under a name that ends in its "
                       r"format's suffix \(README\.txt for plain text, README\.md for",
             "README.Debian": r"README\.Debian: a file of type '\.Debian', which pgfunnel "
                              r"does not read; .*\(README\.Debian\.txt for plain text",
             # a compressed one keeps .gz last, where it is read
             "changelog.gz": r"changelog\.gz: a file of type '\.gz', .*\(changelog\.txt\.gz "
                             r"for plain text, changelog\.md\.gz for Markdown\)"}
    for name, message in cases.items():
        (tmp_path / name).write_text("Plain notes about the package.\n")
        with pytest.raises(InvalidDocumentError, match=message):
            list(read_path(tmp_path / name))
    # and the name it advises is read
    (tmp_path / "README.txt").symlink_to(tmp_path / "README")
    [doc] = read_path(tmp_path / "README.txt")
    assert doc.citekey == "README" and doc.text == "Plain notes about the package."


def test_a_gzip_file_that_expands_past_the_limit_is_refused_naming_it(
        tmp_path: Path, monkeypatch: Any) -> None:
    """A gzip-compressed file was decompressed whole, with no limit: a few megabytes that
    expand to gigabytes of one repeated byte filled memory before anything was said. It
    is read up to MAX_EXPANDED_BYTES (1 GiB, as docs/cli.md says) and refused past it,
    the error naming the file and the limit."""
    import gzip

    import pytest

    from pgfunnel import sources
    from pgfunnel.errors import InvalidDocumentError

    assert sources.MAX_EXPANDED_BYTES == 1 << 30
    monkeypatch.setattr(sources, "MAX_EXPANDED_BYTES", 1 << 16)
    # exactly the limit
    fits = b"word " * 13106 + b"lastly"
    assert len(fits) == 1 << 16
    (tmp_path / "fits.txt.gz").write_bytes(gzip.compress(fits))
    [record] = read_path(tmp_path / "fits.txt.gz")
    assert record.citekey == "fits" and record.text.endswith("word lastly")
    # two gzip members, each under the limit, past it together
    (tmp_path / "bomb.md.gz").write_bytes(gzip.compress(b"word " * 8000) * 2)
    with pytest.raises(InvalidDocumentError, match=r"bomb\.md\.gz: expands past 64 KiB "
                       r"decompressed, the most pgfunnel reads of a gzip-compressed file; "
                       r"give a larger limit \(--max-expanded-mib N, in MiB; "
                       r"max_expanded_bytes in Python.*\), decompress it \(gunzip -k\) "
                       r".*--exclude"):
        list(read_path(tmp_path))


def test_read_path_takes_its_own_gzip_limit(tmp_path: Path) -> None:
    """`max_expanded_bytes` sets the limit for one read (what `pgfunnel ingest
    --max-expanded-mib` gives it); a value that is not a whole number of at least 1 is a
    ConfigError naming it, before any file is read."""
    import gzip

    import pytest

    from pgfunnel.errors import ConfigError, InvalidDocumentError
    from pgfunnel.sources import read_paths

    (tmp_path / "wide.txt.gz").write_bytes(gzip.compress(b"word " * 20_000))
    with pytest.raises(InvalidDocumentError, match=r"wide\.txt\.gz: expands past 64 KiB "
                       r"decompressed.*--max-expanded-mib"):
        list(read_path(tmp_path, max_expanded_bytes=1 << 16))
    [record] = read_paths([tmp_path], max_expanded_bytes=100_000)
    assert record.citekey == "wide"
    for bad in (0, -5, True, 1.5, "1024"):
        with pytest.raises(ConfigError, match="^max_expanded_bytes: must be"):
            list(read_path(tmp_path, max_expanded_bytes=bad))  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="^max_expanded_bytes: must be"):
            list(read_paths([tmp_path / "nothing-here"],
                            max_expanded_bytes=bad))  # type: ignore[arg-type]


def test_a_small_gzip_file_is_read_without_reserving_the_limit(tmp_path: Path) -> None:
    """The limit on a compressed file's expanded size was read as one request for
    MAX_EXPANDED_BYTES + 1 bytes, for which Python reserves the whole buffer first: each
    .gz file read, 40 bytes or 40 MiB, asked for 1 GiB of memory, and where the process
    may hold less (ulimit -v, a 32-bit Python) every compressed file failed with a bare
    MemoryError. It is read a piece at a time, holding about what it expands to."""
    import gzip
    import tracemalloc

    from pgfunnel import sources

    (tmp_path / "small.md.gz").write_bytes(gzip.compress(b"# Small\n\nA few words.\n"))
    (tmp_path / "wide.txt.gz").write_bytes(gzip.compress(b"word " * 400_000))
    assert sources.MAX_EXPANDED_BYTES == 1 << 30
    for name, expanded in (("small.md.gz", 23), ("wide.txt.gz", 2_000_000)):
        tracemalloc.start()
        try:
            [record] = read_path(tmp_path / name)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert record.text, name
        # the text, its decoded copies and the chunks read: some times what it expands to
        assert peak < 16 * expanded + (8 << 20), (name, peak)
