"""Evaluation reports: build one from runs, write it as JSON, Markdown and PNG charts.

The harness runs every configuration over the judged queries and passes the rankings
(and, per stage, the pools) to :func:`build_report`. Everything else here only formats
what that computed. Charts use matplotlib's Agg canvas directly, so no display and no
global pyplot state are involved.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgfunnel.errors import JSON_ERRORS, ConfigError, InvalidInputError, json_problem
from pgfunnel.eval.metrics import (
    MIN_BOOTSTRAP_QUERIES,
    N_NOANSWER,
    N_QUERIES,
    BootstrapResult,
    aggregate,
    metric_names,
    paired_bootstrap,
    pool_recall,
    score_run,
)
from pgfunnel.eval.qrels import ALL_SLICE, JudgedQuery, Split, judging_level, select_split

if TYPE_CHECKING:  # the harness imports this module
    from pgfunnel.eval.harness import HarnessResult

#: bumped when the JSON layout changes incompatibly
REPORT_FORMAT = 1

#: the stages of the funnel in order, for the report's pool-recall columns (the harness's
#: ``STAGES``; that module imports this one)
_FUNNEL_ORDER: tuple[str, ...] = ("lexical", "dense", "fused", "reranked", "capped")


@dataclass
class ConfigResult:
    """What one configuration measured.

    ``pool_recall`` maps stage name (in funnel order: ``"lexical"``, ``"dense"``,
    ``"fused"``, ``"reranked"``, ``"capped"``; a stage the configuration does not have,
    such as the leg a one-leg configuration leaves out, is absent) to slice to the mean
    pool recall over that slice's answerable queries.
    """

    per_query: dict[str, dict[str, float]]
    aggregates: dict[str, dict[str, float]]
    pool_recall: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass
class EvalReport:
    """Every configuration's results and their comparison against ``baseline``.

    ``comparisons`` maps configuration → metric → slice (``"all"`` included) → paired
    bootstrap of ``config − baseline`` over that slice's answerable queries.
    """

    k: int
    judging_level: str
    baseline: str
    configs: dict[str, ConfigResult]
    comparisons: dict[str, dict[str, dict[str, BootstrapResult]]] = field(default_factory=dict)
    alpha: float = 0.05
    n_resamples: int = 2000
    seed: int = 0
    #: the split these numbers were measured on, or None for all queries
    split: str | None = None
    #: free-form provenance the harness records (index version, config hashes, ...)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def slices(self) -> list[str]:
        """Slice names in first-seen order across configurations, ``"all"`` last."""
        names: list[str] = []
        for result in self.configs.values():
            for name in result.aggregates:
                if name != ALL_SLICE and name not in names:
                    names.append(name)
        return [*names, ALL_SLICE]

    @property
    def stages(self) -> list[str]:
        """Stage names with pool recall, in funnel order (legs, fused, reranked, capped;
        ``lexical@40`` sorts as ``lexical``), other names after them in first-seen order
        across configurations. First-seen order alone put a later configuration's dense
        leg or rerank after the first one's ``capped``."""
        names: list[str] = []
        for result in self.configs.values():
            for stage in result.pool_recall:
                if stage not in names:
                    names.append(stage)

        def position(stage: str) -> int:
            base = stage.partition("@")[0]
            return _FUNNEL_ORDER.index(base) if base in _FUNNEL_ORDER else len(_FUNNEL_ORDER)

        return sorted(names, key=position)  # stable: ties keep first-seen order


def build_report(
    runs: Mapping[str, Mapping[str, Sequence[str]]],
    queries: Sequence[JudgedQuery],
    *,
    k: int = 10,
    baseline: str | None = None,
    pools: Mapping[str, Mapping[str, Mapping[str, Sequence[str]]]] | None = None,
    compare: Sequence[str] | None = None,
    split: Split | None = None,
    test_fraction: float = 0.5,
    n_resamples: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
    metadata: Mapping[str, Any] | None = None,
) -> EvalReport:
    """Score every configuration and compare each against the baseline.

    ``runs``: configuration name → query id → final ranked item ids.
    ``pools``: configuration name → stage name → query id → that stage's item ids.
    ``compare``: metric names to bootstrap (default: ``ndcg@k``).
    ``split``: keep only that split's queries (see :func:`~pgfunnel.eval.qrels.split_of`).
    ``baseline`` defaults to the first configuration.
    """
    if not runs:
        raise InvalidInputError("build_report needs at least one configuration")
    if baseline is None:
        baseline = next(iter(runs))
    elif baseline not in runs:
        raise ConfigError("baseline", f"{baseline!r} is not one of the configurations {list(runs)}")
    if split is not None:
        queries = select_split(queries, split, test_fraction)
    level = judging_level(queries)
    metrics = list(compare) if compare is not None else [metric_names(k)[0]]
    known_metrics = set(metric_names(k))
    for m in metrics:
        if m not in known_metrics:
            raise ConfigError("compare", f"{m!r} is not one of {sorted(known_metrics)}")

    configs: dict[str, ConfigResult] = {}
    for name, run in runs.items():
        per_query = score_run(run, queries, k)
        stage_rows: dict[str, dict[str, float]] = {}
        for stage, stage_pools in (pools or {}).get(name, {}).items():
            recall = pool_recall(stage_pools, queries)
            rows = aggregate({q: {stage: v} for q, v in recall.items()}, queries)
            stage_rows[stage] = {s: row[stage] for s, row in rows.items() if stage in row}
        configs[name] = ConfigResult(per_query, aggregate(per_query, queries), stage_rows)

    members: dict[str, list[str]] = {ALL_SLICE: []}
    for q in queries:
        if not q.is_noanswer:
            members.setdefault(q.slice, []).append(q.query_id)
            members[ALL_SLICE].append(q.query_id)
    members[ALL_SLICE] = members.pop(ALL_SLICE)  # keep "all" last

    comparisons: dict[str, dict[str, dict[str, BootstrapResult]]] = {}
    base = configs[baseline].per_query
    for name, result in configs.items():
        if name == baseline:
            continue
        by_metric: dict[str, dict[str, BootstrapResult]] = {}
        for metric in metrics:
            by_slice: dict[str, BootstrapResult] = {}
            for slice_name, ids in members.items():
                if not ids:
                    continue
                a = {q: base[q][metric] for q in ids}
                b = {q: result.per_query[q][metric] for q in ids}
                by_slice[slice_name] = paired_bootstrap(a, b, n_resamples, seed, alpha)
            by_metric[metric] = by_slice
        comparisons[name] = by_metric

    return EvalReport(
        k=k,
        judging_level=level,
        baseline=baseline,
        configs=configs,
        comparisons=comparisons,
        alpha=alpha,
        n_resamples=n_resamples,
        seed=seed,
        split=split,
        metadata=dict(metadata or {}),
    )


# ---------------------------------------------------------------------------- JSON


def to_dict(report: EvalReport) -> dict[str, Any]:
    """The report as plain JSON-ready data (the layout :func:`write_json` writes)."""
    return {
        "format": REPORT_FORMAT,
        "k": report.k,
        "judging_level": report.judging_level,
        "split": report.split,
        "baseline": report.baseline,
        "bootstrap": {
            "alpha": report.alpha,
            "n_resamples": report.n_resamples,
            "seed": report.seed,
        },
        "metadata": report.metadata,
        "configs": {
            name: {
                "aggregates": result.aggregates,
                "pool_recall": result.pool_recall,
                "per_query": result.per_query,
            }
            for name, result in report.configs.items()
        },
        "comparisons": {
            name: {
                metric: {s: r._asdict() for s, r in by_slice.items()}
                for metric, by_slice in by_metric.items()
            }
            for name, by_metric in report.comparisons.items()
        },
    }


def from_dict(data: Mapping[str, Any]) -> EvalReport:
    """Rebuild a report from :func:`to_dict`'s layout (e.g. to compare two runs' files)."""
    try:
        if data["format"] != REPORT_FORMAT:
            raise InvalidInputError(f"report format {data['format']!r} is not {REPORT_FORMAT}")
        boot = data["bootstrap"]
        return EvalReport(
            k=int(data["k"]),
            judging_level=str(data["judging_level"]),
            baseline=str(data["baseline"]),
            configs={
                name: ConfigResult(
                    per_query=c["per_query"],
                    aggregates=c["aggregates"],
                    pool_recall=c["pool_recall"],
                )
                for name, c in data["configs"].items()
            },
            comparisons={
                name: {
                    metric: {
                        # reports written before n was recorded: taken as enough queries
                        s: BootstrapResult(r["mean_diff"], r["low"], r["high"],
                                           int(r.get("n", MIN_BOOTSTRAP_QUERIES)))
                        for s, r in by_slice.items()
                    }
                    for metric, by_slice in by_metric.items()
                }
                for name, by_metric in data["comparisons"].items()
            },
            alpha=float(boot["alpha"]),
            n_resamples=int(boot["n_resamples"]),
            seed=int(boot["seed"]),
            split=data["split"],
            metadata=dict(data["metadata"]),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise InvalidInputError(f"not a pgfunnel evaluation report: missing or bad {exc}") from exc


def write_json(report: EvalReport, path: str | Path) -> None:
    """Write the report as UTF-8 JSON (strict: no NaN or infinity)."""
    try:
        text = json.dumps(to_dict(report), indent=2, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        raise InvalidInputError(f"report holds a non-finite number: {exc}") from exc
    Path(path).write_text(text + "\n", encoding="utf-8")


def write_runs(result: HarnessResult, path: str | Path) -> None:
    """One JSON line per configuration and query: what was searched and the ranked items
    each stage held (the final top k first), for reading why a query lost."""
    slices = {q.query_id: q.slice for q in result.queries}
    with Path(path).open("w", encoding="utf-8") as fh:
        for config, runs in result.runs.items():
            for query_id, run in runs.items():
                row: dict[str, Any] = {"config": config, "query_id": query_id,
                                       "slice": slices.get(query_id), "searched": run.text,
                                       "final": run.final, "stages": run.stages,
                                       "parts": run.parts}
                if run.reranked is not None:
                    # a reranking configuration's: False where the rerank gate skipped it
                    row["reranked"] = run.reranked
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_json(path: str | Path) -> EvalReport:
    """Read a report that :func:`write_json` wrote."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, *JSON_ERRORS) as exc:
        raise InvalidInputError(f"{p}: cannot read report: {json_problem(exc)}") from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"{p}: not a pgfunnel evaluation report")
    return from_dict(data)


# ------------------------------------------------------------------------ Markdown


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _num(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "–"
    return f"{value:.3f}"


def _signed(value: float) -> str:
    return f"{value:+.3f}"


def _level_words(level: str) -> str:
    return {"chunk": "per chunk", "document": "per document (citekey)"}.get(level, level)


def to_markdown(report: EvalReport) -> str:
    """A per-slice table per configuration, then the comparison against the baseline."""
    k = report.k
    ndcg, recall, mrr, found = metric_names(k)
    stages = report.stages
    confidence = round((1.0 - report.alpha) * 100.0, 2)
    conf_text = f"{confidence:g}%"

    lines: list[str] = ["# pgfunnel evaluation", ""]
    lines.append(f"- judging: **{_level_words(report.judging_level)}**")
    lines.append(f"- cutoff k: {k}")
    lines.append(f"- queries: {report.split + ' split' if report.split else 'all (dev and test)'}")
    lines.append(f"- baseline: `{_cell(report.baseline)}`")
    for key, value in report.metadata.items():
        lines.append(f"- {_cell(str(key))}: {_cell(str(value))}")
    lines.append("")
    lines.append(
        "Pool recall is the share of relevant items a stage still holds: the ceiling for "
        f"every later stage. Compare it with recall@{k} (what the final list kept). "
        "Metric means are over answerable queries; no-answer queries are only counted."
    )

    for name, result in report.configs.items():
        lines += ["", f"## Configuration `{_cell(name)}`", ""]
        header = ["slice", "queries", "no-answer"]
        header += [f"pool recall: {_cell(s)}" for s in stages]
        header += [f"recall@{k}", f"nDCG@{k}", f"MRR@{k}", f"all found@{k}"]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
        for slice_name in report.slices:
            row = result.aggregates.get(slice_name)
            if row is None:
                continue
            label = f"**{_cell(slice_name)}**" if slice_name == ALL_SLICE else _cell(slice_name)
            cells = [label, str(int(row[N_QUERIES])), str(int(row[N_NOANSWER]))]
            cells += [_num(result.pool_recall.get(s, {}).get(slice_name)) for s in stages]
            cells += [_num(row.get(m)) for m in (recall, ndcg, mrr, found)]
            lines.append("| " + " | ".join(cells) + " |")

    lines += ["", f"## Comparison against `{_cell(report.baseline)}`", ""]
    if not report.comparisons:
        lines.append("Only one configuration was evaluated; there is nothing to compare.")
    else:
        lines.append(
            f"Δ is the mean per-query difference (configuration − baseline); the interval is "
            f"a paired bootstrap {conf_text} interval over the slice's answerable queries "
            f"({report.n_resamples} resamples, seed {report.seed}). An interval that contains "
            "0 means this set of queries cannot tell the two apart, and so does a slice of "
            f"fewer than {MIN_BOOTSTRAP_QUERIES} queries, whatever its interval."
        )
        lines.append("")
        header = [
            "configuration",
            "metric",
            "slice",
            "queries",
            "Δ",
            f"{conf_text} interval",
            "excludes 0",
        ]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|---|---|---|---:|---:|---|---|")
        base_rows = report.configs[report.baseline].aggregates
        for name, by_metric in report.comparisons.items():
            for metric, by_slice in by_metric.items():
                for slice_name, r in by_slice.items():
                    row = base_rows.get(slice_name, {})
                    n = int(row.get(N_QUERIES, 0) - row.get(N_NOANSWER, 0))
                    label = (
                        f"**{_cell(slice_name)}**" if slice_name == ALL_SLICE else _cell(slice_name)
                    )
                    lines.append(
                        f"| `{_cell(name)}` | {metric} | {label} | {n} | {_signed(r.mean_diff)} "
                        f"| [{_signed(r.low)}, {_signed(r.high)}] "
                        f"| {_decision(r)} |"
                    )
    return "\n".join(lines) + "\n"


def too_few_label(r: BootstrapResult) -> str | None:
    """``"4 queries, too few to tell"`` for a comparison over too few queries, else None."""
    if not r.too_few_queries:
        return None
    return f"{r.n} {'query' if r.n == 1 else 'queries'}, too few to tell"


def _decision(r: BootstrapResult) -> str:
    if (too_few := too_few_label(r)) is not None:
        return f"no: {too_few}"
    return "yes" if r.excludes_zero else "no"


# -------------------------------------------------------------------------- charts


def _new_figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _as_written(name: str) -> str:
    """A slice or configuration name for a chart, drawn as written: matplotlib reads text
    between two ``$`` as math (a slice named ``a $\\frac$ b`` stopped the run with a
    ParseException, ``cost $5 or $10`` was drawn as ``5 or`` in italics)."""
    return name.replace("$", r"\$")


def _legend_beside(ax: Any, handles: Sequence[Any], labels: Sequence[str]) -> None:
    """The legend beside the axes, with every label given: matplotlib leaves a label that
    starts with ``_`` out of a legend it gathers itself (a configuration named ``_base``)."""
    ax.legend(list(handles), [_as_written(label) for label in labels], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize="small")


def _nothing_to_find(ax: Any) -> None:
    """Say on an empty chart why it is empty: every query was a no-answer query."""
    ax.text(0.5, 0.5, "no answerable queries: nothing to find\n(no-answer queries are only "
            "counted)", transform=ax.transAxes, ha="center", va="center")


def _slices_figure(report: EvalReport) -> Any:
    metric = metric_names(report.k)[0]
    configs = list(report.configs)
    if not configs:
        raise InvalidInputError("the report has no configurations to plot")
    # a slice of no-answer queries has no nDCG; leave it off the axis rather than draw 0
    slices = [
        s
        for s in report.slices
        if any(metric in r.aggregates.get(s, {}) for r in report.configs.values())
    ]
    fig = _new_figure(max(6.0, 1.1 * len(slices) * max(1, len(configs)) ** 0.5 + 2), 4.5)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / len(configs)
    bars: list[Any] = []
    for i, name in enumerate(configs):
        rows = report.configs[name].aggregates
        xs: list[float] = []
        ys: list[float] = []
        for j, s in enumerate(slices):
            value = rows.get(s, {}).get(metric)
            if value is not None:
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(value)
        # past the ten colours of the cycle, a hatch tells configurations apart
        bars.append(ax.bar(xs, ys, width=width, color=f"C{i % 10}",
                           hatch=_HATCHES[(i // 10) % len(_HATCHES)]))
    ax.set_xticks(range(len(slices)))
    ax.set_xticklabels(
        [_as_written(s) for s in slices], rotation=30 if len(slices) > 6 else 0,
        ha="right" if len(slices) > 6 else "center")
    if not slices:
        _nothing_to_find(ax)
    ax.set_ylim(0.0, 1.05)
    ax.set_ylabel(f"nDCG@{report.k}")
    # "judged per document (citekey)" inside parentheses read "(citekey))"
    ax.set_title(f"nDCG@{report.k} per slice, judged {_level_words(report.judging_level)}"
                 f"{_split_words(report)}")
    ax.grid(axis="y", alpha=0.3)
    # beside the axes: good configurations fill every slice's bars to near 1.0, so no
    # corner inside is free and loc="best" covered the last slice's bars (the "all" row)
    _legend_beside(ax, bars, configs)
    fig.tight_layout()
    return fig


def _split_words(report: EvalReport) -> str:
    """``, dev split`` for a report of one split: the charts of `eval --split dev` and
    `--split test` had the same titles, and could not be told apart out of their
    folders."""
    return f", {report.split} split" if report.split else ""


def pool_recall_title(report: EvalReport) -> str:
    """The title `pgfunnel eval --out` gives ``pool_recall.png``: the judging level, and
    the split when the report is one split's."""
    return f"Pool recall vs depth ({report.judging_level} judging{_split_words(report)})"


def plot_slices(report: EvalReport, path: str | Path) -> None:
    """PNG: nDCG@k per slice, one bar per configuration in each slice's group."""
    _slices_figure(report).savefig(str(path), format="png")


#: hatches for the bars of configurations past the tenth (colours repeat after ten)
_HATCHES: tuple[str, ...] = ("", "//", "..", "xx")

#: a marker per configuration's line, so that lines which coincide stay apart
_MARKERS: tuple[str, ...] = ("o", "^", "s", "D", "v", "P", "X", "<", ">", "*", "h")

#: how far apart the configurations' lines are drawn, so that lines which coincide stay
#: visible: this share of the decades of depth the axis spans (about 4 pixels)
_DODGE = 0.008

#: the legs' bands, greys outside the colour cycle the configurations are drawn in
_LEG_COLOURS: dict[str, str] = {"lexical leg": "#000000", "dense leg": "#8c8c8c"}

#: line styles for the lines past the tenth (colours repeat after ten)
_LINE_STYLES: tuple[Any, ...] = ("-", "-.", ":", (0, (3, 1, 1, 1, 1, 1)))


def _pool_recall_figure(points: Mapping[str, Sequence[tuple[int, float]]], title: str) -> Any:
    if not points:
        raise InvalidInputError("plot_pool_recall needs at least one line")
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    fig = _new_figure(8.5, 4.5)  # the legend beside the axes
    ax = fig.add_subplot(1, 1, 1)
    drawn = [(name, sorted(series)) for name, series in points.items() if series]
    depths: set[int] = {d for _, ordered in drawn for d, _ in ordered}
    log_x = bool(depths) and min(depths) > 0
    configs = [name for name, _ in drawn if not name.endswith(" leg")]
    lines: list[Any] = []
    names: list[str] = []
    # the configurations' lines a few pixels apart, whatever span of depths the axis has
    dodge = _DODGE * max(1.0, math.log10(max(depths) / min(depths))) if log_x else 0.0
    for name, ordered in drawn:
        xs = [float(d) for d, _ in ordered]
        ys = [r for _, r in ordered]
        if name.endswith(" leg"):
            # a wide pale band under the configurations' lines: a one-leg configuration's
            # final order is often its leg's own list, and whichever of two coinciding
            # lines was drawn second hid the other (the leg, then the configuration)
            [line] = ax.plot(xs, ys, linewidth=7.0, alpha=0.35, linestyle="-",
                             solid_capstyle="round", zorder=1,
                             color=_LEG_COLOURS.get(name, _LEG_COLOURS["lexical leg"]))
        else:
            j = configs.index(name)
            # configurations that coincide (a one-leg one and another whose final order
            # is the same list) sit side by side, each a few pixels from the next
            xs = [x * 10 ** (dodge * (j - (len(configs) - 1) / 2)) for x in xs]
            # the colour of its bars in slices.png (the j-th of the cycle): the leg
            # bands took the first two, so `default` was blue there and green here
            [line] = ax.plot(xs, ys, marker=_MARKERS[j % len(_MARKERS)], markersize=6,
                             linewidth=1.5, color=f"C{j % 10}",
                             linestyle=_LINE_STYLES[(j // 10) % len(_LINE_STYLES)],
                             zorder=2 + j)
        lines.append(line)
        names.append(name)
    if log_x:
        # depths grow by doubling (1, 3, 5, 10, 20, 40 ... 1000): on a linear axis the
        # first five points shared the first twentieth of its width
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(FixedLocator(sorted(depths)))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_locator(NullLocator())
    if not depths:
        _nothing_to_find(ax)
    ax.set_xlabel("depth (ranked chunks)")
    ax.set_ylabel("pool recall (mean over answerable queries)")
    ax.set_ylim(0.0, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if depths:
        # beside the axes: a weak configuration's lines run along the bottom, where the
        # legend (placed lower right) covered them
        _legend_beside(ax, lines, names)
    fig.tight_layout()
    if log_x:
        # the depth the legs read to (the table's pool recall is read there), or with no
        # leg drawn the deepest depth measured: where the axis ends
        legs = [d for name, ordered in drawn if name.endswith(" leg") for d, _ in ordered]
        _thin_depth_labels(fig, ax, sorted(depths), first=max(legs or depths))
    return fig


#: the depths the harness's curves step through (``Harness._curves``): where the table's
#: pool recall (a leg at 40) and recall@k are read, so their labels are kept first
_ROUND_DEPTHS: frozenset[int] = frozenset({1, 3, 5, 10, 20, 40, 80, 160, 320, 640, 1000})


def _thin_depth_labels(fig: Any, ax: Any, depths: Sequence[int],
                       first: int | None = None) -> None:
    """Keep the depth ticks whose labels have room. Each line ends at its own longest
    list, so the axis can hold 39, 40, 44 and 45 side by side, which on a log scale were
    drawn over each other ('394045'). ``first`` (the depth the legs read to) comes first:
    legs 200 deep lost the label at the axis's end to the round 160 beside it. Then the
    round depths, then the lines' ends, the deepest first; a tick whose label would touch
    a kept one is left out (its line's last point is still drawn)."""
    from matplotlib.ticker import FixedLocator

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    extent = {}
    for tick, label in zip(ax.get_xticks(), ax.get_xticklabels(), strict=True):
        box = label.get_window_extent(renderer)
        extent[int(round(tick))] = (box.x0, box.x1)
    gap = 4.0  # pixels between two labels
    order = ([first] if first is not None else []) + [
        d for d in depths if d in _ROUND_DEPTHS and d != first] + sorted(
        (d for d in depths if d not in _ROUND_DEPTHS and d != first), reverse=True)
    kept: list[int] = []
    for d in order:
        if d not in extent:
            continue
        x0, x1 = extent[d]
        if all(x1 + gap <= extent[o][0] or extent[o][1] + gap <= x0 for o in kept):
            kept.append(d)
    if len(kept) < len(extent):
        ax.xaxis.set_major_locator(FixedLocator(sorted(kept)))


def plot_pool_recall(
    points: Mapping[str, Sequence[tuple[int, float]]],
    path: str | Path,
    title: str = "Pool recall vs depth",
) -> None:
    """PNG: mean pool recall against depth, one line per leg or configuration. Depth is
    in ranked chunks, as the harness's curves count it (``Harness._curves``), on a log
    scale; a leg's line (named ``"... leg"``) is a wide pale band drawn under the
    configurations' lines, which each have a marker of their own and are drawn a little
    apart sideways, so that lines which coincide all stay visible."""
    _pool_recall_figure(points, title).savefig(str(path), format="png")


__all__ = [
    "REPORT_FORMAT",
    "ConfigResult",
    "EvalReport",
    "build_report",
    "from_dict",
    "plot_pool_recall",
    "plot_slices",
    "pool_recall_title",
    "read_json",
    "to_dict",
    "to_markdown",
    "write_json",
]
