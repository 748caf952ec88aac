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

__all__ = ["text_line"]

# what the chunker reads as a heading (`sources._HEADING`) or opens a fence with
# (`sources._FENCE`), after up to three spaces
_OPENS_BLOCK = re.compile(r"^( {0,3})(?=#{1,6}(?:\s|$)|`{3,}[^`]*$|~{3,})")


def text_line(line: str) -> str:
    """``line``, a line of text, with the character that would make it a Markdown
    heading or code fence escaped (``\\# Step``, ``\\```python``)."""
    return _OPENS_BLOCK.sub(r"\1\\", line, count=1)
