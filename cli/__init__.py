"""The `pgfunnel` command line.

Importing it (the console script does, first thing) makes a Ctrl-C that no command has
caught yet, one while the CLI's modules load, end with one line, "interrupted", instead
of Python's traceback; the exit status stays that of SIGINT (130 in a shell)."""

from __future__ import annotations

import sys
from types import TracebackType


def _interrupted_in_one_line(kind: type[BaseException], value: BaseException,
                             tb: TracebackType | None,
                             previous: object = sys.excepthook) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.stderr.write("interrupted\n")
        return
    if callable(previous):
        previous(kind, value, tb)


if sys.excepthook is sys.__excepthook__:
    sys.excepthook = _interrupted_in_one_line
