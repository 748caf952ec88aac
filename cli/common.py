"""Shared pieces of the CLI: options, output, and turning errors into exit codes."""

from __future__ import annotations

import copy
import inspect
import json
import math
import os
import re
import shlex
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn, TextIO, TypedDict, TypeVar, cast

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

from pgfunnel.defaults import (
    AUTOMATIC_WEIGHTS,
    BEST_MATCH_UNDER,
    DEPTH_FLOOR,
    RAREST_MISSED_AT,
    RAREST_NUMBER_AT,
    RRF_K,
    WEIGHT_LEAST,
    WEIGHT_MOST,
    number,
)
from pgfunnel.errors import (
    SCHEMA_GRANT_HINT,
    ConfigError,
    InvalidInputError,
    ModelLoadError,
    NotFoundError,
    PgfunnelError,
    escape_controls,
    unicode_problem,
)

# errors, warnings and notes are one line each, however wide: the terminal wraps them,
# and a log or a pipe keeps the line whole for grep. Markup only where a print asks for it
# (markup=True, with what it interpolates escaped): a citekey, title, query or collection
# name holding '[/x]' made rich raise MarkupError, and '[red]x' printed as a red 'x'
console = Console(stderr=True, soft_wrap=True, markup=False)
out = Console(markup=False)


def labelled(label: str, style: str, text: str) -> None:
    """One line on stderr: ``label:`` in ``style``, then ``text`` as written (a name or
    query in it is never read as markup), its control characters as ``\\xNN``: an error
    naming a file whose name held an escape sequence printed it raw to the terminal."""
    console.print(f"[{style}]{label}:[/{style}] {escape(shown(suggest(text)))}",
                  highlight=False, markup=True)


def show_warning(message: Warning | str, category: type[Warning], filename: str,
                 lineno: int, file: TextIO | None = None, line: str | None = None) -> None:
    """A Python warning raised while a command runs, that the command does not say in its
    own words (pgfunnel's `this role may not replace pgfunnel._hnsw_walk`, a library's
    while a model loads): one `warning:` line on stderr, as the CLI's own. Python's
    handler printed two, the second a line of pgfunnel's or the library's source."""
    text = str(message)
    if not category.__module__.startswith("pgfunnel") and category is not UserWarning:
        text = f"{category.__name__}: {text}"  # (a library's FutureWarning, say)
    labelled("warning", "yellow", text)


def quiet_search_notices() -> None:
    """Within a ``warnings.catch_warnings()``: the warnings a search raises of what its
    response holds (its notices, the older schema), which the command says itself, are
    not said twice; any other warning is still said (:func:`show_warning`)."""
    from pgfunnel.errors import SchemaOutdatedWarning, SearchNoticeWarning

    warnings.simplefilter("ignore", SearchNoticeWarning)
    warnings.simplefilter("ignore", SchemaOutdatedWarning)


def shown(text: str) -> str:
    """``text`` for a terminal: each control character written as ``\\xNN``. A document's
    text or citekey holding an escape sequence printed raw recoloured the terminal, set
    its title or wrote its clipboard, and a newline in a citekey split a row in two."""
    return escape_controls(text)


def stale_functions_notice(conn: Any, command: str) -> str | None:
    """The notice for a database whose schema or functions are an older release's, which
    ``command`` (``search``, ``explain``) runs until `pgfunnel migrate`; None when current."""
    from pgfunnel.schema import stale_schema

    what = stale_schema(conn)
    return None if what is None else (
        f"pgfunnel: {what}: this {command} runs those functions; run `pgfunnel migrate`")


# `pgfunnel <command>` in a line the CLI prints: a next step to paste (`pgfunnel init`,
# "Switch: pgfunnel versions activate 2 -c docs"), the library's or the CLI's own words
# (not one in quotes: a name, such as a session's application_name, "pgfunnel reindex docs")
_SUGGESTED = re.compile(r"(?<![\w./'\"-])pgfunnel((?: [a-z][a-z-]*)+)")
# a DSN that holds a password, in a suggestion, and what the line then says of it
HIDDEN_DSN = '"$PGFUNNEL_DSN"'
HIDDEN_DSN_NOTE = (" (set PGFUNNEL_DSN to your connection string first: the --dsn given "
                   "holds a password, which is not printed)")
# where a suggestion's own words end: a backtick, a bracket, a semicolon, a line's end
_SUGGESTION_END = re.compile(r"[`);\n]|$")


def _running_context() -> Any:
    """The running command's click context (None outside a command): from the copy of
    click that newer typers carry, or from click itself."""
    import importlib

    for name in ("typer._click.globals", "click.globals"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        ctx = module.get_current_context(silent=True)
        if ctx is not None:
            return ctx
    return None


def _typed(ctx: Any, name: str) -> str | None:
    """The value of the running command's option ``name`` when it was typed on its command
    line (not from the environment nor the default); None otherwise."""
    value = ctx.params.get(name)
    source = ctx.get_parameter_source(name)
    if not isinstance(value, str) or getattr(source, "name", None) != "COMMANDLINE":
        return None
    return value


def holds_password(dsn: str) -> bool:
    """Whether ``dsn`` names a password (one that cannot be parsed is taken to)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        return bool(conninfo_to_dict(dsn).get("password"))
    except Exception:  # noqa: BLE001 - not parsed: never printed
        return True


def _command_at(root: Any, words: list[str]) -> tuple[Any, int]:
    """The command ``words`` name under the CLI's ``root`` context, and how many words name
    it (a group's subcommand takes two); (None, 0) when they name none."""
    command, used = root.command, 0
    while used < len(words) and hasattr(command, "get_command"):
        sub = command.get_command(root, words[used])
        if sub is None:
            break
        command, used = sub, used + 1
    if used == 0 or hasattr(command, "get_command"):
        return None, 0  # prose ("pgfunnel where you ingest"), or a group alone
    return command, used


def suggest(text: str, *, note: bool = True) -> str:
    """``text`` with each ``pgfunnel <command>`` in it (a command to paste, whoever worded
    it: the CLI or the library, "run `pgfunnel init`") given the running command's
    ``--dsn`` when the user typed it: pasted without it, the command read PGFUNNEL_DSN or
    the embedded server, not the database the user named. A ``--dsn`` from PGFUNNEL_DSN or
    left out adds nothing (the pasted command reads the same). A DSN that holds a password
    is not printed: the command reads ``--dsn "$PGFUNNEL_DSN"`` and the text ends saying
    to set it (HIDDEN_DSN_NOTE; ``note=False``: the caller says it). A ``--collection``
    typed is added too where the suggested command takes one and does not name it."""
    ctx = _running_context()
    if ctx is None:
        return text
    dsn = _typed(ctx, "dsn")
    collection = _typed(ctx, "collection")
    if dsn is None and collection is None:
        return text
    root = ctx.find_root()
    hidden = dsn is not None and holds_password(dsn)

    def add_flags(m: re.Match[str]) -> str:
        words = m.group(1).split()
        command, used = _command_at(root, words)
        if command is None:
            return m.group(0)
        rest = " ".join(words[used:])
        if not rest and text[m.end():m.end() + 1] == ":":
            return m.group(0)  # a prefix, "pgfunnel ingest: ...", not a command
        takes = {p.name for p in getattr(command, "params", [])}
        flags = []
        end = _SUGGESTION_END.search(text, m.end())
        after = text[m.end():end.start() if end else len(text)]
        # a suggestion that names its own --dsn (the owner's, not this role's) keeps it
        if dsn is not None and "dsn" in takes \
                and not re.search(r"(?:^|\s)--dsn(?:[\s=]|$)", f"{rest} {after}"):
            flags.append("--dsn " + (HIDDEN_DSN if hidden else shlex.quote(dsn)))
        if collection is not None and "collection" in takes \
                and not re.search(r"(?:^|\s)(?:-c|--collection)(?:[\s=]|$)", f"{rest} {after}"):
            flags.append(f"-c {shlex.quote(collection)}")
        return " ".join(["pgfunnel", *words[:used], *flags, *([rest] if rest else [])])

    suggested = _SUGGESTED.sub(add_flags, text)
    if note and hidden and f"--dsn {HIDDEN_DSN}" in suggested:
        suggested += HIDDEN_DSN_NOTE
    return suggested


def plural(n: int, noun: str) -> str:
    """``1 chunk``, ``2 chunks`` (regular English nouns only)."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def _as_query_text(params: list[Any], given: list[str]) -> list[str]:
    """``given`` as a command line that runs: the command's own options (with their
    values) first, then ``--`` and the other words: one query text where the query is the
    command's only argument. The unknown option and whatever follows it are words of the
    query, since the command cannot know whether a word after it was meant as its value
    (`search refund --bogus 1` becomes `search -- 'refund --bogus 1'`)."""
    arguments = [p for p in params if getattr(p, "param_type_name", None) == "argument"]
    takes_value: dict[str, bool] = {}
    for param in params:
        if getattr(param, "param_type_name", None) == "option":
            flag = bool(getattr(param, "is_flag", False) or getattr(param, "count", False))
            for name in [*param.opts, *param.secondary_opts]:
                takes_value[name] = not flag
    options: list[str] = []
    words: list[str] = []
    i = 0
    while i < len(given):
        arg = given[i]
        if arg == "--":
            words.extend(given[i + 1:])
            break
        name = arg.split("=", 1)[0] if arg.startswith("--") else arg[:2]
        if name in takes_value and (name == arg or takes_value[name]):
            options.append(arg)
            if takes_value[name] and name == arg and i + 1 < len(given):
                options.append(given[i + 1])
                i += 1
        else:
            words.append(arg)
        i += 1
    return [*options, "--", *([" ".join(words)] if len(arguments) == 1 else words)]


class QueryTextCommand(TyperCommand):
    """A command whose argument is query text. Looking up a command-line flag
    (`--line-length`) is a common documentation search, and the shell hands it over as
    an option, so an unknown option that resembles none of the command's own says how
    to search for it."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        given = list(args)  # click consumes the list it parses
        try:
            return list(super().parse_args(ctx, args))
        except Exception as exc:
            message = getattr(exc, "message", None)
            if not isinstance(message, str):
                raise
            # click's NoSuchOption, from click itself or the copy newer typers carry
            option = getattr(exc, "option_name", None)
            # (an option typed without its value, "Option '-c' requires an argument", has
            # an option_name too: it was told to put -- before it, "search -c -- ''")
            if isinstance(option, str) and not getattr(exc, "possibilities", None) \
                    and type(exc).__name__ == "NoSuchOption":
                # embed's text is embedded, not searched for
                verb = "embed" if ctx.info_name == "embed" else "search for"
                exc.message = (  # type: ignore[attr-defined]
                    f"{message}; to {verb} text that starts with '-', put -- before it: "
                    f"pgfunnel {ctx.info_name} "
                    f"{shlex.join(_as_query_text(self.params, given))}")
            elif message.startswith("Got unexpected extra argument") and "--" in given:
                # options typed after the -- are query words to click
                at = given.index("--")
                before, text, moved = given[:at], given[at + 1:at + 2], given[at + 2:]
                exc.message = (  # type: ignore[attr-defined]
                    f"{message}; everything after -- is query text, so options go before "
                    f"it: pgfunnel {ctx.info_name} {shlex.join([*before, *moved, '--', *text])}")
            raise


# how typer (0.16 on) writes an option's value type in --help, and how the help writes it:
# `<list[str]>` for a repeatable option is one value, `<str>`, as "Repeatable" says; an
# `<int range>` is an `<int>` (the range follows in brackets); a path is a `<path>`
_TYPE_SHOWN = ((re.compile(r"^<list\[(.+)\]>$"), r"<\1>"),
               (re.compile(r"^<(int|float) range>$"), r"<\1>"),
               (re.compile(r"^<(?:Path|PosixPath|WindowsPath)>$"), "<path>"))


def tidy_help(params: list[Any], ctx: Any) -> None:
    """Metavars for --help that read cleanly under any typer: a flag takes no value, so
    it shows none (typer 0.16 on showed `--json <bool>`, `--help <bool>`), the types in
    _TYPE_SHOWN are written as a value is typed, and an argument is named as click
    names it (:func:`_click_named`). A metavar given by hand is kept."""
    for param in params:
        kind = getattr(param, "param_type_name", None)
        if kind not in ("option", "argument") or param.metavar is not None:
            continue
        if kind == "option" and (getattr(param, "is_flag", False)
                                 or getattr(param, "count", False)):
            param.metavar = ""
            continue
        _tidy_type(param, kind, ctx)
        if kind == "argument":
            _click_named(param)


def _tidy_type(param: Any, kind: str, ctx: Any) -> None:
    """The value type ``param`` shows in --help, as _TYPE_SHOWN writes it."""
    shown = getattr(param, "display_type_rich", None)
    if shown is None:  # an older typer: click's own TEXT, INTEGER, ...
        return
    text = shown(ctx=ctx)
    if not isinstance(text, str):
        return
    tidied = text
    for pattern, replacement in _TYPE_SHOWN:
        tidied = pattern.sub(replacement, tidied)
    if tidied == text:
        return
    if kind == "option":
        param.metavar = tidied
    else:
        # an argument's type is shown beside its name whatever its metavar: `PATHS...
        # <path>`, the dots saying there may be several, not `PATHS... <list[Path]>`
        param.display_type_rich = lambda ctx, tidied=tidied: tidied


def _click_named(param: Any) -> None:
    """An argument named as click names it, in capitals, in the usage line, the Arguments
    panel and its errors: `Usage: pgfunnel search [OPTIONS] QUERY`, `PATHS...`, an
    optional one in brackets. Typer 0.16 on wrote `{query}` in the usage line (braces
    around a required argument's name) and `query` in the panel, while the rest of the
    help, and every older typer, wrote `QUERY`."""
    name = str(param.name).upper()
    more = "..." if param.nargs != 1 else ""
    param.metavar = name + more
    usage = (name if param.required else f"[{name}]") + more
    param.get_usage_pieces = lambda ctx, usage=usage: [usage]


class TidyHelpGroup(TyperGroup):
    """A command group whose --help, and its commands', shows metavars by tidy_help, and
    which says "interrupted" for a Ctrl-C that no command caught."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = list(super().get_params(ctx))
        tidy_help(params, ctx)
        return params

    def invoke(self, ctx: Any) -> Any:
        # a Ctrl-C before a command's handle_errors (while it imports the library, say):
        # typer ended it with exit 130 and nothing said
        with warnings.catch_warnings():
            warnings.showwarning = show_warning
            try:
                return super().invoke(ctx)
            except KeyboardInterrupt:
                console.print("[yellow]interrupted[/yellow]", highlight=False, markup=True)
                raise typer.Exit(130) from None

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            command.help = unwrapped_help(command.help)
        if command is not None and not isinstance(command, TyperGroup):
            # its help option included, which it makes when first asked
            tidy_help(list(command.get_params(ctx)), ctx)
        return command


def unwrapped_help(text: str | None) -> str | None:
    """A command's help text with each paragraph on one line, for the help panel to wrap.
    Typer 0.20 on keeps the line breaks of a docstring's later paragraphs and wraps
    between them too, so `reindex --help` read "of the same model" / "instead, unless" on
    lines of their own, cut where the source was. A paragraph click is told not to rewrap
    (its first line ``\b``) stays as written."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split())
                         for p in paragraphs)


def refuse_dense_options(lexical_only: bool, **dense_options: object) -> None:
    """--lexical-only turns the dense leg off: an option of that leg given with it is an
    error, not dropped without a word (as the rerank options are without --rerank)."""
    for name, value in dense_options.items():
        if lexical_only and value is not None:
            raise ConfigError(name, "applies only to the dense leg, which --lexical-only "
                                    "turns off")


class SearchArgs(TypedDict, total=False):
    """The search parameters a command passes on (``Funnel.search``, ``Funnel.check``,
    ``explain_many``, ``versions.compare``), by pgfunnel.search.SearchParams's names. Those
    take them as ``**params: Any``: typed here, a value of the wrong kind, or one landing
    on a keyword of their own (``rerank``, ``n_resamples``), is mypy's to catch. One left
    out takes the search's default (or a logged search's own). ``k`` is not one: compare
    takes it as its own keyword, so each call passes it alone."""

    principals: list[str]
    tenant: str | None
    language: str | None
    fusion: str
    rrf_k: float
    weights: tuple[float, float] | None
    overfetch: int
    per_source_cap: int
    lexical_depth: int | None
    dense_depth: int | None
    trace: bool
    statement_timeout_ms: int | None


def rrf_k_args(rrf_k: float | None, fusion: str) -> SearchArgs:
    """--rrf-k as search arguments, which only RRF reads: given with another fusion it
    is an error, not dropped without a word; left out, none (the search's default)."""
    if rrf_k is None:
        return {}
    if fusion != "rrf":
        raise ConfigError("rrf_k", f"applies only with --fusion rrf (this search fuses by "
                                   f"{fusion}, which has no constant)")
    return {"rrf_k": rrf_k}


DsnOption = Annotated[
    str | None,
    typer.Option("--dsn", envvar="PGFUNNEL_DSN",
                 help="Postgres connection string. Default: PGFUNNEL_DSN, else the embedded "
                      "Postgres in PGFUNNEL_HOME."),
]


def collection_given(param: typer.CallbackParam, value: str) -> str:
    """A collection's name (``--collection``, drop-collection's COLLECTION) checked as it
    is read, alike for every command: an empty or blank name was "must be a non-empty
    name" to search but "collection '' does not exist" to versions list, delete and
    rollback."""
    if not value.strip():
        # an argument as the usage line names it
        named = "--collection" if param.param_type_name == "option" else \
            (param.name or "collection").upper()
        labelled("error", "red", f"{named}: must be a non-empty name, got {value!r}")
        raise typer.Exit(EXIT_ERROR)
    return value


CollectionOption = Annotated[
    str, typer.Option("--collection", "-c", help="Collection (named corpus) to work on.",
                      callback=collection_given)
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]

# exit codes, the same for every command
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_GATE = 3  # a check ran and failed (eval floors, doctor findings, validation)
# the reader of stdout (or of stderr) closed it early, `pgfunnel search ... | head -1`:
# 128 + SIGPIPE, the status a shell gives git or grep that SIGPIPE ended
EXIT_PIPE = 141

T = TypeVar("T")

# options every command that connects has, by the library's name
COMMON_FLAGS = {"dsn": "--dsn (or PGFUNNEL_DSN)", "collection": "--collection"}
# the options of the commands that build an index version (ingest, reindex)
INDEX_FLAGS = {"embedding_model": "--model", "analyzer": "--analyzer",
               "embed_input": "--embed-input", "lexical_input": "--lexical-input",
               "maintenance_work_mem": "--maintenance-work-mem",
               "batch_size": "--batch-size", "m": "--m", "ef_construction": "--ef-construction",
               "chunk_words": "--chunk-words", "private": "--private",
               "collection": "--collection"}


def index_flags(model: str | None) -> dict[str, str]:
    """INDEX_FLAGS for a command run with ``--model`` (or without it): a model that came
    from the collection's active version and cannot load was blamed on a --model flag
    that was never typed ("--model: 'x' could not be loaded")."""
    if model is not None:
        return dict(INDEX_FLAGS)
    return {name: flag for name, flag in INDEX_FLAGS.items() if name != "embedding_model"}


def _schema_hint() -> str:
    """The advice after "permission denied for schema pgfunnel" for this database's mode
    and owner, asked of the database the command ran against; the library's words (true
    in both modes, naming no role) where that cannot be read."""
    from pgfunnel.db import connect, resolve_dsn
    from pgfunnel.security import schema_access_hint

    ctx = _running_context()
    dsn = ctx.params.get("dsn") if ctx is not None else None
    try:
        with connect(resolve_dsn(dsn if isinstance(dsn, str) else None),
                     autocommit=True, register=False) as conn:
            hint = schema_access_hint(conn)
    except Exception:  # noqa: BLE001 - the error being reported matters more than this
        return SCHEMA_GRANT_HINT
    return hint or SCHEMA_GRANT_HINT


@contextmanager
def handle_errors(flags: Mapping[str, str] | None = None,
                  interrupted: str | Callable[[], str] | None = None,
                  kept: Callable[[], str | None] | None = None) -> Iterator[None]:
    """PgfunnelError -> one clear line on stderr and exit 1; never a traceback. ``flags``
    maps the library's parameter names to the command's options, so that an error about
    a value the user typed names the flag they typed it with (``--per-source-cap``, not
    ``per_source_cap``). ``interrupted`` says, after Ctrl-C, what was kept and how to go
    on (a function: worked out then). ``kept``, worked out after an error, says what the
    command had already committed (None: nothing worth saying), after the error on its
    line: an ingest cancelled or cut off after a batch committed said only the error."""
    flags = {**COMMON_FLAGS, **(flags or {})}

    def with_kept(said: str) -> str:
        if SCHEMA_GRANT_HINT in said:
            said = said.replace(SCHEMA_GRANT_HINT, _schema_hint(), 1)
        then = kept() if kept is not None else None
        return f"{said}; {then}" if then else said

    try:
        yield
    except PgfunnelError as exc:
        said: object = exc
        if isinstance(exc, ConfigError) and exc.parameter in flags:
            # the library's "or None" is, on the command line, the flag left out
            said = f"{flags[exc.parameter]}: {exc.detail.replace(' or None', ' or left out')}"
        elif isinstance(exc, NotFoundError) and exc.parameter is not None \
                and exc.parameter in flags and str(exc) != exc.detail:
            # a version number typed as an argument is named as the usage line names it
            # ("collection 'x' does not exist" names its argument itself: said as it is)
            said = f"{flags[exc.parameter]}: {exc.detail}"
        elif isinstance(exc, ModelLoadError) and exc.setting in flags:
            said = f"{flags[exc.setting]}: {str(exc).removeprefix(exc.setting + '=')}"
        elif isinstance(exc, InvalidInputError) \
                and (named := str(exc).partition(": "))[0] in flags and named[2]:
            # a malformed value the user typed, checked before any SQL ran (the query's
            # length): named by the argument they typed it as (QUERY), not query_text
            said = f"{flags[named[0]]}: {named[2]}"
        labelled("error", "red", with_kept(str(said)))
        raise typer.Exit(getattr(exc, "exit_code", EXIT_ERROR)) from None
    except UnicodeEncodeError as exc:
        # a value that is not valid Unicode (a command line's or an environment
        # variable's undecodable byte, read as a lone surrogate) that no check named
        # before it reached the driver: one line and exit 1, never a traceback
        labelled("error", "red", f"a value given {unicode_problem(exc.object, exc.start)}"
                                 f": {exc.object[:60]!r}")
        raise typer.Exit(EXIT_ERROR) from None
    except Exception as exc:
        # a database error that a library path left untranslated (a role without USAGE on
        # schema pgfunnel is refused by the checks that run before anything else): one
        # line and exit 1 as for the rest, never a traceback
        if not type(exc).__module__.startswith("psycopg"):
            raise
        from pgfunnel.errors import translate

        labelled("error", "red", with_kept(str(translate(exc, searching=False))))
        raise typer.Exit(EXIT_ERROR) from None
    except KeyboardInterrupt:
        said_then = interrupted() if callable(interrupted) else interrupted
        console.print("[yellow]interrupted[/yellow]"
                      + (f": {escape(suggest(said_then))}" if said_then else ""),
                      highlight=False,
                      markup=True)
        raise typer.Exit(130) from None


#: characters per write (at most 4 bytes each: within io.DEFAULT_BUFFER_SIZE, 8192)
_PIECE = 2048


class _ClosedPipeGuard:
    """``stream`` (sys.stdout or sys.stderr) whose write to a pipe its reader closed (`|
    head -1`) ends the command quietly, with :data:`EXIT_PIPE`: rich's console and click
    each made it exit 1 with nothing said, and Python dropped the rest of a long write
    without a word (exit 0), depending on which wrote last; a write that failed only at
    exit would print "Exception ignored ... BrokenPipeError"."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            # a piece at a time, each within the stream's buffer: Python gave up on the
            # rest of a longer write that the reader closed part way (`search --json` of
            # many results, or a table, into `| head -1`) and said nothing
            if len(text) <= _PIECE:  # (what is not text, too, as the stream takes it)
                return self._stream.write(text)
            for at in range(0, len(text), _PIECE):
                self._stream.write(text[at:at + _PIECE])
        except BrokenPipeError:
            self._closed()
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        try:
            self._stream.writelines(lines)
        except BrokenPipeError:
            self._closed()

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._closed()

    def _closed(self) -> NoReturn:
        # what Python's documentation of SIGPIPE does: what is still buffered, and any
        # later write, goes to devnull rather than fail again at exit
        try:
            fd = self._stream.fileno()
        except (OSError, ValueError):  # not a file: nothing is left to write at exit
            raise SystemExit(EXIT_PIPE) from None
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, fd)
        finally:
            os.close(devnull)
        raise SystemExit(EXIT_PIPE)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def closed_pipes_end_quietly() -> Iterator[None]:
    """The console script's run: stdout and stderr through :class:`_ClosedPipeGuard`, and
    flushed at the end, so that a reader that closed either early ends the command with
    :data:`EXIT_PIPE` and nothing said, whatever wrote to it."""
    saved = sys.stdout, sys.stderr
    # (None where the stream is closed, `pgfunnel search q >&-`)
    guarded = [None if stream is None else _ClosedPipeGuard(stream) for stream in saved]
    sys.stdout, sys.stderr = (cast(TextIO, g or stream)
                              for g, stream in zip(guarded, saved, strict=True))
    try:
        yield
    finally:
        try:
            for guard in guarded:
                if guard is not None:
                    guard.flush()
        finally:
            sys.stdout, sys.stderr = saved


def print_table(table: Any, lines: list[str]) -> None:
    """``table`` where its cells fit the width unwrapped, or on a terminal (a person reads
    a wrapped cell in its box); in a pipe or a log, where a cell wrapped over lines breaks
    grep and awk (`pgfunnel doctor | grep error` got a third of a finding), its title and
    ``lines``, one whole line per row."""
    from rich.measure import Measurement

    # the width its cells take unwrapped (measured against a console as wide as need be)
    unwrapped = Measurement.get(out, out.options.update_width(1 << 20), table).maximum
    if out.is_terminal or unwrapped <= out.width:
        out.print(table)
        return
    if table.title:
        out.print(str(table.title), highlight=False, soft_wrap=True)
    for line in lines:
        out.print(line, highlight=False, soft_wrap=True)


def emit_json(obj: Any, messages: Iterable[str] = ()) -> None:
    """``obj`` as the command's --json answer on stdout. ``messages`` names the fields
    that hold its words to the user (``"notes"``, ``"notices"``; a dotted path reaches
    into a list's objects, ``"findings.message"``; a list answer's objects each): a
    ``pgfunnel <command>`` in them gets the --dsn and -c typed, as the text output's
    lines do (:func:`suggest`). Pasted from the JSON without them, "run `pgfunnel
    init`" installed the schema in PGFUNNEL_DSN's database or the embedded server. Only
    those fields: a document's text, title or metadata is given as stored."""
    for path in messages:
        obj = _suggested(obj, path.split("."))
    sys.stdout.write(json.dumps(obj, indent=2, default=str, ensure_ascii=False) + "\n")


def _suggested(value: Any, path: list[str]) -> Any:
    """``value`` with :func:`suggest` applied to the text at ``path`` (keys, each list on
    the way taken item by item); a copy where anything changed, ``value`` is left as is."""
    if isinstance(value, list):
        return [_suggested(item, path) for item in value]
    if not path:
        return suggest(value) if isinstance(value, str) else value
    if isinstance(value, dict) and path[0] in value:
        return {**value, path[0]: _suggested(value[path[0]], path[1:])}
    return value


def run(fn: Callable[[], T]) -> T:
    with handle_errors():
        return fn()

# the search parameters that search and explain take as options, by the library's name
FUNNEL_FLAGS = {"k": "--k", "collection": "--collection", "principals": "--principal",
                "tenant": "--tenant", "language": "--language", "fusion": "--fusion",
                "overfetch": "--overfetch",
                "per_source_cap": "--per-source-cap", "lexical_depth": "--lexical-depth",
                "dense_depth": "--dense-depth", "rrf_k": "--rrf-k",
                "weights": "--lexical-weight / --dense-weight",
                "lexical_weight": "--lexical-weight", "dense_weight": "--dense-weight"}


def _weight(text: str) -> float:
    """A leg's weight from the command line, in the range the search takes: 0, or 1e-6 to
    1e6 (far below 1e-6 a weight underflows in Postgres). Parsed here rather than by a
    range, which read NaN as "must be at most 1000000"; the range said 0 to 1e6, and 1e-9
    then failed in the search with exit 1 and another range."""
    try:
        value = float(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a number") from None
    bounds = f"0 or a number from {number(WEIGHT_LEAST)} to {number(WEIGHT_MOST)}"
    if math.isnan(value):
        raise typer.BadParameter(f"must be {bounds}, not NaN")
    if not (value == 0 or WEIGHT_LEAST <= value <= WEIGHT_MOST):
        raise typer.BadParameter(f"must be {bounds}, got {text}")
    return value


def in_range(minimum: int, maximum: int | None = None) -> Callable[[int | None], int | None]:
    """A callback for an integer option with bounds, the one place they are said: typer's
    own ``min=``/``max=`` answered "Input should be greater than or equal to 20", which
    named neither the value typed nor this CLI's words for a range. A usage error (exit
    2), in the words the library's range errors use: "must be between 1 and 1000, got 0"."""
    def check(value: int | None) -> int | None:
        if value is None:
            return value
        if maximum is not None and not minimum <= value <= maximum:
            raise typer.BadParameter(f"must be between {minimum} and {maximum}, got {value}")
        if value < minimum:
            raise typer.BadParameter(f"must be at least {minimum}, got {value}")
        return value

    return check


def given_path(text: str) -> Path:
    """A file or folder named on the command line. An empty one (`ingest "$DOCS"` with the
    variable unset) is refused: as a path it is '.', and ingest read the whole current
    folder (eval --out wrote its report there)."""
    if text == "":
        raise typer.BadParameter("is empty (an unset variable?); give a path ('.' is the "
                                 "current folder)")
    return Path(text)


def leg_weights(lexical_weight: float | None, dense_weight: float | None,
                lexical_only: bool) -> tuple[float, float] | None:
    """The search's weights from --lexical-weight / --dense-weight: None (the adaptive
    defaults) when neither is given, the other leg at its weight in the search's default
    pair (AUTOMATIC_WEIGHTS) otherwise."""
    if lexical_weight == 0 and lexical_only:
        # the search would name its own arguments: "{0,0.7} gives weight 0 to the lexical
        # leg, the only one this search can run (query_embedding is NULL)"
        raise ConfigError("lexical_weight", "is 0, which turns off the lexical leg, the only "
                                            "one --lexical-only leaves")
    if lexical_weight is None and dense_weight is None:
        return None
    lexical, dense = AUTOMATIC_WEIGHTS["default"]
    return (lexical if lexical_weight is None else lexical_weight,
            dense if dense_weight is None else dense_weight)

# Options shared by the commands that run the funnel (search, explain): declared once so
# their defaults cannot drift apart from each other or from the SQL functions'.
PrincipalOption = Annotated[
    list[str] | None,
    typer.Option("--principal", "-p", help="A principal or group of the reader (repeatable: "
                                           "-p alice -p team-a; a comma is part of a name). "
                                           "None given: public documents only."),
]
TenantOption = Annotated[str | None, typer.Option(
    help="The reader's tenant. None given: documents without a tenant only (a document "
         "with one is its tenant's).")]
LanguageOption = Annotated[str | None, typer.Option(
    help="Only documents of this language, as stored (`language` of a .jsonl line: "
         "'de' does not match 'DE'). None given: every language.")]
_FUSION = typer.Option(help="minmax (default), rrf or zscore.")
FusionOption = Annotated[str, _FUSION]
_RRF_K = typer.Option(help=f"RRF constant (default {number(RRF_K)}); only with --fusion rrf.")
RrfKOption = Annotated[float | None, _RRF_K]


def _pair_weight(leg: int) -> str:
    """A leg's weight in each pair the search chooses, as the weight options' help says
    it (the pairs are pgfunnel._automatic_weights()'s, read from pgfunnel.defaults)."""
    default = AUTOMATIC_WEIGHTS["default"][leg]
    identifier = AUTOMATIC_WEIGHTS["identifier"][leg]
    dense_leads = AUTOMATIC_WEIGHTS["dense_leads"][leg]
    rules = []
    if identifier != default:
        rules.append(f"{number(identifier)} for a query that is one identifier, or whose best "
                     "lexical match holds its rarest word when that word is a number and "
                     f"{number(RAREST_NUMBER_AT)} or more of the query's idf")
    if dense_leads != default:
        rules.append(f"{number(dense_leads)} when the best lexical match holds under "
                     f"{number(BEST_MATCH_UNDER)} of the query's idf, or lacks its rarest word "
                     f"and that word is {number(RAREST_MISSED_AT)} or more of it")
    under = f"; under min-max fusion {'; '.join(rules)}" if rules else ""
    return f"default {number(default)}{under}"


_LEXICAL_WEIGHT = typer.Option(
    parser=_weight, metavar="<float>", help=f"Weight of the BM25 leg ({_pair_weight(0)}).")
LexicalWeightOption = Annotated[float | None, _LEXICAL_WEIGHT]
_DENSE_WEIGHT = typer.Option(
    parser=_weight, metavar="<float>", help=f"Weight of the dense leg ({_pair_weight(1)}).")
DenseWeightOption = Annotated[float | None, _DENSE_WEIGHT]
_OVERFETCH = typer.Option(help="Pool size = k x overfetch.")
_CAP = typer.Option(help="Max chunks per citekey.")
OverfetchOption = Annotated[int, _OVERFETCH]
CapOption = Annotated[int, _CAP]
def with_help(option: Any, text: str) -> Any:
    """A shared option definition with another help line, the rest (its name, parser,
    callback) as shared: a command where the shared line's default is not what it does."""
    changed = copy.copy(option)
    changed.help = text
    return changed


# versions compare: what a logged search is replayed with unless the option is given
CompareFusionOption = Annotated[str | None, with_help(
    _FUSION, "minmax, rrf or zscore (default: --queries minmax; with --last, the fusion "
             "each logged search was logged with).")]
CompareRrfKOption = Annotated[float | None, with_help(
    _RRF_K, f"RRF constant (default {number(RRF_K)}, or a logged search's own); with "
            "--queries only with --fusion rrf; with --last alone, for the logged searches "
            "fused with rrf.")]
CompareLexicalWeightOption = Annotated[float | None, with_help(
    _LEXICAL_WEIGHT, "Weight of the BM25 leg (default: --queries as pgfunnel search chooses "
                     "it; with --last, the weights each logged search was logged with, "
                     "chosen again where it let them be chosen).")]
CompareDenseWeightOption = Annotated[float | None, with_help(
    _DENSE_WEIGHT, "Weight of the dense leg (default: --queries as pgfunnel search chooses "
                   "it; with --last, the weights each logged search was logged with, "
                   "chosen again where it let them be chosen).")]
# the same options for a command that tells one not given from its default: versions
# compare --last replays each logged search with its own unless one is typed (the others
# of these options are None when not given already)
GivenOverfetchOption = Annotated[int | None, _OVERFETCH]
GivenCapOption = Annotated[int | None, _CAP]
LexicalOnlyOption = Annotated[bool, typer.Option(help="Skip the dense leg.")]
LexicalDepthOption = Annotated[int | None, typer.Option(
    help=f"Rows the lexical leg reads (default: k x overfetch, at least {DEPTH_FLOOR}).")]
DenseDepthOption = Annotated[int | None, typer.Option(
    help=f"Rows the dense leg reads (default: k x overfetch, at least {DEPTH_FLOOR}).")]


class LogProgress:
    """Progress for a log or a pipe, where rich draws nothing until the work is done: one
    line per task at most every ``every`` seconds, and each task's last count at the end
    (with ``end_line=False``, only once a line was said: a stage that was over in
    seconds says nothing). Takes the calls the CLI makes on rich's ``Progress``."""

    def __init__(self, label: str, every: float = 10.0,
                 clock: Callable[[], float] | None = None, end_line: bool = True) -> None:
        import time

        self.label = label
        self.end_line = end_line
        self.every = every
        self.clock = clock or time.monotonic
        self.started = self.clock()
        self.last_line = self.started
        self.tasks: list[dict[str, Any]] = []

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            for task in self.tasks:
                if task["said"] != (task["completed"], task["total"]) and \
                        (self.end_line or task["said"] is not None):
                    self._say(task)

    def start(self) -> None:
        return None

    def stop(self) -> None:
        self.__exit__(None, None, None)

    def add_task(self, description: str, total: float | None = None,
                 completed: float = 0, **_: Any) -> int:
        self.tasks.append({"description": description, "total": total,
                           "completed": completed, "said": None})
        return len(self.tasks) - 1

    def update(self, task_id: int, *, completed: float | None = None,
               total: float | None = None, advance: float | None = None,
               description: str | None = None, **_: Any) -> None:
        task = self.tasks[task_id]
        if description is not None:
            task["description"] = description
        if total is not None:
            task["total"] = total
        if completed is not None:
            task["completed"] = completed
        if advance:
            task["completed"] += advance
        now = self.clock()
        if now - self.last_line >= self.every:
            self.last_line = now
            self._say(task)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def _say(self, task: dict[str, Any]) -> None:
        done, total = task["completed"], task["total"]
        task["said"] = (done, total)
        count = f"{int(done):,}" if total is None else f"{int(done):,}/{int(total):,}"
        share = f" ({done / total:.0%})" if total else ""
        elapsed = int(self.clock() - self.started)
        console.print(f"{self.label}: {task['description']} {count}{share}, "
                      f"{elapsed // 60}:{elapsed % 60:02d} elapsed", highlight=False)


def progress_display(label: str, transient: bool = False, *, end_line: bool = True) -> Any:
    """rich's bars on a terminal; on a log or a pipe, a line now and then (LogProgress;
    ``end_line=False``: no last count for a stage that said nothing before it)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    if not console.is_terminal:
        return LogProgress(label, end_line=end_line)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=transient)


class NullProgress:
    """Progress that shows nothing (--json: stdout is the answer, stderr stays quiet)."""

    def __enter__(self) -> NullProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *a: Any, **k: Any) -> int:
        return 0

    def advance(self, *a: Any, **k: Any) -> None:
        return None

    def update(self, *a: Any, **k: Any) -> None:
        return None


HistoryOption = Annotated[list[str] | None, typer.Option(
    "--history",
    help="An earlier turn of the conversation, oldest first (repeatable: one --history "
         "per turn): the query is resolved as a follow-up of them, as "
         "Funnel.search(history=...) does, and the text searched is printed.")]

# a turn may hold a newline or a tab (a pasted message); no other control character
_HISTORY_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def check_history(history: list[str] | None) -> list[str] | None:
    """``--history`` as the library's ``history=``: None when none was given. An empty or
    blank turn, or one with a control character other than a newline or tab, a NUL or
    text Postgres cannot hold, is a ConfigError naming ``history`` (the turn's number
    and its text, controls as ``\\xNN``)."""
    from pgfunnel.search import query_text_problem

    if not history:
        return None
    for n, turn in enumerate(history, 1):
        if not turn.strip():
            problem = "is empty; each --history is one earlier turn's text"
        elif (problem_or_none := query_text_problem(turn)) is not None:
            problem = problem_or_none
        elif (m := _HISTORY_CONTROL.search(turn)) is not None:
            problem = f"holds the control character \\x{ord(m.group()):02x}"
        else:
            continue
        raise ConfigError("history", f"turn {n} of {len(history)} {problem}: "
                                     f"{escape_controls(repr(turn[:80]))}")
    return list(history)


def followup_of(transforms: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The follow-up step of a search's ``transforms`` (``step``, ``original``, ``query``,
    ``carried_terms``, ``reason``), or None when no history was given."""
    return next((t for t in transforms if t.get("step") == "followup"), None)


def print_followup(step: dict[str, Any] | None) -> None:
    """One line on stdout saying what a search given --history searched: the resolved
    text, the words carried from the earlier turns and the resolver's reason."""
    if step is None:
        return
    if step["query"] != step["original"]:
        # the reason names the words carried from the earlier turns
        said = (f"follow-up: searched {step['query']!r}, not {step['original']!r} as "
                f"given ({step['reason']})")
    else:
        said = f"follow-up: searched {step['original']!r} as given ({step['reason']})"
    out.print(shown(said), highlight=False, soft_wrap=True)
