"""`pgfunnel explain`: why a chunk did or did not come back for a query."""

from __future__ import annotations

from typing import Annotated

import typer
from pgfunnel.cli.common import (
    FUNNEL_FLAGS,
    CapOption,
    CollectionOption,
    DenseDepthOption,
    DenseWeightOption,
    DsnOption,
    FusionOption,
    HistoryOption,
    JsonOption,
    LexicalDepthOption,
    LexicalOnlyOption,
    LexicalWeightOption,
    OverfetchOption,
    PrincipalOption,
    QueryTextCommand,
    RrfKOption,
    TenantOption,
    check_history,
    emit_json,
    followup_of,
    handle_errors,
    labelled,
    leg_weights,
    out,
    print_followup,
    quiet_search_notices,
    refuse_dense_options,
    rrf_k_args,
    shown,
    stale_functions_notice,
)
from rich.markup import escape


def register(app: typer.Typer) -> None:
    app.command(name="explain", cls=QueryTextCommand)(explain_command)


def explain_command(
    query: Annotated[str, typer.Argument(help="The query text.")],
    chunks: Annotated[list[str], typer.Argument(
        help="Chunk ids, CITEKEY#ORDINAL (ordinal 0-based), or a document's CITEKEY "
             "(its furthest chunk is explained), one or more.")],
    k: Annotated[int, typer.Option("--k", "-k", help="How many chunks the search returns.")] = 10,
    collection: CollectionOption = "default",
    principal: PrincipalOption = None,
    tenant: TenantOption = None,
    fusion: FusionOption = "minmax",
    rrf_k: RrfKOption = None,
    lexical_weight: LexicalWeightOption = None,
    dense_weight: DenseWeightOption = None,
    overfetch: OverfetchOption = 4,
    per_source_cap: CapOption = 3,
    lexical_depth: LexicalDepthOption = None,
    dense_depth: DenseDepthOption = None,
    lexical_only: LexicalOnlyOption = False,
    history: HistoryOption = None,
    dsn: DsnOption = None,
    json_out: JsonOption = False,
) -> None:
    """Say for each chunk whether it came back for the query, and if not, which stage lost it."""
    import warnings

    from pgfunnel.explain import explain
    from pgfunnel.search import Funnel

    with handle_errors({**FUNNEL_FLAGS, "chunk": "CHUNKS", "history": "--history"}), \
            warnings.catch_warnings():
        quiet_search_notices()
        turns = check_history(history)
        refuse_dense_options(lexical_only, dense_weight=dense_weight, dense_depth=dense_depth)
        weights = leg_weights(lexical_weight, dense_weight, lexical_only)
        rrf_args = rrf_k_args(rrf_k, fusion)
        from pgfunnel.db import connect

        # explain runs the database's functions, an older release's until migrate: say so,
        # as search does (it followed the older search with nothing to tell)
        with connect(dsn, autocommit=True) as conn:
            stale = stale_functions_notice(conn, "explain")
        funnel = Funnel(dsn, collection, embedder=None if lexical_only else "auto")
        try:
            found = [explain(funnel, query, c, history=turns, k=k,
                             principals=principal or [], tenant=tenant, fusion=fusion,
                             **rrf_args, weights=weights, overfetch=overfetch,
                             per_source_cap=per_source_cap, lexical_depth=lexical_depth,
                             dense_depth=dense_depth)
                     for c in chunks]
        finally:
            funnel.close()
    if stale:
        for e in found:
            e.notices.append(stale)
    followup = followup_of(found[0].transforms) if found else None
    if json_out:
        emit_json([{**e.as_dict(), "history": turns or [],
                    "searched": followup["query"] if followup else query,
                    "followup": followup} for e in found])
        return
    for note in found[0].notices if found else []:
        if followup is not None and note.startswith("pgfunnel: explain follows the text"):
            continue  # the follow-up line below says it, on stdout with the verdicts
        labelled("warning", "yellow", note)
    print_followup(followup)
    for e in found:
        def show(x: object) -> str:
            return "-" if x is None else (f"{x:.4f}" if isinstance(x, float) else str(x))

        out.print(f"[bold]{escape(shown(str(e.target)))}[/bold]: {e.verdict}", highlight=False,
                  markup=True, soft_wrap=True)
        out.print(f"  lexical rank {show(e.lexical_rank)} (depth {show(e.lexical_depth)}, "
                  f"BM25 {show(e.lexical_exact_score)})  dense rank {show(e.dense_rank)} "
                  f"(depth {show(e.dense_depth)}, cosine {show(e.dense_exact_score)})  "
                  f"fused rank {show(e.fused_rank)} of pool {e.pool_size}  "
                  f"final rank {show(e.final_rank)}", highlight=False, soft_wrap=True)
        # the reason names SQL's parameters; here they are this command's options
        reason = e.reason
        for parameter in ("lexical_depth", "dense_depth"):
            reason = reason.replace(parameter, FUNNEL_FLAGS[parameter])
        # the pool's advice too ("k 3 x overfetch 4" before it stays a product of values)
        reason = reason.replace("; raise overfetch", f"; raise {FUNNEL_FLAGS['overfetch']}")
        reason = reason.replace("so raise k", "so raise -k")
        # one line each, for a log or a pipe to keep whole (the terminal wraps it)
        out.print(f"  {shown(reason)}", highlight=False, soft_wrap=True)
