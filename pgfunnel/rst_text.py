"""The readable text of a reStructuredText file, markdown-ish for the chunker.

Sphinx projects (Python, Django, most of the Python ecosystem) keep their documentation
in reStructuredText. Read as plain text, a page loses its sections (an RST title is a
line underlined with punctuation, not a ``#`` line), so chunks straddle sections and
carry no heading, and markup that is never displayed lands in the index: role names
(``:func:`` before every function), comments, link targets, toctrees. This module does
what a reader of the rendered page sees, closely enough for search, without docutils:

- section titles (underlined, or over- and underlined) become ``#`` headings, levels in
  the order their adornment styles first appear, as docutils assigns them; the first
  title is the document's title;
- roles and interpreted text keep their text (``:func:`os.path.join``` -> ``os.path.join``,
  ``:ref:`the guide <guide>``` -> ``the guide``), inline literals and hyperlink
  references keep their words (``Python_`` -> ``Python``, as docutils reads it: not
  ``__init__``, nor ``foo_`` in a literal), and a backslash escape is its character
  (``app\\_engine`` -> ``app_engine``; an escaped space is nothing);
- directives keep their argument and content (a function's signature and description,
  a note, a code block), except those that render no text of their own (``toctree``,
  ``image``, ``include``, ``index``, ``raw``, ...); their option lines are dropped; a
  ``figure`` is its caption and legend, without its image's path, and ``only`` and
  ``ifconfig`` their content, without their condition;
  ``versionadded`` and friends read as Sphinx renders them ("New in version 3.2");
- a ``csv-table`` or ``list-table`` is its caption and rows, a line per row with cells
  parted by `` | ``;
- comments, link targets (``__ url`` too) and substitution definitions are dropped; a
  substitution reference reads as its definition where the file defines it
  (``replace::``, ``unicode::``; an ``image::`` one reads as nothing), and as written
  where it does not (Sphinx's ``|version|`` comes from the project's configuration); a
  paragraph's closing ``::`` reads as ``:``; transitions are dropped;
- literal blocks and code keep their lines, indented, so a ``#`` comment in code never
  reads as a heading; inline markup inside them is left alone, as it is in a doctest
  block (``>>>`` lines, to a blank line), which keeps its lines as written;
- other indented text (a directive's content, a block quote, a list item's next lines)
  is text, written without its indentation, which the chunker would read as code; inside
  a list item (a nested item, the item's next paragraph) it starts under the item's text,
  as Markdown nests it.
"""

from __future__ import annotations

import csv
import re
from contextvars import ContextVar

from pgfunnel.markdown_lines import text_line

__all__ = ["looks_like_rst", "rst_to_text"]

# an adornment: one punctuation character repeated (docutils allows any of these)
_ADORNMENT = re.compile(r"^([!-/:-@\[-`{-~])\1{2,}\s*$")
_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([\w:.+-]+)::(?:\s+(.*))?$")
_EXPLICIT = re.compile(r"^(\s*)\.\.(?:\s|$)")
# an anonymous hyperlink target written short, ``__ https://...`` (``.. __: https://...``)
_ANONYMOUS_TARGET = re.compile(r"__(?:\s|$)")
_FOOTNOTE = re.compile(r"^(\s*)\.\.\s+\[[^\]]+\]\s+(.*)$")
_OPTION = re.compile(r"^\s+:[\w -]+:(?:\s|$)")
# a list item's marker that Markdown reads as one too (`- `, `* `, `+ `, `1. `, `1) `),
# with the spaces after it: its item's content starts where the match ends
_LIST_ITEM = re.compile(r"^\s*([-*+]|\d{1,9}[.)])(\s+)(?=\S)")
# directives whose content is not text a reader sees on the page
_SILENT = frozenset({
    "toctree", "image", "include", "literalinclude", "raw", "index", "highlight", "module",
    "contents", "sectnum", "meta", "tabularcolumns", "testsetup",
    "testcleanup", "currentmodule", "default-role", "role", "autosummary",
    "graphviz", "digraph", "target-notes", "header", "footer", "sectionauthor",
    "moduleauthor", "codeauthor", "program", "default-domain", "spelling:word-list",
})  # fmt: skip
# directives whose content shows but whose argument does not: a figure's image path (its
# caption and legend are its content), the condition of ``only`` and ``ifconfig``
_UNSHOWN_ARGUMENT = frozenset({"figure", "only", "ifconfig"})
# a ``.. module::`` option that makes Sphinx declare no target (and html_text no line)
_NO_INDEX = frozenset({"noindex", "no-index"})
_VERSION_WORDS = {"versionadded": "New in version", "versionchanged": "Changed in version",
                  "deprecated": "Deprecated since version",
                  "versionremoved": "Removed in version"}
# Python objects Sphinx describes; it shows a bare name qualified by the module (and
# the class, for a member described inside a class), and so does this module
_PY_OBJECTS = frozenset({
    "function", "class", "exception", "data", "attribute", "method", "classmethod",
    "staticmethod", "decorator", "decoratormethod", "property", "type",
    "coroutinefunction", "coroutinemethod", "abstractmethod",
})  # fmt: skip
_PY_NAME = re.compile(r"(?:(?:async|await|class|exception|final|abstract)\s+)*"
                      r"([A-Za-z_][\w.]*)")
_CODE = frozenset({"code-block", "code", "sourcecode", "doctest", "testcode", "testoutput",
                   "parsed-literal", "productionlist", "math"})
# :role:`text`, :domain:role:`text`, and `text` (the default role)
_ROLE = re.compile(r"(?<![\w`]):(?:[\w.+-]+:)+`([^`]+)`|(?<![\w`:])`([^`]+)`(?!`)(?:__?)?")
_LITERAL = re.compile(r"``((?s:.+?))``")  # over a paragraph's lines too, as docutils reads it
_STRONG = re.compile(r"(?<![\w*])\*\*(?=\S)(.+?)(?<=\S)\*\*(?![\w*])")
_EMPHASIS = re.compile(r"(?<![\w*])\*(?=[^\s*])([^*]+?)(?<=\S)\*(?![\w*])")
_FOOTNOTE_REF = re.compile(r"\s?\[(?:#[\w-]*|\*|\d+|[\w-]+)\]_")
# an escaped character (of the first plane) waits as this plus its code, in plane 15's
# private use area, for the markup around it to be read: it is no markup, but it lets one
# start or end where the character itself does (`Python_\ s` is `Pythons`, a reference)
_STAND_IN_BASE = 0xF0000


def _stand_ins(chars: str) -> str:
    return "".join(chr(_STAND_IN_BASE + ord(c)) for c in chars)


# punctuation outside ASCII, near enough: Latin-1's, and past it any character but word
# characters, spaces and the symbol blocks (currency, letterlike, arrows, maths, technical,
# shapes, dingbats, emoji), which docutils does not let touch inline markup
_OTHER_PUNCTUATION = (r"[\xa1\xab\xb7\xbb\xbf]"
                      r"|[^\x00-\xff\w\s\u20a0-\u20cf\u2100-\u27ff\u2900-\u2bff"
                      r"\U0001f000-\U0001faff\U000f0000-\U000fffff]")
# a bare hyperlink reference, ``Python_`` (``Python__``, anonymous): a simple reference
# name, as docutils reads one (word characters and single inner ``-._+:``, no ``_`` at
# either end), then ``_`` or ``__``, standing where docutils starts and ends inline markup:
# after a space, an opening bracket or quote or ``-/:``, before a space or punctuation
# (other than ``*``, ``#``...); non-ASCII punctuation stands for the Unicode classes
# docutils allows there. Kept as written, its ``_`` made v8 index a stray ``python_``.
# ``__init__``, ``_thread``, ``sys.__stdout__`` and ``author__name`` are no references.
# Inline literals and interpreted text (roles, `` `text`_ ``) are matched first, to be
# left alone: ``foo_`` in a literal is code (a literal may go on over a paragraph's lines)
_REFERENCE = re.compile(
    r"``(?s:.+?)``"
    r"|(?<![\w`]):(?:[\w.+-]+:)+`[^`]+`|(?<![\w`:])`[^`]+`(?!`)(?:__?)?"  # as _ROLE
    r"""|(?:^|(?<=[\s"'(<\[{\-/:""" + _stand_ins(" \t\n\"'(<[{-/:") + "])|(?<="
    + _OTHER_PUNCTUATION + "))"
    r"(?P<name>(?:(?!_)\w)+(?:[-._+:](?:(?!_)\w)+)*)__?"
    r"""(?=$|[\s\\.,;!?\-/:"')>\]}""" + _stand_ins(" \t\n\\.,;!?-/:\"')>]}") + "]|"
    + _OTHER_PUNCTUATION + ")")
_TITLED_TARGET = re.compile(r"^(.*?)\s*<[^<>]+>$")
# a backslash escape, `\_` or `\*`, outside inline literals (where a backslash is a
# backslash, over lines too): docutils shows the character, read as no markup, and an
# escaped space or line end, or a backslash ending the text, as nothing. sphinx-apidoc
# writes each module's title so (`google.auth.app\_engine module`); kept, v8 indexed a
# stray `_engine` and no `google.auth.app_engine`
_ESCAPE = re.compile(r"``(?s:.+?)``|\\((?s:.)|\Z)")
_STAND_IN = re.compile("[\U000f0000-\U000fffff]")


def looks_like_rst(text: str) -> bool:
    """Whether a ``.txt`` file is reStructuredText (as Django's documentation is): it has
    a section title underlined with punctuation, and an RST construct (a directive, a
    role, or a literal-block ``::``)."""
    lines = text.removeprefix("\ufeff").splitlines()
    titled = any(_ADORNMENT.match(u) and t.strip() and not _ADORNMENT.match(t)
                 and not t[:1].isspace() and len(u.rstrip()) >= len(t.rstrip())
                 for t, u in zip(lines, lines[1:], strict=False))
    return titled and bool(re.search(r"^\s*\.\. [\w:-]+::|:\w+:`|::\s*$", text, re.M))


def rst_to_text(raw: str) -> tuple[str, str]:
    """(title, text) of a reStructuredText document; the title is "" when it has none."""
    # a tab goes to the next multiple of eight columns, as docutils reads it (each one eight
    # spaces made a title with a tab longer than its underline, no title)
    lines = raw.removeprefix("\ufeff").expandtabs(8).splitlines()
    defined = _SUBSTITUTIONS.set(_substitution_definitions(lines))
    try:
        return _rst_to_text(lines)
    finally:
        _SUBSTITUTIONS.reset(defined)


def _rst_to_text(lines: list[str]) -> tuple[str, str]:
    styles: list[tuple[str, bool]] = []
    out: list[str] = []
    fields, start = _file_fields(lines)
    title = fields.get("title", "")
    paragraph: list[str] = []

    def flush() -> None:
        # inline markup may span the lines of a paragraph (a long link's text and URL)
        if paragraph:
            out.extend(_guard(line) for line in _inline("\n".join(paragraph)).split("\n"))
            paragraph.clear()

    module = ""  # the current module (``.. module::`` / ``.. currentmodule::``)
    declared = ""  # a ``.. module::`` above a section title, written under it
    last_heading = ""
    classes: list[tuple[int, str]] = []  # (indent, qualified name) of enclosing classes
    literal_indent: int | None = None  # inside a literal block or code: lines kept as is
    skip_indent: int | None = None  # inside a block that renders nothing
    # the list items open, innermost last: (the column their content starts at in the
    # file, and in the text written), so that a nested item is written nested
    items: list[tuple[int, int]] = []
    i = start
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if not stripped or indent > 0 or _DIRECTIVE.match(line) or _EXPLICIT.match(line) \
                or _ADORNMENT.match(line) or _section_title(lines, i) is not None:
            flush()
        if skip_indent is not None or literal_indent is not None:
            block = skip_indent if skip_indent is not None else literal_indent
            assert block is not None
            if not stripped or indent > block:
                if literal_indent is not None:
                    out.append("    " + line if stripped else "")
                i += 1
                continue
            skip_indent = literal_indent = None
        while stripped and classes and indent <= classes[-1][0]:
            classes.pop()  # past the content of the class described above
        while stripped and items and indent < items[-1][0]:
            items.pop()  # left of an item's content: past that item
        # where this line's text starts in the text written: at the content of the item
        # that holds it (a nested item, an item's next paragraph), else at the margin
        column = items[-1][1] if items and stripped else 0
        if stripped and (item := _LIST_ITEM.match(line)):
            # its text's column as Markdown reads it: past the spaces after the marker, or
            # one past the marker where they are more than four (the text is code there)
            gap = len(item.group(2))
            items.append((item.end(), column + len(item.group(1)) + (gap if gap <= 4 else 1)))
        heading = _section_title(lines, i)
        if heading is not None:
            text, style, consumed = heading
            if style not in styles:
                styles.append(style)
            level = min(styles.index(style) + 1, 6)
            text = _inline(text)
            title = title or text
            out += ["", "#" * level + " " + text, ""]
            last_heading = text
            if declared and declared.casefold() not in text.casefold():
                out += [f"Module {declared}", ""]
            declared = ""
            i += consumed
            continue
        if _ADORNMENT.match(line) and not stripped.startswith(".."):
            i += 1  # a transition, or an adornment we could not pair: nothing to read
            continue
        directive = _DIRECTIVE.match(line)
        if directive:
            name = directive.group(2).lower()
            short = name.rsplit(":", 1)[-1]
            argument = (directive.group(3) or "").strip()
            i += 1
            options: dict[str, str] = {}
            while i < len(lines) and _OPTION.match(lines[i]):
                # :options: of the directive
                key, _, value = lines[i].strip()[1:].partition(":")
                options[key.strip().lower()] = value.strip()
                i += 1
            if short in ("csv-table", "list-table"):
                content: list[str] = []
                while i < len(lines) and (not lines[i].strip()
                                          or len(lines[i]) - len(lines[i].lstrip()) > indent):
                    content.append(lines[i])
                    i += 1
                rows = (_csv_rows([line.strip() for line in content], options)
                        if short == "csv-table" else _list_table_rows(content))
                out += ["", *([_guard(_inline(argument))] if argument else []),
                        *map(_guard, rows), ""]
                continue
            if short in ("module", "currentmodule") and name.split(":")[0] in (short, "py"):
                module = "" if argument == "None" else argument
                if short == "module" and module and not options.keys() & _NO_INDEX:
                    # as html_text writes Sphinx's target for it: under the section
                    # title that follows, else where it stands
                    if _section_title(lines, _next_nonblank(lines, i)) is not None:
                        declared = module
                    elif module.casefold() not in last_heading.casefold():
                        out += ["", f"Module {module}", ""]
            if short in _SILENT or name in _SILENT:
                skip_indent = indent
                continue
            if short in _PY_OBJECTS and name.split(":")[0] in (short, "py"):
                argument = _qualified(argument, module, classes[-1][1] if classes else "")
                if short in ("class", "exception"):
                    described = _PY_NAME.match(argument)
                    classes.append((indent, described.group(1) if described else argument))
            if short in _VERSION_WORDS:
                version, _, rest = argument.partition(" ")
                out.append(f"{_VERSION_WORDS[short]} {version}." + (f" {_inline(rest)}" if rest
                                                                     else ""))
            elif argument and short not in _CODE and short not in _UNSHOWN_ARGUMENT:
                out.append(_guard(_inline(argument)))
            if short in _CODE:
                literal_indent = indent
            continue
        footnote = _FOOTNOTE.match(line)
        if footnote:
            out.append(footnote.group(1) + _guard(_inline(footnote.group(2))))
            i += 1
            continue
        # a blank line is kept in ``paragraph``: a paragraph has started where it holds text
        starts = not "".join(paragraph).strip()
        if _EXPLICIT.match(line) or (starts and _ANONYMOUS_TARGET.match(stripped)):
            # a comment, a link target (``__ url`` too) or a substitution definition, with
            # its block
            skip_indent = indent
            i += 1
            continue
        if starts and stripped.startswith(">>>"):
            # a doctest block, to the next blank line: code, as written (inline markup
            # read in it took the `_` off `x_` and the `*` off `*args`); at the margin it
            # is not indented, so the chunker reads it as prose, as it read it before
            while i < len(lines) and lines[i].strip():
                out.append(lines[i] if indent > 0 else _guard(lines[i]))
                i += 1
            continue
        if stripped == "::":
            literal_indent = indent
            i += 1
            continue
        if stripped.endswith("::"):
            # "Example::" reads "Example:"; "Example ::" reads "Example"
            text = stripped[:-2].rstrip()
            text = text if stripped[:-2].endswith((" ", "\t")) else text + ":"
            if indent > 0:
                out.append(" " * column + _guard(_inline(text)))
            else:
                paragraph.append(text)
                flush()
            literal_indent = indent
            i += 1
            continue
        if indent > 0:
            # the content of a directive (a note, a function's description), a block quote
            # or a list item's next lines: text, so without its indentation, which made
            # it a block of code to the chunker where it reached four spaces; a doctest
            # block (``>>>``) stays as written. Inside a list item (a nested item, an
            # item's next paragraph) it starts at the item's content, as in Markdown, so
            # that a nested item stays nested
            out.append(" " * column + _guard(_inline(stripped)))
        else:
            paragraph.append(line)
        i += 1
    flush()
    return title, re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"


def _csv_rows(content: list[str], options: dict[str, str]) -> list[str]:
    """A ``csv-table``'s header and rows as the HTML reader writes a table's: a line per
    row, cells parted by `` | ``. Rows in a file (``:file:``, ``:url:``) are not read."""
    delimiter = options.get("delim", ",")
    delimiter = {"tab": "\t", "space": " "}.get(delimiter, delimiter[:1] or ",")
    rows = [options["header"]] if options.get("header") else []
    if "file" not in options and "url" not in options:
        rows += [line for line in content if line]
    written = []
    for cells in csv.reader(rows, delimiter=delimiter, skipinitialspace=True):
        words = [_inline(" ".join(cell.split())) for cell in cells]
        while words and not words[-1]:
            words.pop()
        if words:
            written.append(" | ".join(words))
    return written


def _list_table_rows(content: list[str]) -> list[str]:
    """A ``list-table``'s rows as the HTML reader writes a table's: each ``* -`` item a
    row, each ``-`` item under it (at the first cell's column) a cell, parted by `` | ``.
    Kept as written, its indented lines read as a block of code."""
    rows: list[list[list[str]]] = []
    cell_column = -1
    for line in content:
        text = line.strip()
        if not text:
            continue
        column = len(line) - len(line.lstrip())
        if text[:2] in ("* ", "- ") or text in ("*", "-"):
            if text[0] == "*" and (not rows or column < cell_column):
                rows.append([])
                cell_column = column + 2
                rest = text[1:].strip()
                if rest[:2] == "- " or rest == "-":
                    rows[-1].append([rest[1:].strip()])
                continue
            if text[0] == "-" and column == cell_column and rows:
                rows[-1].append([text[1:].strip()])
                continue
        if rows and rows[-1]:
            rows[-1][-1].append(text)
    return [" | ".join(_inline(" ".join(" ".join(cell).split())) for cell in row)
            for row in rows if row]


_FIELD = re.compile(r"^:([\w -]+):(?:\s+(.*))?$")


def _file_fields(lines: list[str]) -> tuple[dict[str, str], int]:
    """A field list at the top of a file (after comments and targets only) is the file's
    metadata in Sphinx, not text; its ``:title:`` names the document. Returns the fields
    and the line after them."""
    i = 0
    while i < len(lines) and (not lines[i].strip() or lines[i].startswith(("..", " "))):
        i += 1
    fields: dict[str, str] = {}
    while i < len(lines) and (m := _FIELD.match(lines[i])):
        fields[m.group(1).strip().lower()] = (m.group(2) or "").strip()
        i += 1
    if not fields or (i < len(lines) and lines[i].strip()):
        return {}, 0  # not a field list standing alone: text
    return fields, i


def _qualified(signature: str, module: str, owner: str) -> str:
    """A Python object's signature with its name as Sphinx shows it: a bare name gets the
    enclosing class, else the current module, in front (``join(path, *paths)`` under
    ``.. module:: os.path`` is ``os.path.join(path, *paths)``). A dotted name is left as
    written."""
    m = _PY_NAME.match(signature)
    if not m or "." in m.group(1) or not (owner or module):
        return signature  # no name, already dotted (str.split, Popen.wait), or no context
    return signature[:m.start(1)] + (owner or module) + "." + signature[m.start(1):]


def _next_nonblank(lines: list[str], i: int) -> int:
    """The first line from ``i`` on with text (``len(lines)`` when none has)."""
    while i < len(lines) and not lines[i].strip():
        i += 1
    return i


def _section_title(lines: list[str], i: int) -> tuple[str, tuple[str, bool], int] | None:
    """The section title starting at line ``i``: (text, adornment style, lines used)."""
    if i >= len(lines):
        return None
    line = lines[i]
    previous_blank = i == 0 or not lines[i - 1].strip()
    over = _ADORNMENT.match(line)
    if over and previous_blank and i + 2 < len(lines):
        text, under = lines[i + 1], lines[i + 2]
        under_match = _ADORNMENT.match(under)
        if (text.strip() and not _ADORNMENT.match(text) and under_match
                and under_match.group(1) == over.group(1)
                and len(under.rstrip()) >= len(text.rstrip())):
            return text.strip(), (over.group(1), True), 3
    if (previous_blank and line.strip() and not line[:1].isspace() and not over
            and i + 1 < len(lines) and not line.lstrip().startswith("..")):
        under_match = _ADORNMENT.match(lines[i + 1])
        if under_match and len(lines[i + 1].rstrip()) >= len(line.rstrip()):
            return line.strip(), (under_match.group(1), False), 2
    return None


# the substitutions the document being read defines, by name
_SUBSTITUTIONS: ContextVar[dict[str, str] | None] = ContextVar("rst_substitutions",
                                                              default=None)
_SUBSTITUTION_DEFINITION = re.compile(
    r"^(\s*)\.\.\s+\|(?![\s|])([^|]+?)(?<!\s)\|\s+(replace|unicode|image)::(?:\s+(.*))?$")
# a reference, |name| (|name|_ and |name|__ are links), or an inline literal, where a
# reference is left alone
_SUBSTITUTION_OR_LITERAL = re.compile(
    r"``.+?``|(?<![\w|`\\])\|(?![\s|])([^|\n]+?)(?<!\s)\|(?:__?)?(?![\w|])")
# a character code of the unicode directive: 0xA9, x2014, \u2014, U+2014, &#x2014; or 169
_CHARACTER_CODE = re.compile(
    r"(?:0x|x|\\x|U\+|u|\\u)([0-9a-fA-F]+)|&#x([0-9a-fA-F]+);|&#(\d+);|(\d+)", re.I)


def _substitution_definitions(lines: list[str]) -> dict[str, str]:
    """``.. |name| replace:: text`` (its text may go on in the lines indented under it),
    ``.. |name| unicode:: 0xA9`` and ``.. |name| image:: path`` (a picture: no text), by
    name; docutils matches a reference to one case-insensitively when no name matches
    exactly, so each is also kept under its name folded."""
    defined: dict[str, str] = {}
    for i, line in enumerate(lines):
        m = _SUBSTITUTION_DEFINITION.match(line)
        if m is None:
            continue
        indent, name, kind = len(m.group(1)), " ".join(m.group(2).split()), m.group(3)
        words = [m.group(4) or ""]
        for more in lines[i + 1:]:
            if more.strip() and len(more) - len(more.lstrip()) <= indent:
                break
            if kind != "image" and not _OPTION.match(more):
                words.append(more)
        text = " ".join(" ".join(words).split())
        if kind == "unicode":
            text = "".join(_character(code) for code in text.split(" .. ")[0].split())
        elif kind == "image":
            text = ""
        defined[name] = text
        defined.setdefault(name.casefold(), text)
    return defined


def _character(code: str) -> str:
    """A code of the unicode directive as its character; other text as it is."""
    m = _CHARACTER_CODE.fullmatch(code)
    if m is None:
        return code
    hex_digits = m.group(1) or m.group(2)
    value = int(hex_digits, 16) if hex_digits else int(m.group(3) or m.group(4))
    return chr(value) if 0 < value <= 0x10FFFF and not 0xD800 <= value <= 0xDFFF else code


def _substituted(text: str) -> str:
    defined = _SUBSTITUTIONS.get()
    if not defined or "|" not in text:
        return text

    def replace(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return m.group()  # an inline literal shows its text as written
        name = " ".join(m.group(1).split())
        found = defined.get(name, defined.get(name.casefold()))
        return m.group() if found is None else found

    return _SUBSTITUTION_OR_LITERAL.sub(replace, text)


def _inline(text: str) -> str:
    """Inline markup to the words a reader sees."""
    text = _substituted(text)
    # escaped characters wait as stand-ins, which no markup reads, unless the text holds
    # such characters of its own
    escaped = "\\" in text and not _STAND_IN.search(text)
    if escaped:
        text = _ESCAPE.sub(_stand_in, text)
    text = _REFERENCE.sub(_reference_text, text)
    text = _LITERAL.sub(r"\1", text)
    text = _ROLE.sub(_role_text, text)
    text = _EMPHASIS.sub(r"\1", _STRONG.sub(r"\1", text))
    text = _FOOTNOTE_REF.sub("", text)
    return _STAND_IN.sub(_escaped, text) if escaped else text


def _stand_in(m: re.Match[str]) -> str:
    char = m.group(1)
    if char is None:
        return m.group()  # an inline literal: its backslashes are text
    if not char:
        return ""  # a backslash that ends the text escapes nothing and shows nothing
    return chr(_STAND_IN_BASE + ord(char)) if ord(char) < 0x10000 else char


def _escaped(m: re.Match[str]) -> str:
    char = chr(ord(m.group()) - _STAND_IN_BASE)
    return "" if char.isspace() else char  # an escaped space or line end shows nothing


def _reference_text(m: re.Match[str]) -> str:
    name = m.group("name")
    return m.group() if name is None else name


def _role_text(m: re.Match[str]) -> str:
    inner = m.group(1) if m.group(1) is not None else m.group(2)
    titled = _TITLED_TARGET.match(inner)
    if titled and titled.group(1):
        inner = titled.group(1)
    # ~a.b.c shows as c and !a as a in Sphinx; the whole name is the better search term
    return inner.lstrip("~!")


def _guard(line: str) -> str:
    """A text line that starts with ``#`` (after up to three spaces) would read as a
    markdown heading, and one that starts with three backticks or tildes as a code fence
    (RST has neither): that character is escaped, as CommonMark escapes it."""
    return text_line(line)
