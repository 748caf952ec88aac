"""Text lines written for the chunker, which reads what the format readers write as
Markdown: a line of text that Markdown would read as a block of its own is escaped.

The reStructuredText, AsciiDoc and HTML readers write a page's text as Markdown, for
the chunker (``sources.chunk_text``) to find its sections and its code. A line of their
text that opens with ``#`` (a heading to Markdown) or with three backticks or tildes (a
code fence, which made the rest of the page code until another such line, its section
titles with it) is no such thing in those formats; its first character is escaped with a
backslash, as CommonMark escapes it. The chunker reads the line as prose, and a chunk
holds it as written, without the backslash (``sources._sections`` for ``#``,
``sources._escaped_fences_shown`` for a fence).
"""

from __future__ import annotations

import re

__all__ = ["FENCE_OPEN", "HEADING_MARK", "INDENT", "text_line"]

# the patterns the chunker (``sources._HEADING``, ``sources._FENCE``) and the escape below
# are made of, in one place: an escape that missed a line the chunker reads as a heading
# or a fence let a line of text open a block
#: what may come before a block's marker: up to three spaces (CommonMark)
INDENT = r" {0,3}"
#: the marker of a heading: one to six ``#`` (a space or the line's end must follow)
HEADING_MARK = r"#{1,6}"
#: what opens a code fence: three or more tildes, or three or more backticks followed
#: by no backtick on the line (``"```foo``` at the start of a line"`` is inline code)
FENCE_OPEN = r"`{3,}(?=[^`]*$)|~{3,}"

# what the chunker reads as a heading or opens a fence with, after up to three spaces
_OPENS_BLOCK = re.compile(rf"^({INDENT})(?={HEADING_MARK}(?:\s|$)|{FENCE_OPEN})")


def text_line(line: str) -> str:
    """``line``, a line of text, with the character that would make it a Markdown
    heading or code fence escaped (``\\# Step``, ``\\```python``)."""
    return _OPENS_BLOCK.sub(r"\1\\", line, count=1)
