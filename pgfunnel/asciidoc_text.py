"""The readable text of an AsciiDoc page (``.adoc``: Antora sites, Spring, Asciidoctor).

Read the way its rendered page reads, without an AsciiDoc processor: section titles
(``== Install``, or ``Install`` over ``-------``) become markdown headings, each starting
a section; the document title
(``= Guide``) is the title. Listing and literal blocks (``----``, ``....``) stay code,
fenced, so a ``#`` comment in them never starts a section. What the page does not show
goes: attribute entries (``:toc:``), line and block comments (``//``, ``////``), block
attribute lines (``[source,java]``, ``[[anchor]]``), conditional and include directives
and the other blocks' delimiters. Links and cross references keep their text
(``https://example.com[the site]`` is ``the site``, ``<<install,Installing>>`` is
``Installing``); emphasis is its words (``_very_`` is ``very``, by Asciidoctor's rule for
where ``_`` may open and close it; not in a literal paragraph, monospace, a passthrough or
a URL, and a dunder name, ``__init__``, is kept as a name); an image keeps its
alternative text; nested list items (``** sub``,
``.. step``) are written nested, as Markdown nests them. A reference to an attribute the
page defines (``{product}`` under ``:product: Acme``) reads as its value, except in
listing and literal blocks (a value ending in `` \\``, or the older AsciiDoc's `` +``,
goes on on the next line), and a counter (``{counter:step}``) as its next value; one to an
attribute it does not define stays as written.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pgfunnel.markdown_lines import text_line

__all__ = ["asciidoc_to_text"]

_SECTION = re.compile(r"^(={1,6}|#{1,6})\s+(\S.*?)\s*(?:\1)?\s*$")
_ATTRIBUTE_ENTRY = re.compile(r"^:(!?)([\w-]+)(!?):(?:\s+(.*))?$")
# a reference to an attribute, `{product}`, or a counter, `{counter:step}` (its next
# value) or `{counter2:step}` (counted, not shown), with an optional first value
# (`{counter:step:A}`); `\{product}` is written as it is
_ATTRIBUTE_REFERENCE = re.compile(
    r"(\\)?\{(?:(counter2?):([\w][\w-]*)(?::([^{}\s]*))?|([\w][\w-]*))\}")
# the attributes Asciidoctor defines for characters that are awkward to write
_CHARACTER_ATTRIBUTES = {
    "empty": "", "sp": " ", "nbsp": "\u00a0", "zwsp": "\u200b", "wj": "\u2060",
    "apos": "'", "quot": '"', "lsquo": "\u2018", "rsquo": "\u2019", "ldquo": "\u201c",
    "rdquo": "\u201d", "deg": "\u00b0", "plus": "+", "brvbar": "\u00a6", "vbar": "|",
    "amp": "&", "lt": "<", "gt": ">", "startsb": "[", "endsb": "]", "caret": "^",
    "asterisk": "*", "tilde": "~", "backslash": "\\", "backtick": "`",
    "two-colons": "::", "two-semicolons": ";;", "cpp": "C++", "pp": "++",
}
_BLOCK_ATTRIBUTES = re.compile(r"^\[[^\[\]]*\]\s*$|^\[\[[^\[\]]*\]\]\s*$|^\[#[^\]]*\]\s*$")
_SOURCE = re.compile(r"^\[source(?:,\s*([\w+#.-]+))?[^\]]*\]\s*$")
_BLOCK_TITLE = re.compile(r"^\.([^.\s].*)$")
_DIRECTIVE = re.compile(r"^(?:include|ifdef|ifndef|ifeval|endif|toc)::[^\[]*\[.*\]\s*$")
_IMAGE = re.compile(r"^image::[^\[]*\[([^\],]*)[^\]]*\]\s*$")
# delimiters of blocks whose content is code, prose, or nothing the page shows
_CODE_DELIMITERS = ("----", "....")
_COMMENT_DELIMITER = "////"
# a two-line title's underline characters, by level
_UNDERLINES = "=-~^+"
_PROSE_DELIMITERS = ("====", "****", "____", "++++", "--", "|===", ",===", ":===")
_LINK = re.compile(r"\b(?:link:([^\s\[\]]+)|mailto:([^\s\[\]]+)"
                   r"|((?:https?|ftp|irc|file)://[^\s\[\]]+))\[([^\]]*)\]")
_XREF = re.compile(r"<<([^,>]+)(?:,\s*([^>]+))?>>")
_INLINE_XREF = re.compile(r"\bxref:[^\[\s]+\[([^\]]*)\]")
_INLINE_IMAGE = re.compile(r"\bimage:[^\[\s]+\[([^\],]*)[^\]]*\]")
# a Markdown-style fenced listing block, which Asciidoctor reads too: ```ruby ... ```
_BACKTICK_FENCE = re.compile(r"^(`{3,})([\w+#.-]*)(?:,[^`]*)?$")
# a list item: `*` to `*****` and `-` unordered, `.` to `.....` and `1.` ordered; its
# level is its marker's, not its indentation
_LIST_ITEM = re.compile(r"^[ \t]*(\*{1,5}|-|\.{1,5}|\d{1,9}\.)[ \t]+(\S.*)$")
_THEMATIC_BREAK = re.compile(r"^[ \t]*([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_INLINE_ANCHOR = re.compile(r"\[\[[^\[\]]*\]\]|\banchor:[^\[\s]+\[[^\]]*\]")
# emphasis, `_word_` or `_a phrase_` (constrained: not inside a word; Asciidoctor's rule)
# and `__phrase__` standing alone: the page shows the words without the underscores, and
# kept, v8 indexed `_word_`, `_a` and `phrase_`, terms no query holds. A name in
# monospace (`` `_x_` ``), a passthrough (`+_x_+`, `pass:[...]`), a bare URL and a dunder
# name (`__init__`, which its author means as a name) are matched first, to be kept
# A span is matched over at most _SPAN characters: unbounded, a long line of `_a _a ...`
# took a time growing with its length squared (32 s for 48 kB)
_SPAN = 300
_EMPHASIS = re.compile((
    r"`[^`\n]+`|\+\+\+.{1,N}?\+\+\+|\+\+.{1,N}?\+\+|(?<![\w;:}])\+\S(?:.{0,N}?\S)?\+(?!\w)"
    r"|\bpass:[a-z,]*\[[^\]]*\]|\b[a-z][\w+.-]*://\S+|(?<!\w)__[^\W_]\w{0,N}?(?<!_)__(?!\w)"
    r"|(?<![\w\\])__(?P<free>(?!_)\S(?:.{0,N}?\S)?)(?<!_)__(?!\w)"
    r"|(?<![\w;:}\\])_(?P<bound>(?!_)\S(?:.{0,N}?\S)?)(?<!_)_(?!\w)").replace("N", str(_SPAN)))


def asciidoc_to_text(raw: str) -> tuple[str, str]:
    """(title, text) of an AsciiDoc page; see the module docstring."""
    lines = raw.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[str] = []
    title = ""
    block = ""  # the delimiter of the block being read, if any
    block_is_code = False  # a listing or literal block, whatever its delimiter's length
    language = ""  # of the next listing block, from its [source,LANG] line
    in_header = False  # the author and revision lines under the document title
    underline = -1  # the index of a two-line title's underline, read with its title
    opened = -1  # the index in ``out`` of the code block's opening fence
    # the list items open, outermost first: their marker, and the column their text
    # starts at as written (where a nested item's marker goes)
    items: list[tuple[str, int]] = []
    after_blank = attached = False  # the line above was blank; was a list continuation `+`
    continued = -1  # the last line of an attribute entry's value that goes on over lines
    attributes = dict(_CHARACTER_ATTRIBUTES) | _header_attributes(lines)
    for i, line in enumerate(lines):
        if i == underline or i <= continued:
            continue
        if not block and not line.startswith("//"):
            # a listing or literal block's text is as written (Asciidoctor substitutes
            # no attribute in it unless told to), as is a comment (a line, or a block),
            # which counts nothing
            line = _substituted(line, attributes)
        stripped = line.rstrip()
        if m := _ATTRIBUTE_ENTRY.match(stripped) if not block else None:
            # `:product: Acme` (in the header or later) defines {product} for the lines
            # below it; `:product!:` unsets it
            name = m.group(2).lower()
            if m.group(1) or m.group(3):
                attributes.pop(name, None)
            else:
                # its first line's references were read above, those of the lines it
                # goes on over are read as they come
                attributes[name], continued = _entry_value(
                    m.group(4) or "", lines, i, lambda more: _substituted(more, attributes))
            continue
        if in_header:
            if stripped:
                continue
            in_header = False
        if block:
            if stripped == block:
                if block_is_code:
                    _fence_closed(out, opened)
                block = ""
            elif block_is_code:
                out.append(line)
            continue
        item = _LIST_ITEM.match(stripped) if not _THEMATIC_BREAK.match(stripped) else None
        if stripped and not item and ((after_blank and not attached)
                                      or stripped.startswith("//")
                                      or _BLOCK_ATTRIBUTES.match(stripped)):
            # a paragraph after a blank line (not attached by `+`) ends a list, as does a
            # comment or a block attribute line, which part two lists
            items.clear()
        after_blank, attached = not stripped, stripped == "+" or (attached and not stripped)
        if level := _two_line_title(stripped, lines[i + 1] if i + 1 < len(lines) else ""):
            # `Install` over `-------`: a section title (Asciidoctor reads them, as the
            # older AsciiDoc wrote them), not a paragraph over a listing block's delimiter
            underline = i + 1
            stripped = f"{'=' * level} {stripped}"
        elif stripped in _CODE_DELIMITERS or (len(stripped) > 4
                                            and set(stripped) in ({"-"}, {"."})):
            block, block_is_code, opened = stripped, True, len(out)
            out.append(f"```{language}")
            language = ""
            continue
        elif m := _BACKTICK_FENCE.match(stripped):
            # its lines are code (a `# comment` in them was a section title, a `// note`
            # and an `[1, 2]` line were left out), up to the fence that closes it
            block, block_is_code, opened = m.group(1), True, len(out)
            out.append(f"```{m.group(2) or language}")
            language = ""
            continue
        if stripped == _COMMENT_DELIMITER or (len(stripped) > 4 and set(stripped) == {"/"}):
            block, block_is_code = stripped, False
            continue
        if stripped in _PROSE_DELIMITERS or (len(stripped) > 4 and len(set(stripped)) == 1
                                             and stripped[0] in "=*_+"):
            # an example, sidebar, quote or open block: its content is text
            out.append("")
            continue
        if stripped.startswith("//") or stripped == "+":
            # a line comment; a list item's continuation mark
            continue
        if m := _SOURCE.match(stripped):
            language = m.group(1) or ""
            continue
        if _ATTRIBUTE_ENTRY.match(stripped) or _BLOCK_ATTRIBUTES.match(stripped) \
                or _DIRECTIVE.match(stripped):
            continue
        if m := _IMAGE.match(stripped):
            out.append(text_line(m.group(1).strip()))
            continue
        if m := _SECTION.match(stripped):
            level = len(m.group(1))
            heading = _inline(m.group(2))
            if level == 1 and not title:
                title = heading
                in_header = not any(o.strip() for o in out)
            out.append(f"{'#' * level} {heading}")
            continue
        if m := _BLOCK_TITLE.match(stripped):
            out.append(text_line(_inline(m.group(1))))
            continue
        if item:
            # written as Markdown writes a nested list: under the text of the item that
            # holds it (`** sub` was a line of its own, `. first` no list item)
            marker = item.group(1)
            marker = "1." if marker[0].isdigit() else marker  # `1.`, `2.`: one level
            if any(marker == held for held, _ in items):
                while items.pop()[0] != marker:
                    pass  # a sibling of an item above: the items nested in it end
            column = items[-1][1] if items else 0
            written = ("*" if marker[0] == "*" else "1." if marker[0] == "."
                       else item.group(1))
            items.append((marker, column + len(written) + 1))
            line = f"{' ' * column}{written} {item.group(2)}"
        # a line that starts with `#` (an indented one, a literal paragraph) is no heading,
        # and one that starts with three backticks or tildes opens no code block; a literal
        # paragraph's text is as written: no emphasis in it
        out.append(text_line(_inline(line, emphasis=not (line[:1].isspace() and not item))))
    if block and block_is_code:
        _fence_closed(out, opened)
    return title, "\n".join(out).strip("\n")


# a line of code that a fence of backticks as long as its run, or shorter, would close
_BACKTICK_RUN = re.compile(r"^ {0,3}(`{3,})[ \t]*$")


def _fence_closed(out: list[str], opened: int) -> None:
    """The code block whose opening fence is ``out[opened]`` closed, its fences longer
    than any run of backticks alone on a line of its code (a listing that shows
    Markdown's ```` ``` ````), which would have closed it there and opened another."""
    longest = max((len(m.group(1)) for line in out[opened + 1:]
                   if (m := _BACKTICK_RUN.match(line))), default=0)
    fence = "`" * max(3, longest + 1)
    out[opened] = fence + out[opened].lstrip("`")
    out.append(fence)


def _header_attributes(lines: list[str]) -> dict[str, str]:
    """The attributes the document header defines (the entries above its title and in
    the lines under it, up to the first blank line): the title may refer to them."""
    defined: dict[str, str] = {}
    titled = False
    continued = -1  # the last line of a value that goes on over lines
    for i, line in enumerate(lines):
        stripped = line.rstrip()
        if not stripped:
            if titled:
                break
            continue
        if i <= continued:
            continue
        if m := _ATTRIBUTE_ENTRY.match(stripped):
            if not (m.group(1) or m.group(3)):
                value, continued = _entry_value(m.group(4) or "", lines, i)
                defined[m.group(2).lower()] = _substituted(value, _CHARACTER_ATTRIBUTES
                                                           | defined)
        elif stripped.startswith("= ") and not titled:
            titled = True
        elif not titled and not stripped.startswith("//"):
            break  # no header: the body starts here
    return defined


def _entry_value(first: str, lines: list[str], i: int,
                 read: Callable[[str], str] = str) -> tuple[str, int]:
    """The value of the attribute entry on line ``i``, whose first line's is ``first``,
    and the index of its last line: a value that ends in `` \\`` (Asciidoctor) or
    `` +`` (the older AsciiDoc) goes on on the next line (read with ``read``), joined to
    it by a space (`` + \\`` keeps a line break on the page, a space to search); a blank
    line ends it."""
    parts: list[str] = []
    value = first.strip()
    while ((value in ("\\", "+") or value.endswith((" \\", " +"))) and i + 1 < len(lines)
           and lines[i + 1].strip()):
        # ` \` (Asciidoctor), ` +` (the older AsciiDoc) or ` + \` (a line break)
        backslash = value.endswith("\\")
        value = value[:-1].rstrip()
        if backslash and (value == "+" or value.endswith(" +")):
            value = value[:-1].rstrip()
        parts.append(value)
        i += 1
        value = read(lines[i]).strip()
    parts.append(value.removesuffix(" \\").removesuffix(" +"))
    return " ".join(part for part in parts if part), i


def _substituted(line: str, attributes: dict[str, str]) -> str:
    """``line`` with each reference to a defined attribute replaced by its value, and
    each counter by its next value (``{counter:step}``, or nothing for
    ``{counter2:step}``); a reference to an attribute not defined stays as written, as
    Asciidoctor leaves it."""
    if "{" not in line:
        return line

    def value(m: re.Match[str]) -> str:
        if m.group(1):
            return m.group(0)[1:]
        if m.group(2):
            # a counter: the attribute's next value (a number, or a letter), else its
            # first value (1 unless the counter says)
            name = m.group(3).lower()
            current = attributes.get(name)
            attributes[name] = (_next_value(current) if current is not None
                                else m.group(4) or "1")
            return attributes[name] if m.group(2) == "counter" else ""
        return attributes.get(m.group(5).lower(), m.group(0))

    return _ATTRIBUTE_REFERENCE.sub(value, line)


def _next_value(current: str) -> str:
    """A counter's value after ``current``, as Asciidoctor counts: an integer plus one,
    a letter the next one (``z`` is followed by ``aa``)."""
    if re.fullmatch(r"-?\d+", current):
        return str(int(current) + 1)
    if len(current) == 1 and current.isascii() and current.isalpha():
        return {"z": "aa", "Z": "AA"}.get(current, chr(ord(current) + 1))
    return current


def _two_line_title(line: str, following: str) -> int:
    """The level of a two-line section title (1 for ``=``, the document's; 2 for ``-``, 3
    ``~``, 4 ``^``, 5 ``+``) whose text is ``line`` and underline ``following``, as
    Asciidoctor reads one: the underline a single character repeated, its length within
    one of the title's; 0 when they are no such title."""
    under = following.rstrip()
    if (len(under) < 2 or len(set(under)) != 1 or under[0] not in _UNDERLINES
            or abs(len(line) - len(under)) > 1 or not line.strip()
            or line.startswith((".", "[", "//", ":", " ", "\t", "=", "*", "-"))
            or line in _CODE_DELIMITERS or line in _PROSE_DELIMITERS):
        return 0
    return _UNDERLINES.index(under[0]) + 1


def _inline(text: str, emphasis: bool = True) -> str:
    """Links, cross references, images, anchors and emphasis as the page shows them."""
    text = _INLINE_ANCHOR.sub("", text)
    text = _INLINE_IMAGE.sub(lambda m: m.group(1), text)
    text = _INLINE_XREF.sub(lambda m: m.group(1), text)
    text = _XREF.sub(lambda m: (m.group(2) or m.group(1)).strip(), text)
    text = _LINK.sub(lambda m: m.group(4) or m.group(1) or m.group(2) or m.group(3), text)
    return _EMPHASIS.sub(_emphasised, text) if emphasis else text


def _emphasised(m: re.Match[str]) -> str:
    words = m.group("free") if m.group("free") is not None else m.group("bound")
    return m.group() if words is None else words
