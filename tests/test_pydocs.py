"""Tests of bench/pydocs.py on inline HTML snippets (no dependency on the installed docs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from funnel_util import load_module

_PATH = Path(__file__).resolve().parents[1] / "bench" / "pydocs.py"


pydocs = load_module("bench_pydocs", _PATH)

PAGE = """<!DOCTYPE html>
<html><head><title>json — JSON encoder and decoder &#8212; Python 3.11.2 documentation</title>
</head><body>
<div class="mobile-nav"><nav class="nav-content"><a href="/">NAVLOGO</a></nav></div>
<div class="related" role="navigation"><ul><li><a href="x.html">RELATEDNAV</a></li></ul></div>
<div class="document"><div class="documentwrapper"><div class="bodywrapper">
<div class="body" role="main">
<section id="module-json">
<h1><code>json</code> — JSON encoder and decoder<a class="headerlink" href="#module-json"
 title="Permalink to this heading">¶</a></h1>
<p><strong>Source code:</strong> <a href="x">Lib/json/__init__.py</a></p>
<p>JSON is a lightweight   data
 interchange format.</p>
<div class="highlight-python3"><div class="highlight">
<pre><span class="gp">&gt;&gt;&gt; </span><span>import</span> <span>json</span>
## not a heading
</pre></div></div>
<section id="basic-usage"><h2>Basic Usage<a class="headerlink" href="#basic-usage">¶</a></h2>
<dl><dt class="sig" id="json.dumps"><span class="pre">json.</span><span>dumps</span>(obj)<a
 class="headerlink" href="#json.dumps">¶</a></dt>
<dd><p>Serialize <em>obj</em> to a string.</p></dd></dl>
<ul><li><p>first item</p></li><li>second item</li></ul>
<section id="sub"><h3>Character Encodings<a class="headerlink" href="#sub">¶</a></h3>
<p>Text about encodings.</p></section></section></section>
<div class="clearer"></div>
</div></div></div></div>
<div class="sphinxsidebar" role="navigation"><h3>Table of Contents</h3><p>SIDEBARTEXT</p></div>
<div class="footer">FOOTERTEXT Copyright</div>
</body></html>
"""


def test_page_parser_title_headings_and_nav() -> None:
    title, text = pydocs.parse_page(PAGE)
    assert title == "json — JSON encoder and decoder"
    lines = text.splitlines()
    assert lines[0] == "## json — JSON encoder and decoder"
    assert "## Basic Usage" in lines
    assert "## Character Encodings" in lines
    assert "¶" not in text
    for nav in ("NAVLOGO", "RELATEDNAV", "SIDEBARTEXT", "FOOTERTEXT", "Table of Contents"):
        assert nav not in text
    assert "Source code: Lib/json/__init__.py" in text
    assert "JSON is a lightweight data interchange format." in text
    assert "json.dumps(obj)" in text
    assert "Serialize obj to a string." in text
    assert "- first item" in lines and "- second item" in lines


def test_page_parser_code_is_indented_and_never_a_heading() -> None:
    _, text = pydocs.parse_page(PAGE)
    lines = text.splitlines()
    assert "    >>> import json" in lines
    assert "    ## not a heading" in lines
    assert not any(line.startswith("## not") for line in lines)


def test_word_count_and_chunk_estimate() -> None:
    text = "## A\n" + " ".join(["w"] * 250) + "\n## B\n" + " ".join(["w"] * 10)
    assert pydocs.word_count(text) == 260 + 2  # the heading words count, "##" does not
    assert pydocs.estimate_chunks(text) == 2 + 1


GENINDEX = """<html><body><div class="body" role="main">
<table style="width: 100%" class="indextable genindextable"><tr>
<td><ul>
  <li><a href="library/json.html#json.dumps">dumps() (in module json)</a>
    <ul>
      <li><a href="library/marshal.html#marshal.dumps">(in module marshal)</a></li>
      <li><a href="library/pickle.html#pickle.dumps">(in module pickle)</a></li>
    </ul></li>
  <li><a href="library/os.path.html#os.path.join">os.path.join()</a></li>
  <li><a href="glossary.html#term-decorator"><strong>decorator</strong></a>,
      <a href="reference/compound_stmts.html#index-30">[1]</a>,
      <a href="glossary.html#term-decorator2">[2]</a></li>
  <li>
    exceptions
    <ul>
      <li><a href="reference/simple_stmts.html#index-1">chaining</a>,
          <a href="library/exceptions.html#index-2">[1]</a></li>
      <li><a href="missing/page.html#x">not in corpus</a></li>
    </ul></li>
  <li><a href="library/exceptions.html#NameError">NameError</a></li>
  <li><a href="reference/executionmodel.html#index-9">NameError (built-in exception)</a></li>
  <li><a href="a.html#1">generic</a>, <a href="b.html">[1]</a>, <a href="c.html">[2]</a>,
      <a href="d.html">[3]</a>, <a href="e.html">[4]</a>, <a href="f.html">[5]</a>,
      <a href="g.html">[6]</a>, <a href="h.html">[7]</a>, <a href="i.html">[8]</a></li>
  <li><a href="missing/page.html#y">orphan</a></li>
</ul></td></tr></table>
</div></body></html>
"""

CORPUS_KEYS = {
    "library/json",
    "library/marshal",
    "library/pickle",
    "library/os.path",
    "glossary",
    "reference/compound_stmts",
    "reference/simple_stmts",
    "library/exceptions",
    "reference/executionmodel",
    *"abcdefghi",
}


def test_genindex_parser_entries_links_and_subentries() -> None:
    entries = pydocs.parse_genindex(GENINDEX)
    names = [e.name for e in entries]
    assert names[:4] == ["dumps() (in module json)", "os.path.join()", "decorator", "exceptions"]
    dumps = entries[0]
    assert dumps.links == ["library/json.html#json.dumps"]
    assert [s.name for s in dumps.subs] == ["(in module marshal)", "(in module pickle)"]
    deco = entries[2]
    assert len(deco.links) == 3  # "[1]", "[2]" links belong to the entry, not to its name
    exc = entries[3]
    assert exc.links == []
    assert [s.name for s in exc.subs] == ["chaining", "not in corpus"]
    assert exc.subs[0].links == [
        "reference/simple_stmts.html#index-1",
        "library/exceptions.html#index-2",
    ]


DL_GENINDEX = """<html><body><table class="indextable genindextable"><tr><td>
<dl>
  <dt><a href="core/exceptions.html#sqlalchemy.exc.ArgumentError">ArgumentError</a></dt>
  <dt>as_uuid</dt>
  <dd><dl>
    <dt><a href="dialects/postgresql.html#p.UUID.params.as_uuid">(UUID parameter)</a>,
        <a href="core/type_basics.html#t.Uuid.params.as_uuid">[1]</a></dt>
  </dl></dd>
  <dt></dt>
</dl></td></tr></table></body></html>
"""


def test_the_older_dl_genindex_layout_is_read_too() -> None:
    entries = pydocs.parse_genindex(DL_GENINDEX)
    assert [e.name for e in entries] == ["ArgumentError", "as_uuid"]
    assert entries[0].links == ["core/exceptions.html#sqlalchemy.exc.ArgumentError"]
    [sub] = entries[1].subs
    assert sub.name == "(UUID parameter)" and len(sub.links) == 2


def test_an_index_without_entries_stops_the_build() -> None:
    import pytest

    with pytest.raises(SystemExit, match="no entries"):
        pydocs.build_queries(pydocs.parse_genindex("<html><p>no index</p></html>"),
                             CORPUS_KEYS)


def test_identifier_query_strips_parens_and_decoration() -> None:
    assert pydocs.identifier_query("dumps() (in module json)") == "dumps"
    assert pydocs.identifier_query("os.path.join()") == "os.path.join"
    assert pydocs.identifier_query("decode() (bytearray method)") == "decode"
    assert pydocs.identifier_query("JSONDecoder (class in json)") == "JSONDecoder"
    assert pydocs.identifier_query("GetoptError") == "GetoptError"
    assert pydocs.identifier_query("decorator") is None
    assert pydocs.identifier_query("context manager") is None
    assert pydocs.identifier_query("! (pdb command)") is None
    assert pydocs.keyword_query("context manager") == "context manager"
    assert pydocs.keyword_query("dumps() (in module json)") is None


def test_candidates_map_entries_to_distinct_corpus_pages() -> None:
    entries = pydocs.parse_genindex(GENINDEX)
    cands = pydocs.candidates_from_index(entries, CORPUS_KEYS)
    ident, kw, sub = cands["identifier"], cands["keyword"], cands["subentry"]
    # decoration-only sub-entries are the same name in other modules: merged into the parent
    assert ident["dumps"] == ["library/json", "library/marshal", "library/pickle"]
    assert ident["os.path.join"] == ["library/os.path"]
    # a plain entry that is also an API name elsewhere joins the identifier query
    assert sorted(ident["NameError"]) == ["library/exceptions", "reference/executionmodel"]
    assert "NameError" not in kw
    # two links to the same page count once
    assert kw["decorator"] == ["glossary", "reference/compound_stmts"]
    assert sub["exceptions chaining"] == ["reference/simple_stmts", "library/exceptions"]
    assert sub["exceptions not in corpus"] == []
    assert "exceptions" not in kw or kw["exceptions"] == []


def test_build_queries_filters_generic_and_orphan_entries() -> None:
    entries = pydocs.parse_genindex(GENINDEX)
    queries = pydocs.build_queries(entries, CORPUS_KEYS, per_slice=10, seed=0)
    texts = {q["query"] for q in queries}
    assert "generic" not in texts  # 9 pages > 8
    assert "orphan" not in texts  # no corpus page
    assert "exceptions not in corpus" not in texts
    by_query = {q["query"]: q for q in queries}
    assert by_query["dumps"]["slice"] == "identifier"
    assert by_query["dumps"]["relevant"] == {
        "library/json": 1,
        "library/marshal": 1,
        "library/pickle": 1,
    }
    assert by_query["exceptions chaining"]["slice"] == "subentry"
    for q in queries:
        assert set(q) == {"query_id", "query", "slice", "relevant", "history", "split"}
        assert q["history"] == [] and q["split"] in ("dev", "test")
        assert q["split"] == pydocs.assign_split(q["query_id"])
    ids = [q["query_id"] for q in queries]
    assert len(ids) == len(set(ids))
    assert queries == pydocs.build_queries(entries, CORPUS_KEYS, per_slice=10, seed=0)


def test_sampling_is_seeded_and_capped() -> None:
    items = [f"q{i}" for i in range(100)]
    a = pydocs._sample(items, 10, 0, "keyword")
    assert a == pydocs._sample(list(reversed(items)), 10, 0, "keyword")
    assert len(a) == 10
    assert a != pydocs._sample(items, 10, 1, "keyword")


def test_question_wrapper_is_deterministic_and_varied() -> None:
    terms = [f"term{i}" for i in range(40)]
    first = [pydocs.wrap_question(t) for t in terms]
    assert first == [pydocs.wrap_question(t) for t in terms]
    assert pydocs.wrap_question("decorator") in {
        t.format(x="decorator") for t in pydocs.QUESTION_TEMPLATES
    }
    used = {q.replace(t, "{x}") for q, t in zip(first, terms, strict=True)}
    assert used == set(pydocs.QUESTION_TEMPLATES)


def test_split_is_deterministic_and_balanced() -> None:
    ids = [pydocs.make_query_id("keyword", f"query {i}") for i in range(2000)]
    splits = [pydocs.assign_split(i) for i in ids]
    assert splits == [pydocs.assign_split(i) for i in ids]
    assert pydocs.assign_split("keyword-decorator-abc123") == pydocs.assign_split(
        "keyword-decorator-abc123"
    )
    share = splits.count("dev") / len(splits)
    assert 0.45 < share < 0.55


def test_missing_docs_message_names_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pydocs, "DOC_ROOT_CANDIDATES", (tmp_path / "nope",))
    monkeypatch.setattr(pydocs.os, "geteuid", lambda: 1000)
    with pytest.raises(SystemExit) as err:
        pydocs.ensure_docs()
    assert "python3.11-doc" in str(err.value)
    with pytest.raises(SystemExit):
        pydocs.ensure_docs(tmp_path)


def test_build_end_to_end_on_a_tiny_docs_tree(tmp_path: Path) -> None:
    root = tmp_path / "html"
    (root / "library").mkdir(parents=True)
    (root / "library" / "json.html").write_text(PAGE, encoding="utf-8")
    (root / "library" / "tiny.html").write_text(
        "<html><head><title>t</title></head><body><div class='body' role='main'><p>few words"
        "</p></div></body></html>",
        encoding="utf-8",
    )
    (root / "library" / "index.html").write_text(PAGE, encoding="utf-8")  # navigation page
    (root / "genindex-all.html").write_text(GENINDEX, encoding="utf-8")
    out = tmp_path / "out"
    counts = pydocs.build(out, docs_root=root)
    docs = pydocs.load_corpus(out / "corpus.jsonl")
    assert [d["citekey"] for d in docs] == ["library/json"]
    doc = docs[0]
    assert doc["metadata"] == {"section": "library"}
    assert doc["tenant"] is None and doc["readers"] == [] and doc["language"] == "en"
    queries = pydocs.load_queries(out / "queries.jsonl")
    assert {q["query"] for q in queries} == {"dumps"}
    assert counts["docs"] == 1 and counts["queries_identifier"] == 1


UNDERSCORED_GENINDEX = """<html><body><div class="body" role="main">
<table class="indextable genindextable"><tr>
<td><ul>
  <li><a href="library/json.html#a">__init__() (object method)</a>
    <ul><li><a href="library/pickle.html#b">(in module pickle)</a></li></ul></li>
  <li><a href="library/json.html#c">object.__slots__</a></li>
  <li><a href="library/json.html#d">_thread</a></li>
  <li><a href="library/json.html#e">sys._getframe()</a></li>
  <li><a href="library/json.html#f">and_() (in module operator)</a></li>
  <li><a href="library/json.html#g">os.path.join()</a></li>
  <li><a href="library/json.html#h">snake_case()</a></li>
  <li><a href="missing/page.html#i">__orphan__</a></li>
</ul></td></tr></table>
</div></body></html>
"""


def test_underscored_slice_separates_kinds_of_name() -> None:
    assert pydocs.underscored_slice("__init__") == "dunder"
    assert pydocs.underscored_slice("object.__getattr__") == "dunder-qualified"
    assert pydocs.underscored_slice("__future__.annotations") == "dunder-qualified"
    assert pydocs.underscored_slice("_thread") == "private"
    assert pydocs.underscored_slice("sys._getframe") == "private"
    assert pydocs.underscored_slice("_fields_") == "private"
    assert pydocs.underscored_slice("and_") == "trailing"
    assert pydocs.underscored_slice("snake_case") is None
    assert pydocs.underscored_slice("os.path.join") is None
    assert pydocs.underscored_slice("__") is None


def test_build_writes_every_underscored_query_when_asked(tmp_path: Path) -> None:
    root = tmp_path / "html"
    (root / "library").mkdir(parents=True)
    (root / "library" / "json.html").write_text(PAGE, encoding="utf-8")
    (root / "library" / "pickle.html").write_text(PAGE, encoding="utf-8")
    (root / "genindex-all.html").write_text(UNDERSCORED_GENINDEX, encoding="utf-8")
    out = tmp_path / "out"
    target = tmp_path / "underscored.jsonl"
    assert pydocs.main(["build", "--out", str(out), "--docs", str(root),
                        "--per-slice", "1", "--underscored-queries", str(target)]) == 0
    got = {q["query"]: (q["slice"], q["relevant"]) for q in pydocs.load_queries(target)}
    # every one, not the --per-slice sample; judged as the benchmark judges (linked pages
    # in the corpus, the decoration-only sub-entry's page merged in)
    assert got == {
        "__init__": ("dunder", {"library/json": 1, "library/pickle": 1}),
        "object.__slots__": ("dunder-qualified", {"library/json": 1}),
        "_thread": ("private", {"library/json": 1}),
        "sys._getframe": ("private", {"library/json": 1}),
        "and_": ("trailing", {"library/json": 1}),
    }
    # the benchmark's own queries are still sampled
    assert len(pydocs.load_queries(out / "queries.jsonl")) == 1
    # without the flag nothing is written there
    target.unlink()
    pydocs.main(["build", "--out", str(out), "--docs", str(root)])
    assert not target.exists()


def test_run_configs_measure_each_leg_as_the_eval_presets_do() -> None:
    from pgfunnel.eval.harness import DENSE_ONLY, LEXICAL_ONLY, EvalConfig

    # one leg alone: the other does not run, so its hits cannot fill the list
    assert pydocs.RUN_CONFIGS["lexical"] == LEXICAL_ONLY
    assert pydocs.RUN_CONFIGS["dense"] == DENSE_ONLY
    for name, raw in pydocs.RUN_CONFIGS.items():
        EvalConfig.from_dict(name, raw)


def test_run_before_build_says_to_build_first(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as err:
        pydocs.run(tmp_path / "pydocs", tmp_path / "out")
    assert "corpus.jsonl not found" in str(err.value)
    assert f"python bench/pydocs.py build --out {tmp_path / 'pydocs'}" in str(err.value)
    (tmp_path / "pgdocs").mkdir()
    (tmp_path / "pgdocs" / "corpus.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"queries.jsonl not found.*bench/pgdocs.py build"):
        pydocs.run(tmp_path / "pgdocs", tmp_path / "out", collection="pgdocs")
    assert not (tmp_path / "out").exists()


def test_summary_table_shows_a_dash_for_a_peer_without_pool_recall() -> None:
    # the Supabase-style peer has no funnel stages: its pool-recall cells read 'nan'
    from pgfunnel.eval.report import ConfigResult, EvalReport

    metrics = {"ndcg@10": 0.5, "recall@10": 0.75}
    report = EvalReport(k=10, judging_level="document", baseline="minmax", configs={
        "minmax": ConfigResult({}, {"identifier": metrics, "all": metrics},
                               {"fused": {"all": 0.9}, "capped": {"all": 0.8}}),
        "supabase-hybrid": ConfigResult({}, {"identifier": metrics, "all": metrics}),
    })
    rows = {line.split(" | ")[0]: line for line in
            pydocs.summary_table(report, "dev").splitlines() if line.startswith("| ")}
    assert rows["| minmax"].endswith("| 0.750 | 0.900 | 0.800 |")
    assert rows["| supabase-hybrid"].endswith("| 0.750 | – | – |")
    assert "nan" not in pydocs.summary_table(report, "dev")


def test_summary_table_says_which_row_is_the_default_and_which_way_is_better() -> None:
    # the printed table named its rows 'minmax', 'rrf, no cap', 'supabase-hybrid' while the
    # README's rows read 'default: min-max' and 'Supabase-style hybrid_search'; nothing
    # said which one was pgfunnel's default, nor that higher is better
    from pgfunnel.eval.report import ConfigResult, EvalReport

    metrics = {"ndcg@10": 0.5, "recall@10": 0.75}
    configs = {name: ConfigResult({}, {"identifier": metrics, "all": metrics})
               for name in (*pydocs.RUN_CONFIGS, pydocs.PEER)}
    report = EvalReport(k=10, judging_level="document", baseline=pydocs.PEER,
                        configs=configs)
    legend = pydocs.summary_table(report, "dev").splitlines()[-1]
    assert "minmax: pgfunnel's default" in legend, legend
    assert "supabase-hybrid: the Supabase-style hybrid_search" in legend, legend
    assert "', no cap': the same with per_source_cap 1000" in legend, legend
    assert legend.endswith("every figure: higher is better."), legend
    only_peer = EvalReport(k=10, judging_level="document", baseline=pydocs.PEER,
                           configs={pydocs.PEER: configs[pydocs.PEER]})
    assert "minmax" not in pydocs.summary_table(only_peer, "dev").splitlines()[-1]


def test_help_gives_the_folders_build_and_run_use(capsys: pytest.CaptureFixture[str]) -> None:
    # `build --help` and `run --help` listed --out OUT and --data DATA with no default
    for command, said in (("build", "(default: bench/data/pydocs)"),
                          ("run", "(default: bench/data/pydocs)"),
                          ("run", "(default: bench/out)")):
        with pytest.raises(SystemExit) as exc:
            pydocs.main([command, "--help"])
        assert exc.value.code == 0
        assert said in " ".join(capsys.readouterr().out.split()), (command, said)
