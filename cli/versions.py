"""`pgfunnel reindex` and `pgfunnel versions ...`: build, validate, switch, roll back, compare."""

from __future__ import annotations

import re
import shlex
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table
from typer.core import TyperCommand

from pgfunnel.defaults import (
    COLLECTION,
    HNSW_EF_CONSTRUCTION,
    HNSW_EF_CONSTRUCTION_LEAST,
    HNSW_EF_CONSTRUCTION_MOST,
    HNSW_M,
    HNSW_M_LEAST,
    HNSW_M_MOST,
)

from .common import (
    EXIT_GATE,
    EXIT_USAGE,
    FUNNEL_FLAGS,
    CollectionOption,
    CompareDenseWeightOption,
    CompareFusionOption,
    CompareLexicalWeightOption,
    CompareRrfKOption,
    DenseDepthOption,
    DsnOption,
    GivenCapOption,
    GivenOverfetchOption,
    JsonOption,
    LexicalDepthOption,
    PrincipalOption,
    SearchArgs,
    TenantOption,
    TidyHelpGroup,
    collection_given,
    console,
    emit_json,
    given_path,
    handle_errors,
    in_range,
    index_flags,
    labelled,
    leg_weights,
    out,
    plural,
    print_table,
    progress_display,
    rrf_k_args,
    shown,
    suggest,
)

if TYPE_CHECKING:
    import psycopg

    from pgfunnel.versions import QueryDiff

VersionArg = Annotated[int, typer.Argument(help="Version number (as `versions list` shows it).")]
# the library's parameter, named as the usage line names the argument
VERSION_FLAGS = {"version": "VERSION"}


class VersionNumberCommand(TyperCommand):
    """A command whose arguments are version numbers: a negative one, which the parser
    takes for an option, was answered "No such option: -1", which named no version."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return list(super().parse_args(ctx, args))
        except Exception as exc:
            # click's NoSuchOption, from click itself or the copy newer typers carry
            option = getattr(exc, "option_name", None)
            if isinstance(option, str) and re.fullmatch(r"-\d+", option) \
                    and isinstance(getattr(exc, "message", None), str):
                exc.message = (  # type: ignore[attr-defined]
                    f"{option} is not a version number: versions are numbered from 1 "
                    "(`pgfunnel versions list` shows them)")
                exc.possibilities = []  # type: ignore[attr-defined]
            raise


def _quiet() -> None:
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    warnings.filterwarnings("ignore", category=FutureWarning)


class _Bars:
    """Rich progress bars for the embedding and index-build stages of a reindex."""

    def __init__(self, enabled: bool) -> None:
        self.progress: Any = (progress_display("reindex") if enabled
                              else Progress(console=console, disable=True))
        self.tasks: dict[str, Any] = {}
        self.started = False
        # the run has made (or resumed) its version: an error from here on leaves it
        self.began = False
        # chunks this run wrote, and how many of them got a copied vector
        self.done = 0
        self.copied = 0
        # the library said, before the first batch, that the vectors come from another
        # version: the bar starts as "copying vectors", not "embedding chunks 0/N"
        self.copy_from = False

    def __enter__(self) -> _Bars:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            self.progress.stop()

    def _embedding_label(self) -> str:
        # what the run does: a reindex whose vectors all came from a version of the same
        # model embedded nothing, and its bar said "embedding chunks 121/121"
        if not self.done:
            return "copying vectors" if self.copy_from else "embedding chunks"
        if not self.copied:
            return "embedding chunks"
        if self.copied >= self.done:
            return "copying vectors"
        return "embedding chunks and copying vectors"

    def __call__(self, stage: str, n: int, total: int | None) -> None:
        if not self.started:
            # the display starts with its first report: a reindex that fails before one
            # prints its error alone, not below an empty progress line
            self.progress.start()
            self.started = True
        if stage == "copy-from":
            self.copy_from = True
        elif stage == "embedding-total":
            self.began = True
            self.tasks["embedding"] = self.progress.add_task(self._embedding_label(),
                                                             total=total, completed=n)
        elif stage == "copied":
            self.copied += n
        elif stage == "embedding":
            if "embedding" not in self.tasks:
                self.tasks["embedding"] = self.progress.add_task(self._embedding_label(),
                                                                 total=None)
            self.done += n
            self.progress.update(self.tasks["embedding"], advance=n,
                                 description=self._embedding_label())
        elif stage == "index":
            if "index" not in self.tasks:
                self.tasks["index"] = self.progress.add_task("building HNSW index", total=total)
            self.progress.update(self.tasks["index"], completed=n, total=total)


def _largest_version_id(conn: Any, collection: str) -> list[int]:
    """The largest index version id but the collection's building one (which a reindex
    resumes), as a list of none when it cannot be read (no schema yet: the reindex that
    follows says so)."""
    import psycopg

    try:
        row = conn.execute(
            "select coalesce(max(v.id), 0) from pgfunnel.index_version v join "
            "pgfunnel.collection c on c.id = v.collection_id "
            "where not (c.name = %s and v.state = 'building')", (collection,)).fetchone()
    except (psycopg.Error, UnicodeEncodeError):
        # (a name the driver cannot send, -c $'\xff': the reindex that follows names it)
        return []
    return [int(row[0])] if row else []


def _notice(text: str) -> None:
    labelled("notice from Postgres", "yellow", text)


def reindex(
    collection: CollectionOption = COLLECTION,
    model: Annotated[str | None, typer.Option(
        help="Embedding model id or local path for the new version (default: the active "
             "version's model).")] = None,
    analyzer: Annotated[str | None, typer.Option(
        help="Analyzer for the new version's BM25 terms: english_v8 (the default for new "
             "collections), simple_v8, german_v8 (english_v8 with German stemming and stop "
             "words, for German text), or the older english_v7 / simple_v7 / english_v6 / "
             "simple_v6 / english_v5 / "
             "simple_v5 / english_v4 / "
             "simple_v4 / english_v3 / "
             "simple_v3 / english_v2 / simple_v2 / english_v1 / simple_v1 (default: the "
             "active version's). `select * from pgfunnel.analyzers()` lists them.")] = None,
    activate: Annotated[bool, typer.Option(
        "--activate", help="Switch to the new version once it validates.")] = False,
    maintenance_work_mem: Annotated[str | None, typer.Option(
        help="maintenance_work_mem for the HNSW build, e.g. 256MB or 2GB (default: what "
             "the graph needs, ~180MB per 100k 384-dim chunks, ~250MB for a vector graph). "
             "If the graph does not fit, "
             "Postgres says so and the build slows down.")] = None,
    batch_size: Annotated[int, typer.Option(
        help="Chunks embedded and committed per batch (a killed run resumes from the last "
             "committed batch).")] = 256,
    reembed: Annotated[bool, typer.Option(
        "--reembed", help="Compute vectors again even when a version with the same model "
                          "and embedding input exists (by default its vectors are "
                          "copied).")] = False,
    m: Annotated[int, typer.Option(
        help=f"HNSW m (links per node), {HNSW_M_LEAST} to {HNSW_M_MOST}.")] = HNSW_M,
    ef_construction: Annotated[int, typer.Option(
        help=f"HNSW ef_construction, {HNSW_EF_CONSTRUCTION_LEAST} to "
             f"{HNSW_EF_CONSTRUCTION_MOST} and at least 2 x m.")] = HNSW_EF_CONSTRUCTION,
    embed_input: Annotated[str | None, typer.Option(
        help="What the model reads per chunk: title (the document title above the chunk; "
             "the default for new collections), section (the title and the headings the "
             "chunk's section sits under), text (the chunk alone). Default: the active "
             "version's (title if it embeds the chunk alone). Vectors of chunks that read "
             "the same either way are copied.")
    ] = None,
    lexical_input: Annotated[str | None, typer.Option(
        help="What BM25 indexes per chunk: title2_term2 (the document title above the "
             "chunk, counted twice, and an API object's or glossary term's heading counted "
             "twice too; the default), title2 (the title twice, a term's heading once, as "
             "versions made before title2_term2 index it), title (the title once) or text "
             "(the chunk alone, as versions made before titles index it).")
    ] = None,
    dsn: DsnOption = None,
    json_out: JsonOption = False,
) -> None:
    """Build a new index version beside the active one (which keeps serving), validate it.

    Embeds every chunk with the model (copies the vectors of a version of the same model
    instead, unless --reembed), writes BM25 rows and statistics with the
    analyzer, builds the HNSW index concurrently, then checks the index is valid, the
    counts match the chunks, and HNSW recall@10 vs an exact scan is at least 0.95. A rerun
    after an interruption resumes. Exit 1 if another reindex holds the collection, 3 if
    validation fails.
    """
    from pgfunnel import versions
    from pgfunnel.db import connect
    from pgfunnel.ingest import active_version, require_collection

    _quiet()
    # the largest version id before this run but a building one it may resume: a version
    # it made or resumed has a larger one (ids, unlike numbers, are never given again)
    before: list[int] = []

    def stopped() -> str:
        # the version's number is known only once the run has made it
        made = None
        resume = None
        try:
            with connect(dsn, autocommit=True) as conn:
                number = versions.building_version(conn, collection)
                if number is not None:
                    # its own settings: "the same `pgfunnel reindex -c NAME`", as pasted,
                    # asked for the active version's analyzer and model, and a build begun
                    # with others was dropped, its embedded chunks with it
                    resume = next((versions.resume_hint(collection, info)
                                   for info in versions.list_versions(conn, collection)
                                   if info.version == number), None)
                if number is None and before:
                    made = conn.execute(
                        "select v.version, v.state from pgfunnel.index_version v join "
                        "pgfunnel.collection c on c.id = v.collection_id where c.name = %s "
                        "and v.id > %s order by v.id desc limit 1",
                        (collection, before[0])).fetchone()
        except Exception:  # noqa: BLE001 - a message after Ctrl-C must not raise
            number = None
        if made is not None:
            # Ctrl-C after validation (in --activate's switch, or before the report): "no
            # version was made yet" was said of a ready version, and the rerun built another
            if made[1] == "active":
                return f"version {made[0]} of {collection!r} is active; the switch had finished"
            return (f"version {made[0]} of {collection!r} was built and validated "
                    f"({made[1]}) and is not active: `pgfunnel versions activate {made[0]} -c "
                    f"{shlex.quote(collection)}` switches to it (a rerun of this reindex "
                    "would build another)")
        if number is None:
            return "no version was made yet; nothing to discard"
        if resume is not None:
            return f"version {number} stays 'building', with what it wrote; {resume}"
        return (f"version {number} stays 'building', with what it wrote; `pgfunnel versions "
                f"list -c {shlex.quote(collection)}` names the `pgfunnel reindex` that resumes "
                f"it (`pgfunnel versions drop {number} -c {shlex.quote(collection)}` discards "
                "it)")

    shown_bars: list[_Bars] = []

    def kept() -> str | None:
        # an error once the version was made (a lost connection: `pgfunnel stop`, a
        # restart, pg_terminate_backend) said only the error, nothing of the version
        # left 'building' nor of the reindex that resumes it. Worked out without
        # connecting: the server may be the one that went away
        if not shown_bars or not shown_bars[0].began \
                or isinstance(sys.exc_info()[1], versions.ValidationFailed):
            return None  # (validation's own error says what it left)
        coll = shlex.quote(collection)
        return ("the version this run made is kept, with what it wrote: `pgfunnel versions "
                f"list -c {coll}` shows its state and, while it is 'building', names the "
                f"`pgfunnel reindex` that resumes it (`pgfunnel versions drop N -c {coll}` "
                "discards it)")

    with handle_errors(index_flags(model)):
        # before the connection: a typo in --m was told only once a database answered
        versions.check_hnsw_settings(m, ef_construction)
    with handle_errors(index_flags(model), interrupted=stopped, kept=kept), \
            connect(dsn, autocommit=True) as conn, \
            _Bars(not json_out) as bars:
        shown_bars.append(bars)
        before.extend(_largest_version_id(conn, collection))
        result = versions.reindex(
            conn, collection, model=model, analyzer=analyzer, activate_after=activate,
            maintenance_work_mem=maintenance_work_mem, batch_size=batch_size, m=m,
            ef_construction=ef_construction, progress=bars, notice=_notice, reembed=reembed,
            embed_input=embed_input, lexical_input=lexical_input)
        # only its number: list_versions would also count each version's missing chunks
        current = None if result.activated else active_version(
            conn, require_collection(conn, collection))
        active = current.version if current is not None else None
        # searches are logged only with tracing on: without any, --last has nothing to
        # compare, and the hint names a query file instead
        logged = not result.activated and bool(versions.last_queries(conn, collection, 1))
    if json_out:
        emit_json(result.to_json(), ("notes", "notices"))
        return
    # notes on stderr, as every command's: stdout holds the version made and its validation
    for note in result.notes:
        labelled("note", "yellow", note)
    v = result.validation
    assert v is not None
    out.print(f"version {result.version} of {collection!r}: {result.embedding_model} "
              f"({result.dimensions} dims), analyzer {result.analyzer}; "
              f"{plural(result.chunks_indexed, 'chunk')} indexed"
              + (f" ({result.chunks_embedded} embedded, {result.chunks_copied} with vectors "
                 "copied)" if result.chunks_copied else "")
              + (f" (resumed after {result.chunks_before})" if result.resumed else ""),
              soft_wrap=True)
    # an empty collection (every document deleted) has no chunk to sample the recall with
    recall = ("no recall sample (no chunks)" if v.recall is None
              else f"HNSW recall@10 {v.recall:.3f} on {v.sample:,} sample "
                   f"{'query' if v.sample == 1 else 'queries'}")
    out.print(f"validated: index valid, {plural(v.collection_chunks, 'chunk')} covered, "
              f"{recall}", soft_wrap=True)
    # the hints are pasted as they are, so they name the collection
    coll = f" -c {shlex.quote(collection)}"
    if result.activated:
        out.print(f"[green]version {result.version} is active[/green]"
                  + escape(suggest(f" (replaced {result.replaced}; `pgfunnel versions "
                                   f"rollback{coll}` returns to it)") if result.replaced
                           else ""), highlight=False,
                  markup=True, soft_wrap=True)
    else:
        source = "--last 100" if logged else "--queries QUERIES.jsonl"
        # with no active version there is nothing to compare it with (the hint held
        # `<active>`, which a shell pasted as a redirect)
        compare = ("" if active is None else
                   f" Compare it: pgfunnel versions compare {active} {result.version}{coll} "
                   f"{source};")
        out.print(suggest(f"version {result.version} is ready.{compare} Switch: pgfunnel "
                          f"versions activate {result.version}{coll}"), highlight=False,
                  soft_wrap=True)


versions_app = typer.Typer(help="List, activate, roll back, retire, drop and compare index "
                                "versions.", no_args_is_help=True, cls=TidyHelpGroup)


@versions_app.command("list")
def list_cmd(collection: CollectionOption = COLLECTION, dsn: DsnOption = None,
             json_out: JsonOption = False) -> None:
    """Every index version of a collection: state, model, analyzer, index, coverage."""
    from pgfunnel import versions
    from pgfunnel.db import connect
    from pgfunnel.ingest import require_collection
    from pgfunnel.sources import version_embed_input, version_lexical_input

    with handle_errors(), connect(dsn, autocommit=True) as conn:
        infos = versions.list_versions(conn, collection)
        building = [i for i in infos if i.state == "building"]
        # a version 'building' with no reindex running was interrupted (a kill -9 or a lost
        # connection says nothing): a plain `pgfunnel reindex` drops one built with other
        # settings than the active version's, so the list names the one that resumes it
        interrupted = building if building and versions.lock_holder(
            conn, require_collection(conn, collection)) is None else []
    # what the text output says on stderr (the interrupted builds first), by version; in
    # --json each version's `notes`: they were left out of it
    notes = [(info.version, f"version {info.version} is not being built (its reindex was "
                            f"interrupted): {versions.resume_hint(collection, info)}")
             for info in interrupted]
    notes += [(i.version, f"the drop of version {i.version} did not finish, and it cannot "
                          f"be activated; `pgfunnel versions drop {i.version} -c "
                          f"{shlex.quote(collection)}` finishes it")
              for i in infos if i.params.get("dropping")]
    if json_out:
        emit_json([{**i.to_json(), "notes": [said for n, said in notes if n == i.version]}
                   for i in infos], ("notes",))
        return
    rows = []
    for i in infos:
        idx = ("valid" if i.index_valid else "INVALID" if i.index_present else "missing")
        # a drop cut short (Ctrl-C, a lost connection) leaves the version marked: it looks
        # ready or retired, but no activation takes it until `versions drop` finishes
        state = f"{i.state}, drop unfinished" if i.params.get("dropping") else i.state
        rows.append({"version": str(i.version), "state": state, "model": i.embedding_model,
                     "dims": str(i.dimensions), "analyzer": i.analyzer,
                     # what the embedder and BM25 read per chunk
                     "inputs": f"{version_embed_input(i.params)}/"
                               f"{version_lexical_input(i.params)}",
                     "chunks": str(i.chunk_count), "missing": str(i.missing_chunks),
                     "hnsw index": (f"{idx} {i.index_bytes / 1e6:.1f} MB" if i.index_present
                                    else idx),
                     # the graph's build settings (reindex --m, --ef-construction): two
                     # versions built with other ones read alike but for the index size
                     "m/ef_construction": "{}/{}".format(
                         int(i.params.get("m", HNSW_M)),
                         int(i.params.get("ef_construction", HNSW_EF_CONSTRUCTION))),
                     "activated": f"{i.activated_at:%Y-%m-%d %H:%M}" if i.activated_at else "-",
                     "retired": f"{i.retired_at:%Y-%m-%d %H:%M}" if i.retired_at else "-"})
    table = Table(title=f"index versions of {collection!r}", title_justify="left")
    for col in rows[0] if rows else ("version", "state", "model"):
        table.add_column(col, no_wrap=True)
    for row in rows:
        table.add_row(*row.values())
    columns = list(rows[0]) if rows else []
    needed = 1 + sum(3 + max(len(c), *(len(r[c]) for r in rows)) for c in columns)
    if needed <= out.width:
        out.print(table)
    else:
        # too narrow for the table (80 columns cut every header to "vers…", "acti…"): one
        # line per version instead
        out.print(f"index versions of {collection!r}", highlight=False, soft_wrap=True)
        for row in rows:
            rest = ", ".join(f"{name} {value}" for name, value in row.items()
                             if name not in ("version", "state") and value != "-")
            out.print(f"  version {row['version']} ({row['state']}): {rest}",
                      highlight=False, soft_wrap=True)
    # notes on stderr: `versions list | grep ready` gets the versions alone
    for _, said in notes:
        labelled("note", "yellow", said)


def _print_activation(act: Any, json_out: bool) -> None:
    if json_out:
        emit_json(act.to_json())
        return
    if act.already_active:
        # another session switched to it while this one caught it up or built its graph:
        # that work is kept, so "nothing changed" would hide it
        done = []
        if act.caught_up:
            done.append(f"{plural(act.caught_up, 'chunk')} ingested since its build "
                        f"{'was' if act.caught_up == 1 else 'were'} indexed into it")
        if act.index_built:
            done.append("its HNSW index, missing or invalid, was built")
        said = ("; " + "; ".join(done) + " (another session activated it meanwhile)"
                if done else "; nothing changed")
        out.print(f"version {act.activated} of {act.collection!r} was already active{said}",
                  highlight=False, soft_wrap=True)
        return
    msg = f"version {act.activated} of {act.collection!r} is active"
    if act.replaced is not None:
        msg += (f"; version {act.replaced} retired (`pgfunnel versions rollback -c "
                f"{shlex.quote(act.collection)}` returns to it)")
    if act.caught_up:
        msg += (f"; {plural(act.caught_up, 'chunk')} ingested since its build "
                f"{'was' if act.caught_up == 1 else 'were'} indexed first")
    if act.index_built:
        msg += "; its HNSW index, missing or invalid, was built first"
    # one line, so that a pipe or a log keeps the rollback command whole
    out.print(suggest(msg), highlight=False, soft_wrap=True)


def _active_number(conn: Any, collection: str) -> int | None:
    """The collection's active version number (None: no such collection, or none active)."""
    row = conn.execute("select v.version from pgfunnel.index_version v "
                       "join pgfunnel.collection c on c.id = v.collection_id "
                       "where c.name = %s and v.state = 'active'", (collection,)).fetchone()
    return None if row is None else int(row[0])


def _switch_interrupted(dsn: str | None, collection: str, command: str,
                        target: int | None, before: list[int | None]) -> Callable[[], str]:
    """What a Ctrl-C during `versions activate` or `rollback` left: "interrupted" alone did
    not say whether the switch had committed (it can land after the commit, before the
    report), nor that the chunks caught up so far are kept."""
    def said() -> str:
        from pgfunnel.db import connect

        try:
            with connect(dsn, autocommit=True) as check:
                now = _active_number(check, collection)
        except Exception:  # noqa: BLE001 - a message after Ctrl-C must not raise
            return ""
        if now is None:
            return f"collection {collection!r} has no active version"
        switched = now == target if target is not None else bool(before) and \
            before[0] is not None and now != before[0]
        if switched:
            return f"version {now} of {collection!r} is active; the switch had finished"
        return (f"nothing was switched; version {now} of {collection!r} is still active "
                f"(chunks indexed for the switch so far are kept: `{command}` goes on)")
    return said


@versions_app.command("activate", cls=VersionNumberCommand)
def activate_cmd(version: VersionArg, collection: CollectionOption = COLLECTION,
                 dsn: DsnOption = None, json_out: JsonOption = False) -> None:
    """Switch searches to a ready or retired version, in one transaction.

    Chunks ingested since the version was built are embedded and indexed first. The
    previously active version becomes 'retired' (kept; `rollback` returns to it).
    """
    from pgfunnel import versions
    from pgfunnel.db import connect

    _quiet()
    again = f"pgfunnel versions activate {version} -c {shlex.quote(collection)}"
    with handle_errors(VERSION_FLAGS,
                       interrupted=_switch_interrupted(dsn, collection, again, version, [])), \
            connect(dsn, autocommit=True) as conn:
        act = versions.activate(conn, collection, version)
    _print_activation(act, json_out)


@versions_app.command("rollback")
def rollback_cmd(collection: CollectionOption = COLLECTION, dsn: DsnOption = None,
                 json_out: JsonOption = False) -> None:
    """Activate the version the active one replaced (running it twice switches back)."""
    import psycopg

    from pgfunnel import versions
    from pgfunnel.db import connect

    _quiet()
    again = f"pgfunnel versions rollback -c {shlex.quote(collection)}"
    # the version active before: a rollback has no target number to look for afterwards
    before: list[int | None] = []
    with handle_errors(interrupted=_switch_interrupted(dsn, collection, again, None, before)), \
            connect(dsn, autocommit=True) as conn:
        try:
            before.append(_active_number(conn, collection))
        except psycopg.Error:
            # (a role that may not read it: the rollback says what it lacks)
            before.append(None)
        act = versions.rollback(conn, collection)
    _print_activation(act, json_out)


@versions_app.command("retire", cls=VersionNumberCommand)
def retire_cmd(version: VersionArg, collection: CollectionOption = COLLECTION,
               dsn: DsnOption = None, json_out: JsonOption = False) -> None:
    """Mark a ready version retired (kept and re-activatable). Refuses the active one."""
    from pgfunnel import versions
    from pgfunnel.db import connect

    with handle_errors(VERSION_FLAGS), connect(dsn, autocommit=True) as conn:
        info = versions.retire(conn, collection, version)
    if json_out:
        emit_json(info.to_json())
    else:
        out.print(f"version {version} of {collection!r} is retired.", soft_wrap=True)


@versions_app.command("drop", cls=VersionNumberCommand)
def drop_cmd(version: VersionArg, collection: CollectionOption = COLLECTION,
             dsn: DsnOption = None, json_out: JsonOption = False) -> None:
    """Drop a version's HNSW index and all its rows. Refuses the active version."""
    from pgfunnel import versions
    from pgfunnel.db import connect

    def after_interrupt() -> str:
        # Ctrl-C can land after the drop finished and before it is reported: "interrupted"
        # alone then read as a drop that had not happened
        try:
            with connect(dsn, autocommit=True) as check:
                row = check.execute(
                    "select v.params ? 'dropping' from pgfunnel.index_version v "
                    "join pgfunnel.collection c on c.id = v.collection_id "
                    "where c.name = %s and v.version = %s", (collection, version)).fetchone()
        except Exception:
            return ""
        if row is None:
            return f"version {version} of {collection!r} is dropped; the drop had finished"
        if row[0]:
            return (f"the drop of version {version} is unfinished; `pgfunnel versions drop "
                    f"{version} -c {shlex.quote(collection)}` finishes it")
        return f"nothing was dropped; version {version} of {collection!r} is as it was"

    with handle_errors(VERSION_FLAGS, interrupted=after_interrupt), \
            connect(dsn, autocommit=True) as conn:
        info = versions.drop(conn, collection, version)
    if json_out:
        emit_json({"dropped": info.version, "id": info.id, "collection": collection})
    else:
        out.print(f"version {version} of {collection!r} dropped "
                  f"(the rows of {plural(info.chunk_count, 'chunk')}; its HNSW index "
                  f"{info.index_name} is "
                  f"named by the version's id {info.id}, unique across collections).",
                  highlight=False, soft_wrap=True)


@versions_app.command("drop-collection")
def drop_collection_cmd(
    collection: Annotated[str, typer.Argument(help="The collection to drop, whole.",
                                              callback=collection_given)],
    yes: Annotated[bool, typer.Option("--yes", help="Confirm: every document, chunk, "
                                                    "version and trace of it goes.")] = False,
    dsn: DsnOption = None, json_out: JsonOption = False,
) -> None:
    """Drop a collection whole. Without --yes it only says what would go (exit 2).

    Its documents, chunks, every index version (HNSW indexes and posting partitions
    included), traces and judged queries go."""
    from pgfunnel import versions
    from pgfunnel.db import connect

    with handle_errors(), connect(dsn, autocommit=True) as conn:
        if not yes:
            # a misspelt name is said to be one before the confirmation is asked for
            from pgfunnel.db import require_schema

            require_schema(conn)
            coll_id = versions.collection_to_drop(conn, collection)
            row = conn.execute("select count(*) from pgfunnel.document where collection_id = %s",
                               (coll_id,)).fetchone()
            held = plural(int(row[0]) if row else 0, "document")
            labelled("error", "red", f"this drops collection {collection!r} and everything in "
                     f"it ({held}); pass --yes to confirm")
            raise typer.Exit(EXIT_USAGE)
        result = versions.drop_collection(conn, collection)
    if json_out:
        emit_json(result)
    else:
        out.print(f"collection {collection!r} dropped: {plural(result['documents'], 'document')}, "
                  f"versions {', '.join(map(str, result['versions'])) or 'none'}.",
                  highlight=False, soft_wrap=True)


def _logged_searches(diffs: list[QueryDiff]) -> str:
    """'N logged searches ('a', 'b', ...)': how compare's notes name the searches they are
    about, the first five by their text."""
    names = ", ".join(shown(repr(d.query)) for d in diffs[:5])
    more = ", ..." if len(diffs) > 5 else ""
    return f"{len(diffs)} logged {'search' if len(diffs) == 1 else 'searches'} ({names}{more})"


@versions_app.command("compare", cls=VersionNumberCommand)
def compare_cmd(
    version_a: Annotated[int, typer.Argument(help="First version (usually the active one).")],
    version_b: Annotated[int, typer.Argument(help="Second version (the candidate).")],
    queries: Annotated[Path | None, typer.Option(
        # read_query_file says why it cannot read one (exit 1)
        parser=given_path, metavar="<path>",
        help="JSONL file of queries: the eval format with judgments (then nDCG is compared "
             "too) or lines with a \"query\" field.")] = None,
    last: Annotated[int | None, typer.Option(
        "--last", help="Use the last N distinct logged searches (search_log) instead, each "
                       "as of the time it searched as of, and as the reader it ran as unless "
                       "--principal or --tenant is given."
    )] = None,
    k: Annotated[int | None, typer.Option(
        "--k", "-k", help="Cutoff for overlap@k and nDCG@k, and the k each query is "
                          "searched with (default 10; with --last, the k each search was "
                          "logged with, which a --k given replaces).")] = None,
    show: Annotated[int, typer.Option(callback=in_range(0),
                                      help="How many most-changed queries to list "
                                           "(0 or more).")] = 10,
    fusion: CompareFusionOption = None,
    rrf_k: CompareRrfKOption = None,
    lexical_weight: CompareLexicalWeightOption = None,
    dense_weight: CompareDenseWeightOption = None,
    overfetch: GivenOverfetchOption = None,
    per_source_cap: GivenCapOption = None,
    lexical_depth: LexicalDepthOption = None,
    dense_depth: DenseDepthOption = None,
    collection: CollectionOption = COLLECTION,
    principal: PrincipalOption = None,
    tenant: TenantOption = None,
    dsn: DsnOption = None,
    json_out: JsonOption = False,
) -> None:
    """What users will see differently if version B replaces A: overlap@k, nDCG@k change.

    Overlap@k per query between two versions, and with judged queries the nDCG@k change
    and its paired-bootstrap 95% interval. The search options (--fusion, --rrf-k, the
    weights, --overfetch, --per-source-cap, the depths), as `pgfunnel search` takes them,
    set how --queries are searched; with --last, one typed replaces what each logged
    search was logged with (a note says which), the others as logged."""
    from pgfunnel import versions
    from pgfunnel.db import connect
    from pgfunnel.errors import ConfigError, InvalidInputError
    from pgfunnel.eval.harness import missing_items_message, respelled_items_message

    _quiet()
    if (queries is None) == (last is None):
        raise typer.BadParameter("give exactly one of --queries FILE or --last N")
    with handle_errors({**FUNNEL_FLAGS, "version_a": "VERSION_A", "version_b": "VERSION_B",
                        "last": "--last", "n": "--last", "queries": "--queries"}), \
            connect(dsn, autocommit=True) as conn:
        search_given = _search_options(conn, collection, fusion, rrf_k, lexical_weight,
                                       dense_weight, overfetch, per_source_cap,
                                       lexical_depth, dense_depth, last is not None)
        versions.require_pin_privilege(conn)
        if queries is not None:
            try:
                qs, _ = versions.read_query_file(queries)
            except InvalidInputError as exc:
                # the library's "queries: cannot read ..." names its argument; here it
                # is the flag the user typed
                raise InvalidInputError(
                    "--queries: " + str(exc).removeprefix("queries: ")) from None
        else:
            assert last is not None
            # last_searches refuses a count out of range as its "n"
            qs = list(versions.last_searches(conn, collection, last))
            if not qs:
                raise ConfigError("last", f"collection {collection!r} has no logged "
                                  "searches (searches are logged with `pgfunnel search "
                                  "--trace` or `trace => true`); compare with --queries "
                                  "FILE instead")
        # logged searches run as the reader each ran as, unless one is named for all
        named: SearchArgs = {} if last is not None and not principal and tenant is None \
            else {"principals": principal or [], "tenant": tenant}
        # one mapping: two TypedDicts unpacked into one call crash mypy 2.4 (argmap)
        params: SearchArgs = {**named, **search_given}
        cmp = versions.compare(conn, collection, version_a, version_b, qs, k=k, **params)
    reader = (f"principals {', '.join(principal)}" if principal
              else "each as the reader it was logged with" if not named
              else "no --principal: public documents only")
    # (label, text): a warning, or a note of what was read otherwise than written, as eval
    # labels them; --json has every text in `notices`
    notes: list[tuple[str, str]] = []
    if cmp.empty_in_both:
        # both empty reads as "identical": say it compared nothing
        notes.append(("warning", f"{cmp.empty_in_both} of {cmp.n_queries} queries returned "
                      f"nothing on either version ({reader}); they count as identical. A "
                      "collection whose documents are not public is compared as a reader "
                      "with --principal"))
    if cmp.judged_items_respelled:
        notes.append(("note", respelled_items_message(cmp.judged_items_respelled).replace(
            "pgfunnel eval", "versions compare")))
    if cmp.judged_items_missing:
        from pgfunnel.eval.qrels import JudgedQuery

        notes.append(("warning", missing_items_message(
            cmp.judged_items_missing, [q for q in qs if isinstance(q, JudgedQuery)],
            collection, principals=principal or [], tool="versions compare")))
    if cmp.legs_guessed:
        # as explain --search-id says it of the one search it replays
        guessed = [d for d in cmp.per_query if d.legs_guessed]
        one = len(guessed) == 1
        notes.append(("note", f"{_logged_searches(guessed)} "
                      f"{'was' if one else 'were'} logged before pgfunnel recorded whether "
                      "a search had a query embedding; none of the candidates in "
                      f"{'its trace' if one else 'their traces'} came from the dense leg, so "
                      f"{'it was' if one else 'they were'} replayed with the lexical leg "
                      "alone, a guess: a dense leg that found nothing visible looks the same"))
    if cmp.config_guessed:
        # as the legs' guess above is said: the defaults stand in for what was not logged
        guessed_qs = [d for d in cmp.per_query if d.config_guessed]
        one = len(guessed_qs) == 1
        keys = [n for n in versions.LOGGED_SEARCH_PARAMS
                if any(n in d.config_guessed for d in guessed_qs)]
        defaults = ", ".join(f"{n} {versions.param_shown(n, _default_param(n))}"
                             for n in keys)
        notes.append(("note", f"{_logged_searches(guessed_qs)} "
                      f"{'does' if one else 'do'} not record {', '.join(keys)} in "
                      f"{'its' if one else 'their'} log (logged before pgfunnel recorded "
                      f"{'it' if len(keys) == 1 else 'them'}; an eval's log did not keep "
                      f"the k it cut at), so {'it was' if one else 'they were'} replayed "
                      f"with the default{'s' if len(keys) > 1 else ''} ({defaults}), "
                      "a guess"))
    if cmp.overridden:
        changed_qs = [d for d in cmp.per_query if d.overridden]
        one = len(changed_qs) == 1
        given = ", ".join(f"{FUNNEL_FLAGS.get(n, n)} {versions.param_shown(n, v)}"
                          for n, v in cmp.overridden.items())
        notes.append(("note", f"{len(changed_qs)} logged "
                      f"{'search was' if one else 'searches were'} replayed with the "
                      f"{given} given instead of what "
                      f"{'it was' if one else 'they were'} logged with (each other search "
                      "parameter as logged)"))
    if cmp.not_applied:
        # --rrf-k alone: the searches fused otherwise have no constant to replace
        kept = [d for d in cmp.per_query if d.not_applied]
        one = len(kept) == 1
        flags = ", ".join(FUNNEL_FLAGS.get(n, n) for n in versions.LOGGED_SEARCH_PARAMS
                          if any(n in d.not_applied for d in cmp.per_query))
        notes.append(("note", f"{flags} did not apply to {_logged_searches(kept)}, which "
                      f"{'fuses' if one else 'fuse'} by another method (no constant): "
                      f"{'it was' if one else 'they were'} replayed with "
                      f"{'its' if one else 'their'} own fusion"))
    if cmp.logged_reranked:
        reranked_qs = [d for d in cmp.per_query if d.logged_reranked]
        one = len(reranked_qs) == 1
        notes.append(("note", f"{_logged_searches(reranked_qs)} reranked "
                      f"{'its' if one else 'their'} pool when {'it' if one else 'they'} "
                      "ran; compare does not rerank (a reranker is no part of an index "
                      f"version), so {'its' if one else 'their'} overlap compares each "
                      "version's results before the rerank, not the list the user saw"))
    if json_out:
        emit_json({**cmp.to_json(), "notices": [text for _, text in notes]}, ("notices",))
        return
    for label, text in notes:
        labelled(label, "yellow", text)
    for number, n in cmp.caught_up.items():
        if n:
            labelled("note", "yellow", f"version {number} lacked {plural(n, 'chunk')} "
                     "ingested since its build (ingest writes only the active version): "
                     "indexed first, as its activation would, so both versions are compared "
                     "on the same chunks")
    # a query whose results only moved is not identical: said, so that the counts add up
    reordered = (f" ({cmp.reordered} more with the same results in a different order)"
                 if cmp.reordered else "")
    if cmp.k is not None:
        k_said, at = f"k={cmp.k}", str(cmp.k)
    else:
        # logged searches replayed with the k each was logged with, which differ
        ks = sorted({d.k for d in cmp.per_query})
        k_said, at = f"k as each search was logged ({ks[0]} to {ks[-1]})", "k"
    out.print(f"{cmp.n_queries} queries, {k_said}: mean overlap@{at} "
              f"{cmp.mean_overlap:.3f}; {cmp.identical} identical top-{at}{reordered}; "
              f"top-1 changed for {cmp.top1_changed}", soft_wrap=True)
    k = cmp.k
    if cmp.judged and cmp.ndcg_diff is not None:
        out.print(f"nDCG@{k}: version {version_a} {cmp.ndcg_a:.4f} -> version {version_b} "
                  f"{cmp.ndcg_b:.4f}; change {cmp.ndcg_diff:+.4f} "
                  f"(95% paired bootstrap [{cmp.ndcg_low:+.4f}, {cmp.ndcg_high:+.4f}])",
                  soft_wrap=True)
    # every query that is not identical, a reordered one too: the count above said it
    # changed, and the list left it out
    changed = [d for d in cmp.per_query if not d.identical][:show]

    def moved(d: versions.QueryDiff) -> str:
        return "same results, different order" if d.overlap == 1.0 else ""


    if changed:
        table = Table(title="most changed queries", title_justify="left")
        for col in ("query", f"overlap@{at}", "rank shift", f"only in {version_a}",
                    f"only in {version_b}"):
            table.add_column(col, overflow="fold")
        # a control character in a query or a citekey is shown, not sent to the terminal
        for d in changed:
            table.add_row(shown(d.query + replayed_as(d, cmp.k)), f"{d.overlap:.2f}",
                          f"{d.rank_shift:.1f}",
                          shown(", ".join(d.only_a[:3])) or moved(d),
                          shown(", ".join(d.only_b[:3])))
        print_table(table, [f"{d.query!r}{shown(replayed_as(d, cmp.k))}: "
                            f"overlap@{d.k} {d.overlap:.2f}; "
                            f"rank shift {d.rank_shift:.1f}; "
                            + (moved(d) or
                               f"only in {version_a}: "
                               f"{shown(', '.join(d.only_a[:3])) or '-'}; only in "
                               f"{version_b}: {shown(', '.join(d.only_b[:3])) or '-'}")
                            for d in changed])


def register(app: typer.Typer) -> None:
    app.command("reindex")(reindex)
    app.add_typer(versions_app, name="versions")


def replayed_as(d: QueryDiff, k: int | None = None) -> str:
    """What a changed query's line adds of how it was replayed: the reader, the legs and
    the search parameters not at their default (its k, where ``k``, the one cutoff of the
    comparison, is not it) a logged search (--last) had; empty for a query searched as
    the command was asked."""
    from pgfunnel import versions

    # a text logged by two readers (--last) was two lines that read the same
    who = d.reader or {}
    said = [f"principals {', '.join(who['principals'])}"] if who.get("principals") else []
    if who.get("tenant") is not None:
        said.append(f"tenant {who['tenant']}")
    shown = [f"as {'; '.join(said)}"] if said else []
    # a text logged lexical-only and hybrid was two lines that read the same
    if d.legs != "both":
        shown.append(f"{d.legs} leg only")
    if d.logged_reranked:
        shown.append("reranked when logged, compared before the rerank")
    # and so was one logged with two configurations: the parameters not at their default
    # (its k where the queries' cutoffs differ)
    if d.config:
        differ = [f"{n} {versions.param_shown(n, v)}" for n, v in d.config.items()
                  if not _same_default(n, v) and not (n == "k" and v == k)]
        if differ:
            shown.append(", ".join(differ))
    return f" ({'; '.join(shown)})" if shown else ""


def _search_options(conn: psycopg.Connection[Any], collection: str, fusion: str | None,
                    rrf_k: float | None, lexical_weight: float | None, dense_weight: float | None,
                    overfetch: int | None, per_source_cap: int | None,
                    lexical_depth: int | None, dense_depth: int | None,
                    last: bool) -> SearchArgs:
    """The search options typed, as compare's search parameters (one left out is not
    there: a logged search keeps its own), checked before any version is searched."""
    from pgfunnel.errors import ConfigError
    from pgfunnel.search import Funnel

    if rrf_k is not None and fusion is None and not last:
        # --queries are searched as `search` searches them: minmax, unless --fusion rrf
        raise ConfigError("rrf_k", "applies only with --fusion rrf: give --fusion rrf with "
                                   "it (with --last, alone, it applies to the logged "
                                   "searches that fused with rrf)")
    given: SearchArgs = {}
    # one not typed is left out, not sent as None: a logged search keeps its own
    if fusion is not None:
        given["fusion"] = fusion
    weights = leg_weights(lexical_weight, dense_weight, False)
    if weights is not None:
        given["weights"] = weights
    if overfetch is not None:
        given["overfetch"] = overfetch
    if per_source_cap is not None:
        given["per_source_cap"] = per_source_cap
    if lexical_depth is not None:
        given["lexical_depth"] = lexical_depth
    if dense_depth is not None:
        given["dense_depth"] = dense_depth
    if fusion is not None:
        given.update(rrf_k_args(rrf_k, fusion))
    elif rrf_k is not None:
        # --last: each logged search fused with rrf takes it, the others keep their fusion
        given["rrf_k"] = rrf_k
    if given:
        # a bad value is said as the search says it, before the versions are caught up
        # and every query embedded (--rrf-k alone checked as an rrf search reads it)
        with Funnel(conn, collection, embedder=None) as funnel:
            funnel.check(None, **given, **({"fusion": "rrf"} if fusion is None
                                            and rrf_k is not None else {}))
    return given


def _default_param(name: str) -> Any:
    from pgfunnel.search import SearchParams

    return getattr(SearchParams(), name)


def _same_default(name: str, value: Any) -> bool:
    default = _default_param(name)
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return list(value) == list(default)
    return bool(value == default)


__all__ = ["register", "EXIT_GATE"]
