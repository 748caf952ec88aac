"""`pgfunnel eval`: run configurations over judged queries; tables, JSON, charts, floors."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer

from pgfunnel.defaults import COLLECTION

from .common import (
    EXIT_GATE,
    CollectionOption,
    DsnOption,
    JsonOption,
    NullProgress,
    console,
    emit_json,
    given_path,
    handle_errors,
    labelled,
    out,
    progress_display,
)

# the harness's parameters that eval takes as options, by the library's name
EVAL_FLAGS = {"k": "--k", "split": "--split", "config": "--config", "preset": "--preset",
              "principals": "--principal", "floors": "--floors", "qualifiers": "--qualifiers",
              "out": "--out", "trace": "--trace"}


def register(app: typer.Typer) -> None:
    app.command(name="eval")(evaluate)


def evaluate(
    queries: Annotated[Path, typer.Argument(
        # a file that cannot be read is the loader's error (exit 1), not a usage one
        parser=given_path,
        help="Judged queries (JSON Lines); with --qrels, BEIR's "
                             "queries.jsonl.")],
    dsn: DsnOption = None,
    collection: CollectionOption = COLLECTION,
    config: Annotated[list[str] | None, typer.Option(
        "--config", help='A configuration NAME=JSON of search parameters, e.g. '
                         'minmax=\'{"fusion": "minmax"}\'. Repeatable; the first is the '
                         'baseline, unless --preset is also given: the presets\' '
                         'configurations come first, wherever each flag stands.')] = None,
    preset: Annotated[list[str] | None, typer.Option(
        "--preset", help="Named configurations: default, lexical, dense, all-fusions "
                         "(default first, then lexical, dense, rrf, zscore). Repeatable. "
                         "Default: 'default' when no --config is given.")] = None,
    k: Annotated[int, typer.Option("--k", help="Cutoff for the metrics and the search.")] = 10,
    split: Annotated[str | None, typer.Option(
        "--split", help="Evaluate only the dev or the test split. Default: both.")] = None,
    floors: Annotated[Path | None, typer.Option(
        "--floors", parser=given_path, metavar="<path>",
        help="Per-slice floors (JSON); exit 3 when any is not met.")] = None,
    out_dir: Annotated[Path | None, typer.Option(
        "--out", parser=given_path, metavar="<path>",
        help="Write report.json, report.md, runs.jsonl (each query's ranked items "
             "per stage), slices.png and pool_recall.png here.")] = None,
    qualifiers: Annotated[str | None, typer.Option(
        "--qualifiers", help="Comma-separated words that qualify a topic (plan names...), "
                             "for follow-up resolution and decomposition, for a "
                             "configuration without qualifiers of its own. Default: the "
                             "collection's qualifiers setting.")] = None,
    principal: Annotated[list[str] | None, typer.Option(
        "--principal", help="Search as this reader (repeatable). Default: public only.")] = None,
    trace: Annotated[bool, typer.Option(
        "--trace", help="Trace the searches (search_log/search_trace) for stage recall in "
                        "the database.")] = False,
    qrels: Annotated[Path | None, typer.Option(
        "--qrels", parser=given_path, metavar="<path>",
        help="BEIR qrels (TSV: query-id, corpus-id, score): the judgments of the "
             "queries in QUERIES, a BEIR queries.jsonl.")] = None,
    store_qrels: Annotated[bool, typer.Option(
        "--store-qrels", help="Also load the judged queries evaluated (with --split, that "
                               "split's) into pgfunnel.qrel.")] = False,
    json_out: JsonOption = False,
) -> None:
    """Evaluate configurations: per-slice nDCG/recall/MRR with the pool recall of each stage."""

    from pgfunnel.db import connect
    from pgfunnel.errors import ConfigError
    from pgfunnel.eval.harness import (
        Harness,
        missing_items_message,
        parse_config_arg,
        preset_configs,
        respelled_items_message,
        unread_history_message,
    )
    from pgfunnel.eval.harness import (
        store_qrels as store,
    )
    from pgfunnel.eval.metrics import check_floors, load_floors, metric_names
    from pgfunnel.eval.qrels import load_beir, load_queries
    from pgfunnel.eval.report import (
        plot_pool_recall,
        plot_slices,
        pool_recall_title,
        to_dict,
        to_markdown,
        write_json,
        write_runs,
    )

    with handle_errors(EVAL_FLAGS):
        if split not in (None, "dev", "test"):
            raise ConfigError("split", f"must be dev or test, got {split!r}")
        judged = load_queries(queries) if qrels is None else load_beir(queries, qrels)
        configs = []
        if preset or not config:
            configs += preset_configs(*(preset or ["default"]))
        for extra in (parse_config_arg(c) for c in config or []):
            if any(c.name == extra.name for c in configs):
                raise ConfigError("config", f"two configurations are named {extra.name!r}; "
                                            "give each --config a name of its own")
            configs.append(extra)
        if qualifiers:
            words = tuple(w.strip() for w in qualifiers.split(",") if w.strip())
            configs = [dataclasses.replace(c, qualifiers=c.qualifiers or words)
                       for c in configs]
        floor_spec = load_floors(floors) if floors is not None else None
        if floor_spec is not None:
            # a misspelt or other-cutoff metric can never be measured: say so before the
            # searches (minutes), not as an unmet floor after them
            measured = metric_names(k)
            for slice_name, metric_floors in floor_spec.items():
                for metric in metric_floors:
                    if metric not in measured:
                        raise ConfigError(
                            "floors", f"{floors}: slice {slice_name!r}: {metric!r} is not a "
                            f"metric eval reports at --k {k} ({', '.join(measured)})")
        if out_dir is not None:
            # before the searches, which take minutes: a path that cannot be a folder was a
            # traceback after all of them had run
            _writable(out_dir)
        conn = connect(dsn, autocommit=True)
        try:
            if store_qrels:
                from pgfunnel.db import refuse_read_only, require_writer

                # before the searches: on a replica, and for a reader, they all ran and
                # then the first write to pgfunnel.qrel failed
                refuse_read_only(conn, "eval --store-qrels")
                require_writer(conn, "store judgments (--store-qrels)", "qrel", "INSERT")
            with (NullProgress() if json_out else progress_display("eval", transient=True)
                  ) as progress:
                task = progress.add_task("evaluating", total=None)

                def tick(name: str, done: int, total: int) -> None:
                    progress.update(task, description=f"evaluating {name}", completed=done,
                                    total=total)

                harness = Harness(conn, collection, k=k, principals=principal or [],
                                  trace=trace, progress=tick)
                with warnings.catch_warnings():
                    # said once below, in the CLI's own words; "1 judged item was
                    # written as a file name" too, which "judged items" let through
                    warnings.filterwarnings("ignore", message="pgfunnel eval: .* judged items?")
                    warnings.filterwarnings("ignore", message="pgfunnel eval: .*; not read: ")
                    result = harness.run(judged, configs, split=split)  # type: ignore[arg-type]
            respelled = result.report.metadata.get("judged_items_respelled") or {}
            if store_qrels:
                # under the citekeys the run matched file names to, or the stage recall
                # read in the database found none of them; the queries the run evaluated
                # (its split's), not the whole file: the other split's, never searched,
                # counted in the stage recall read in the database
                n = store(conn, collection, result.queries, respelled=respelled)
                of_split = f" (the {split} split)" if split else ""
                console.print(f"stored {n} judgments of {len(result.queries)} queries"
                              f"{of_split} in pgfunnel.qrel", soft_wrap=True)
        finally:
            conn.close()
        if respelled:
            labelled("note", "yellow", respelled_items_message(respelled))
        if result.unread_history:
            labelled("note", "yellow", unread_history_message(result.unread_history))
        if result.missing_items:
            labelled("warning", "yellow", missing_items_message(
                result.missing_items, result.queries, collection,
                result.citekeys_read_as_chunks, principal or []))
        report = result.report
        violations = check_floors(report.configs[report.baseline].aggregates, floor_spec) \
            if floor_spec is not None else []
        markdown = to_markdown(report)
        if out_dir is not None:
            try:
                out_dir.mkdir(parents=True, exist_ok=True)
                write_json(report, out_dir / "report.json")
                (out_dir / "report.md").write_text(markdown, encoding="utf-8")
                plot_slices(report, out_dir / "slices.png")
                plot_pool_recall(result.curves, out_dir / "pool_recall.png",
                                 title=pool_recall_title(report))
                write_runs(result, out_dir / "runs.jsonl")
            except OSError as exc:
                raise _unwritable(out_dir, exc) from None
    if json_out:
        data: dict[str, Any] = to_dict(report)
        data["floor_violations"] = [str(v) for v in violations]
        emit_json(data)
    else:
        _print_tables(report, k)
        if out_dir is not None:
            # where the report went, on stderr as `stored ...` is: stdout holds the tables
            console.print(f"wrote {out_dir}/{', '.join(OUT_FILES)}", highlight=False,
                          soft_wrap=True)
    if floor_spec is not None:
        if violations:
            for v in violations:
                labelled("floor", "red", f"configuration {report.baseline!r}, {v}")
            raise typer.Exit(EXIT_GATE)
        console.print(f"floors: all {sum(len(m) for m in floor_spec.values())} met "
                      f"(configuration {report.baseline!r})")


#: the files ``--out`` writes
OUT_FILES: tuple[str, ...] = ("report.json", "report.md", "runs.jsonl", "slices.png",
                              "pool_recall.png")


def _unwritable(folder: Path, exc: OSError) -> Exception:
    from pgfunnel.errors import ConfigError

    # the file, when one of the report's could not be written: "Is a directory" alone,
    # said of the folder, named nothing that was one
    name = Path(exc.filename).name if exc.filename is not None else ""
    where = f" ({name})" if name in OUT_FILES else ""
    return ConfigError("out", f"cannot write the report in {folder}{where}: "
                              f"{exc.strerror or exc}")


def _writable(folder: Path) -> None:
    """``folder`` made if missing; a ConfigError for ``--out`` when it cannot be one, or
    when one of the files the report is written to cannot be replaced (a folder of that
    name, a file without write permission): that was said only after every search."""
    import errno
    import os
    import tempfile

    from pgfunnel.errors import ConfigError

    if folder.exists() and not folder.is_dir():
        # mkdir said only "File exists", of the folder the user had named
        raise ConfigError("out", f"{folder} is a file, not a folder: --out names the "
                                 f"folder the report's files ({', '.join(OUT_FILES)}) "
                                 "are written in")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        for name in OUT_FILES:
            path = folder / name
            if path.is_dir():
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
            if path.exists() and not os.access(path, os.W_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
    except OSError as exc:
        raise _unwritable(folder, exc) from None


def _print_tables(report: Any, k: int) -> None:
    from rich.console import Console
    from rich.table import Table

    from pgfunnel.eval.metrics import N_NOANSWER, N_QUERIES, metric_names
    from pgfunnel.eval.report import too_few_label

    # wide enough for every stage column: a narrow terminal wraps lines but never cuts
    # a header or a slice name
    wide = Console(width=max(out.width, 150), highlight=False, markup=False)
    ndcg, recall, mrr, found = metric_names(k)
    wide.print(f"judging: per {report.judging_level}; split: {report.split or 'all'}; k={k}",
               soft_wrap=True)
    for name, res in report.configs.items():
        # the title on a line of its own: as the table's title, rich padded it with
        # spaces to the table's width (150 columns), which a copied report kept
        wide.print(f"{name}: pool recall per stage | final metrics", soft_wrap=True)
        table = Table()
        table.add_column("slice", no_wrap=True, min_width=10)
        table.add_column("n", justify="right", no_wrap=True)
        for stage in report.stages:
            table.add_column(stage, justify="right")
        for col in (recall, ndcg, mrr, found):
            table.add_column(col.replace("all_found", "found"), justify="right")
        for s in report.slices:
            row = res.aggregates.get(s)
            if row is None:
                continue
            n = f"{int(row[N_QUERIES])}" + (f" ({int(row[N_NOANSWER])} na)"
                                              if row[N_NOANSWER] else "")
            cells = [s, n]
            cells += [_fmt(res.pool_recall.get(st, {}).get(s)) for st in report.stages]
            cells += [_fmt(row.get(m)) for m in (recall, ndcg, mrr, found)]
            table.add_row(*cells)
        wide.print(table)
    # the tables' short names ("16 na", found@10) and the comparisons' bracketed pairs were
    # explained only in docs/evaluation.md and the markdown report
    stages = ", ".join(report.stages)
    wide.print(f"n: judged queries (na: those with nothing to find, counted, not scored); "
               f"{stages}: pool recall, the share of a query's relevant items each stage "
               f"still holds; found@{k}: share of queries with every relevant item in the top "
               f"{k}; –: not measured. Every score: higher is better.", soft_wrap=True)
    for name, counts in (report.metadata.get("rerank") or {}).items():
        # how often the reranker ran: a gate's margin is chosen on judged queries
        gated = (f"; the rerank gate skipped {counts['skipped_by_gate']}"
                 if counts.get("skipped_by_gate") else "")
        wide.print(f"{name}: reranked {counts['reranked']} of {counts['queries']} queries"
                   f"{gated}", soft_wrap=True)
    if report.comparisons:
        wide.print(f"Against the baseline '{report.baseline}': Δ, the mean per-query "
                   "difference (configuration − baseline), and [its 95% paired-bootstrap "
                   "interval]; 'excludes 0' marks a difference these queries can tell.",
                   soft_wrap=True)
    for name, by_metric in report.comparisons.items():
        for metric, by_slice in by_metric.items():
            parts = [f"{s}: {r.mean_diff:+.3f} [{r.low:+.3f}, {r.high:+.3f}]"
                     + (f" ({too_few})" if (too_few := too_few_label(r))
                        else " excludes 0" if r.excludes_zero else "")
                     for s, r in by_slice.items()]
            wide.print(f"{name} − {report.baseline} ({metric}): " + ("; ".join(parts) or (
                "nothing to compare: no query has a relevant item (no-answer queries only)")),
                soft_wrap=True)


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


__all__ = ["register"]
