"""reStructuredText files (Sphinx sources): sections by title, markup read as rendered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from funnel_util import one_row

from pgfunnel.rst_text import looks_like_rst, rst_to_text
from pgfunnel.sources import chunk_text, read_path

PAGE = """\
.. _os-path:

=======================================
:mod:`os.path` --- Common pathname ops
=======================================

.. module:: os.path
   :synopsis: Operations on pathnames.

**Source code:** :source:`Lib/posixpath.py`

.. index:: single: path; operations

This module implements useful functions on pathnames; see :ref:`the tutorial <tut-files>`
and `the home page <https://python.org>`_ [#]_.

.. toctree::
   :maxdepth: 2

   library/os

Functions
---------

.. function:: join(path, *paths)

   Join one or more path segments. Uses :func:`~os.path.normpath` and ``os.sep``.

   .. versionchanged:: 3.6
      Accepts a :term:`path-like object`.

   Example::

      >>> import os
      # a comment in an example
      >>> os.path.join("a", "b")

.. note::

   On Windows, the drive is reset.

.. code-block:: python
   :linenos:

   # a comment in code
   x = ":kbd:`kept as written`"

..
   A comment block,
   never shown.

----------

Constants
^^^^^^^^^

.. data:: sep

   The separator.

.. [#] A footnote.
"""


def test_titles_become_sections_and_the_first_is_the_title() -> None:
    title, text = rst_to_text(PAGE)
    assert title == "os.path --- Common pathname ops"
    headings = [line for line in text.splitlines() if line.startswith("#")]
    # levels in the order the adornment styles first appear: overlined '=', '-', '^'
    assert headings == ["# os.path --- Common pathname ops", "## Functions", "### Constants"]
    chunks = chunk_text(text)
    assert [c.heading for c in chunks] == [
        "os.path --- Common pathname ops", "Functions", "Constants"]
    functions = chunks[1].text
    assert "join(path, *paths)" in functions and "Join one or more path segments" in functions
    assert "Constants" not in functions and "sep The separator." in " ".join(chunks[2].text.split())


def test_markup_reads_as_rendered() -> None:
    _, text = rst_to_text(PAGE)
    assert "Uses os.path.normpath and os.sep." in text
    assert "see the tutorial\nand the home page." in text
    assert "Source code: Lib/posixpath.py" in text
    assert "Changed in version 3.6." in text and "Accepts a path-like object." in text
    assert "Example:\n" in text and "On Windows, the drive is reset." in text
    for hidden in (":func:", ":ref:", "tut-files", "https://", ".. ", "toctree", "maxdepth",
                   "library/os", "synopsis", "single: path", "A comment block", "never shown",
                   "linenos", "_os-path", "[#]", "----------"):
        assert hidden not in text, hidden


def test_substitutions_the_file_defines_read_as_their_text() -> None:
    # |RST| was indexed as "|RST|" wherever the page showed "reStructuredText"
    page = """Writing |RST|
=============

Use |RST| for |project| docs |copy| 2024 |dash| |logo| done. ``|RST|`` is literal;
see |rst|_, a|b|c, and | a | table | row |.

::

    |RST| in code stays

.. |RST| replace:: *reStructuredText*
   markup
.. |copy| unicode:: 0xA9 .. the copyright sign
.. |dash| unicode:: U+2014
.. |logo| image:: logo.png
   :alt: The logo
"""
    title, text = rst_to_text(page)
    assert title == "Writing reStructuredText markup"
    assert "Use reStructuredText markup for |project| docs \u00a9 2024 \u2014  done." in text
    assert "|RST| is literal;\nsee reStructuredText markup, a|b|c, and | a | table | row |." \
        in text
    assert "    |RST| in code stays" in text
    assert "logo.png" not in text and "The logo" not in text and "replace::" not in text
    # a later document defines nothing: nothing carries over from the one before
    assert "|RST|" in rst_to_text("Other\n=====\n\nStill |RST| here.\n")[1]


def test_code_keeps_its_lines_and_never_makes_a_heading() -> None:
    _, text = rst_to_text(PAGE)
    code = [line for line in text.splitlines() if "comment in" in line or "kept as" in line]
    assert code == ["          # a comment in an example", "       # a comment in code",
                    '       x = ":kbd:`kept as written`"']
    assert [c.heading for c in chunk_text(text)].count("a comment in code") == 0


ADMONITIONS = """\
Guide
=====

.. note::
    Notes indented by four spaces.

.. function:: run(x)

   Runs it.

   .. warning::

      Nested six spaces deep.

   .. versionadded:: 3.2
      The *x* parameter.

.. admonition:: Mind the gap

   Prose under a title.

.. deprecated:: 4.0
   Use ``walk`` instead.

.. code-block:: python

   # code stays code

An example::

    literal stays
"""


def test_a_directives_text_is_prose_not_code() -> None:
    # a note's, warning's or versionadded's content kept its indentation: four spaces or
    # more (a note nested in a function's description) made it a block of code
    _, text = rst_to_text(ADMONITIONS)
    lines = text.splitlines()
    for prose in ("Notes indented by four spaces.", "Runs it.", "Nested six spaces deep.",
                  "The x parameter.", "Mind the gap", "Prose under a title.",
                  "Use walk instead."):
        assert prose in lines, prose
    assert "       # code stays code" in lines and "        literal stays" in lines
    assert "An example:" in lines


def test_a_figure_is_its_caption_and_legend_and_only_its_content() -> None:
    # a figure's caption and legend were left out with its image, though Sphinx shows them
    # (and the HTML reader keeps them); `only::` wrote its condition as a line of text
    _, text = rst_to_text("""Title
=====

.. figure:: img/arch.png
   :alt: the pipeline
   :width: 80%

   The architecture of the ingest pipeline.

   Each box is a stage that runs beside the next.

.. figure:: img/bare.png

.. only:: html and not latex

   Shown on the web only.

After.
""")
    assert " ".join(text.split()) == (
        "# Title The architecture of the ingest pipeline. Each box is a stage that runs "
        "beside the next. Shown on the web only. After.")


def test_rst_and_txt_files_are_read_as_rst(tmp_path: Path) -> None:
    (tmp_path / "ospath.rst").write_text(PAGE)
    # Django keeps its reStructuredText documentation in .txt files
    (tmp_path / "howto.txt").write_text(
        "Writing views\n=============\n\nA view is a :term:`callable`::\n\n    def view(r):\n"
        "        pass\n\nUsing templates\n---------------\n\nSee :doc:`templates`.\n")
    (tmp_path / "notes.txt").write_text("Plain notes.\n\nNo markup: a :b: c.\n")
    docs = {d.citekey: d for d in read_path(tmp_path)}
    assert docs["ospath"].title == "os.path --- Common pathname ops"
    assert docs["howto"].title == "Writing views"
    assert [c.heading for c in chunk_text(docs["howto"].text)] == ["Writing views",
                                                                   "Using templates"]
    assert "A view is a callable:" in docs["howto"].text
    assert docs["notes"].title == "notes" and docs["notes"].text.startswith("Plain notes.")


def test_looks_like_rst_needs_a_title_and_markup() -> None:
    assert looks_like_rst("Title\n=====\n\nText with :func:`x`.\n")
    assert looks_like_rst("Title\n=====\n\n.. note::\n\n   Careful.\n")
    assert not looks_like_rst("Title\n=====\n\nJust text.\n")  # a plain-text heading
    assert not looks_like_rst("Text with :func:`x` but no title.\n")
    assert not looks_like_rst("Short\n==\n\nExample::\n")  # underline shorter than title


def test_windows_line_ends_and_a_byte_order_mark_change_nothing() -> None:
    assert rst_to_text("\ufeff" + PAGE.replace("\n", "\r\n")) == rst_to_text(PAGE)
    assert looks_like_rst("\ufeffTitle\r\n=====\r\n\r\nSee :func:`x`.\r\n")


def test_hostile_rst_never_raises() -> None:
    for raw in ("", "=====", "====\n====\n====", ".. ::", ".. x::", "``unclosed", ":r:`",
                "Title\n=====\n" * 50, "\t.. code::\n\tx", "a\n" + "-" * 10000, "\x00"):
        title, text = rst_to_text(raw)
        assert isinstance(title, str) and isinstance(text, str)
        chunk_text(text)


def test_an_rst_folder_is_searchable(conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    from funnel_util import ingest

    (tmp_path / "ospath.rst").write_text(PAGE)
    ingest(conn, list(read_path(tmp_path)), dims=8)
    rows = conn.execute(
        "select c.heading from funnel_search('join path segments', null, 3, collection => 't')"
        " f join pgfunnel.chunk c on c.id = f.chunk_id").fetchall()
    assert rows[0][0] == "Functions"
    # role names are not indexed: 'func' occurs only as markup
    assert one_row(conn.execute(
        "select count(*) from pgfunnel.posting where term in ('func', 'ref')"))[0] == 0


def test_a_declared_module_is_written_as_the_html_reader_writes_it() -> None:
    # as html_text writes Sphinx's target: under the section title the directive stands
    # above, else where it stands; not when the title names it, nor for :no-index:
    title, text = rst_to_text(
        ".. module:: werkzeug.routing\n\n===========\nURL Routing\n===========\n\n"
        "Dispatching requests.\n\nCore\n----\n\nCore text.\n\n"
        ".. module:: werkzeug.core\n   :synopsis: core things\n\nMore text.\n\n"
        ".. module:: werkzeug.hidden\n   :no-index:\n\n"
        ".. module:: tornado.ioloop\n\ntornado.ioloop — loop\n---------------------\n\n"
        ".. module:: tornado.ioloop\n\nThe loop.\n")
    assert title == "URL Routing"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    assert lines == ["# URL Routing", "Module werkzeug.routing", "Dispatching requests.",
                     "## Core", "Core text.", "Module werkzeug.core", "More text.",
                     "## tornado.ioloop — loop", "The loop."]


def test_python_objects_are_named_as_sphinx_shows_them() -> None:
    # a bare name is qualified by the module, and a member by its class, as on the page
    # (and as users search for them: subprocess.Popen.wait); a dotted name stays as written
    _, text = rst_to_text(
        ".. module:: subprocess\n\n"
        ".. function:: run(args, *, check=False)\n\n   Run a command.\n\n"
        ".. class:: Popen(args, bufsize=-1)\n\n   Execute a child program.\n\n"
        "   .. method:: wait(timeout=None)\n\n      Wait for the child.\n\n"
        "   .. attribute:: returncode\n\n"
        ".. data:: DEVNULL\n\n"
        ".. method:: Popen.poll()\n\n"
        ".. currentmodule:: None\n\n"
        ".. function:: open(file)\n\n"
        ".. c:function:: PyObject* PyList_New(Py_ssize_t len)\n")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    assert lines == ["Module subprocess",
                     "subprocess.run(args, *, check=False)", "Run a command.",
                     "subprocess.Popen(args, bufsize=-1)", "Execute a child program.",
                     "subprocess.Popen.wait(timeout=None)", "Wait for the child.",
                     "subprocess.Popen.returncode", "subprocess.DEVNULL", "Popen.poll()",
                     "open(file)", "PyObject* PyList_New(Py_ssize_t len)"]
    assert "os.path.join(path, *paths)" in rst_to_text(PAGE)[1]


def test_plain_text_underlined_headings_start_sections(tmp_path: Path) -> None:
    """A .txt that is not reStructuredText (release notes, specs) still has underlined
    headings: they become sections and the title, and no rule of '=' is indexed."""
    notes = tmp_path / "2.38.2.txt"
    notes.write_text(
        "Git 2.38.2 Release Notes\n========================\n\n"
        "This is to backport various fixes.\n\n\n"
        "Fixes since v2.38.1\n-------------------\n\n"
        " * \"git remote rename\" failed to rename a remote without a fetch refspec.\n\n"
        "A paragraph of two lines\nfollowed by a rule is a separator\n----------\n\nend\n",
        encoding="utf-8")
    (doc,) = read_path(notes)
    assert doc.title == "Git 2.38.2 Release Notes"
    assert "====" not in doc.text and "-------------------" not in doc.text
    assert "followed by a rule is a separator\n----------" in doc.text
    headings = [c.heading for c in chunk_text(doc.text, chunk_words=20)]
    assert headings[0] == "Git 2.38.2 Release Notes"
    assert "Fixes since v2.38.1" in headings
    # overlined titles too; a .txt that opens with prose keeps its file name as title
    spec = tmp_path / "triggers.txt"
    spec.write_text("Draft.\n\n========\nTRIGGERS\n========\n\nIntro\n-----\n\nA trigger.\n",
                    encoding="utf-8")
    (doc,) = read_path(spec)
    assert doc.title == "triggers" and "# TRIGGERS\n" in doc.text and "## Intro\n" in doc.text


def test_sphinx_source_copies_are_read_in_the_format_their_name_gives(tmp_path: Path) -> None:
    # a Sphinx build's _sources: guide.rst.txt, intro.md.txt; given by themselves (the
    # cleanest text of a packaged manual), they were plain text
    sources = tmp_path / "_sources"
    sources.mkdir()
    (sources / "powered_by.rst.txt").write_text(
        ".. _aiohttp-powered-by:\n\nPowered by aiohttp\n==================\n\n"
        "Web sites powered by aiohttp.\n\n"
        "* `Home Assistant <https://home-assistant.io>`_\n")
    (sources / "glossary.rst.txt").write_text(
        ".. _aiohttp-glossary:\n\n\n.. glossary::\n\n   asyncio\n\n"
        "      The library for writing single-threaded concurrent code.\n")
    (sources / "overview.md.txt").write_text(
        "# Overview\n\nIt gives you a class decorator:\n\n"
        "```{include} ../README.md\n:start-after: 'code-begin -->'\n```\n\n"
        "## Philosophy\n\nIt is about regular classes.\n")
    docs = {d.citekey: d for d in read_path(sources)}
    assert sorted(docs) == ["glossary.rst", "overview.md", "powered_by.rst"]
    powered = docs["powered_by.rst"]
    assert powered.title == "Powered by aiohttp"
    assert "Home Assistant" in powered.text
    assert ".. _" not in powered.text and "https://" not in powered.text
    glossary = docs["glossary.rst"]
    assert glossary.title == "glossary"
    assert "asyncio" in glossary.text and ".. glossary::" not in glossary.text
    overview = docs["overview.md"]
    assert overview.title == "Overview"
    assert "{include}" not in overview.text and "## Philosophy" in overview.text


def test_a_csv_table_is_read_as_its_rows() -> None:
    # rsyslog documents every module parameter's type and default in a csv-table, and
    # clang its floating point modes: the whole directive was left out as showing no text
    src = """Parameters
==========

.. csv-table:: Floating Point Models
   :header: "Mode", "Precise", "Strict"
   :widths: 25, 15, 15

   "except_behavior", "ignore", "strict"
   "fenv_access", "off", ":option:`on <fenv>`",

.. csv-table::
   :file: external.csv

After the tables.
"""
    _, text = rst_to_text(src)
    assert ("Floating Point Models\nMode | Precise | Strict\nexcept_behavior | ignore | strict\n"
            "fenv_access | off | on\n\nAfter the tables.") in text
    assert "external.csv" not in text and ":widths:" not in text


def test_a_list_table_is_read_as_its_rows() -> None:
    # Python's asyncio API index: kept as written, its indented items read as code
    src = """Tasks
=====

.. list-table::
    :widths: 50 50

    * - :func:`run`
      - Create event loop, run a coroutine,
        close the loop.

    * - :class:`TaskGroup`
      - Holds a group of tasks.

        - a nested item

After the table.
"""
    _, text = rst_to_text(src)
    assert ("run | Create event loop, run a coroutine, close the loop.\n"
            "TaskGroup | Holds a group of tasks. - a nested item\n\nAfter the table.") in text
    assert "* -" not in text


def test_a_line_opening_with_backticks_or_tildes_opens_no_code_block(tmp_path: Path) -> None:
    # RST has no backtick fences: a note that shows Markdown's ``` (or a line of text
    # that starts with ~~~) made the rest of the page code to the chunker, so the
    # section titles below it started no section
    src = """Guide
=====

Intro text.

.. note::

   ```python is how Markdown opens a code block,
   and this is prose.

~~~ also prose

.. admonition:: ```fenced```

   More prose.

Install
-------

Run the installer.
"""
    (tmp_path / "guide.rst").write_text(src)
    (doc,) = read_path(tmp_path / "guide.rst")
    chunks = chunk_text(doc.text)
    assert [c.heading for c in chunks] == ["Guide", "Install"]
    assert "```python is how Markdown opens a code block," in chunks[0].text.splitlines()
    assert "~~~ also prose" in chunks[0].text.splitlines()
    assert chunks[1].text == "Install\n\nRun the installer."
    # code keeps its lines as written
    _, text = rst_to_text("Code\n====\n\n.. code-block:: md\n\n   ```\n   x\n   ```\n")
    assert "       ```\n       x\n       ```" in text


def test_a_nested_list_stays_nested(tmp_path: Path) -> None:
    # a sub-item was written at the margin, as a top-level item of its own
    src = """Setup
=====

- Install the package

  - on Linux, with apt
  - on macOS, with brew

    1. update brew first
    2. then install

  Its next paragraph, inside the item.

- Configure it

.. note::

   - an item in a note
"""
    (tmp_path / "setup.rst").write_text(src)
    (doc,) = read_path(tmp_path / "setup.rst")
    (chunk,) = chunk_text(doc.text)
    assert chunk.text == """Setup

- Install the package

  - on Linux, with apt
  - on macOS, with brew

    1. update brew first
    2. then install

  Its next paragraph, inside the item.

- Configure it

- an item in a note"""
    # items written with wider gaps after their markers nest as Markdown reads them
    _, text = rst_to_text("Top\n===\n\n*   one\n\n    *   two\n\n-      wide\n\n       - sub\n")
    assert text == "# Top\n\n*   one\n\n    *   two\n\n-      wide\n\n  - sub\n"


def test_tabs_go_to_the_next_tab_stop_as_docutils_reads_them() -> None:
    # each tab read as eight spaces made a title with a tab longer than its underline
    # (no title, no section), and an item's text start further in than the nested item
    title, text = rst_to_text("Install\tguide\n=============\n\nText.\n\n-\tone\n\n\t- sub\n")
    assert title == "Install guide"
    assert text == "# Install guide\n\nText.\n\n-       one\n\n  - sub\n"


def test_a_bare_hyperlink_reference_is_stored_as_its_word() -> None:
    # `Python_` (and anonymous `Python__`) was stored as written, so analyzer v8, which
    # keeps underscore-bounded names, indexed a stray `python_`; the expected texts are
    # what docutils renders
    page = """Python_ guide
=============

See Python_ for more, or Python__. We use Python_. (Python_) "Python_" Python_: x,
Python_'s docs, e-mail_, 3.x_, foo_bar_, snake_case_ and \u00abPython_\u00bb\u2014done.

Names: __init__ _thread_ sys.__stdout__ author__name a__b_ C++_ .Python_ Python_*.

Literals: ``foo_`` and ``bar__`` and :data:`sys.__stdout__` and :func:`foo_`; the
`Python`_ and `anon`__ forms; |name|_ is undefined; notes [1]_ and [CIT2002]_ go.

   An indented Python_ line.

Example::

    code_ = stays_
    x = y__

.. code-block:: python

   make_ = keep__

>>> spam_ = eggs_ + 1
... # see `Python`_, f(*a*)
42

.. _Python: https://www.python.org
__ https://www.python.org
"""
    title, text = rst_to_text(page)
    assert title == "Python guide"
    assert text == """# Python guide

See Python for more, or Python. We use Python. (Python) "Python" Python: x,
Python's docs, e-mail, 3.x, foo_bar, snake_case and \u00abPython\u00bb\u2014done.

Names: __init__ _thread_ sys.__stdout__ author__name a__b_ C++_ .Python_ Python_*.

Literals: foo_ and bar__ and sys.__stdout__ and foo_; the
Python and anon forms; |name|_ is undefined; notes and go.

An indented Python line.

Example:

        code_ = stays_
        x = y__

       make_ = keep__

>>> spam_ = eggs_ + 1
... # see `Python`_, f(*a*)
42
"""
    # an indented doctest block keeps all its lines as written (its `...` and output
    # lines were prose, their markup read); after a paragraph's line it is that paragraph
    _, text = rst_to_text("Go.\n\n.. note::\n\n   >>> f(*a*)\n   ... x_ + 1\n   2\n\n"
                          "See x_ +\n>>> y_\n")
    assert text == "Go.\n\n   >>> f(*a*)\n   ... x_ + 1\n   2\n\nSee x +\n>>> y\n"


def test_a_reference_indexes_no_stray_term(conn: psycopg.Connection[Any],
                                            tmp_path: Path) -> None:
    from funnel_util import ingest, make_collection

    (tmp_path / "links.rst").write_text(
        "Links\n=====\n\nRead Python_ and Django__, then call ``reset_`` and __init__.\n"
        "See google.auth.app\\_engine.\n\n"
        ">>> spam_ = eggs_ + 1\n")
    make_collection(conn, "t", 8, analyzer="english_v8")
    ingest(conn, list(read_path(tmp_path)), dims=8)
    terms = {t for (t,) in conn.execute("select distinct term from pgfunnel.posting")}
    assert {"python", "django", "reset_", "__init__", "spam_", "eggs_",
            "google.auth.app_engine", "app_engine"} <= terms
    assert not terms & {"python_", "django__", "_engine"}, terms


def test_backslash_escapes_read_as_their_characters() -> None:
    # sphinx-apidoc titles each module `google.auth.app\_engine module`; the backslash
    # was stored, and v8 indexed a stray `_engine` and no `google.auth.app_engine`. The
    # expected texts are what docutils renders
    title, text = rst_to_text(
        "google.auth.app\\_engine module\n===============================\n\n"
        "See \\*not emphasis\\*, a\\ b, \\\\ back, dictionary\\'s, \\`not a role\\`,\n"
        "Python\\_ stays, Py\\_thon_ too, Python_\\ s and \\(Python_\\) go, ``lit\\_eral``\n"
        "and ``C:\\dir\\\nsub``.\n\n"
        "   An indented line ending in a backslash \\\n\n"
        "::\n\n    code\\_ stays\n")
    assert title == "google.auth.app_engine module"
    assert text == ("# google.auth.app_engine module\n\n"
                    "See *not emphasis*, ab, \\ back, dictionary's, `not a role`,\n"
                    "Python_ stays, Py_thon_ too, Pythons and (Python) go, lit\\_eral\n"
                    "and C:\\dir\\\nsub.\n\n"
                    "An indented line ending in a backslash \n\n"
                    "        code\\_ stays\n")
