"""Markdown files: front matter, and code fences that hold '#' lines."""

from __future__ import annotations

from pathlib import Path

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


def test_hash_lines_in_code_fences_are_not_headings(tmp_path: Path) -> None:
    chunks = chunk_text(GUIDE.split("---\n", 2)[2])
    assert [c.heading for c in chunks] == ["", "Configure", "Later heading"]
    assert "# install the dependencies first" in chunks[0].text
    assert "## not a heading either" in chunks[1].text


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
    assert "a list item ---" in usage and "not a heading -------------" in usage
    assert "More text." in usage and "=====" not in doc.text
