"""Shared pieces of the CLI: options, output, and turning errors into exit codes."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from pgfunnel.errors import PgfunnelError

# errors, warnings and notes are one line each, however wide: the terminal wraps them,
# and a log or a pipe keeps the line whole for grep
console = Console(stderr=True, soft_wrap=True)
out = Console()


def plural(n: int, noun: str) -> str:
    """``1 chunk``, ``2 chunks`` (regular English nouns only)."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"

DsnOption = Annotated[
    str | None,
    typer.Option("--dsn", envvar="PGFUNNEL_DSN",
                 help="Postgres connection string. Default: PGFUNNEL_DSN, else the embedded "
                      "Postgres in PGFUNNEL_HOME."),
]
CollectionOption = Annotated[
    str, typer.Option("--collection", "-c", help="Collection (named corpus) to work on.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]

# exit codes, the same for every command
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_GATE = 3  # a check ran and failed (eval floors, doctor findings, validation)

T = TypeVar("T")


@contextmanager
def handle_errors() -> Iterator[None]:
    """PgfunnelError -> one clear line on stderr and exit 1; never a traceback."""
    try:
        yield
    except PgfunnelError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False, markup=True)
        raise typer.Exit(getattr(exc, "exit_code", EXIT_ERROR)) from None
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]")
        raise typer.Exit(130) from None


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str, ensure_ascii=False) + "\n")


def run(fn: Callable[[], T]) -> T:
    with handle_errors():
        return fn()

# Options shared by the commands that run the funnel (search, explain): declared once so
# their defaults cannot drift apart from each other or from the SQL functions'.
PrincipalOption = Annotated[
    list[str] | None,
    typer.Option("--principal", "-p", help="A principal or group of the reader (repeatable). "
                                           "None given: public documents only."),
]
TenantOption = Annotated[str | None, typer.Option(help="The reader's tenant.")]
FusionOption = Annotated[str, typer.Option(help="minmax (default), rrf or zscore.")]
OverfetchOption = Annotated[int, typer.Option(help="Pool size = k x overfetch.")]
CapOption = Annotated[int, typer.Option(help="Max chunks per citekey.")]
LexicalOnlyOption = Annotated[bool, typer.Option(help="Skip the dense leg.")]
