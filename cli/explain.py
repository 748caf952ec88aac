"""`pgfunnel explain`: why a chunk did or did not come back for a query."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from pgfunnel import defaults as sql_defaults

from .common import (
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
    SearchArgs,
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

if TYPE_CHECKING:
    from pgfunnel.explain import Explanation


class _ExplainCommand(QueryTextCommand):
    """explain's QUERY holds the first chunk with --search-id: given no chunk at all,
    click's "Missing argument 'QUERY'" asked for query text that form does not take; the
    command says instead what is missing there."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        # after a -- everything is query text, a "--search-id" there too
        options = args[:args.index("--")] if "--" in args else args
        if not any(a == "--search-id" or a.startswith("--search-id=") for a in options):
            return super().parse_args(ctx, args)
        query = next(p for p in self.params if p.name == "query")
        query.required = False
        try:
            return super().parse_args(ctx, args)
        finally:
            query.required = True


def register(app: typer.Typer) -> None:
    app.command(name="explain", cls=_ExplainCommand)(explain_command)


def explain_command(
    ctx: typer.Context,
    query: Annotated[str | None, typer.Argument(
        help="The query text (with --search-id: the first chunk).")],
    chunks: Annotated[list[str] | None, typer.Argument(
        help="Chunk ids, CITEKEY#ORDINAL (ordinal 0-based), or a document's CITEKEY "
             "(its furthest chunk is explained), one or more.")] = None,
    k: Annotated[int, typer.Option(
        "--k", "-k", help="How many chunks the search returns.")] = sql_defaults.K,
    collection: CollectionOption = sql_defaults.COLLECTION,
    principal: PrincipalOption = None,
    tenant: TenantOption = None,
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
    rerank: Annotated[bool, typer.Option(
        help="Follow the search reranked with a cross-encoder, as search --rerank ranks.")
    ] = False,
    rerank_model: Annotated[str | None, typer.Option(
        help="Cross-encoder model id or local path; needs --rerank. Default: the "
             "ms-marco-MiniLM-L6-v2 cross-encoder.")] = None,
    rerank_depth: Annotated[int | None, typer.Option(
        help="How many pool candidates the reranker scores, as for search; needs "
             "--rerank.")] = None,
    search_id: Annotated[int | None, typer.Option(
        help="Explain this traced search (search --trace prints its id) from its log: "
             "every argument is then a chunk, and the search's own text and options are "
             "used (with --lexical-only, a chunk it did not log is replayed without "
             "embedding the text).")] = None,
    dsn: DsnOption = None,
    json_out: JsonOption = False,
) -> None:
    """Say for each chunk whether it came back for the query, and if not, which stage lost it."""
    import warnings

    from pgfunnel.errors import ConfigError
    from pgfunnel.explain import explain_many
    from pgfunnel.search import Funnel, check_rerank_depth

    with handle_errors({**FUNNEL_FLAGS, "chunk": "CHUNKS", "history": "--history",
                        "rerank_depth": "--rerank-depth", "rerank_model": "--rerank-model",
                        "search_id": "--search-id", "query_text": "QUERY"}), \
            warnings.catch_warnings():
        quiet_search_notices()
        if search_id is not None:
            if query is None:
                raise ConfigError("search_id", f"give the chunks to explain after the id: "
                                  f"pgfunnel explain --search-id {search_id} CHUNKS... (chunk "
                                  "ids, CITEKEY#ORDINAL or a document's CITEKEY); the search's "
                                  "own text and options are used")
            _explain_logged(ctx, search_id, [query, *(chunks or [])], collection,
                            principal, tenant, lexical_only, dsn, json_out)
            return
        if query is None:  # pragma: no cover - click requires QUERY without --search-id
            raise ConfigError("chunk", "give the query text and the chunks to explain")
        if not chunks:
            raise ConfigError("chunk", "give one or more chunks to explain after the query "
                                       "(or --search-id ID and the chunks)")
        turns = check_history(history)
        refuse_dense_options(lexical_only, dense_weight=dense_weight, dense_depth=dense_depth)
        weights = leg_weights(lexical_weight, dense_weight, lexical_only)
        rrf_args = rrf_k_args(rrf_k, fusion)
        if not rerank and (rerank_model is not None or rerank_depth is not None):
            # as search refuses them: an explain that never reranked, with nothing to say so
            raise ConfigError("rerank_model" if rerank_model is not None else "rerank_depth",
                              "applies only with --rerank; add --rerank to follow the "
                              "reranked search")
        check_rerank_depth(rerank_depth)
        from pgfunnel.db import connect

        params: SearchArgs = {
            "principals": principal or [], "tenant": tenant, "fusion": fusion,
            **rrf_args, "weights": weights, "overfetch": overfetch,
            "per_source_cap": per_source_cap, "lexical_depth": lexical_depth,
            "dense_depth": dense_depth}
        # explain runs the database's functions, an older release's until migrate: say so,
        # as search does (it followed the older search with nothing to tell)
        with connect(dsn, autocommit=True) as conn:
            stale = stale_functions_notice(conn, "explain")
            if rerank and stale is None:
                # a bad value or an unknown collection is told before the cross-encoder
                # loads (seconds), as search tells it
                Funnel(conn, collection, embedder=None).check(query, k=k, **params)
        reranker = None
        if rerank:
            from pgfunnel.rerank import DEFAULT_RERANK_MODEL, Reranker

            reranker = Reranker(DEFAULT_RERANK_MODEL if rerank_model is None else rerank_model)
        funnel = Funnel(dsn, collection, embedder=None if lexical_only else "auto",
                        reranker=reranker, rerank_depth=rerank_depth)
        try:
            # one search (and one rerank) for every chunk asked about
            found = explain_many(funnel, query, chunks, k=k, history=turns, **params)
        finally:
            funnel.close()
    if stale:
        for e in found:
            e.notices.append(stale)
    _show(found, query, turns, json_out)


#: the options a logged search is explained with: which one, who reads its log, and
#: whether its replay embeds the text (--lexical-only: no model is loaded, as a Funnel
#: made with embedder=None replays)
_LOGGED_OPTIONS = {"ctx", "query", "chunks", "search_id", "collection", "principal", "tenant",
                   "lexical_only", "dsn", "json_out"}


def _explain_logged(ctx: typer.Context, search_id: int, targets: list[str], collection: str,
                    principal: list[str] | None, tenant: str | None, lexical_only: bool,
                    dsn: str | None, json_out: bool) -> None:
    from pgfunnel.errors import ConfigError, ModelLoadError
    from pgfunnel.explain import explain_many
    from pgfunnel.search import Funnel

    for param in ctx.command.params:
        if param.name in _LOGGED_OPTIONS or param.name is None:
            continue
        # as typed (a default from the environment stands for nothing asked); by name:
        # newer typers carry a click of their own, whose enum is not click's
        source = ctx.get_parameter_source(param.name)
        if getattr(source, "name", None) == "COMMANDLINE":
            raise ConfigError("search_id", f"takes no {'/'.join(param.opts)}: the logged "
                              "search is explained with its own text and options")
    funnel = Funnel(dsn, collection, embedder=None if lexical_only else "auto")
    try:
        found = explain_many(funnel, None, targets, search_id=search_id,
                             principals=principal or [], tenant=tenant)
    except ConfigError as exc:
        from pgfunnel.explain_log import DENSE_ONLY_NO_EMBEDDER

        library = DENSE_ONLY_NO_EMBEDDER.format(search_id=search_id)
        if exc.detail != library:
            raise
        # in the flag that set it, not the Funnel's parameter
        raise ConfigError("search_id", library.replace(
            "this Funnel has no query embedder (embedder=None): explain it with one",
            "--lexical-only loads no embedding model: explain it without --lexical-only")
        ) from exc
    except ModelLoadError as exc:
        # the one thing this form can do about it: replay without the model
        raise ConfigError("search_id", f"the replay embeds the logged text with the model of "
                          f"the version it replays on, and {exc}; --lexical-only replays the "
                          "lexical leg alone, without it") from exc
    finally:
        funnel.close()
    # the library's notice names the Funnel's parameter; here the flag that set it
    from pgfunnel.explain_log import NO_EMBEDDER

    library = NO_EMBEDDER.format(search_id=search_id)
    for e in found:
        e.notices = [f"pgfunnel: --lexical-only: the replay of search {search_id} runs the "
                     "lexical leg alone, loading no embedding model" if n == library else n
                     for n in e.notices]
    _show(found, found[0].searched if found else None, [], json_out)


def _show(found: list[Explanation], query: str | None, turns: list[str] | None,
          json_out: bool) -> None:
    followup = followup_of(found[0].transforms) if found else None
    if json_out:
        emit_json([{**e.as_dict(), "history": turns or [],
                    "searched": followup["query"] if followup else query,
                    "followup": followup} for e in found], ("notices",))
        return
    for note in found[0].notices if found else []:
        if followup is not None and note.startswith("pgfunnel: explain follows the text"):
            continue  # the follow-up line below says it, on stdout with the verdicts
        labelled("warning", "yellow", note)
    print_followup(followup)
    if found and found[0].search_id is not None:
        out.print(f"search {found[0].search_id} searched {shown(repr(found[0].searched))}",
                  highlight=False, markup=False, soft_wrap=True)
    for e in found:
        def show(x: object) -> str:
            return "-" if x is None else (f"{x:.4f}" if isinstance(x, float) else str(x))

        out.print(f"[bold]{escape(shown(str(e.target)))}[/bold]: {e.verdict}", highlight=False,
                  markup=True, soft_wrap=True)
        # a logged candidate's answer has no exact scores, only the trace's leg scores,
        # which are its BM25 score and cosine similarity: `--search-id` printed "BM25 -"
        # for a chunk its trace scored
        bm25 = e.lexical_score if e.lexical_exact_score is None else e.lexical_exact_score
        cosine = e.dense_score if e.dense_exact_score is None else e.dense_exact_score
        out.print(f"  lexical rank {show(e.lexical_rank)} (depth {show(e.lexical_depth)}, "
                  f"BM25 {show(bm25)})  dense rank {show(e.dense_rank)} "
                  f"(depth {show(e.dense_depth)}, cosine {show(cosine)})  "
                  f"fused rank {show(e.fused_rank)} of pool {e.pool_size}  "
                  + (f"rerank rank {show(e.rerank_rank)} (score {show(e.rerank_score)})  "
                     if e.reranked else "")
                  + f"final rank {show(e.final_rank)}", highlight=False, soft_wrap=True)
        # the reason names SQL's parameters; here they are this command's options
        reason = e.reason
        for parameter in ("lexical_depth", "dense_depth"):
            reason = reason.replace(parameter, FUNNEL_FLAGS[parameter])
        # the pool's advice too ("k 3 x overfetch 4" before it stays a product of values)
        reason = reason.replace("; raise overfetch", f"; raise {FUNNEL_FLAGS['overfetch']}")
        reason = reason.replace("so raise k", "so raise -k")
        reason = reason.replace(", rerank_depth)", ", --rerank-depth)")
        # a logged search's replay says what another search would need, and how to try it
        reason = reason.replace("a larger overfetch", f"a larger {FUNNEL_FLAGS['overfetch']}")
        reason = reason.replace("a larger k ", "a larger -k ")
        reason = reason.replace("a weight above 0", "a weight above 0 (--lexical-weight)")
        reason = reason.replace("without search_id", "without --search-id")
        # one line each, for a log or a pipe to keep whole (the terminal wraps it)
        out.print(f"  {shown(reason)}", highlight=False, soft_wrap=True)
        if e.capped_chunks:
            # search's capped: line names the fused ranks it skipped; these are the chunks
            # behind them, by the name explain takes back
            named = ", ".join(f"{shown(e.target)}#{c['ordinal']} (fused rank {c['fused_rank']})"
                              for c in e.capped_chunks[:10])
            more = (f" and {len(e.capped_chunks) - 10:,} more (--json lists them)"
                    if len(e.capped_chunks) > 10 else "")
            out.print(f"  capped: {named}{more}", highlight=False, soft_wrap=True)
