"""`pgfunnel doctor`: check the database pgfunnel runs on and say what to fix."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from .common import (
    EXIT_GATE,
    DsnOption,
    JsonOption,
    emit_json,
    handle_errors,
    out,
    plural,
    print_table,
    suggest,
)

_STYLE = {"error": "red", "warning": "yellow", "info": "dim"}


def doctor(
    dsn: DsnOption = None,
    json_out: JsonOption = False,
    app_role: Annotated[str | None, typer.Option(
        help="The role your application connects as: checked like the members of "
             "pgfunnel_reader (not the owner, no superuser, no BYPASSRLS), and that it may "
             "search (a member of pgfunnel_reader under RLS).")] = None,
) -> None:
    """Check the database and say what to fix. Exit 3 when any finding is an error.

    Checks pgvector's version, invalid indexes, the active versions' HNSW indexes, BM25
    statistics, index size vs shared_buffers, row security, roles and their privileges."""
    from pgfunnel.db import connect
    from pgfunnel.doctor import run_checks, worst

    with handle_errors({"app_role": "--app-role"}), connect(dsn, autocommit=True) as conn:
        findings = run_checks(conn, app_role=app_role)
    level = worst(findings)
    if json_out:
        emit_json({"ok": level != "error", "worst": level,
                   "findings": [f.to_json() for f in findings]}, ("findings.message",))
    else:
        table = Table(title="pgfunnel doctor", title_justify="left")
        for col in ("level", "check", "finding"):
            table.add_column(col, overflow="fold")
        # a fix to paste names the --dsn typed (suggest)
        said = [suggest(f.message) for f in findings]
        for f, message in zip(findings, said, strict=True):
            style = _STYLE[f.level]
            table.add_row(Text(f.level, style=style), f.check, message)
        print_table(table, [f"{f.level}  {f.check}: {message}"
                            for f, message in zip(findings, said, strict=True)])
        n_err = sum(f.level == "error" for f in findings)
        n_warn = sum(f.level == "warning" for f in findings)
        out.print(f"{plural(n_err, 'error')}, {plural(n_warn, 'warning')}", soft_wrap=True)
    if level == "error":
        raise typer.Exit(EXIT_GATE)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
