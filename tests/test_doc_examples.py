"""Every ```python and ```sql block in README.md and docs/*.md runs as written.

Users copy these examples. Each block is found by doc and index (`python-api.md#3`:
the fourth python or sql block of docs/python-api.md, indented ones inside list items
included) and is either run by a check below, against a real database holding the
help-center corpus the doc assumes, or listed in NOT_RUN with the reason. A new block
that is neither fails test_every_block_is_run_or_listed, so none is skipped silently.

What a block cannot run here as written is substituted in one place, `_runnable`: the
doc's placeholder DSN by the test database's, and the hub cross-encoder (which cannot be
downloaded here) by the tiny local one tests build (`pgfunnel.tiny_models`), on the CPU.
Names a block takes from the prose around it (`texts`, `search_ids`, ...) are given to it
in its check, and a block that continues an earlier one runs after it, in one namespace.

The shell blocks are checked too: every `pgfunnel` command in them names options its
command has; the README's "Use it" lines, the psql heredocs and index-versions.md's
walkthrough run, and what docs/cli.md shows a command print (a `capped:` line, the keys
of a `--json` object) is compared with what it prints.
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>python|sql)[ \t]*\n(?P<body>.*?)^(?P=indent)```",
    re.M | re.S)

# what a doc writes where the reader puts their own database, and the hub model that
# cannot be downloaded here
DSN_PLACEHOLDERS = ("postgresql://app@db/app",)
HUB_CROSS_ENCODER = "cross-encoder/ms-marco-MiniLM-L6-v2"


def _blocks() -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for doc in DOCS:
        for i, m in enumerate(FENCE.finditer(doc.read_text())):
            found[f"{doc.name}#{i}"] = (m["lang"], textwrap.dedent(m["body"]))
    return found


BLOCKS = _blocks()

NOT_RUN: dict[str, str] = {
    "python-api.md#5": "the Ingester example: run as written, with what its comments say, by "
                       "test_docs_api.py::test_the_ingester_example_leaves_the_collection_as_it_found_it",
}

Check = Callable[[pytest.FixtureRequest, str], None]
CHECKS: dict[str, Check] = {}
# a block that uses the names an earlier block of its page made runs after that one
CONTINUES: dict[str, tuple[str, ...]] = {
    "python-api.md#8": ("python-api.md#7",),
    "python-api.md#9": ("python-api.md#7",),
    "python-api.md#10": ("python-api.md#7",),
    "python-api.md#11": ("python-api.md#7",),
    "python-api.md#12": ("python-api.md#2",),
}


def check(block_id: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        CHECKS[block_id] = fn
        return fn
    return register


def _runnable(code: str, *, dsn: str | None = None, cross_encoder: Path | None = None) -> str:
    """The block with this machine's stand-ins; each substitution must find its target,
    so that a doc that changes its placeholder breaks here rather than run something else."""
    if dsn is not None:
        hits = [p for p in DSN_PLACEHOLDERS if p in code]
        assert hits, f"no DSN placeholder {DSN_PLACEHOLDERS} in the block"
        for placeholder in hits:
            code = code.replace(placeholder, dsn)
    if cross_encoder is not None:
        if HUB_CROSS_ENCODER in code.split("#")[0] or f'"{HUB_CROSS_ENCODER}"' in code:
            code = code.replace(f'"{HUB_CROSS_ENCODER}"', repr(str(cross_encoder)))
        else:
            # Reranker() loads the hub model by default: give it the local one, on the CPU
            assert "Reranker()" in code, "the block makes no Reranker to substitute"
            code = code.replace("Reranker()", f"Reranker({str(cross_encoder)!r}, device='cpu')")
    return code


def _exec(code: str, namespace: dict[str, Any], name: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, name, "exec"), namespace)  # noqa: S102 - the docs' own examples
    return out.getvalue()


# --- databases -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def helpcenter(server_dsn: str, sample_template: str) -> Iterator[str]:
    """The help center in collection 'default', as docs/python-api.md prepares it; the
    examples run against it only read (those that write get a database of their own)."""
    from conftest import _create_db, _drop_db

    name = "pgf_docex_default"
    yield _create_db(server_dsn, name, sample_template)
    _drop_db(server_dsn, name)


def _help_center_as(server_dsn: str, template: str, collection: str,
                    name: str | None = None) -> Iterator[str]:
    from conftest import _create_db, _drop_db

    name = name or f"pgf_docex_{collection}"
    dsn = _create_db(server_dsn, name, template)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("update pgfunnel.collection set name = %s where name = 'default'",
                     (collection,))
    yield dsn
    _drop_db(server_dsn, name)


@pytest.fixture(scope="module")
def handbook(server_dsn: str, sample_template: str) -> Iterator[str]:
    """The help center in collection 'handbook', as the README ingests it."""
    yield from _help_center_as(server_dsn, sample_template, "handbook")


@pytest.fixture(scope="module")
def demo(server_dsn: str, sample_template: str) -> Iterator[str]:
    """The help center in collection 'demo', as `pgfunnel demo` ingests it (docs/cli.md)."""
    yield from _help_center_as(server_dsn, sample_template, "demo")


@pytest.fixture(scope="module")
def tiny_ce(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pgfunnel.tiny_models import build_tiny_cross_encoder

    return build_tiny_cross_encoder(tmp_path_factory.mktemp("doc-ce"))


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def _psql(dsn: str, script: str, tmp_path: Path, **variables: str) -> str:
    """Runs a block as the docs say to, at the psql prompt (psql fills in `:'q'`)."""
    from pgfunnel.cli.main import demo_psql

    psql, _ = demo_psql()
    path = tmp_path / "block.sql"
    path.write_text(script)
    args = [psql, dsn, "-X", "-v", "ON_ERROR_STOP=1", "-A", "-F", "|", "-P", "footer=off"]
    for key, value in variables.items():
        args += ["-v", f"{key}={value}"]
    res = subprocess.run([*args, "-f", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _embedded(command: str, dsn: str) -> str:
    """What `$(pgfunnel embed 'TEXT' -c NAME)` in a doc's psql line prints."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    embed = re.search(r"\$\(pgfunnel embed '([^']*)' -c ([\w-]+)\)", command)
    assert embed, command
    res = CliRunner().invoke(app, ["embed", embed[1], "-c", embed[2], "--dsn", dsn])
    assert res.exit_code == 0, res.output
    return res.stdout.strip()


def _table(out: str, header_start: str) -> list[dict[str, str]]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    header = lines[start].split("|")
    rows = []
    for line in lines[start + 1:]:
        cells = line.split("|")
        if len(cells) < len(header):
            break
        rows.append(dict(zip(header, cells, strict=False)))
    return rows


# --- README.md -------------------------------------------------------------------------

@check("README.md#0")
def _readme_sql(request: pytest.FixtureRequest, code: str) -> None:
    # q is what the psql line above the block gives it: -v q="$(pgfunnel embed ...)"
    dsn = request.getfixturevalue("handbook")
    readme = (ROOT / "README.md").read_text()
    line = readme.split("```sql\n" + code, 1)[0].rsplit("```bash\n", 1)[1]
    out = _psql(dsn, code, request.getfixturevalue("tmp_path"), q=_embedded(line, dsn))
    rows = _table(out, "citekey|")
    assert 1 <= len(rows) <= 5, out
    assert [r["final_rank"] for r in rows] == [str(i) for i in range(1, len(rows) + 1)]
    assert rows[0]["citekey"] == "err-6358", out


@check("README.md#1")
def _readme_python(request: pytest.FixtureRequest, code: str) -> None:
    dsn = request.getfixturevalue("handbook")
    out = _exec(_runnable(code, dsn=dsn), {}, "README.md#1")
    lines = out.splitlines()
    assert len(lines) == 5, out
    assert [line.split()[0] for line in lines] == ["1", "2", "3", "4", "5"]
    assert lines[0].split()[1] == "refunds-monthly", out


# --- docs/python-api.md ----------------------------------------------------------------
# "Everything below runs against a database prepared with pgfunnel init && pgfunnel
# ingest pgfunnel/data/helpcenter.jsonl": PGFUNNEL_DSN names that database

def _api_namespace(request: pytest.FixtureRequest, dsn: str, *ids: str) -> dict[str, Any]:
    request.getfixturevalue("monkeypatch").setenv("PGFUNNEL_DSN", dsn)
    namespace: dict[str, Any] = {}
    for block_id in ids:
        code = BLOCKS[block_id][1]
        if "Reranker()" in code:
            code = _runnable(code, cross_encoder=request.getfixturevalue("tiny_ce"))
        _exec(code, namespace, block_id)
    return namespace


@check("python-api.md#0")
def _api_funnel(request: pytest.FixtureRequest, code: str) -> None:
    request.getfixturevalue("monkeypatch").setenv("PGFUNNEL_DSN",
                                                  request.getfixturevalue("helpcenter"))
    out = _exec(code, {}, "python-api.md#0")
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == ["1", "2", "3", "4", "5"], out
    assert lines[0].split()[1] == "refunds-annual", out


@check("python-api.md#1")
def _api_explain(request: pytest.FixtureRequest, code: str) -> None:
    request.getfixturevalue("monkeypatch").setenv("PGFUNNEL_DSN",
                                                  request.getfixturevalue("helpcenter"))
    namespace: dict[str, Any] = {}
    out = _exec(code, namespace, "python-api.md#1")
    verdict, reason = out.splitlines()
    e = namespace["e"]
    assert (verdict, reason) == (e.verdict, e.reason)
    # the comments list the verdicts and show a reason for a chunk that k=1 cut
    assert verdict == "cut at k", out
    assert reason.startswith(
        "fused rank 3 is in the pool and not capped, but 2 chunks come before it"), out


@check("python-api.md#2")
def _api_rerank(request: pytest.FixtureRequest, code: str) -> None:
    request.getfixturevalue("monkeypatch").setenv("PGFUNNEL_DSN",
                                                  request.getfixturevalue("helpcenter"))
    namespace: dict[str, Any] = {}
    out = _exec(_runnable(code, cross_encoder=request.getfixturevalue("tiny_ce")), namespace,
                "python-api.md#2")
    resp = namespace["resp"]
    assert out.startswith("True ["), out
    assert resp.reranked and len(resp.results) == 5
    assert all(r.rerank_rank is not None for r in resp.results)


@check("python-api.md#3")
def _api_model_load_error(request: pytest.FixtureRequest, code: str) -> None:
    out = _exec(code, {}, "python-api.md#3")
    assert out.strip() == "rerank_model no-such-org/no-such-model"


@check("python-api.md#4")
def _api_transforms(request: pytest.FixtureRequest, code: str) -> None:
    request.getfixturevalue("monkeypatch").setenv("PGFUNNEL_DSN",
                                                  request.getfixturevalue("helpcenter"))
    out = _exec(code, {}, "python-api.md#4")
    parts, rewrite, followup = out.splitlines()
    assert parts == str(["currency on monthly plans", "levy on annual plans"]), out
    assert rewrite.startswith("what does ERR-4029 mean fallback: "), out
    assert "ERR-4029" in rewrite.removeprefix("what does ERR-4029 mean"), out
    assert followup == "refunds what about monthly plans?", out


@check("python-api.md#6")
def _api_embedding_inputs(request: pytest.FixtureRequest, code: str) -> None:
    # `doc` is the record whose vectors the prose computes: one with a section
    from pgfunnel.sources import DocumentRecord, chunk_text

    doc = DocumentRecord(citekey="kb-7", title="Billing",
                         text="# Billing\n\n## Refunds\n\nAnnual plans are refunded pro rata.")
    namespace: dict[str, Any] = {"doc": doc}
    _exec(code, namespace, "python-api.md#6")
    chunks = list(chunk_text(doc.text))
    assert len(namespace["inputs"]) == len(chunks) >= 1
    assert all("Annual plans are refunded" in i for i in namespace["inputs"][-1:])
    assert any("Refunds" in i for i in namespace["inputs"]), namespace["inputs"]


@check("python-api.md#7")
def _api_sqla(request: pytest.FixtureRequest, code: str) -> None:
    namespace = _api_namespace(request, request.getfixturevalue("helpcenter"))
    out = _exec(code, namespace, "python-api.md#7")
    namespace["engine"].dispose()
    rows = [line.split() for line in out.splitlines()]
    assert [r[0] for r in rows] == ["1", "2", "3", "4", "5"], out
    assert rows[0][1:] == ["refunds-annual", "en"], out
    assert len({r[1] for r in rows}) == 5, "per_source_cap=1 gives one chunk per document"


@check("python-api.md#8")
def _api_sqla_trace(request: pytest.FixtureRequest, code: str) -> None:
    dsn = request.getfixturevalue("sample_db")   # it commits a trace
    namespace = _api_namespace(request, dsn, *CONTINUES["python-api.md#8"])
    _exec(code, namespace, "python-api.md#8")
    namespace["engine"].dispose()
    with psycopg.connect(dsn) as conn:
        logged = [r[0] for r in conn.execute("select id from pgfunnel.search_log")]
    assert logged == [namespace["search_id"]]
    assert namespace["rows"] and all(len(r) == 2 for r in namespace["rows"])


@check("python-api.md#9")
def _api_sqla_errors(request: pytest.FixtureRequest, code: str) -> None:
    namespace = _api_namespace(request, request.getfixturevalue("helpcenter"),
                               *CONTINUES["python-api.md#9"])
    _exec(code, namespace, "python-api.md#9")
    namespace["engine"].dispose()
    assert [r.citekey for r in namespace["rows"]][0] == "refunds-annual"


@check("python-api.md#10")
def _api_sqla_text(request: pytest.FixtureRequest, code: str) -> None:
    namespace = _api_namespace(request, request.getfixturevalue("helpcenter"),
                               *CONTINUES["python-api.md#10"])
    _exec(code, namespace, "python-api.md#10")
    namespace["engine"].dispose()
    rows = namespace["rows"]
    assert [r.final_rank for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0].citekey == "refunds-annual", rows


@check("python-api.md#11")
def _api_sqla_register_vector(request: pytest.FixtureRequest, code: str) -> None:
    # `engine` is the reader's own: one made by create_engine, whose connections nothing
    # registered pgvector on, so that a numpy vector cannot be sent until the block ran
    from sqlalchemy import create_engine
    from sqlalchemy import text as sa_text
    from sqlalchemy.exc import DBAPIError

    from pgfunnel.errors import translate

    dsn = request.getfixturevalue("helpcenter")
    namespace = _api_namespace(request, dsn, *CONTINUES["python-api.md#11"])
    namespace["engine"].dispose()
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))
    query = sa_text("select citekey from funnel_search(:q, :v, k => 3, principals => '{}')")
    values = {"q": namespace["q"], "v": namespace["Embedder"]().embed_query(namespace["q"])}
    try:
        with engine.connect() as conn, pytest.raises(DBAPIError) as caught:
            conn.execute(query, values)
        assert "the connection has no pgvector adapters" in str(translate(caught.value))
        engine.dispose()
        _exec(code, {"engine": engine}, "python-api.md#11")
        with engine.connect() as conn:
            assert conn.execute(query, values).scalars().first() == "refunds-annual"
    finally:
        engine.dispose()


@check("python-api.md#12")
def _api_packing(request: pytest.FixtureRequest, code: str) -> None:
    namespace = _api_namespace(request, request.getfixturevalue("helpcenter"),
                               *CONTINUES["python-api.md#12"])
    out = _exec(code, namespace, "python-api.md#12")
    packed = namespace["packed"]
    assert len(packed.kept) + len(packed.dropped) == len(namespace["resp"].results)
    assert out.count("dropped ") == len(packed.dropped)


# --- docs/python-rerank.md -------------------------------------------------------------
# its blocks name what the page's prose has in hand (a reranker, the pool's texts, a
# search function): those are given here, from the help center

def _pool(request: pytest.FixtureRequest, query: str, k: int = 10) -> list[Any]:
    from pgfunnel.search import Funnel

    with Funnel(request.getfixturevalue("helpcenter"),
                embedder=request.getfixturevalue("embedder")) as funnel:
        return funnel.search(query, k=k, principals=[]).results


def _search_ids(request: pytest.FixtureRequest) -> Callable[[str], list[int]]:
    return lambda q: [r.chunk_id for r in _pool(request, q)]


def _reranker(request: pytest.FixtureRequest) -> Any:
    from pgfunnel.rerank import Reranker

    return Reranker(request.getfixturevalue("tiny_ce"), device="cpu")


@check("python-rerank.md#0")
def _rr_rank(request: pytest.FixtureRequest, code: str) -> None:
    texts = [r.text for r in _pool(request, "refund on a monthly plan", k=12)]
    namespace: dict[str, Any] = {"texts": texts}
    _exec(_runnable(code, cross_encoder=request.getfixturevalue("tiny_ce")), namespace,
          "python-rerank.md#0")
    rows = namespace["rows"]
    assert len(rows) == 10
    assert all(set(r) == {"corpus_id", "score", "text"} for r in rows)
    assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    assert all(r["text"] == texts[r["corpus_id"]][:len(r["text"])] for r in rows)


@check("python-rerank.md#1")
def _rr_settings(request: pytest.FixtureRequest, code: str) -> None:
    # the listing is a call with every default spelled out: what it makes is what
    # Reranker(model) makes, and its comments say what those defaults are on a CPU
    from pgfunnel.rerank import Reranker

    tiny = request.getfixturevalue("tiny_ce")
    made = eval(_runnable(code, cross_encoder=tiny), {"Reranker": Reranker})  # noqa: S307
    plain = Reranker(str(tiny))
    for attr in ("device", "batch_size", "max_length", "fp16", "backend", "snippet_chars"):
        assert getattr(made, attr) == getattr(plain, attr), attr
    assert (made.device, made.batch_size, made.backend, made.snippet_chars) == (
        "cpu", 32, "torch", 1000)
    assert not made.fp16
    # and the values it spells out are Reranker's declared defaults, the model's included;
    # "every argument after the model is keyword-only"
    import ast
    import inspect

    call = ast.parse(code, mode="eval").body
    assert isinstance(call, ast.Call)
    declared = inspect.signature(Reranker).parameters
    listed: dict[str, Any] = {}
    for kw in call.keywords:
        assert kw.arg is not None, "the documented call spreads a ** mapping"
        listed[kw.arg] = ast.literal_eval(kw.value)
    assert list(listed) == list(declared)
    for name, value in listed.items():
        assert declared[name].default == value, (name, value, declared[name].default)
    assert [p.kind for p in declared.values()][1:] == [inspect.Parameter.KEYWORD_ONLY] * (
        len(declared) - 1)


@check("python-rerank.md#2")
def _rr_onnx(request: pytest.FixtureRequest, code: str) -> None:
    # "path/to/cross-encoder" is the reader's own model: the tiny one here. The page says
    # that without the onnx extra construction raises ModelLoadError saying which pip
    # install to run, the command in the page's bash block above this one
    import importlib.util

    from pgfunnel.errors import ModelLoadError
    from pgfunnel.rerank import Reranker

    if importlib.util.find_spec("onnxruntime") is not None:
        pytest.skip("the onnx extra is installed: the tiny model has no ONNX export to load")
    page = (ROOT / "docs" / "python-rerank.md").read_text()
    install = page.split("```python\n" + code.splitlines()[0], 1)[0].rsplit("```bash\n", 1)[1]
    assert "path/to/cross-encoder" in code
    code = code.replace("path/to/cross-encoder", str(request.getfixturevalue("tiny_ce")))
    with pytest.raises(ModelLoadError) as caught:
        eval(code, {"Reranker": Reranker})  # noqa: S307 - the page's own example
    assert install.split("```", 1)[0].strip() in str(caught.value), (install, caught.value)


@check("python-rerank.md#3")
def _rr_gate(request: pytest.FixtureRequest, code: str) -> None:
    pool = _pool(request, "refund on a monthly plan")
    decisive = {"fused_scores": [1.0, 0.1], "reranker": _reranker(request),
                "query": "refund on a monthly plan", "texts": [r.text for r in pool]}
    _exec(code, decisive, "python-rerank.md#3")
    assert "order" not in decisive, "a top score far ahead skips the reranker"
    close = {**decisive, "fused_scores": [1.0, 0.99]}
    _exec(code, close, "python-rerank.md#3")
    assert len(close["order"]) == len(pool)


@check("python-rerank.md#4")
def _rr_multi(request: pytest.FixtureRequest, code: str) -> None:
    namespace: dict[str, Any] = {
        "query": "refund on an annual plan",
        "paraphrases": ["money back for a yearly plan", "", "refund on an annual plan"],
        "search_ids": _search_ids(request)}
    _exec(code, namespace, "python-rerank.md#4")
    assert namespace["mq"].queries == ["refund on an annual plan",
                                       "money back for a yearly plan"]
    fused = namespace["fused"]
    assert fused and all(isinstance(cid, int) for cid, _ in fused)
    # the page's rule: sum(w_i / (k + rank_i)), ranks from 1; ties in the order the keys
    # are first met scanning rank by rank across the lists
    lists = namespace["lists"]
    expected: dict[int, float] = {}
    for rank in range(max(map(len, lists))):
        for ranked in lists:
            if rank < len(ranked):
                expected[ranked[rank]] = expected.get(ranked[rank], 0.0) + 1 / (60 + rank + 1)
    order = sorted(expected, key=lambda cid: -expected[cid])   # stable: first met first
    assert [cid for cid, _ in fused] == order
    assert [s for _, s in fused] == pytest.approx([expected[cid] for cid in order])


@check("python-rerank.md#5")
def _rr_decompose(request: pytest.FixtureRequest, code: str) -> None:
    namespace: dict[str, Any] = {"search_ids": _search_ids(request)}
    _exec(code, namespace, "python-rerank.md#5")
    assert namespace["d"].parts == ["currency on monthly plans", "levy on annual plans"]
    merged = namespace["merged"]
    # "every part its share of the first k slots": in turn, each part's best chunk not
    # already taken (a repeat is skipped, the part keeps its turn), the first 10 kept
    parts = [_search_ids(request)(p) for p in namespace["d"].parts]
    expected: list[int] = []
    while len(expected) < 10:
        taken = len(expected)
        for ranked in parts:
            best = next((cid for cid in ranked if cid not in expected), None)
            if best is not None and len(expected) < 10:
                expected.append(best)
        if len(expected) == taken:
            break
    assert merged == expected
    assert all(merged[i] in parts[i % 2] for i in range(len(merged)))


@check("python-rerank.md#6")
def _rr_rewrite(request: pytest.FixtureRequest, code: str) -> None:
    namespace: dict[str, Any] = {"call_llm_rewrite": lambda q: "meaning of error code",
                                 "trace": {}}
    _exec(code, namespace, "python-rerank.md#6")
    r = namespace["trace"]["rewrite"]
    assert namespace["search_text"] == "what does ERR-4029 mean on monthly plans"
    assert not r.used_rewrite and "ERR-4029" in r.reason
    for attr in ("used_rewrite", "reason", "protected", "missing", "elapsed_s"):
        assert hasattr(r, attr), attr


@check("python-rerank.md#7")
def _rr_followup(request: pytest.FixtureRequest, code: str) -> None:
    namespace: dict[str, Any] = {}
    _exec(code, namespace, "python-rerank.md#7")
    res = namespace["res"]
    assert res.query == "refunds what about monthly plans?"
    assert res.carried_terms == ["refunds"]


@check("python-rerank.md#8")
def _rr_packing(request: pytest.FixtureRequest, code: str) -> None:
    # the pool, and a copy of its best chunk as a dict with an id, as the comment's 42
    pool = _pool(request, "refund on a monthly plan", k=20)
    final_chunks = [*pool, {"id": 42, "text": pool[0].text}]
    namespace: dict[str, Any] = {"final_chunks": final_chunks,
                                 "reader_tokenizer": _reranker(request).tokenizer}
    _exec(code, namespace, "python-rerank.md#8")
    res = namespace["res"]
    assert len(res.kept) + len(res.dropped) == len(final_chunks)
    reasons = [reason for _, reason in res.dropped]
    assert f"near-duplicate of {pool[0].chunk_id}" in reasons, reasons
    assert all(r == "over token budget" or r.startswith("near-duplicate of ") for r in reasons)
    assert namespace["prompt_chunks"] == res.kept and res.kept


@check("python-rerank.md#9")
def _rr_tiny_models(request: pytest.FixtureRequest, code: str) -> None:
    from sentence_transformers import CrossEncoder, SentenceTransformer

    namespace: dict[str, Any] = {"tmp_path": request.getfixturevalue("tmp_path")}
    _exec(code, namespace, "python-rerank.md#9")
    assert CrossEncoder(str(namespace["path"])).predict([("a", "b")]).shape == (1,)
    assert CrossEncoder(str(namespace["bench"])).predict([("a", "b")]).shape == (1,)
    assert SentenceTransformer(str(namespace["bi"])).encode(["a"]).shape == (1, 64)


# --- docs/security.md ------------------------------------------------------------------

@check("security.md#0")
def _sec_roles(request: pytest.FixtureRequest, code: str) -> None:
    from pgfunnel import schema
    from pgfunnel.security import security_findings

    dsn = request.getfixturevalue("sample_db")
    schema.init(dsn, rls=True)
    roles = ("webapp", "ingest_job")
    try:
        _psql(dsn, code, request.getfixturevalue("tmp_path"))
        with psycopg.connect(dsn) as conn:
            member = conn.execute(
                "select pg_has_role('webapp', 'pgfunnel_reader', 'member'),"
                " pg_has_role('ingest_job', 'pgfunnel_writer', 'member'),"
                " (select rolsuper or rolbypassrls from pg_roles where rolname = 'webapp')"
            ).fetchone()
            assert member == (True, True, False)
            findings = security_findings(conn, app_role="webapp")
            # "search (and write traces)": as webapp, with the reader set, under RLS
            conn.execute("set role webapp")
            conn.execute("select set_config('pgfunnel.principals', '[]', true)")
            traced = conn.execute("select count(*) from pgfunnel.funnel_search("
                                  "'refund', principals => '{}', trace => true)").fetchone()
            logged = conn.execute("select pgfunnel.last_search_id()").fetchone()
            conn.commit()
        assert not [f for f in findings if f.level == "error"], findings
        assert traced is not None and traced[0] > 0
        assert logged is not None and logged[0] is not None
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for role in roles:
                conn.execute(sql.SQL("drop owned by {} cascade").format(sql.Identifier(role)))
                conn.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))


@check("security.md#1")
def _sec_reader_setting(request: pytest.FixtureRequest, code: str) -> None:
    out = _psql(request.getfixturevalue("handbook"), code, request.getfixturevalue("tmp_path"))
    rows = _table(out, "chunk_id|")
    assert rows and rows[0]["citekey"].startswith("refund"), out


# --- docs/sql.md: signature listings ----------------------------------------------------
# each names its parameters (query_text, chunk_ids, ...) where a call has values, so it
# cannot run; what it states is the function's signature: its parameters, in order, and
# the defaults it writes, which are compared with the ones the database declares

def _listed(code: str) -> tuple[str, list[tuple[str, str | None]]]:
    m = re.fullmatch(r"select \* from ([\w.]+)\((.*)\);", " ".join(code.split()))
    assert m, code
    params: list[tuple[str, str | None]] = []
    for arg in m[2].split(", "):
        name, _, default = arg.partition(" => ")
        params.append((name, default.lower() or None))
    return m[1], params


def _declared(conn: psycopg.Connection[Any], function: str) -> list[tuple[str, str | None]]:
    [(args,)] = conn.execute(
        "select pg_get_function_arguments(p.oid) from pg_proc p join pg_namespace n"
        " on n.oid = p.pronamespace where n.nspname = 'pgfunnel' and p.proname = %s",
        (function.removeprefix("pgfunnel."),)).fetchall()
    params: list[tuple[str, str | None]] = []
    for arg in args.split(", "):
        m = re.fullmatch(r"(\w+) [\w .\[\]]+?(?: DEFAULT (.+))?", arg)
        assert m, arg
        default = re.sub(r"::[\w .\[\]]+$", "", m[2]).lower() if m[2] else None
        params.append((m[1], default))
    return params


def _signature(request: pytest.FixtureRequest, code: str) -> None:
    function, listed = _listed(code)
    with psycopg.connect(request.getfixturevalue("helpcenter")) as conn:
        declared = _declared(conn, function)
        if listed[-1][0] == "<same parameters as candidates>":
            # explain's own arguments, then candidates' after its query text and vector
            listed = listed[:-1] + [p for p in _declared(conn, "candidates")
                                    if p[0] not in ("query_text", "query_embedding")]
            listed = [(name, None) if default is None else (name, default)
                      for name, default in listed]
    assert [name for name, _ in listed] == [name for name, _ in declared], function
    for (name, default), (_, actual) in zip(listed, declared, strict=True):
        if default is not None:
            assert default == actual, f"{function}: {name} => {default}, declared {actual}"


for _block in ("sql.md#0", "sql.md#1", "sql.md#2"):
    check(_block)(_signature)


# --- the tests -------------------------------------------------------------------------

def test_every_block_is_run_or_listed() -> None:
    assert len(BLOCKS) >= 26, sorted(BLOCKS)
    both = set(CHECKS) & set(NOT_RUN)
    assert not both, f"blocks both run and listed as not run: {sorted(both)}"
    unhandled = set(BLOCKS) - set(CHECKS) - set(NOT_RUN)
    assert not unhandled, f"doc blocks neither run nor listed in NOT_RUN: {sorted(unhandled)}"
    stale = (set(CHECKS) | set(NOT_RUN) | set(CONTINUES)) - set(BLOCKS)
    assert not stale, f"entries for blocks the docs no longer have: {sorted(stale)}"


@pytest.mark.parametrize("block_id", sorted(BLOCKS))
def test_doc_block_runs_as_written(block_id: str, request: pytest.FixtureRequest) -> None:
    if block_id in NOT_RUN:
        pytest.skip(f"{block_id}: {NOT_RUN[block_id]}")
    CHECKS[block_id](request, BLOCKS[block_id][1])


# --- README.md's first screen: the commands of "Use it" --------------------------------

def _use_it_commands() -> list[list[str]]:
    import shlex

    text = (ROOT / "README.md").read_text()
    block = text.split("## Use it", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line, comments=True)[1:] for line in block.splitlines()
            if line.startswith("pgfunnel ")]


def _options(args: list[str]) -> tuple[Any, list[str]]:
    """The click command a command line names, and the options it gives."""
    import typer
    from pgfunnel.cli.main import app

    command: Any = typer.main.get_command(app)
    rest = list(args)
    while hasattr(command, "commands") and rest and rest[0] in command.commands:
        command = command.commands[rest.pop(0)]
    return command, [a.split("=", 1)[0] for a in rest if a.startswith("-")]


SHELL = re.compile(r"^(?P<indent>[ \t]*)```(?:bash|sh)[ \t]*\n(?P<body>.*?)^(?P=indent)```",
                   re.M | re.S)


def _shell_commands() -> list[tuple[str, list[str]]]:
    """Each `pgfunnel ...` of the docs' shell blocks: at a line's start, after `&&` or in
    `$(...)`, up to a pipe, a comment, a heredoc or the closing parenthesis."""
    import shlex

    found = []
    for doc in [*DOCS, ROOT / "bench" / "README.md", ROOT / "examples" / "webapp" / "README.md",
                ROOT / "docker" / "README.md"]:
        for m in SHELL.finditer(doc.read_text()):
            for line in m["body"].replace("\\\n", " ").splitlines():
                for seg in re.findall(r"(?:^|\$\(|&&)\s*pgfunnel ([^|)#<&]*)", line):
                    found.append((doc.name, shlex.split(seg)))
    return found


def test_the_docs_commands_name_options_their_commands_have() -> None:
    commands = _shell_commands()
    assert len(commands) >= 30, commands
    for doc, args in commands:
        command, given = _options(args)
        known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        assert set(given) <= known, f"{doc}: pgfunnel {' '.join(args)}: {set(given) - known}"
        # a file of this repository that a command names is there
        for arg in args:
            if arg.startswith(("pgfunnel/", "docs/")):
                assert (ROOT / arg).exists(), f"{doc}: pgfunnel {' '.join(args)}: no {arg}"


def test_the_readmes_commands_run_as_written(server_dsn: str, sample_template: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # on a database named by PGFUNNEL_DSN (the README's commands name none) that already
    # holds the help center as 'handbook', so that its ingest finds every document
    # unchanged and embeds nothing; from the repository's root, as a user who cloned it
    # runs them. Substituted: the docs/ ingest runs with --dry-run (the variant its comment
    # gives), since embedding the whole docs folder takes a minute on a CPU. Left out: the
    # two eval lines (the judged run takes minutes and the BEIR files are the user's own),
    # whose options the test above checks
    from conftest import _create_db, _drop_db
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    name = "pgf_docex_readme"
    db = _create_db(server_dsn, name, sample_template)
    try:
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("update pgfunnel.collection set name = 'handbook'"
                         " where name = 'default'")
        monkeypatch.setenv("PGFUNNEL_DSN", db)
        monkeypatch.chdir(ROOT)
        outputs: dict[str, str] = {}
        for args in _use_it_commands():
            if args[0] == "eval":
                continue
            if args[:2] == ["ingest", "docs/"]:
                args = [*args, "--dry-run"]
            res = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
            assert res.exit_code == 0, f"pgfunnel {' '.join(args)}: {res.output}"
            outputs[" ".join(args[:2])] = res.output
    finally:
        _drop_db(server_dsn, name)
    assert len(outputs) == 7, sorted(outputs)
    assert "refunds-monthly" in outputs["search refund on a monthly plan"]
    explained = outputs["explain refund on a monthly plan"]
    assert "refunds-annual" in explained, explained
    ingested = outputs["ingest docs/"]
    assert "(dry run: nothing written)" in ingested, ingested
    assert any(line.split()[:1] == ["python-api"] for line in ingested.splitlines()), ingested
    assert outputs["dsn"].strip() == db


# --- docs/cli.md: the examples that show what a command prints --------------------------

def test_cli_md_embed_example_runs_in_psql(demo: str, tmp_path: Path) -> None:
    # `pgfunnel embed`'s example: psql -v q="$(pgfunnel embed '...' -c demo)" <<'SQL' ... SQL
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text.split("### `pgfunnel embed", 1)[1].split("\n### ", 1)[0]
    command = section.split("```bash\n", 1)[1].split("```", 1)[0]
    script = command.split("<<'SQL'\n", 1)[1].split("\nSQL\n", 1)[0]
    out = _psql(demo, script, tmp_path, q=_embedded(command, demo))
    rows = _table(out, "citekey|")
    assert list(rows[0]) == ["citekey", "lexical_rank", "dense_rank", "final_rank"]
    assert len(rows) == 5 and rows[0]["citekey"] == "refunds-monthly", out


def test_cli_md_capped_line_is_what_search_prints(helpcenter: str) -> None:
    import shlex

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    text = " ".join((ROOT / "docs" / "cli.md").read_text().split())
    shown = re.search(
        r"says so \(`pgfunnel (search [^`]*)` on the help center\): `(capped: [^`]*)`", text)
    assert shown, "docs/cli.md no longer shows the capped: line with its command"
    args = shlex.split(shown[1])
    res = CliRunner().invoke(app, [*args, "--dsn", helpcenter], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    [capped] = [line for line in res.stdout.splitlines() if line.startswith("capped: ")]
    assert capped.startswith(shown[2].removesuffix("...").rstrip()), (capped, shown[2])


def test_cli_md_explain_capped_line_is_what_explain_prints(helpcenter: str) -> None:
    """The chunks behind search's capped: line, as docs/cli.md shows explain naming them."""
    import shlex

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    text = " ".join((ROOT / "docs" / "cli.md").read_text().split())
    shown = re.search(r"met them, the chunks behind the fused ranks `search`'s `capped:` "
                      r"line skipped \(`pgfunnel (explain [^`]*)` on the help center: "
                      r"`(capped: [^`]*)`", text)
    assert shown, "docs/cli.md no longer shows explain's capped: line with its command"
    args = shlex.split(shown[1])
    res = CliRunner().invoke(app, [*args, "--dsn", helpcenter], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert f"  {shown[2]}" in res.stdout.splitlines(), (res.stdout, shown[2])
    # the search with the same options skips that fused rank
    search = ["search", *args[1:2], *args[3:]]
    res = CliRunner().invoke(app, [*search, "--dsn", helpcenter], env={"COLUMNS": "200"})
    rank = re.search(r"fused rank ([0-9]+)\)", shown[2])
    assert rank and f"capped: fused rank {rank[1]} not shown" in res.stdout, res.stdout


def test_cli_md_empty_query_is_what_search_does(helpcenter: str) -> None:
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    text = " ".join((ROOT / "docs" / "cli.md").read_text().split())
    said = re.search(r"An empty or blank QUERY .*?warning, `([^`]*)`.*?A query of punctuation "
                     r"alone \(`'(\S+)'`\) is embedded", text)
    assert said, "docs/cli.md no longer says what search does with an empty query"
    warning, punctuation = said[1], said[2]
    for empty in ("", "   "):
        res = CliRunner().invoke(app, ["search", empty, "--dsn", helpcenter],
                                 env={"COLUMNS": "200"})
        assert res.exit_code == 0, res.output
        assert "no results." in res.stdout.splitlines(), res.stdout
        assert warning in " ".join(res.stderr.split()), res.stderr
        res = CliRunner().invoke(app, ["search", empty, "--json", "--dsn", helpcenter])
        # not embedded: the lexical leg alone ran
        assert json.loads(res.stdout)["fusion"]["legs"] == ["lexical"], res.stdout
    res = CliRunner().invoke(app, ["search", punctuation, "--json", "--dsn", helpcenter])
    found = json.loads(res.stdout)
    assert "dense" in found["fusion"]["legs"] and found["results"], res.stdout
    assert all(r["lexical_rank"] is None for r in found["results"]), res.stdout


# the commands whose section lists the keys of their --json object, run in this order
# (the last drops the collection) with the arguments that make each do its work
_JSON_RUNS = {
    "init": ["init"],
    "doctor": ["doctor"],
    "migrate": ["migrate"],
    "delete": ["delete", "refunds-annual", "no-such-doc"],
    "embed": ["embed", "refund on a monthly plan"],
    "ingest": ["ingest", str(ROOT / "pgfunnel" / "data" / "demo_internal.jsonl")],
    "versions drop-collection": ["versions", "drop-collection", "default", "--yes"],
}


def test_cli_md_json_keys_are_what_each_command_prints(sample_db: str) -> None:
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    page = (ROOT / "docs" / "cli.md").read_text()
    listed: dict[str, list[str]] = {}
    for section in page.split("\n### `pgfunnel ")[1:]:
        command = " ".join(w for w in section.split("`", 1)[0].split()
                           if re.fullmatch(r"[a-z][a-z-]*", w))
        flat = " ".join(section.split())
        for keys in re.findall(r"`--json`: `\{([^`]*)\}`", flat):
            # {"a", "b"}, or {"a": TYPE, ...} where a value is spelled out (doctor's)
            listed[command] = (re.findall(r'"(\w+)":', keys)
                               or re.findall(r'"(\w+)"', keys))
    assert set(listed) == set(_JSON_RUNS), sorted(listed)
    for command, args in _JSON_RUNS.items():
        res = CliRunner().invoke(app, [*args, "--json", "--dsn", sample_db])
        assert res.exit_code == 0, (command, res.output)
        printed = json.loads(res.stdout)
        assert list(printed) == listed[command], (command, list(printed))
    # doctor's findings: [{"level", "check", "message"}]
    res = CliRunner().invoke(app, ["doctor", "--json", "--dsn", sample_db])
    findings = json.loads(res.stdout)["findings"]
    assert findings and all(list(f) == ["level", "check", "message"] for f in findings)


def test_index_versions_walkthrough_runs_as_written(server_dsn: str, sample_template: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/index-versions.md's first block (cli.md's Examples run the same lines) on the
    # help center as collection 'demo', what `pgfunnel demo` makes, from the repository root
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    page = (ROOT / "docs" / "index-versions.md").read_text()
    block = SHELL.search(page)
    assert block
    commands = [args for doc, args in _shell_commands() if doc == "index-versions.md"]
    assert len(commands) == len(block["body"].strip().splitlines())
    databases = _help_center_as(server_dsn, sample_template, "demo", "pgf_docex_versions")
    dsn = next(databases)
    try:
        monkeypatch.chdir(ROOT)
        outputs = []
        for args in commands:
            res = CliRunner().invoke(app, [*args, "--dsn", dsn], env={"COLUMNS": "200"})
            assert res.exit_code == 0, f"pgfunnel {' '.join(args)}: {res.output}"
            outputs.append(res.stdout)
    finally:
        next(databases, None)
    # what the block's comments say each line does
    built, compared, activated, rolled_back, dropped = outputs
    analyzer = commands[0][commands[0].index("--analyzer") + 1]
    # the walkthrough is not about upgrading from an old analyzer: it names the current
    # simple one, the default's generation without stemming
    from pgfunnel.ingest import DEFAULT_ANALYZER
    assert analyzer == "simple_" + DEFAULT_ANALYZER.rsplit("_", 1)[1], analyzer
    assert built.startswith("version 2 of 'demo': ") and f"analyzer {analyzer}" in built
    assert "version 2 is ready." in built, built
    assert compared.startswith("97 queries, k=10: ") and "version 1 " in compared, compared
    assert activated.startswith("version 2 of 'demo' is active; version 1 retired"), activated
    assert rolled_back.startswith("version 1 of 'demo' is active; version 2 retired"), rolled_back
    assert dropped.startswith("version 2 of 'demo' dropped"), dropped


def test_sql_md_whole_document_explain_gives_the_row_the_page_states(
        handbook: str, tmp_path: Path) -> None:
    # docs/sql.md, explain: a document's furthest chunk from SQL; "The row is the
    # document's chunk 0, `returned` at rank 5, as `pgfunnel explain ...` reports it"
    import shlex

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    page = (ROOT / "docs" / "sql.md").read_text()
    [command] = [m["body"] for m in SHELL.finditer(page) if "pgfunnel.explain(" in m["body"]]
    script = command.split("<<'SQL'\n", 1)[1].split("\nSQL\n", 1)[0]
    [row] = _table(_psql(handbook, script, tmp_path, q=_embedded(command, handbook)),
                   "ordinal|")
    after = " ".join(page.split(command, 1)[1].split("\n\n", 2)[1].split())
    stated = re.match(r"The row is the document's chunk (\d+), `(\w+)` at rank (\d+), as "
                      r"`pgfunnel (explain [^`]*)` reports it", after)
    assert stated, after
    assert (row["ordinal"], row["verdict"], row["final_rank"]) == stated.groups()[:3], row
    res = CliRunner().invoke(app, [*shlex.split(stated[4]), "--dsn", handbook])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(f"guide-building-integrations: {stated[2]}\n"), res.stdout
    assert (f"(guide-building-integrations#{stated[1]}, chunk id" in res.stdout
            and f"{stated[2]} at rank {stated[3]} " in res.stdout), res.stdout


def test_sql_md_candidates_into_final_gives_funnel_search_rows(
        handbook: str, tmp_path: Path) -> None:
    # docs/sql.md, final: candidates() into final() in SQL with nothing in between; "The
    # rows are those of `select ... from funnel_search(...)`: three chunks of
    # `guide-building-integrations`, then fused ranks 7 and 8"
    page = (ROOT / "docs" / "sql.md").read_text()
    [command] = [m["body"] for m in SHELL.finditer(page)
                 if "pgfunnel.candidates(" in m["body"]]
    script = command.split("<<'SQL'\n", 1)[1].split("\nSQL\n", 1)[0]
    q = _embedded(command, handbook)
    rows = _table(_psql(handbook, script, tmp_path, q=q), "final_rank|")
    after = " ".join(page.split(command, 1)[1].split("\n\n", 2)[1].split())
    stated = re.match(r"The rows are those of `(select [^`]*)`: three chunks of "
                      r"`([\w-]+)`, then fused ranks (\d+) and (\d+)", after)
    assert stated, after
    expected = _table(_psql(handbook, stated[1] + ";\n", tmp_path, q=q), "final_rank|")
    assert rows == expected and len(rows) == 5, (rows, expected)
    assert [r["citekey"] for r in rows[:3]] == [stated[2]] * 3, rows
    assert [r["fused_rank"] for r in rows[3:]] == [stated[3], stated[4]], rows


def test_the_docs_eval_configurations_parse_as_written() -> None:
    """Every `--config` the docs give, in a shell block or in the prose, is a NAME=JSON
    that `pgfunnel eval` takes. docs/tuning.md gave `pgfunnel eval --preset lexical
    --config '{"ef_search": 400}'`, which eval refuses (`expected NAME=JSON`)."""
    import shlex

    from pgfunnel.eval.harness import parse_config_arg

    found = []
    for doc in [*DOCS, ROOT / "bench" / "README.md"]:
        # a command in the prose may run over a line break
        text = " ".join(doc.read_text().split())
        for m in re.finditer(r"--config (NAME=JSON|[\w.-]*=?'[^']*'|\S+)", text):
            if m[1] == "NAME=JSON":
                continue  # the usage line's placeholder
            [arg] = shlex.split(m[1].rstrip("`;,)"))
            found.append((doc.name, arg))
            parse_config_arg(arg)
    assert len(found) >= 3, found
