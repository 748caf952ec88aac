"""Print the bracket-expression body of the characters the v6 analyzers never count as
part of a word: every non-ASCII code point whose Unicode general category is a separator
(Z*), punctuation (P*), symbol (S*), control (Cc), format (Cf) or private use (Co).

The analyzer (sql/010_analyzer.sql, ``pgfunnel._nonword_chars``) holds the output as a
constant, so that what a word is does not depend on the database's locale: Postgres's
``[[:alnum:]]`` follows the collation, and under ``C`` it holds ASCII only. Run it with
the Python whose Unicode version the constant names, and paste the output there when
moving to a newer Unicode version (a new analyzer version: the terms may change)."""

from __future__ import annotations

import sys
import unicodedata

# every separator, punctuation and symbol category (Z*, P*, S*), and these of the others
NON_WORD_MAJOR_CLASSES = "ZPS"
NON_WORD_CATEGORIES = ("Cc", "Cf", "Co")


def is_non_word(code_point: int) -> bool:
    category = unicodedata.category(chr(code_point))
    return category[0] in NON_WORD_MAJOR_CLASSES or category in NON_WORD_CATEGORIES


def non_word_ranges(start: int = 0x80, stop: int = 0x110000) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    first: int | None = None
    for cp in range(start, stop):
        if is_non_word(cp):
            if first is None:
                first = cp
        elif first is not None:
            ranges.append((first, cp - 1))
            first = None
    if first is not None:
        ranges.append((first, stop - 1))
    return ranges


def escape(cp: int) -> str:
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def bracket_body(ranges: list[tuple[int, int]]) -> str:
    return "".join(escape(a) if a == b else f"{escape(a)}-{escape(b)}" for a, b in ranges)


def sql_lines(ranges: list[tuple[int, int]], width: int = 84) -> list[str]:
    """The bracket body as adjacent SQL string literals, cut between ranges."""
    lines = [""]
    for a, b in ranges:
        item = bracket_body([(a, b)])
        if len(lines[-1]) + len(item) > width:
            lines.append("")
        lines[-1] += item
    return [f"'{line}'" for line in lines]


if __name__ == "__main__":
    ranges = non_word_ranges()
    sys.stdout.write(f"-- Unicode {unicodedata.unidata_version}, {len(ranges)} ranges\n")
    sys.stdout.write("\n".join(sql_lines(ranges)) + "\n")
