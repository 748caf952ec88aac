"""The `pgfunnel` admin CLI. Each command parses options and calls the library."""

from __future__ import annotations

import importlib
import shlex
import time
import unicodedata
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

import typer
from rich.markup import escape
from rich.table import Table

from pgfunnel import defaults as sql_defaults

if TYPE_CHECKING:
    from pgfunnel.ingest import CitekeyHint

from .common import (
    FUNNEL_FLAGS,
    HIDDEN_DSN,
    HIDDEN_DSN_NOTE,
    INDEX_FLAGS,
    CapOption,
    CollectionOption,
    DenseDepthOption,
    DenseWeightOption,
    DsnOption,
    FusionOption,
    HistoryOption,
    JsonOption,
    LanguageOption,
    LexicalDepthOption,
    LexicalOnlyOption,
    LexicalWeightOption,
    NullProgress,
    OverfetchOption,
    PrincipalOption,
    QueryTextCommand,
    RrfKOption,
    SearchArgs,
    TenantOption,
    TidyHelpGroup,
    check_history,
    closed_pipes_end_quietly,
    emit_json,
    followup_of,
    given_path,
    handle_errors,
    holds_password,
    in_range,
    index_flags,
    labelled,
    leg_weights,
    out,
    plural,
    print_followup,
    print_table,
    progress_display,
    quiet_search_notices,
    refuse_dense_options,
    rrf_k_args,
    shown,
    stale_functions_notice,
    suggest,
)

app = typer.Typer(
    name="pgfunnel",
    help="Hybrid retrieval (BM25 + HNSW, fusion, per-source cap, rerank) inside Postgres.",
    no_args_is_help=True,
    cls=TidyHelpGroup,
    pretty_exceptions_enable=False,
    add_completion=False,
)

import pgfunnel  # noqa: E402

SAMPLE_CORPUS = Path(pgfunnel.__file__).resolve().parent / "data" / "helpcenter.jsonl"


def _print_version(value: bool) -> None:
    if value:
        out.print(f"pgfunnel {pgfunnel.__version__}", highlight=False, soft_wrap=True)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print pgfunnel's version and exit.")] = False,
) -> None:
    """Hybrid retrieval (BM25 + HNSW, fusion, per-source cap, rerank) inside Postgres."""
# two staff-only runbooks, so the demo can show one query answered for two readers
DEMO_INTERNAL = SAMPLE_CORPUS.with_name("demo_internal.jsonl")
DEMO_STAFF = "support-staff"


def _quiet_warnings() -> None:
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    warnings.filterwarnings("ignore", category=FutureWarning)


@app.command()
def init(
    dsn: DsnOption = None,
    rls: Annotated[bool, typer.Option(
        "--rls", help="Also enable row-level security policies (FORCE) that read the reader "
                      "from a transaction-local setting.")] = False,
    json_out: JsonOption = False,
) -> None:
    """Create the vector extension, the pgfunnel schema, its tables and functions. Idempotent."""
    from pgfunnel import schema

    waited: list[str] = []
    with handle_errors():
        result = schema.init(dsn, rls=rls, on_wait=_waiting_note(json_out, waited))
    if json_out:
        emit_json({**result, "notes": [*waited, *result["notes"]]}, ("notes",))
    elif result["created"]:
        out.print(f"pgfunnel schema installed (revision {result['revision']}, "
                  f"vector in schema {result['vector_schema']}).", soft_wrap=True)
    elif result["revision_before"] != result["revision"]:
        out.print(f"pgfunnel schema upgraded to revision {result['revision']} (was "
                  f"{result['revision_before']}); functions refreshed.", soft_wrap=True)
    else:
        out.print(f"pgfunnel schema already installed (revision {result['revision']}); "
                  "functions refreshed.", soft_wrap=True)
    if not json_out:
        for note in result["notes"]:
            # notes on stderr, as every command's: stdout holds what was done (an
            # upgrade's, and on any run public.funnel_search left uncreated)
            labelled("note", "yellow", note)
    if result["rls"] and not json_out:
        # on an installed schema the lines above said nothing of it
        out.print("row-level security is on: a role sees only the rows its transaction's "
                  "pgfunnel.principals may read; give your application's login role "
                  "`grant pgfunnel_reader to ROLE` (docs/security.md)", highlight=False,
                  soft_wrap=True)


def _waiting_note(json_out: bool, waited: list[str]) -> Callable[[str], None]:
    """What init and migrate do with the line saying which other init or migrate they
    wait for: a note on stderr as the wait begins (a second init stood silent for as long
    as the first ran), or with --json one of the JSON's notes (``waited``)."""
    def said(line: str) -> None:
        if json_out:
            waited.append(line)
        else:
            labelled("note", "yellow", line)

    return said


@app.command()
def migrate(dsn: DsnOption = None, json_out: JsonOption = False) -> None:
    """Upgrade an existing pgfunnel schema to this version and refresh its functions."""
    from pgfunnel import schema

    waited: list[str] = []
    with handle_errors():
        result = schema.migrate(dsn, on_wait=_waiting_note(json_out, waited))
    if json_out:
        emit_json({**result, "notes": [*waited, *result["notes"]]}, ("notes",))
    else:
        if result["revision_before"] == result["revision"]:
            out.print(f"schema already at revision {result['revision']}, this release's; "
                      "functions refreshed.", soft_wrap=True)
        else:
            out.print(f"schema upgraded to revision {result['revision']} (was "
                      f"{result['revision_before']}); functions refreshed.", soft_wrap=True)
        for note in result["notes"]:
            labelled("note", "yellow", note)


@app.command()
def dsn(dsn: DsnOption = None) -> None:
    """Print the connection string in use (starting the embedded Postgres if needed)."""
    from pgfunnel.db import resolve_dsn

    _quiet_warnings()
    with handle_errors():
        out.print(resolve_dsn(dsn), highlight=False, soft_wrap=True)


@app.command()
def stop() -> None:
    """Stop the embedded Postgres of PGFUNNEL_HOME; its data stays.

    The next command that needs it starts it again. A server of your own (PGFUNNEL_DSN) is
    never touched."""
    from pgfunnel.db import pgfunnel_home, stop_embedded

    with handle_errors():
        stopped = stop_embedded()
    home = pgfunnel_home() / "pgdata"
    out.print(f"stopped the embedded Postgres in {home}" if stopped
              else f"no embedded Postgres running in {home}", highlight=False, soft_wrap=True)


def read_documents(paths: list[Path], exclude: list[str] | None, root: Path | None,
                   copies: dict[str, tuple[Any, str]] | None = None,
                   encoding: str | None = None, origins: dict[str, Path] | None = None,
                   progress: Any = None, max_expanded_mib: int | None = None
                   ) -> tuple[list[Any], list[str]]:
    """Every document the paths hold, validated, and the notes on what was left out;
    paths that hold no document are an error. ``copies``, when given, gets each document
    left out as a copy of another, by citekey, with its note. ``encoding``: the one files
    that are not UTF-8 are read in (read_paths). ``origins``, given empty, gets each
    citekey's file (read_paths). ``progress``, a progress display, counts the documents
    read as they are. ``max_expanded_mib``: the most a gzip-compressed file is read to,
    decompressed, in MiB (None: read_paths' default)."""
    from pgfunnel.errors import InvalidDocumentError
    from pgfunnel.sources import (
        EmptyFileWarning,
        GuessedEncodingWarning,
        OtherFilesWarning,
        drop_common_title_parts,
        drop_copied_pages,
        drop_gathering_pages,
        drop_repeated_blocks,
        format_suffix,
        read_paths,
    )

    noted = (EmptyFileWarning, OtherFilesWarning, GuessedEncodingWarning)
    with warnings.catch_warnings(record=True) as caught:
        for category in noted:
            warnings.simplefilter("always", category)
        if origins is None:
            origins = {}
        # every file is read before anything is written: 520 pages of Python's HTML
        # manual took 80 s here, without a word on the terminal until the embedding began
        reading = (None if progress is None
                   else progress.add_task("reading files (documents so far)", total=None))
        records = []
        limit = None if max_expanded_mib is None else max_expanded_mib << 20
        for record in read_paths(paths, exclude or [], root, origins=origins,
                                 encoding=encoding, max_expanded_bytes=limit):
            records.append(record)
            if reading is not None:
                progress.advance(reading)
    skipped = [str(w.message) for w in caught if issubclass(w.category, noted)]
    for w in caught:
        if not issubclass(w.category, noted):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if not records:
        raise InvalidDocumentError("nothing to ingest: no document in "
                                   + ", ".join(str(p) for p in paths)
                                   + "".join(f"; {note}" for note in skipped))
    # a JSONL line names its own citekey and title, where a file's are made up from its
    # path and markup: it is a document the caller named, never a generator's print
    # edition (a handbook line for one tenant, beside its sections for another, was left
    # out whole and hidden from its tenant) nor its copy of a page (two lines of one text
    # were one document), and a title part lines share is the caller's ("FAQ: " was
    # taken off as a site's name); nor are the paragraphs its lines share a site's
    # boilerplate (one policy written per tenant lost its every sentence but the first)
    lines = {key for key, source in origins.items() if format_suffix(source) == ".jsonl"}
    trimmed, boilerplate = drop_repeated_blocks([r for r in records if r.citekey not in lines])
    in_order = iter(trimmed)
    records = [r if r.citekey in lines else next(in_order) for r in records]
    files, gathering = drop_gathering_pages([r for r in records if r.citekey not in lines])
    pages, copied = drop_copied_pages(files)
    if copies is not None:
        stays = {r.citekey for r in pages}
        left = [r for r in files if r.citekey not in stays]
        copies.update({r.citekey: (r, note) for r, note in zip(left, copied, strict=True)})
    # and only an HTML page's title comes from a site's <title>: a Markdown or RST file's
    # is its author's first heading, where a part ten of them share is a series'
    # ("Tutorial: "), not a site's name
    html = {key for key, source in origins.items()
            if format_suffix(source) in (".html", ".htm", ".xhtml")}
    titled, titles = drop_common_title_parts([r for r in pages if r.citekey in html])
    kept = {r.citekey: r for r in pages} | {r.citekey: r for r in titled}
    records = [r if r.citekey in lines else kept[r.citekey]
               for r in records if r.citekey in lines or r.citekey in kept]
    return records, skipped + boilerplate + gathering + copied + titles


class PlannedDocument(TypedDict):
    """One document of ``ingest --dry-run``'s plan (its ``documents`` in --json)."""

    citekey: str
    title: str
    chunks: int
    words: int


def dry_run(paths: list[Path], chunk_words: int, exclude: list[str] | None,
            root: Path | None, prune_from: tuple[str | None, str] | None = None,
            encoding: str | None = None, show_progress: bool = False,
            max_expanded_mib: int | None = None) -> dict[str, Any]:
    """What an ingest would read: each document's citekey, title, chunks and words.
    ``prune_from`` (dsn, collection): also the documents ``--prune`` would delete there,
    read from the database (nothing is written). ``show_progress``: count the documents
    read on stderr as they are."""
    from pgfunnel.ingest import checked_records
    from pgfunnel.sources import chunk_text, count_words

    copies: dict[str, tuple[Any, str]] = {}
    with (progress_display("ingest", transient=True, end_line=False) if show_progress
          else NullProgress()) as reading:
        records, skipped = read_documents(paths, exclude, root, copies, encoding,
                                          progress=reading, max_expanded_mib=max_expanded_mib)
    # the checks the ingest would stop at, before any of its batches
    documents: list[PlannedDocument] = [
        {"citekey": r.citekey, "title": r.title, "chunks": len(chunk_text(r.text, chunk_words)),
         "words": count_words(r.text)} for r in checked_records(records)]
    plan = {"documents": documents, "chunks": sum(d["chunks"] for d in documents),
            "words": sum(d["words"] for d in documents), "notes": skipped}
    if prune_from is not None:
        pruned = stored_elsewhere(*prune_from, {r.citekey for r in records}, set(copies))
        plan |= {"documents_pruned": len(pruned), "pruned": pruned}
    return plan


def _check_dry_run_collection(dsn_value: str | None, collection: str, prune: bool) -> None:
    """Refuse the collection name a real ingest would refuse. A name with whitespace at an
    end is refused only for a new collection: with a database given (``--dsn`` or
    PGFUNNEL_DSN) or read anyway (``--prune``) one lookup tells whether it exists; with
    neither the dry run reads no database (the default one is the embedded server, which
    a lookup would start), and refuses it as a new collection's name."""
    from pgfunnel.ingest import check_collection_name, check_new_collection_name

    check_collection_name(collection)
    if collection == collection.strip():
        return
    if dsn_value is None and not prune:
        check_new_collection_name(collection)
    from pgfunnel.db import connect, require_schema
    from pgfunnel.ingest import collection_id

    with connect(dsn_value, autocommit=True) as conn:
        require_schema(conn)
        if collection_id(conn, collection) is None:
            check_new_collection_name(collection)


def stored_elsewhere(dsn_value: str | None, collection: str, read: set[str],
                     copies: set[str]) -> list[str]:
    """The citekeys of ``collection`` that an ingest of ``read`` would prune, sorted: those
    not read, less the copies the ingest writes because they are stored (do_ingest)."""
    from pgfunnel.db import connect, require_schema
    from pgfunnel.ingest import collection_id, unread_citekeys

    with connect(dsn_value, autocommit=True) as conn:
        require_schema(conn)
        cid = collection_id(conn, collection)
        if cid is None:
            return []
        return [key for key in unread_citekeys(conn, cid, read) if key not in copies]


def do_ingest(dsn_value: str | None, paths: list[Path], collection: str, chunk_words: int,
              model: str | None, private: bool, show_progress: bool = True,
              exclude: list[str] | None = None, root: Path | None = None,
              kept: dict[str, int] | None = None, prune: bool = False,
              encoding: str | None = None, analyzer: str | None = None,
              max_expanded_mib: int | None = None,
              on_wait: Callable[[str], None] | None = None) -> Any:
    """Ingest ``paths``. ``kept``, when given, counts as it goes the documents read
    ("total") and those whose batch has committed ("stored"), and, with ``prune``, the
    documents pruned once that has committed ("pruned"), for what a Ctrl-C says.
    ``on_wait`` gets the line naming another ingest of the collection that this one
    waits for."""
    from pgfunnel.db import connect
    from pgfunnel.embedder import Embedder, check_model_name
    from pgfunnel.errors import InvalidInputError
    from pgfunnel.ingest import (
        Ingester,
        active_version,
        check_ingest_analyzer,
        check_new_collection_name,
        collection_id,
        one_ingest_at_a_time,
        same_model,
    )
    if model is not None:
        # '' was taken as no --model: the collection's (or the default) model, unsaid
        check_model_name(model)
    copies: dict[str, tuple[Any, str]] = {}
    origins: dict[str, Path] = {}
    with (progress_display("ingest", transient=True, end_line=False) if show_progress
          else NullProgress()) as reading:
        records, skipped = read_documents(paths, exclude, root, copies, encoding, origins,
                                          reading, max_expanded_mib)
    if kept is not None:
        kept["total"] = len(records)
    with connect(dsn_value, autocommit=True) as conn, ExitStack() as stack:
        from pgfunnel.db import require_schema
        from pgfunnel.schema import require_current_schema
        from pgfunnel.versions import name_session

        name_session(conn, f"pgfunnel ingest {collection}")
        require_schema(conn)
        require_current_schema(conn)  # before the model loads
        # before anything stored is read: a second run of the same collection waits for
        # the first, then finds its documents unchanged (both embedded everything, and
        # the loser threw its vectors away)
        stack.enter_context(one_ingest_at_a_time(conn, collection, on_wait))
        cid = collection_id(conn, collection)
        if cid is not None and copies:
            # a copy whose citekey an earlier ingest stored (the file since edited into
            # another's text) is written: left out, its old text stayed searchable under
            # its name, the file's change never read
            stored = {ck for (ck,) in conn.execute(
                "select citekey from pgfunnel.document where collection_id = %s "
                "and citekey = any(%s)", (cid, list(copies))).fetchall()}
            for key in sorted(stored):
                rec, note = copies[key]
                records.append(rec)
                skipped[skipped.index(note)] = (
                    f"kept {key!r}, " + note.removeprefix(f"left out {key!r}: ")
                    + ": a document of that citekey "
                    "is stored, and left out it would keep its old text (`pgfunnel delete "
                    f"-c {shlex.quote(collection)} {shlex.quote(key)}` takes it out)")
            if kept is not None:
                kept["total"] = len(records)
        if cid is None:
            # a name Ingester refuses for a new collection, refused before the model loads
            check_new_collection_name(collection)
        version = active_version(conn, cid) if cid is not None else None
        # refused before the model loads, as --model is; Ingester refuses it too
        check_ingest_analyzer(conn, collection, analyzer, cid, version)
        if version is not None and model and not same_model(model, version.embedding_model):
            # refused before the model loads (seconds); Ingester refuses it too
            raise InvalidInputError(
                f"--model: collection {collection!r} is indexed with "
                f"{version.embedding_model!r}, not {model!r}; leave --model out, or change "
                "the collection's model with `pgfunnel reindex --model`")
        # a collection with an active version gets its model when a chunk needs a vector:
        # re-ingesting unchanged or reworded sources then takes no model load (about 10 s
        # of importing torch and sentence-transformers); a new collection needs it at once
        embedder = None if version is not None else Embedder(
            "all-MiniLM-L6-v2" if model is None else model)
        with progress_display("ingest") if show_progress else NullProgress() as progress:
            docs: Any = progress.add_task("documents", total=len(records))
            emb: list[Any] = []
            index_task: list[Any] = []

            def tick(stage: str, n: int, total: int | None = None) -> None:
                if stage == "index":
                    if kept is not None:
                        # every batch committed; until "analyze", the graph is unbuilt
                        kept["indexing"] = 1
                    # a new version's HNSW graph, built once after its first rows
                    if not index_task:
                        index_task.append(progress.add_task("building HNSW index", total=total))
                    progress.update(index_task[0], completed=n, total=total)
                elif stage == "embedding":
                    # shown once something is queued for the model, not as "0/?" when
                    # every chunk kept its vector
                    if not emb:
                        emb.append(progress.add_task("embedding (texts queued so far)",
                                                     total=total))
                    progress.update(emb[0], advance=n, total=total)
                elif stage == "documents":
                    # told once the documents' batch has committed
                    if kept is not None:
                        kept["stored"] = kept.get("stored", 0) + n
                    progress.advance(docs, n)
                elif stage == "pruned" and kept is not None:
                    kept["pruned"] = n
                elif stage == "analyze" and kept is not None:
                    kept.pop("indexing", None)

            ingester = Ingester(conn, collection, embedder=embedder, chunk_words=chunk_words,
                                private=private, progress=tick, analyzer=analyzer)
            stats = ingester.ingest(records, prune=prune)
            if not prune and paths and all(path.is_dir() for path in paths):
                unread = _unread_note(conn, collection, {r.citekey for r in records},
                                      set(copies), len(paths))
                if unread:
                    stats.notes.append(unread)
            if not prune:
                # the files written: not those left out as copies of another
                moved = _moved_note(conn, collection, {r.citekey: origins[r.citekey]
                                                       for r in records}, paths)
                if moved:
                    stats.notes.append(moved)
        stats.notes.extend(skipped)
        return stats


def _moved_note(conn: Any, collection: str, origins: dict[str, Path], paths: list[Path]
                ) -> str | None:
    """The note on files this ingest wrote that ``collection`` also holds under a longer
    citekey, their path from a folder above (``sub/guide`` for the ``guide`` that
    ``pgfunnel ingest docs/sub/guide.md`` wrote, where ``docs`` was ingested before): a
    file edited and ingested by itself, without ``--root``, became a second document
    beside its old one, both searchable, and nothing said so. ``paths``: those given, for
    the ingest with ``--root`` that the note suggests."""
    import os

    from pgfunnel.ingest import moved_files

    found = [(m.citekey, m.stored, m.path) for m in moved_files(conn, collection, origins)]
    if not found:
        return None
    key, other, path = found[0]
    # the folder as the path was given (absolute, or from here), else from here
    levels = other.count("/")
    root = (str(path.parents[levels]) if levels < len(path.parents)
            else os.path.relpath(Path(os.path.abspath(path)).parents[levels]))
    named = ", ".join(f"{k!r} beside {o!r}" for k, o, _ in found[:_UNREAD_NAMED])
    more = len(found) - _UNREAD_NAMED
    if more > 0:
        named += f" and {more:,} more"
    new = " ".join(shlex.quote(k) for k in sorted({k for k, _, _ in found}))
    return (f"collection {collection!r} now holds {plural(len(found), 'file')} twice, "
            f"under the citekey this ingest gave and under its path from a folder above, "
            f"which an earlier ingest gave ({named}): both are searchable, the older with "
            "the file's text as it was then. A file's citekey is its path from the folder "
            "given; give that folder as --root to replace the older (`pgfunnel ingest "
            f"{' '.join(shlex.quote(str(p)) for p in paths)} --root {shlex.quote(root)}`), "
            "and `pgfunnel delete "
            f"{new}` takes out the documents this ingest added")


#: how many citekeys of documents an ingest did not read its note names
_UNREAD_NAMED = 5


def _unread_note(conn: Any, collection: str, read: set[str], copies: set[str],
                 folders: int) -> str | None:
    """The note on the documents of ``collection`` that an ingest of whole folders (as
    many as ``folders``) did not read: ingest never deletes, so a file removed from the
    folder left its document searchable, and the summary (`20 documents written, ...`)
    said nothing of the 21st."""
    from pgfunnel.ingest import collection_id, unread_citekeys

    cid = collection_id(conn, collection)
    if cid is None:
        return None
    unread = [key for key in unread_citekeys(conn, cid, read) if key not in copies]
    if not unread:
        return None
    # quoted as the other notes' citekeys are: unquoted, "(bug reports, git-README)" read
    # as one citekey or three, a name with a space or comma being a file's
    named = ", ".join(repr(key) for key in unread[:_UNREAD_NAMED])
    more = len(unread) - _UNREAD_NAMED
    if more > 0:
        named += f" and {more:,} more"
    one = len(unread) == 1
    return (f"collection {collection!r} holds {plural(len(unread), 'document')} that "
            f"the {'folder' if folders == 1 else 'folders'} did not give ({named}): "
            f"{'a file' if one else 'files'} removed since, or written by another source. "
            "Ingest never deletes: `pgfunnel delete CITEKEY...` does, and --prune makes "
            "the collection match the folders given (--dry-run --prune lists what it "
            "would delete)")


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(
        # one that cannot be read is ingest's error (exit 1), not a usage one
        parser=given_path,
        help="Files or folders (.md, .mdx, .rst, .adoc, .txt, .html, .ipynb, .jsonl, and each "
             "of these compressed with gzip: README.md.gz). Folders are read recursively.")],
    collection: CollectionOption = sql_defaults.COLLECTION,
    chunk_words: Annotated[int, typer.Option(
        callback=in_range(20), help="Target chunk size in words (at least 20).")] = 200,
    model: Annotated[str | None, typer.Option(
        help="Embedding model for a new collection (default all-MiniLM-L6-v2, bundled). "
             "An existing collection uses its active index version's model; naming another "
             "is refused (change it with `pgfunnel reindex --model`).")] = None,
    private: Annotated[bool, typer.Option(
        help="Create the collection private: documents without readers are visible to "
             "nobody instead of everyone in their tenant.")] = False,
    analyzer: Annotated[str | None, typer.Option(
        help="Analyzer for a new collection's BM25 terms (default english_v8; german_v8 for "
             "German text; `select * from pgfunnel.analyzers()` lists them). An existing "
             "collection keeps its own; naming another is refused (change it with "
             "`pgfunnel reindex --analyzer`, no model time).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(
        help="Glob of paths to leave out of a folder, relative to it; matches the whole "
             "path ('*' crosses folders) or one part ('_sources'). Repeatable. Hidden "
             "files and folders are always left out.")] = None,
    root: Annotated[Path | None, typer.Option(
        parser=given_path, metavar="<path>",
        help="Citekeys are paths relative to this folder (default: each folder given; a "
             "file given alone: its name without the suffix). Give the corpus folder to "
             "re-ingest one of its files under the same citekey.")] = None,
    prune: Annotated[bool, typer.Option(
        help="Make the collection match the paths: once the ingest has committed, delete "
             "its documents this run did not read (files removed or --exclude'd since). "
             "Refused when the paths hold no document.")] = False,
    encoding: Annotated[str | None, typer.Option(
        metavar="NAME",
        help="Read files that are not UTF-8 in this encoding (cp1252, latin-1, shift_jis: "
             "any Python knows); valid UTF-8 is still read as UTF-8, an HTML page's "
             "declared charset wins when its bytes fit it, and a file whose byte order mark "
             "says another encoding is an error. Default: such a file is an error.")
    ] = None,
    max_expanded_mib: Annotated[int | None, typer.Option(
        callback=in_range(1), metavar="MIB",
        help="The most a gzip-compressed file (.md.gz, .jsonl.gz, ...) is read to, "
             "decompressed, in MiB; one that expands past it is an error. It is held in "
             "memory as it expands. Default 1024 (1 GiB).")] = None,
    dry_run_only: Annotated[bool, typer.Option(
        "--dry-run", help="Read and chunk only: list each document's citekey, title and "
                          "chunks, and what was left out; no database (with --prune: "
                          "reads which documents it would delete; a --collection with "
                          "whitespace at an end is looked up in --dsn), no model.")] = False,
    dsn: DsnOption = None,
    json_out: JsonOption = False,
) -> None:
    """Ingest documents: chunk, embed, index (BM25 + HNSW). Re-ingesting replaces by citekey."""
    _quiet_warnings()
    if dry_run_only:
        with handle_errors({**INDEX_FLAGS, "encoding": "--encoding"}):
            # the name a real run would refuse, refused here too: a dry run that passes
            # promises the ingest would start
            _check_dry_run_collection(dsn, collection, prune)
            plan = dry_run(paths, chunk_words, exclude, root,
                           (dsn, collection) if prune else None, encoding,
                           show_progress=not json_out, max_expanded_mib=max_expanded_mib)
        if json_out:
            emit_json(plan, ("notes",))
            return
        table = Table("citekey", "title", "chunks", "words", box=None, pad_edge=False)
        # a control character in a file's name or title is shown, not sent to the terminal
        for d in plan["documents"]:
            table.add_row(shown(d["citekey"]), shown(d["title"]), f"{d['chunks']:,}",
                          f"{d['words']:,}")
        print_table(table, [f"{shown(d['citekey'])}  ({plural(d['chunks'], 'chunk')}, "
                            f"{plural(d['words'], 'word')})  {shown(d['title'])}"
                            for d in plan["documents"]])
        out.print(f"{plural(len(plan['documents']), 'document')}, "
                  f"{plural(plan['chunks'], 'chunk')}, {plural(plan['words'], 'word')} "
                  "(dry run: nothing written)", highlight=False, soft_wrap=True)
        # what was left out and why: notes, on stderr, so that the listing is stdout's alone
        for note in plan["notes"]:
            labelled("note", "yellow", note)
        if prune:
            _print_pruned(plan["pruned"], collection, "would be pruned (dry run: nothing "
                          "deleted)")
        return
    kept: dict[str, int] = {}
    waited: list[str] = []

    def stopped() -> str:
        # each batch is one transaction: a document is in whole, with its chunks, terms
        # and vectors, or not at all
        stored, total = kept.get("stored", 0), kept.get("total")
        if "pruned" in kept:
            # the prune committed; only the summary was cut short
            return (f"all {total:,} documents stored in collection {collection!r} and "
                    f"{plural(kept['pruned'], 'document')} not read pruned")
        # the prune runs only once every batch has committed, as one transaction
        unpruned = "; nothing was pruned" if prune else ""
        if not stored:
            return (f"no document was written to collection {collection!r} (each batch "
                    f"of documents is all or nothing){unpruned}; run the same ingest again")
        if "indexing" in kept:
            # the documents are in and searchable; "all stored" alone read as done, and
            # the dense leg read every vector until someone ran doctor
            return (f"{stored:,} of {total:,} documents stored in collection {collection!r}, "
                    "each whole (each batch of documents is all or nothing), but not its "
                    "HNSW index, which was being built (dense searches scan every vector "
                    f"until it is){unpruned}; the same ingest again skips the documents, "
                    "unchanged, and builds it")
        return (f"{stored:,} of {total:,} documents stored in collection {collection!r}, "
                "each whole (each batch of documents is all or nothing)"
                f"{unpruned}; the same ingest again skips them, unchanged, and goes on")

    def kept_then() -> str | None:
        # after an error (a cancel request, a lost connection, a bad document at a later
        # batch): what the batches committed before it kept, in Ctrl-C's words, so that
        # an operator knows a rerun resumes; nothing added when no batch had committed
        return stopped() if kept.get("stored") or "pruned" in kept else None

    with handle_errors({**index_flags(model), "encoding": "--encoding"}, interrupted=stopped,
                       kept=kept_then):
        stats = do_ingest(dsn, paths, collection, chunk_words, model, private,
                          show_progress=not json_out, exclude=exclude, root=root, kept=kept,
                          prune=prune, encoding=encoding, analyzer=analyzer,
                          max_expanded_mib=max_expanded_mib,
                          on_wait=_waiting_note(json_out, waited))
    if json_out:
        stats.notes[:0] = waited
        emit_json(stats.__dict__, ("notes",))
        return
    # the progress bar counts the texts the model read; chunks that repeat another's text
    # share its vector, and the summary says so rather than leave the two counts apart
    used = stats.texts_embedded - stats.texts_unused
    shared = stats.chunks_embedded - used
    as_texts = f" as {plural(used, 'distinct text')}" if used and shared > 0 else ""
    # the loser of two simultaneous ingests of the same files embeds every text, then
    # finds them written by the other: "0 embedded" beside "embed 50.9s" hid where the
    # time went
    unused = (f", {plural(stats.texts_unused, 'text')} embedded then found written by "
              "another ingest" if stats.texts_unused else "")
    out.print(f"{plural(stats.documents_written, 'document')} written, "
              f"{stats.documents_unchanged:,} unchanged; {plural(stats.chunks_written, 'chunk')} "
              f"({stats.chunks_embedded:,} embedded{as_texts}, {stats.chunks_reused:,} "
              f"reused{unused}), "
              f"{stats.chunks_removed:,} replaced; index version {stats.index_version}. "
              f"embed {stats.embed_seconds:.1f}s, database {stats.db_seconds:.1f}s",
              highlight=False, soft_wrap=True)
    for note in stats.notes:
        labelled("note", "yellow", note)
    if prune:
        _print_pruned(stats.pruned, collection, "pruned (not read by this ingest)")


def _print_pruned(citekeys: list[str], collection: str, what: str) -> None:
    """How many documents of ``collection`` --prune deletes, then each citekey on a line of
    its own, control characters shown."""
    out.print(f"{plural(len(citekeys), 'document')} of collection {collection!r} "
              f"{what}{':' if citekeys else ''}", highlight=False, soft_wrap=True)
    for key in citekeys:
        out.print(f"  {shown(key)}", highlight=False, soft_wrap=True)


@app.command(cls=QueryTextCommand)
def embed(
    text: Annotated[str, typer.Argument(help="The query text to embed.")],
    collection: CollectionOption = sql_defaults.COLLECTION,
    model: Annotated[str | None, typer.Option(
        help="Embedding model. Default: the collection's active index version's model "
             "(searches must be embedded with the model their version was built with).")
    ] = None,
    dsn: DsnOption = None,
    json_out: JsonOption = False,
) -> None:
    """Print TEXT's embedding as a pgvector literal, for funnel_search in SQL (psql -v)."""
    from pgfunnel.embedder import Embedder
    from pgfunnel.errors import InvalidInputError

    _quiet_warnings()
    # a model from the collection's active version is not --model's
    with handle_errors({"collection": "--collection",
                        **({} if model is None else {"embedding_model": "--model"})}):
        if not text.strip():
            # the vector of nothing would search for nothing in particular
            raise InvalidInputError("TEXT: is empty or only white space: there is nothing to embed")
        if model is None:
            from pgfunnel.search import Funnel

            with Funnel(dsn, collection, embedder=None) as funnel:
                model, _ = funnel.active_model()
        vector = Embedder(model).embed_query(text)
    literal = "[" + ",".join(f"{x:.8g}" for x in vector.tolist()) + "]"
    if json_out:
        emit_json({"model": model, "dimensions": len(vector), "embedding": vector.tolist()})
    else:
        print(literal)


def _citekeys_given(citekeys: list[str]) -> list[str]:
    """An empty citekey (`delete "$KEY"` with the variable unset) is a usage error: no
    document has one, and it was counted as "not in collection" with exit 0, as if a
    document had been looked for."""
    if any(not key.strip() for key in citekeys):
        raise typer.BadParameter("a citekey is empty (an unset variable?); give the "
                                 "citekeys of the documents to delete")
    return citekeys


@app.command()
def delete(
    citekeys: Annotated[list[str], typer.Argument(help="Citekeys of the documents to delete.",
                                                  callback=_citekeys_given)],
    collection: CollectionOption = sql_defaults.COLLECTION,
    dsn: DsnOption = None,
    json_out: JsonOption = False,
) -> None:
    """Delete documents and their chunks (BM25 statistics stay exact)."""
    from pgfunnel.db import connect, require_schema
    from pgfunnel.ingest import CitekeyHint, delete_documents_report

    with handle_errors(), connect(dsn, autocommit=True) as conn:
        from pgfunnel.versions import name_session

        # named as reindex names its session: one waiting for the collection's lock (an
        # ingest batch) is told apart in pg_stat_activity and pg_locks
        name_session(conn, f"pgfunnel delete {collection}")
        require_schema(conn)
        # named, not only counted: "1 of the citekeys given was not in collection" left
        # the user to find which of several (a typo, a file's name for its path). The
        # JSON hints every one (one query, whatever their number): a script reads them all
        report = delete_documents_report(conn, collection, citekeys,
                                         hints=len(citekeys) if json_out else _UNREAD_NAMED)
    n, missing, given = report.deleted, report.missing, list(dict.fromkeys(citekeys))
    if json_out:
        # one entry per citekey not found, in their order, both lists always there (empty
        # where there is no hint), so a script reads one shape; each list names the first
        # few, and its *_more says how many more the collection holds
        empty = CitekeyHint()
        hints = [{"citekey": key, "other_forms": hint.other_forms,
                  "other_forms_more": hint.more_other_forms, "longer_paths": hint.longer,
                  "longer_paths_more": hint.more_longer}
                 for key in missing for hint in [report.hints.get(key, empty)]]
        emit_json({"collection": collection, "deleted": n,
                   "not_found": len(given) - n, "not_found_citekeys": missing,
                   "not_found_hints": hints})
    else:
        out.print(f"{plural(n, 'document')} deleted.", soft_wrap=True)
        if n < len(given):
            count = len(given) - n
            named = ", ".join(
                repr(key) + "".join(f" (stored {what}: {', '.join(map(repr, keys))}"
                                    + (f" and {more:,} more)" if more else ")")
                                    for what, keys, more in _hint_parts(hint))
                for key, hint in report.hints.items())
            if len(missing) > _UNREAD_NAMED:
                named += f" and {len(missing) - _UNREAD_NAMED:,} more"
            out.print(shown(f"{count} of the citekeys given {'was' if count == 1 else 'were'} "
                            f"not in collection {collection!r}" + (f": {named}." if named
                                                                    else ".")),
                      highlight=False, soft_wrap=True)


def _hint_parts(hint: CitekeyHint) -> list[tuple[str, list[str], int]]:
    """What the delete's note says of a citekey it did not find: the citekeys stored in
    another Unicode form of it, then those that are it under a folder, each with how many
    more the collection holds than are named."""
    parts: list[tuple[str, list[str], int]] = []
    for form in ("decomposed", "composed"):
        # NFD, as macOS writes file names, is what a citekey from a folder holds; a
        # keyboard types NFC: the two print alike, so the note says which is stored
        keys = [k for k in hint.other_forms if (unicodedata.normalize("NFC", k) != k)
                == (form == "decomposed")]
        if keys:
            parts.append((f"with {form} accents", keys, 0))
    if parts and hint.more_other_forms:
        # the ones not named are of either form: counted after the last named
        parts[-1] = (*parts[-1][:2], hint.more_other_forms)
    if hint.longer:
        parts.append(("under a longer path", hint.longer, hint.more_longer))
    return parts


def _text_cell(text: str) -> str:
    """A chunk's text on one line, its first 200 characters, control characters shown."""
    return shown(" ".join(text.split())[:200])


def _results_table(title: str, results: list[Any], show_rerank: bool = False,
                   width: int | None = None, whole: bool = False) -> Table:
    """The results as a table that fits ``width`` (the console's), a long citekey and the
    text cut with an ellipsis; ``whole``: every cell as it is, to measure whether the
    table fits a pipe unwrapped (print_table)."""
    table = Table(title=title, title_justify="left", show_lines=False)
    rerank_width = 9 if show_rerank else 0
    # 22 columns keeps the text readable at 80; a wider console shows citekeys whole (a
    # 120-column one cut `guide-payments-and-plans` to 22 beside 60 columns of text), as
    # `pgfunnel explain QUERY CITEKEY` needs them, while the text keeps 40 columns
    citekey_width = min(max([16, *(len(shown(r.citekey)) for r in results)]),
                        max(22, (width or out.width) - 35 - rerank_width - 40))
    for col in ("#", "citekey", "lex", "dense", "fused"):
        if col == "citekey" and not whole:
            table.add_column(col, no_wrap=True, overflow="ellipsis", min_width=16,
                             max_width=citekey_width)
        else:
            table.add_column(col, justify="right" if col != "citekey" else "left",
                             no_wrap=True, min_width=max(3, len(col)))
    if show_rerank:
        table.add_column("rerank", justify="right")
    # Rich does not narrow a no_wrap column to fit, so a fixed width would push the table
    # past the console and crop its right edge (80 columns when piped): the text column
    # gets what the other columns leave.
    others = 35 + citekey_width + rerank_width
    table.add_column("text", overflow="ellipsis", no_wrap=True,
                     max_width=None if whole else max(8, min(80, (width or out.width) - others)))
    for r in results:
        row = [str(r.final_rank), shown(r.citekey), str(r.lexical_rank or "-"),
               str(r.dense_rank or "-"), str(r.fused_rank)]
        if show_rerank:
            row.append(str(r.rerank_rank or "-"))
        row.append(_text_cell(r.text))
        table.add_row(*row)
    return table


def _result_lines(results: list[Any], show_rerank: bool = False) -> list[str]:
    """One whole line per result, for a pipe or a log: `pgfunnel search ... | grep KEY`
    gets the citekey as stored, never cut to 22 characters."""
    def rank(x: int | None) -> str:
        return str(x or "-")

    return [f"{r.final_rank}  {shown(r.citekey)}  lex {rank(r.lexical_rank)}  "
            f"dense {rank(r.dense_rank)}  fused {rank(r.fused_rank)}"
            + (f"  rerank {rank(r.rerank_rank)}" if show_rerank else "")
            + f"  {_text_cell(r.text)}" for r in results]


def _print_results(title: str, results: list[Any], show_rerank: bool = False,
                   lines: bool = False) -> None:
    """The results table on a terminal; in a pipe or a log, where a cut citekey or text is
    no use to grep, one whole line per result where the cells, whole, do not fit (``lines``:
    whether they fit or not)."""
    if out.is_terminal:
        out.print(_results_table(title, results, show_rerank=show_rerank))
    elif lines:
        out.print(title, highlight=False, soft_wrap=True)
        for line in _result_lines(results, show_rerank=show_rerank):
            out.print(line, highlight=False, soft_wrap=True)
    else:
        print_table(_results_table(title, results, show_rerank=show_rerank, whole=True),
                    _result_lines(results, show_rerank=show_rerank))


def _capped_note(results: list[Any], per_source_cap: int,
                 explain_with: tuple[str, list[str]] | None = None) -> str | None:
    """The line saying which fused ranks the per-source cap dropped, for a search without
    a rerank: its results are the first k of the pool after the cap, in fused order, so a
    fused rank missing above the last one shown was capped (the pool holds only visible
    chunks). Without it the cap acted unseen: ranks 1, 3, 4 with nothing to say why.
    ``explain_with`` (the query and the options of the search that ran) makes its explain
    command one to paste, where the caller knows them all (the demo)."""
    if not results:
        return None
    shown_ranks = {r.fused_rank for r in results}
    missing = [m for m in range(1, max(shown_ranks) + 1) if m not in shown_ranks]
    if not missing:
        return None
    counts: dict[str, list[int]] = {}
    for r in results:
        counts.setdefault(r.citekey, []).append(r.fused_rank)
    full = [c for c, ranks in counts.items()
            if len(ranks) >= per_source_cap and sorted(ranks)[per_source_cap - 1] < missing[-1]]
    ranks_text = ", ".join(str(m) for m in missing)
    many = len(missing) > 1
    # the citekeys at the cap before the last missing rank: which one each missing chunk
    # belongs to is not in the results, so more than one is named as "one of"
    of = ""
    if full:
        # k 100 under cap 1 would name up to 100: the first five, in rank order
        names = ", ".join(shown(c) for c in full[:5])
        more = f" and {len(full) - 5:,} more" if len(full) > 5 else ""
        of = f" ({'one of ' if len(full) > 1 else ''}{names}{more})"
    what = "each was one more chunk" if many else "it was one more chunk"
    return (f"capped: fused rank{'s' if many else ''} {ranks_text} not shown: "
            f"--per-source-cap {per_source_cap} keeps at most "
            f"{plural(per_source_cap, 'chunk')} per citekey, and {what} of a citekey already "
            f"at the cap{of}; a higher --per-source-cap shows "
            f"{'them' if many else 'it'}, and {_explain_capped(full, explain_with)} "
            "capped chunks as CITEKEY#ORDINAL")


def _explain_capped(full: list[str], explain_with: tuple[str, list[str]] | None) -> str:
    """The explain command that names a citekey's capped chunks, and whose they are."""
    if explain_with is None:
        return "`pgfunnel explain QUERY CITEKEY` (with this search's options) names the citekey's"
    query, options = explain_with
    one = len(full) == 1
    command = shlex.join(["pgfunnel", "explain", query, shown(full[0]) if one else "CITEKEY",
                          *options])
    whose = "its" if one else "the citekey's"
    return f"`{command}` names {whose}"


@app.command(cls=QueryTextCommand)
def search(
    query: Annotated[str, typer.Argument(help="The query text.")],
    k: Annotated[int, typer.Option(
        "--k", "-k", help="How many chunks to return.")] = sql_defaults.K,
    collection: CollectionOption = sql_defaults.COLLECTION,
    principal: PrincipalOption = None,
    tenant: TenantOption = None,
    language: LanguageOption = None,
    fusion: FusionOption = sql_defaults.FUSION,
    rrf_k: RrfKOption = None,
    lexical_weight: LexicalWeightOption = None,
    dense_weight: DenseWeightOption = None,
    overfetch: OverfetchOption = sql_defaults.OVERFETCH,
    per_source_cap: CapOption = sql_defaults.PER_SOURCE_CAP,
    lexical_depth: LexicalDepthOption = None,
    dense_depth: DenseDepthOption = None,
    lexical_only: LexicalOnlyOption = False,
    history: HistoryOption = None,
    rerank: Annotated[bool, typer.Option(help="Rerank the pool with a cross-encoder.")] = False,
    rerank_model: Annotated[str | None, typer.Option(
        help="Cross-encoder model id or local path; needs --rerank. Default: the "
             "ms-marco-MiniLM-L6-v2 cross-encoder.")] = None,
    rerank_depth: Annotated[int | None, typer.Option(
        help="How many pool candidates the reranker scores (default: k x overfetch, the "
             "pool as asked; a pool the search widened for the per-source cap keeps its "
             "tail in fused order).")] = None,
    trace: Annotated[bool, typer.Option(help="Record a trace (search_log).")] = False,
    timeout_ms: Annotated[int | None, typer.Option(
        help="statement_timeout for the search, in ms. Default: the session's own "
             "(the role's, database's or server's setting).")] = None,
    dsn: DsnOption = None,
    json_out: JsonOption = False,
) -> None:
    """Search a collection and print the results with per-leg ranks."""
    from pgfunnel.errors import ConfigError
    from pgfunnel.search import Funnel, check_rerank_depth

    _quiet_warnings()
    with handle_errors({**FUNNEL_FLAGS, "rerank_depth": "--rerank-depth",
                        "statement_timeout_ms": "--timeout-ms",
                        "rerank_model": "--rerank-model", "query_text": "QUERY",
                        "trace": "--trace", "history": "--history"}):
        reranker = None
        turns = check_history(history)
        refuse_dense_options(lexical_only, dense_weight=dense_weight, dense_depth=dense_depth)
        weights = leg_weights(lexical_weight, dense_weight, lexical_only)
        rrf_args = rrf_k_args(rrf_k, fusion)
        if not rerank and (rerank_model is not None or rerank_depth is not None):
            # without --rerank they were ignored: results that were never reranked,
            # with nothing to say so
            raise ConfigError("rerank_model" if rerank_model is not None else "rerank_depth",
                              "applies only with --rerank; add --rerank to rerank the pool")
        # told before the cross-encoder loads (seconds), not after it
        check_rerank_depth(rerank_depth)
        from pgfunnel.db import connect

        search_params: SearchArgs = {
            "principals": principal or [], "tenant": tenant, "language": language,
            "fusion": fusion,
            **rrf_args, "weights": weights, "overfetch": overfetch,
            "per_source_cap": per_source_cap, "lexical_depth": lexical_depth,
            "dense_depth": dense_depth, "trace": trace, "statement_timeout_ms": timeout_ms}
        # searches run on an older release's functions until migrate: say so, as ingest
        # (which refuses) and doctor (an error) do; before the search, which can fail on
        # a function the older release lacks (--trace)
        with connect(dsn, autocommit=True) as conn:
            stale = stale_functions_notice(conn, "search")
            if rerank and stale is None:
                # the cross-encoder loads for seconds: a bad value (--k 0) or an unknown
                # collection is told before that, not after (nor hidden behind a model
                # that cannot load)
                Funnel(conn, collection, embedder=None).check(query, k=k, **search_params)
        if rerank:
            from pgfunnel.rerank import DEFAULT_RERANK_MODEL, Reranker

            # '' is refused by the Reranker, not taken as the default model
            reranker = Reranker(DEFAULT_RERANK_MODEL if rerank_model is None else rerank_model)
        if stale and not json_out:
            labelled("warning", "yellow", stale)
        funnel = Funnel(dsn, collection, embedder=None if lexical_only else "auto",
                        reranker=reranker, rerank_depth=rerank_depth)
        with warnings.catch_warnings():
            quiet_search_notices()
            response = funnel.search(query, k=k, history=turns, **search_params)
        followup = followup_of(response.transforms)
        searched = followup["query"] if followup else query
        # what the search ran, which it read in its own transaction
        used = None if response.fusion is None else response.fusion.as_dict()
        funnel.close()
        # the number `versions list` shows: the id alone (3 for version 1 of a collection
        # whose database holds others) could not be told from it
        version = _version_number(dsn, response.index_version_id) if json_out else None
    if json_out:
        if stale:
            response.notices.append(stale)
        emit_json({"query": query, "notices": response.notices,
                   "search_id": response.search_id, "timings_ms": response.timings_ms,
                   "reranked": response.reranked,
                   "rerank_skipped_reason": response.rerank_skipped_reason,
                   "index_version": version,
                   "index_version_id": response.index_version_id,
                   "history": turns or [],
                   "searched": searched,
                   "followup": followup,
                   # the fields docs/cli.md names: Result.document_id, the database's
                   # row id, is the Python API's (an application's link to its own row)
                   "results": [{k: v for k, v in r.__dict__.items() if k != "document_id"}
                               for r in response.results],
                   "fusion": used}, ("notices",))
        return
    for note in response.notices:
        labelled("warning", "yellow", note)
    print_followup(followup)
    if (fusion_line := _fusion_line(used)) is not None:
        out.print(fusion_line, highlight=False, soft_wrap=True)
    if not response.results:
        out.print("no results.", soft_wrap=True)
    else:
        _print_results(f"{searched!r}", response.results, show_rerank=response.reranked)
        capped = None if response.reranked else _capped_note(response.results, per_source_cap)
        if capped:
            out.print(capped, highlight=False, soft_wrap=True)
    # a search that found nothing is traced too, and its trace is the one to read
    if response.search_id:
        out.print(f"trace: search_id {response.search_id}", soft_wrap=True)


def _fusion_line(used: dict[str, Any] | None) -> str | None:
    """``fusion: minmax; weights: lexical 1, dense 0.2 (chosen: identifier)``."""
    if used is None:
        return None
    if used["fusion"] == "none":
        return f"fusion: none (one leg: {used['legs'][0]})"
    lexical, dense = (f"{w:g}" for w in used["weights"])
    rrf = f", rrf_k {used['rrf_k']:g}" if used["rrf_k"] is not None else ""
    how = f"chosen: {used['weights_rule']}" if used["weights_rule"] else "given"
    return f"fusion: {used['fusion']}{rrf}; weights: lexical {lexical}, dense {dense} ({how})"


def _version_number(dsn: str | None, version_id: int | None) -> int | None:
    """The number within its collection of the index version ``version_id`` (None for
    none, or for a version dropped since)."""
    if version_id is None:
        return None
    from pgfunnel.db import connect

    with connect(dsn, autocommit=True) as conn:
        row = conn.execute("select version from pgfunnel.index_version where id = %s",
                           (version_id,)).fetchone()
    return None if row is None else int(row[0])


DEMO_QUERIES = [
    ("identifier, typed as the docs write it", "ERR-{code}"),
    ("identifier, typed with a space", "err {code}"),
    ("identifier, typed without the hyphen", "what does err{code} mean"),
    ("identifier, a dotted event name", "invoice.payment_failed"),
    ("paraphrase: 'money back' where the docs say 'refund'",
     "get my money back on a monthly plan"),
    ("plan qualifier: near-duplicates differ in one word", "storage quota on the trial plan"),
    ("no answer in the corpus", "do you ship hardware to antarctica"),
]

# one long guide (guide-building-integrations, six sections) holds the best fused chunks
# of this query: the per-source cap skips them past its third and other citekeys' chunks
# move up, which none of DEMO_QUERIES shows (their best chunks come from many citekeys)
DEMO_CAP_QUERY = "building an API integration"


@app.command()
def demo(
    dsn: DsnOption = None,
    k: Annotated[int, typer.Option("--k", "-k", callback=in_range(1, sql_defaults.K_MOST),
                                   help=f"Results per query (1 to {sql_defaults.K_MOST}).")] = 5,
) -> None:
    """Init, ingest the bundled help-center corpus, and show what each stage did."""
    import json

    from pgfunnel import schema
    from pgfunnel.search import Funnel

    _quiet_warnings()
    with handle_errors():
        t0 = time.perf_counter()
        info = schema.init(dsn)
        out.print(f"[bold]1. init[/bold]: schema at revision {info['revision']}",
                  markup=True, soft_wrap=True)
        stats = do_ingest(dsn, [SAMPLE_CORPUS, DEMO_INTERNAL], "demo", 200, None, False)
        # chunks_written counts this run's writes: a second demo wrote none, and said
        # "0 chunks into collection 'demo'" of a collection holding 226
        out.print(f"[bold]2. ingest[/bold]: {plural(stats.documents_written, 'document')} "
                  f"written, {stats.documents_unchanged:,} unchanged "
                  f"({plural(stats.chunks_written, 'chunk')} written) into collection "
                  f"'demo' (two of the documents are readable by "
                  f"'{DEMO_STAFF}' only)", markup=True, soft_wrap=True)
        codes = [json.loads(line)["citekey"] for line in SAMPLE_CORPUS.read_text().splitlines()
                 if line.startswith('{"citekey": "err-')]
        code = codes[0].split("-")[1] if codes else "4029"
        funnel = Funnel(dsn, "demo")
        # the legend says what is printed: a table's columns on a terminal; in a pipe or a
        # log, a line per result (whose rank has no `#` header to name it)
        out.print("[bold]3. searches[/bold] " + (
            "(lex/dense = rank in each leg, fused = rank after fusion, # = rank after the "
            "per-citekey cap)" if out.is_terminal else
            "(a line per result: its rank after the per-citekey cap, its citekey, lex/dense "
            "N = its rank in each leg, fused N = its rank after fusion, then its text)"),
                  markup=True, soft_wrap=True)
        for label, template in DEMO_QUERIES:
            q = template.format(code=code)
            with warnings.catch_warnings():
                quiet_search_notices()
                resp = funnel.search(q, k=k, trace=True)
            _print_results(f"{label}: {q!r}", resp.results, lines=True)
            for note in resp.notices:
                out.print(f"  [yellow]{escape(note)}[/yellow]",
                          highlight=False, markup=True, soft_wrap=True)
            out.print(f"  pool {len(resp.pool) or k * 4} candidates; "
                      f"{resp.timings_ms.get('funnel_search', 0):.1f} ms in SQL, "
                      f"{resp.timings_ms.get('embed', 0):.1f} ms embedding the query\n",
                      soft_wrap=True)
        _demo_cap(funnel, k)
        q = f"ERR-{code}"
        out.print(f"[bold]5. access[/bold]: {q!r} for a reader with no principals (public "
                  f"documents only), then for principal '{DEMO_STAFF}'",
                  markup=True, soft_wrap=True)
        staff_only = {json.loads(line)["citekey"]
                      for line in DEMO_INTERNAL.read_text().splitlines() if line.strip()}
        shown: list[list[str]] = []
        for principals in ([], [DEMO_STAFF]):
            with warnings.catch_warnings():
                quiet_search_notices()
                resp = funnel.search(q, k=k, principals=principals)
            _print_results(f"principals {principals}", resp.results, lines=True)
            shown.append([r.citekey for r in resp.results])
        # say what the two tables show, so the reader need not diff them
        public_hits = sorted(staff_only.intersection(shown[0]))
        staff_hits = [f"{c} at rank {i}" for i, c in enumerate(shown[1], 1) if c in staff_only]
        out.print(f"  staff-only documents returned with no principals: "
                  f"{', '.join(public_hits) or 'none'}; for '{DEMO_STAFF}': "
                  f"{', '.join(staff_hits) or 'none in the first ' + str(k)} "
                  f"(access is filtered inside each leg, before ranking)\n",
                  highlight=False, soft_wrap=True)
        funnel.close()
        from pgfunnel.db import resolve_dsn

        # the query's vector comes from `pgfunnel embed`: without it (NULL) funnel_search
        # runs the lexical leg alone, another search than the one above. psql substitutes
        # its variables in a script it reads, not in -c. A demo given --dsn passes it to
        # embed too (suggest): without it, embed read the embedded server's 'demo'
        # collection (or started one), not the database the demo filled; a DSN holding
        # a password is printed as "$PGFUNNEL_DSN", for psql too
        server = resolve_dsn(dsn)
        embed = suggest(f"pgfunnel embed '{q}' -c demo", note=False)
        psql_dsn = HIDDEN_DSN if holds_password(server) else shlex.quote(server)
        unset = HIDDEN_DSN_NOTE if HIDDEN_DSN in embed else ""
        psql, bundled = demo_psql()
        where = "; no psql on the PATH: the embedded server's own" if bundled else ""
        # which search: after the cap step, "the same search" could be any of them; the
        # columns are the ones its lines print (fused: the cap step's gaps show in SQL too)
        out.print(f"done in {time.perf_counter() - t0:.1f}s. The same search in SQL as the "
                  f"last one above ({q!r} for principal '{DEMO_STAFF}'; pgfunnel on the "
                  f"PATH: `. .venv/bin/activate`{where}){unset}:\n"
                  f"  {psql} {psql_dsn} -v q=\"$({embed})\" <<'SQL'\n"
                  "  select citekey, lexical_rank, dense_rank, fused_rank, final_rank\n"
                  f"    from funnel_search('{q}', :'q', collection => 'demo', k => {k},\n"
                  "                       principals => '{" + DEMO_STAFF + "}');\n"
                  "SQL",
                  highlight=False, soft_wrap=True)


def _demo_cap(funnel: Any, k: int) -> None:
    """The demo's step 4: the per-source cap acting on a query one citekey dominates, with
    search's capped line (``_capped_note``) and the chunks that moved up in words. Where
    the default cap skips no rank in the first k (-k 2 or 3), the same query follows
    with --per-source-cap 1, and the line says so."""
    from pgfunnel.search import SearchParams

    default_cap = SearchParams.per_source_cap
    out.print(f"[bold]4. per-source cap[/bold]: {DEMO_CAP_QUERY!r}, which one guide answers "
              f"from many of its sections; a citekey keeps at most {default_cap} chunks "
              "(--per-source-cap, the default), so the fused ranks of its further chunks "
              "are skipped and other citekeys' chunks move up",
              markup=True, soft_wrap=True)
    for cap in (default_cap, 1):
        with warnings.catch_warnings():
            quiet_search_notices()
            resp = funnel.search(DEMO_CAP_QUERY, k=k, per_source_cap=cap)
        default = " (the default)" if cap == default_cap else ""
        _print_results(f"--per-source-cap {cap}{default}", resp.results, lines=True)
        for notice in resp.notices:
            out.print(f"  [yellow]{escape(notice)}[/yellow]",
                      highlight=False, markup=True, soft_wrap=True)
        options = [] if funnel.collection == sql_defaults.COLLECTION \
            else ["-c", funnel.collection]
        options += ["-k", str(k)] + ([] if cap == default_cap else ["--per-source-cap", "1"])
        note = _capped_note(resp.results, cap, (DEMO_CAP_QUERY, options))
        if note:
            # a demo given --dsn names it in the command, which otherwise read another server
            out.print(f"  {suggest(note)}", highlight=False, soft_wrap=True)
            moved = [f"{shown(r.citekey)} from fused rank {r.fused_rank} to rank {r.final_rank}"
                     for r in resp.results if r.fused_rank > r.final_rank]
            more = f" and {len(moved) - 3:,} more" if len(moved) > 3 else ""
            out.print(f"  moved up past the capped chunks: {', '.join(moved[:3])}{more}\n",
                      highlight=False, soft_wrap=True)
            return
        if k == 1:
            # a citekey's first chunk is always kept: no cap skips a rank above the first
            out.print("  no fused rank can be skipped in the first result: the cap keeps "
                      "each citekey's first chunk (-k 5 shows it act)\n",
                      highlight=False, soft_wrap=True)
            return
        if cap == 1:
            break
        out.print(f"  no fused rank skipped in the first {plural(k, 'result')} at the "
                  f"default cap: the same query with --per-source-cap 1, which keeps one "
                  "chunk per citekey:", highlight=False, soft_wrap=True)
    out.print()


def demo_psql() -> tuple[str, bool]:
    """The psql that the demo's closing line runs, shell-quoted, and whether it is the
    embedded server's. A machine without a psql on the PATH (a fresh container, a CI
    runner) got `psql: command not found` from the line as printed: the embedded server's
    wheel ships one, which the line then names by its path."""
    import shutil

    if shutil.which("psql"):
        return "psql", False
    try:
        from pgserver._commands import POSTGRES_BIN_PATH
    except ImportError:  # no embedded server installed: nothing better to name
        return "psql", False
    bundled = Path(POSTGRES_BIN_PATH) / "psql"
    if not bundled.is_file():
        return "psql", False
    return shlex.quote(str(bundled)), True


def _register_subcommands() -> None:
    # optional command groups live in their own modules; each exposes register(app)
    for name in ("versions", "evaluate", "doctor", "explain"):
        try:
            module = importlib.import_module(f"pgfunnel.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"pgfunnel.cli.{name}":
                raise
            continue
        module.register(app)


_register_subcommands()


def main() -> None:
    with closed_pipes_end_quietly():
        app()


if __name__ == "__main__":
    main()
