"""The analyzer: identifiers as typed, whole-and-parts identifiers, dropped query words."""

from __future__ import annotations

import json
import random
import re
import unicodedata
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from funnel_util import c_locale_database, doc, ingest, lexical, message_primary, one_row

from pgfunnel.errors import ConfigError
from pgfunnel.ingest import TermAnalyzer, _takes_general_path
from pgfunnel.search import Funnel

SAMPLE = Path(__file__).resolve().parent.parent / "pgfunnel" / "data" / "helpcenter.jsonl"


def _error_code_docs() -> list[tuple[str, str]]:
    """(citekey, code) of help-center documents about one ERR- code."""
    out = []
    for line in SAMPLE.read_text().splitlines():
        d = json.loads(line)
        if d["citekey"].startswith("err-"):
            out.append((d["citekey"], d["citekey"].upper()))
    return out


def test_sample_has_error_code_documents() -> None:
    codes = _error_code_docs()
    assert len(codes) >= 3
    assert all(code in SAMPLE.read_text() for _, code in codes)


@pytest.mark.parametrize("spelling", ["{CODE}", "{code_space}", "{code_joined}", "{lower}"])
def test_three_identifier_spellings_find_the_same_chunk(
        sample_conn: psycopg.Connection[Any], spelling: str) -> None:
    for citekey, code in _error_code_docs()[:4]:
        letters, digits = code.split("-")
        query = spelling.format(CODE=code, code_space=f"{letters.lower()} {digits}",
                                code_joined=f"{letters.lower()}{digits}", lower=code.lower())
        rows = lexical(sample_conn, query)
        assert rows, query
        assert rows[0][1] == citekey, (query, rows[:3])


def test_spellings_share_terms(conn: psycopg.Connection[Any]) -> None:
    def terms(text: str) -> list[str]:
        return list(one_row(conn.execute("select pgfunnel.analyze(%s)", (text,)))[0])

    assert set(terms("ERR-4029")) == {"err4029", "err", "4029"}
    assert set(terms("err4029")) == {"err4029", "err", "4029"}
    assert terms("err 4029") == ["err", "4029"]


def test_identifier_indexed_whole_and_in_parts(conn: psycopg.Connection[Any]) -> None:
    terms = one_row(conn.execute("select pgfunnel.analyze('jsonb_path_exists')"))[0]
    assert "jsonb_path_exists" in terms and {"jsonb", "path", "exist"} <= set(terms)
    dotted = one_row(conn.execute("select pgfunnel.analyze('os.path.join')"))[0]
    assert "os.path.join" in dotted and {"os", "path", "join"} <= set(dotted)

    ingest(conn, [
        doc("exact", "To test a JSON path use jsonb_path_exists in a where clause."),
        # shares every part, several times over, but never the identifier itself
        doc("parts", "A jsonb value has a path; whether a path exists in the jsonb depends "
                     "on the path. jsonb path exists exists path jsonb."),
        doc("other", "Unrelated text about refunds and invoices."),
    ])
    rows = lexical(conn, "jsonb_path_exists", collection="t")
    assert [r[1] for r in rows[:2]] == ["exact", "parts"]
    assert rows[0][3] > rows[1][3]


def _capture(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    conn.add_notice_handler(
        lambda d: seen.append((d.severity_nonlocalized or "", d.message_primary or "")))
    return seen


def test_question_words_dropped_and_reported(sample_conn: psycopg.Connection[Any]) -> None:
    terms = one_row(sample_conn.execute(
        "select pgfunnel.analyze('how do I get a refund', for_query => true)"))[0]
    assert terms == ["get", "refund"]
    # documents keep them: only the query side drops question words
    doc_terms = one_row(sample_conn.execute(
        "select pgfunnel.analyze('what does refund mean', 'simple_v1')"))[0]
    assert doc_terms == ["what", "does", "refund", "mean"]
    q_terms = one_row(sample_conn.execute(
        "select pgfunnel.analyze('what does refund mean', 'simple_v1', true)"))[0]
    assert q_terms == ["refund"]
    dropped = one_row(sample_conn.execute(
        "select pgfunnel.dropped_query_words('what is the refund window')"))[0]
    assert set(dropped) == {"what", "is", "the"}
    # a word is reported only when nothing of it is searched: s3 keeps s3 and 3 without
    # its stop word s, a-team keeps ateam and team
    partly = one_row(sample_conn.execute(
        "select pgfunnel.dropped_query_words('does s3 work for the a-team')"))[0]
    assert set(partly) == {"does", "for", "the"}

    seen = _capture(sample_conn)
    rows = lexical(sample_conn, "how do I get a refund")
    assert rows
    notices = [m for s, m in seen if s == "NOTICE" and "query words not searched" in m]
    assert notices and all(w in notices[0] for w in ("how", "do", "i"))
    seen.clear()
    lexical(sample_conn, "how do I get a refund on s3")
    notices = [m for s, m in seen if s == "NOTICE" and "query words not searched" in m]
    assert notices and "s3" not in notices[0].split(": ", 1)[1].split(", ")


def test_a_query_of_nothing_but_question_words_searches_them(
        sample_conn: psycopg.Connection[Any]) -> None:
    """`tell` (a file method), `explain` (a Hypothesis phase, a Postgres command) and
    `mean` are question words in `what does X mean`; a query of nothing else lost every
    term and searched nothing, with a warning."""
    from funnel_util import doc, ingest

    conn = sample_conn

    ingest(conn, [doc("io", "The tell method returns the stream position."),
                  doc("plan", "Explain shows the plan of a statement.")], collection="qw")
    for query, term, citekey in (("tell", "tell", "io"), ("explain", "explain", "plan"),
                                 ("Explain?", "explain", "plan")):
        assert one_row(conn.execute("select pgfunnel.analyze(%s, for_query => true)",
                                    (query,)))[0] == [term]
        assert one_row(conn.execute("select pgfunnel.dropped_query_words(%s)",
                                    (query,)))[0] == []
        seen = _capture(conn)
        rows = conn.execute("select citekey from funnel_search(%s, null, 5, collection => 'qw')",
                            (query,)).fetchall()
        assert rows and rows[0][0] == citekey
        assert not [m for s, m in seen if "no searchable term" in m]
    # with another word they frame the question, as before
    assert one_row(conn.execute("select pgfunnel.analyze('explain the plan', for_query => true)"
                                ))[0] == ["plan"]
    # nothing left either way: still the warning and no rows
    seen = _capture(conn)
    assert conn.execute("select count(*) from funnel_search('what is the', null, 5, "
                        "collection => 'qw')").fetchone() == (0,)
    assert [m for s, m in seen if s == "WARNING" and "no searchable term" in m]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="^for_query: "):
        conn.execute("select pgfunnel.analyze('tell', 'english_v6', null)")


@pytest.mark.parametrize("analyzer", ["english_v6", "simple_v6", "english_v1"])
@pytest.mark.parametrize("query, searched, not_searched", [
    # words that also name things are searched where a question does not put them
    ("Greenwich Mean Time", ["greenwich", "mean", "time"], []),
    ("mean squared error", ["mean", "squared", "error"], []),
    ("arithmetic mean", ["arithmetic", "mean"], []),
    ("what is the arithmetic mean", ["arithmetic", "mean"], ["what", "is", "the"]),
    ("which rows may be locked", ["rows", "may", "locked"], ["which", "be"]),
    ("refund for any plan", ["refund", "any", "plan"], ["for"]),
    # ... or as part of a longer token
    ("explain_analyze option", ["explain_analyze", "option"], []),
    ("tell2 results", ["tell2", "results"], []),
    ("how do I use explain-analyze", ["explain-analyze"], ["how", "do", "i"]),
    # ... and written in capitals, anywhere
    ("EXPLAIN ANALYZE output", ["explain", "analyze", "output"], []),
    ("US tax on refunds", ["us", "tax", "refunds"], ["on"]),
    ("how do I use IN with a subquery", ["use", "in", "subquery"], ["how", "do", "i", "with", "a"]),
    # where they frame the question they are dropped, as before
    ("explain refund windows", ["refund", "windows"], ["explain"]),
    ("can you tell us about refunds", ["refunds"], ["can", "you", "tell", "us", "about"]),
    ("what does ERR-4029 mean", ["err-4029"], ["what", "does", "mean"]),
    ("what is the meaning of proration", ["proration"], ["what", "is", "the", "meaning", "of"]),
    ("what do you mean by proration", ["by", "proration"], ["what", "do", "you", "mean"]),
    ("how may I pay", ["pay"], ["how", "may", "i"]),
    # a query in capitals throughout says nothing by them
    ("WHAT DOES REFUND MEAN", ["refund"], ["what", "does", "mean"]),
    # `work` closing a question asked with `do` frames it, before question words or at
    # the end; elsewhere it is what the question asks about
    ("how does asyncio work", ["asyncio"], ["how", "does", "work"]),
    ("how does the GIL work in python", ["gil", "python"],
     ["how", "does", "the", "work", "in"]),
    ("how do sessions works with caching", ["sessions", "caching"],
     ["how", "do", "works", "with"]),
    ("how do I work with dates", ["work", "dates"], ["how", "do", "i", "with"]),
    ("how do I configure work queues", ["configure", "work", "queues"], ["how", "do", "i"]),
    ("how does it work", ["work"], ["how", "does", "it"]),
    ("why would refunds work", ["refunds", "work"], ["why", "would"]),
    ("how does work_mem work", ["work_mem"], ["how", "does", "work"]),
    ("how does sorting WORK", ["sorting", "work"], ["how", "does"]),
])
def test_question_words_are_dropped_only_where_they_frame_the_question(
        sample_conn: psycopg.Connection[Any], analyzer: str, query: str,
        searched: list[str], not_searched: list[str]) -> None:
    """The query side dropped every listed word wherever it stood: `mean squared error`
    searched `squared error`, `EXPLAIN ANALYZE` searched `analyze`, `US tax` `tax`."""
    rows = sample_conn.execute(
        "select token, term, dropped from pgfunnel.analyze_tokens(%s, %s, true)",
        (query, analyzer)).fetchall()
    question = {token for token, _term, dropped in rows if dropped == "question word"}
    # a searched word may still be a stop word of the english analyzers (`in`, `any`)
    stop = {token for token, _term, dropped in rows if dropped == "stop word"}
    assert question == set(not_searched)
    assert set(searched) <= {token for token, term, _d in rows if term is not None} | stop
    assert not set(searched) & question
    # the fast path (plain words) and the general one (a digit among the inputs) agree
    both = sample_conn.execute(
        "select input_ordinal, token, dropped from pgfunnel.analyze_each(%s, %s, true)",
        ([query, "4029"], analyzer)).fetchall()
    assert {t for i, t, d in both if i == 1 and d == "question word"} == set(not_searched)


def test_work_is_dropped_only_where_it_closes_the_question(
        sample_conn: psycopg.Connection[Any]) -> None:
    """The `work` a question asked with `do` ends on frames it; the `work` it asks about is
    searched, in the same query."""
    rows = sample_conn.execute(
        "select token_position, term, dropped from pgfunnel.analyze_tokens("
        "'how does work stealing work', 'english_v6', true)").fetchall()
    assert rows == [(1, None, "question word"), (2, None, "question word"), (3, "work", None),
                    (4, "steal", None), (5, None, "question word")]
    # the documents' side never drops it
    assert one_row(sample_conn.execute("select pgfunnel.analyze('how does work stealing work')"
                                       ))[0] == ["work", "steal", "work"]


def test_words_longer_than_a_term_are_reported_not_searched(
        sample_conn: psycopg.Connection[Any]) -> None:
    long_word = "x" * 101
    long_compound = "ab-" * 40 + "z"  # its parts are short, the token is not
    rows = sample_conn.execute(
        "select token, term, dropped from pgfunnel.analyze_tokens(%s, 'english_v2', true)",
        (f"refund {long_word} {long_compound} {'y' * 100}",)).fetchall()
    assert ("refund", "refund", None) in rows
    for token in (long_word, long_compound):
        # one row for the whole token, no term of it or of its parts
        assert [r for r in rows if r[0] == token] == [(token, None, "longer than 100 characters")]
    # the limit itself is a term, and indexed terms are what they were
    [(_, at_limit, why)] = [r for r in rows if r[0] == "y" * 100]
    assert at_limit and why is None
    assert one_row(sample_conn.execute("select pgfunnel.analyze(%s)",
                                       (f"refund {long_word}",)))[0] == ["refund"]
    # the plain-word path reports it too (no digit or joiner in the input)
    plain = sample_conn.execute("select dropped from pgfunnel.analyze_tokens(%s)",
                                (long_word,)).fetchall()
    assert plain == [("longer than 100 characters",)]
    assert one_row(sample_conn.execute("select pgfunnel.dropped_query_words(%s)",
                                       (f"refund {long_word}",)))[0] == [long_word]

    seen = _capture(sample_conn)
    assert lexical(sample_conn, f"refund {long_word}")
    [notice] = [m for s, m in seen if s == "NOTICE" and "query words not searched" in m]
    assert "xxxxxxxxxxxxxxxxxxxx... (101 characters; a term has at most 100)" in notice
    seen.clear()
    assert not lexical(sample_conn, long_word)
    [warning] = [m for s, m in seen if s == "WARNING"]
    assert "101 characters" in warning and "punctuation" not in warning


def test_dropped_words_become_a_python_warning(sample_db: str) -> None:
    with Funnel(sample_db, embedder=None) as f, warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        resp = f.search("how do I get a refund", k=3)
    assert resp.results
    assert any("query words not searched" in n for n in resp.notices)
    [warning] = [w for w in got if "query words not searched" in str(w.message)]
    # it names the caller's line, not one inside pgfunnel
    assert warning.filename == __file__


def test_search_notices_have_a_warning_category_of_their_own(sample_db: str) -> None:
    # they were plain UserWarnings: a web app could not filter them apart from others
    import pgfunnel
    from pgfunnel.errors import SearchNoticeWarning

    assert pgfunnel.SearchNoticeWarning is SearchNoticeWarning
    assert issubclass(SearchNoticeWarning, UserWarning)
    with Funnel(sample_db, embedder=None) as f, warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", SearchNoticeWarning)
        resp = f.search("how do I get a refund", k=3)
    assert any("query words not searched" in n for n in resp.notices)
    assert not [w for w in got if "query words not searched" in str(w.message)]
    with Funnel(sample_db, embedder=None) as f, warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        f.search("how do I get a refund", k=3)
    [warning] = [w for w in got if "query words not searched" in str(w.message)]
    assert warning.category is SearchNoticeWarning
    assert str(warning.message) in resp.notices


def test_query_losing_every_term_warns(sample_conn: psycopg.Connection[Any]) -> None:
    seen = _capture(sample_conn)
    rows = lexical(sample_conn, "what is the")
    assert rows == []
    warnings_seen = [m for s, m in seen if s == "WARNING"]
    assert warnings_seen and "no searchable term" in warnings_seen[0]
    seen.clear()
    assert lexical(sample_conn, "?!?") == []
    assert any(s == "WARNING" and "nothing but punctuation" in m for s, m in seen)
    seen.clear()
    # an empty query is not punctuation: the SQL warning says what the API and CLI say
    assert lexical(sample_conn, " \n") == []
    assert any(s == "WARNING" and "the query is empty" in m for s, m in seen), seen
    # with no query embedding either nothing runs, and the warning says so; with one,
    # the dense leg answers and the warning does not claim there are no results
    assert any(m.endswith("the lexical leg is empty and no query embedding was given: "
                          "no results") for s, m in seen if s == "WARNING"), seen
    seen.clear()
    vector = "[" + ",".join(["0.05"] * 384) + "]"
    rows = sample_conn.execute("select chunk_id from pgfunnel.funnel_search(%s, %s::vector, 5)",
                               ("what is the", vector)).fetchall()
    assert rows
    assert [m for s, m in seen if s == "WARNING" and m.endswith("the lexical leg is empty")]
    # an embedding given with the dense leg at weight 0 is not "no query embedding": the
    # warning said one was not given
    seen.clear()
    assert sample_conn.execute("select chunk_id from pgfunnel.funnel_search(%s, %s::vector, 5, "
                               "weights => '{1,0}')", ("what is the", vector)).fetchall() == []
    assert [m for s, m in seen if s == "WARNING"] == [
        "pgfunnel: no searchable term left in query_text (dropped: is, the, what); the "
        "lexical leg is empty and weights {1,0} give the dense leg weight 0, so it does not "
        "run: no results"], seen


def test_unknown_analyzer_names_the_parameter(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue) as exc:
        conn.execute("select pgfunnel.analyze('text', 'klingon_v1')")
    assert message_primary(exc.value).startswith("analyzer:")
    assert "english_v1" in message_primary(exc.value)
    from pgfunnel.errors import translate

    err = translate(exc.value)
    assert isinstance(err, ConfigError) and err.parameter == "analyzer"


def _random_strings(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    # with what the v3 analyzers fold: combining accents, full-width and ligature forms,
    # soft hyphens and zero-width characters, and "¨", whose NFKC form holds a space
    alphabet = ("abcXYZ019_.-'\",;:!?()[]{}/\\@#$%^&*+=<>|~` \t\n"
                "éÉßøçñ日本語Ωπ٣४\u00a0\u2003\u2019\u201c\u00ab\u2014\u00b7"
                "\u0301\u0308ｒＥ１．＿ﬁ\u00ad\u200b\u200d\ufeff\u00a8")
    out = []
    for _ in range(n):
        out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))))
    # identifier-heavy strings
    for _ in range(n):
        parts = [rng.choice(["err", "x9", "jsonb", "path", "4029", "os", "Ab3c", "ÉTÉ"])
                 for _ in range(rng.randint(1, 4))]
        out.append(rng.choice(["_", ".", "-", " ", "-.", "__"]).join(parts)
                   + rng.choice(["", ".", ",", "?", "..."]))
    return out


@pytest.mark.parametrize("analyzer", ["english_v1", "simple_v1", "english_v2", "simple_v2",
                                      "english_v3", "simple_v3", "english_v4", "simple_v4",
                                      "english_v5", "simple_v5", "english_v6", "simple_v6",
                                      "english_v7", "simple_v7", "english_v8", "simple_v8"])
def test_python_term_analyzer_matches_sql(conn: psycopg.Connection[Any], analyzer: str) -> None:
    texts = [json.loads(line)["text"] for line in SAMPLE.read_text().splitlines()]
    texts += _random_strings(150, seed=7) + _CJK_TEXTS + _OTHER_SCRIPT_TEXTS
    # Unicode dashes inside, around and between words (v7 reads some as '-')
    texts += [f"ERR{d}4029, jsonb{d}path {d}x 10{d} {d}{d}a{d}b{d}c." for d in _UNICODE_DASHES]
    texts += ["refunds\u2014annual", "os.path\u2010join ERR\ufe634029 \uff0dx"]
    # underscores opening, closing and joining identifiers, inside punctuation (v8 keeps
    # them)
    texts += _UNDERSCORED_TEXTS + ["(__init__), `__all__`. _exit; class_: \"__main__\"?",
                                   "._x_. -_y- _-z __.__ a__ __b__c_. \uff3f\uff3finit\uff3f"]
    # `<`, `=` or `>` and a combining long solidus fold into one symbol (`≮`), which is
    # no word character: the word cache strips no `<` from before the mark
    texts += ["<\u0338abc =\u0338x (>\u0338y_z) \"<\u0338_init_\" '\u0301x a<\u0338 \u0338b"]
    ta = TermAnalyzer(conn, analyzer)
    ta.prepare(texts)
    for text in texts:
        sql_terms = one_row(conn.execute("select pgfunnel.analyze(%s, %s)", (text, analyzer)))[0]
        assert ta.terms(text) == Counter(sql_terms), text


def test_a_word_that_folds_into_a_digit_or_joiner_goes_in_the_general_call(
        conn: psycopg.Connection[Any]) -> None:
    # The analyzer takes its plain path only when no input of a call holds a digit or a
    # joiner once folded; one word of the plain call that did (`As…` is `As...`) sent the
    # whole call, some 13,000 words of a batch, down the general path at twice the cost.
    # Every word the server reads so must be sorted into the general call.
    words = ["As…", "a²", "ｘ０", "①", "file…name", "ERR\u20104029", "x\uff3fy", "plain",
             "café", "naïve", "日本語"]
    words += [w for s in _random_strings(200, seed=11) for w in s.split()]
    folded = one_row(conn.execute("select pgfunnel._unicode_fold(%s::text[], true)",
                                  (words,)))[0]
    general = [w for w, f in zip(words, folded, strict=True) if re.search("[0-9._-]", f)]
    assert {"As…", "a²", "ｘ０", "①", "file…name", "ERR\u20104029", "x\uff3fy"} <= set(general)
    assert [w for w in general if not _takes_general_path(w)] == []
    assert not any(map(_takes_general_path, ["plain", "café", "naïve", "日本語"]))


def test_term_analyzer_caches_each_words_terms_in_the_analyzers_order(
        conn: psycopg.Connection[Any]) -> None:
    # the cache is read back from one line per word: a word with no term (a stop word, a
    # word longer than 100 characters) keeps its place, and a word of several terms keeps
    # them in analyze_each's order, repeats included
    words = ["the", "os.path.join", "x" * 101, "ERR-4029", "refunds", "and", "x-x",
             "csv.QUOTE_ALL", "__init__", "调用方法"]
    ta = TermAnalyzer(conn, "english_v8")
    ta.prepare([" ".join(words)])
    rows = conn.execute("select input_ordinal, term from pgfunnel.analyze_each(%s, %s, false) "
                        "where term is not null", (words, "english_v8")).fetchall()
    expected: dict[str, list[str]] = {w: [] for w in words}
    for ordinal, term in rows:
        expected[words[ordinal - 1]].append(term)
    assert {w: list(ta.cache[w]) for w in words} == expected
    assert ta.cache["the"] == () and ta.cache["x" * 101] == ()
    assert len(ta.cache["os.path.join"]) > 3 and ta.cache["x-x"].count("x") == 2


def _terms(conn: psycopg.Connection[Any], text: str, analyzer: str) -> list[str]:
    row = conn.execute("select pgfunnel.analyze(%s, %s)", (text, analyzer)).fetchone()
    assert row is not None
    return list(row[0])


def test_v2_indexes_the_inner_names_of_dotted_identifiers(conn: psycopg.Connection[Any]) -> None:
    v1 = _terms(conn, "csv.QUOTE_ALL and os.path.join", "english_v1")
    v2 = _terms(conn, "csv.QUOTE_ALL and os.path.join", "english_v2")
    # v2 is v1 plus the inner names, nothing else changes
    assert Counter(v2) - Counter(v1) == Counter(["quote_all", "os.path", "path.join"])
    assert not Counter(v1) - Counter(v2)
    assert set(_terms(conn, "xml.etree.ElementTree.fromstring", "simple_v2")) >= {
        "xml.etree", "etree.elementtree", "elementtree.fromstring",
        "xml.etree.elementtree", "etree.elementtree.fromstring"}
    # undotted identifiers and hyphenated codes are as in v1
    for text in ("jsonb_path_exists", "ERR-4029", "err 4029", "3.14"):
        assert _terms(conn, text, "english_v2") == _terms(conn, text, "english_v1"), text


@pytest.mark.parametrize("analyzer", ["english_v3", "simple_v3"])
def test_v3_reads_one_visible_text_as_one_set_of_terms(conn: psycopg.Connection[Any],
                                                       analyzer: str) -> None:
    import unicodedata

    for typed, stored in (
            # composed and decomposed accents (macOS file names, some HTML)
            ("résumé Zürich", unicodedata.normalize("NFD", "résumé Zürich")),
            # full-width letters, digits and joiners; a ligature
            ("refund ERR-4029 os.path", "ｒｅｆｕｎｄ ＥＲＲ－４０２９ ｏｓ．ｐａｔｈ"),
            ("file profile", "ﬁle proﬁle"),
            # invisible characters inside a word: soft hyphen, zero-width space and joiner,
            # word joiner, byte-order mark
            ("refundable statement", "refund\u00adable state\u200bment"),
            ("jsonb_path_exists", "jsonb\u200d_path\u2060_exists\ufeff")):
        assert _terms(conn, stored, analyzer) == _terms(conn, typed, analyzer), stored
    # text with nothing to fold reads as under v2
    texts = [json.loads(line)["text"] for line in SAMPLE.read_text().splitlines()]
    older = analyzer.replace("_v3", "_v2")
    for text in texts[:60] + _random_strings(100, seed=3):
        if unicodedata.is_normalized("NFKC", text) and not set(text) & set(
                "\u00ad\u200b\u200c\u200d\u2060\ufeff"):
            assert _terms(conn, text, analyzer) == _terms(conn, text, older), text


# Chinese and Japanese, alone, mixed with Latin identifiers and punctuation, and full-width
_CJK_TEXTS = ["数据库索引的性能", "如何创建索引？PostgreSQL数据库的索引类型。",
              "インデックスを作成する (CREATE INDEX) と検索が速くなります",
              "库 and 表, err-4029 错误代码：ERR-4029", "ｶﾀｶﾅ と ひらがな・カタカナ",
              "한국어 텍스트 검색", "𠮷野家 の 牛丼", "데이터베이스를 백업하는 방법은?",
              "ㅋㅋ 그 책은 PostgreSQL로 써요", "인덱스(index)와 err-4029 오류"]


@pytest.mark.parametrize("analyzer", ["english_v4", "simple_v4"])
def test_v4_reads_chinese_and_japanese_as_pairs_of_characters(
        conn: psycopg.Connection[Any], analyzer: str) -> None:
    assert _terms(conn, "数据库索引的性能", analyzer) == [
        "数据", "据库", "库索", "索引", "引的", "的性", "性能"]
    # a lone character is its own term; Latin text next to a run is a word of its own
    assert _terms(conn, "库", analyzer) == ["库"]
    assert _terms(conn, "PostgreSQL数据库", analyzer) == ["postgresql", "数据", "据库"]
    # half-width katakana is folded first; the middle dot is punctuation, not a character
    assert _terms(conn, "ｶﾀｶﾅ・ひらがな", analyzer) == ["カタ", "タカ", "カナ", "ひら", "らが",
                                                   "がな"]
    # Hangul is written with spaces: its words stay whole
    assert _terms(conn, "한국어 텍스트", analyzer) == ["한국어", "텍스트"]
    # identifiers keep their rules beside Chinese text
    older = analyzer.replace("_v4", "_v3")
    assert _terms(conn, "错误 ERR-4029 os.path.join", analyzer) == \
        ["错误"] + _terms(conn, "ERR-4029 os.path.join", older)
    # text without those scripts reads as under v3
    texts = [json.loads(line)["text"] for line in SAMPLE.read_text().splitlines()]
    cjk = re.compile("[\u3040-\u30fa\u30fc-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
                     "\uff66-\uff9f\U00020000-\U0003134f]")
    others = [t for t in texts + _random_strings(100, seed=5) if not cjk.search(t)]
    assert len(others) > 200
    for text in others + ["한국어 텍스트 검색"]:
        assert _terms(conn, text, analyzer) == _terms(conn, text, older), text


def test_a_long_run_of_paired_characters_is_paired_whole(
        conn: psycopg.Connection[Any]) -> None:
    # each pair was cut out with substr(), which walks the run from its start: a query of
    # 10,000 Chinese characters (the most a search takes) analysed in over a second, and
    # a 40,000-character run of a document took some 16 s. Whether it is linear now is
    # bench/paired_runs.py's to say (time(40k) / time(10k) against 4x and 16x): here, that
    # every pair of the longest run comes out, in order, an astral character whole
    rng = random.Random(11)
    run = "".join(rng.choice("数据库索引的性能𠮷") for _ in range(40_000))
    assert _terms(conn, run, "simple_v8") == [run[i:i + 2] for i in range(len(run) - 1)]
    # Thai and Hangul runs are paired the same way, by code point (a tone mark in two pairs)
    thai = "ข้อมูล" * 500
    assert _terms(conn, thai, "simple_v8") == [thai[i:i + 2] for i in range(len(thai) - 1)]
    hangul = "데이터베이스를" * 300
    assert _terms(conn, hangul, "simple_v8") == [hangul[i:i + 2]
                                                 for i in range(len(hangul) - 1)]


def test_a_chinese_word_finds_the_sentence_that_holds_it_under_v4(
        conn: psycopg.Connection[Any]) -> None:
    from funnel_util import make_collection

    records = [doc("perf", "数据库索引的性能取决于索引类型。"),
               doc("backup", "如何备份数据库？使用转储工具。"),
               doc("ja", "インデックスを作成すると検索が速くなります。"),
               doc("en", "How to create an index in PostgreSQL.")]
    for name, analyzer in (("v4", "english_v4"), ("v3", "english_v3")):
        make_collection(conn, name, 16, analyzer=analyzer)
        ingest(conn, records, collection=name)
    assert [r[1] for r in lexical(conn, "索引", collection="v4")] == ["perf"]
    assert [r[1] for r in lexical(conn, "数据库", collection="v4")][:2] in (
        ["perf", "backup"], ["backup", "perf"])
    assert [r[1] for r in lexical(conn, "インデックス 作成", collection="v4")] == ["ja"]
    assert [r[1] for r in lexical(conn, "index", collection="v4")] == ["en"]
    # under v3 each sentence was one term: a word inside it found nothing
    assert lexical(conn, "索引", collection="v3") == []


@pytest.mark.parametrize("analyzer", ["english_v5", "simple_v5"])
def test_v5_reads_korean_words_as_pairs_of_characters(
        conn: psycopg.Connection[Any], analyzer: str) -> None:
    older = analyzer.replace("_v5", "_v4")
    assert _terms(conn, "데이터베이스를 백업", analyzer) == [
        "데이", "이터", "터베", "베이", "이스", "스를", "백업"]
    # a one-syllable word is itself; pairs never cross the space between two words
    assert _terms(conn, "그 책", analyzer) == ["그", "책"]
    # Latin text beside Hangul is a word of its own, and identifiers keep their rules
    assert _terms(conn, "PostgreSQL로", analyzer) == ["postgresql", "로"]
    assert _terms(conn, "오류 ERR-4029 os.path.join", analyzer) == \
        ["오류"] + _terms(conn, "ERR-4029 os.path.join", older)
    # conjoining jamo are composed into syllables first (NFKC), half-width jamo folded
    decomposed = unicodedata.normalize("NFD", "데이터")
    assert decomposed != "데이터"
    assert _terms(conn, decomposed, analyzer) == _terms(conn, "데이터", analyzer)
    # Chinese and Japanese read as under v4, and text without Hangul gets its v4 terms
    texts = [json.loads(line)["text"] for line in SAMPLE.read_text().splitlines()]
    hangul = re.compile("[\uac00-\ud7a3\u1100-\u11ff\ua960-\ua97f\ud7b0-\ud7ff"
                        "\u3131-\u318e\uffa0-\uffdc]")
    others = [t for t in texts + _random_strings(100, seed=6) + _CJK_TEXTS
              if not hangul.search(t)]
    assert len(others) > 200
    for text in others:
        assert _terms(conn, text, analyzer) == _terms(conn, text, older), text


def test_a_korean_word_finds_its_forms_with_particles_under_v5(
        conn: psycopg.Connection[Any]) -> None:
    from funnel_util import make_collection

    records = [doc("backup", "데이터베이스를 백업하려면 덤프 도구를 사용하세요."),
               doc("index", "인덱스는 검색 속도를 높입니다."),
               doc("en", "How to back up a database.")]
    for name, analyzer in (("v5", "english_v5"), ("v4", "english_v4")):
        make_collection(conn, name, 16, analyzer=analyzer)
        ingest(conn, records, collection=name)
    # the bare word finds the sentence that holds it with a particle (-를) written on
    assert [r[1] for r in lexical(conn, "데이터베이스", collection="v5")] == ["backup"]
    assert [r[1] for r in lexical(conn, "인덱스가 뭐예요", collection="v5")][:1] == ["index"]
    assert [r[1] for r in lexical(conn, "database", collection="v5")] == ["en"]
    # under v4 the word and its form with the particle were two unrelated terms
    assert lexical(conn, "데이터베이스", collection="v4") == []


# words written with marks (Thai tone marks and vowel signs, a Hindi virama), scripts
# without spaces between words, and upper-case letters beyond ASCII
_OTHER_SCRIPT_TEXTS = ["วิธีสำรองฐานข้อมูลของคุณ", "การค้นหาเอกสาร ERR-4029", "हिन्दी में खोज",
                       "ຖານຂໍ້ມູນ", "ការស្វែងរកឯកសារ", "ဒေတာဘေ့စ်ကို ရှာဖွေခြင်း။",
                       "CAFÉ Crème brûlée", "ΣΊΣΥΦΟΣ Ελληνικά", "Привет, МИР: os.path.join",
                       "தமிழ் தேடல்", "Straße İstanbul ǅemal"]


def test_init_refuses_a_sql_ascii_database_before_writing_anything(server_dsn: str) -> None:
    from pgfunnel import schema

    # what initdb makes under locale C when no encoding is given: bytes of no encoding,
    # whose text the driver returns as bytes (init failed on them, naming schema b'public')
    with c_locale_database(server_dsn, "SQL_ASCII", init=False) as dsn:
        with pytest.raises(ConfigError, match="SQL_ASCII.*encoding 'UTF8'") as err:
            schema.init(dsn)
        assert err.value.parameter == "database"
        with pytest.raises(ConfigError, match="SQL_ASCII"):
            schema.migrate(dsn)
        with psycopg.connect(dsn) as c:
            assert c.execute("select count(*) from pg_extension where extname = 'vector'"
                             ).fetchone() == (0,)
            assert c.execute("select to_regnamespace('pgfunnel')").fetchone() == (None,)
        # what ingest, search and doctor say on it: run init, which refuses it, and why
        from pgfunnel.db import connect, require_schema
        from pgfunnel.doctor import check_schema
        from pgfunnel.errors import SchemaMissingError

        with connect(dsn, autocommit=True) as c:
            with pytest.raises(SchemaMissingError, match="init refuses this database: its "
                                                         "encoding is SQL_ASCII"):
                require_schema(c)
            [finding] = check_schema(c)
            assert finding.level == "error" and "encoding is SQL_ASCII" in finding.message


@pytest.mark.parametrize(("encoding", "text", "terms"), [
    # LATIN1's characters are their Unicode code points: the Unicode classes hold
    ("LATIN1", "Crème brûlée «Zoë» ERR-4029",
     ["crème", "brûlée", "zoë", "err4029", "err", "4029"]),
    # WIN1251's are not (Ё is byte 0xA8, which is ¨ in Unicode): every non-ASCII
    # character is a letter there, and the C collation lowers ASCII only
    ("WIN1251", "Ёжик в тумане, ERR-4029", ["Ёжик", "в", "тумане", "err4029", "err", "4029"]),
])
def test_v6_in_a_single_byte_database(server_dsn: str, encoding: str, text: str,
                                      terms: list[str]) -> None:
    from funnel_util import make_collection

    from pgfunnel.db import connect
    from pgfunnel.doctor import check_active_indexes

    with c_locale_database(server_dsn, encoding) as dsn, connect(dsn, autocommit=True) as c:
        assert _terms(c, text, "simple_v6") == terms
        make_collection(c, "t", 16, analyzer="english_v6")
        ingest(c, [doc("d", text)])
        assert [r[1] for r in lexical(c, terms[1], collection="t")] == ["d"]
        # doctor reads the database without sending it characters it cannot hold
        check_active_indexes(c)
        if encoding == "LATIN1":
            # before v6 the locale's [[:alnum:]] cut every accented letter out
            assert _terms(c, "Crème brûlée", "simple_v5") == ["cr", "me", "br", "l", "e"]


def test_v6_nonword_characters_are_unicode_separators_punctuation_and_symbols(
        conn: psycopg.Connection[Any]) -> None:
    from funnel_util import load_module

    uwc = load_module("unicode_word_class", SAMPLE.parents[2] / "scripts" /
                      "unicode_word_class.py")
    [[body]] = conn.execute("select pgfunnel._nonword_chars()").fetchall()
    ascii_part = "\\u0001-\\u002f\\u003a-\\u0040\\u005b-\\u0060\\u007b-\\u007f"
    assert body.startswith(ascii_part)
    if unicodedata.unidata_version == "14.0.0":
        # the Unicode version the constant was written from: exactly what the script gives
        assert body == ascii_part + uwc.bracket_body(uwc.non_word_ranges())
    else:
        # a newer Unicode assigns more characters; those it had keep their categories
        for first, last in re.findall(r"\\[uU]([0-9a-f]+)(?:-\\[uU]([0-9a-f]+))?",
                                      body[len(ascii_part):]):
            for cp in range(int(first, 16), int(last or first, 16) + 1):
                assert uwc.is_non_word(cp), hex(cp)
    # letters, marks and digits of every script are word characters; punctuation not
    for ch, is_word in (("é", True), ("ж", True), ("\u0e49", True), ("\u094d", True),
                        ("٣", True), ("数", True), ("—", False), ("«", False),
                        ("\u3001", False), ("\u0964", False), ("😀", False)):
        [[match]] = conn.execute("select %s ~ ('^[^' || pgfunnel._nonword_chars() || ']$')",
                                 (ch,)).fetchall()
        assert match is is_word, ch


def test_v6_reads_every_script_alike_whatever_the_database_locale(
        conn: psycopg.Connection[Any], server_dsn: str) -> None:
    texts = [json.loads(line)["text"] for line in SAMPLE.read_text().splitlines()][:60]
    texts += _random_strings(100, seed=11) + _CJK_TEXTS + _OTHER_SCRIPT_TEXTS
    with c_locale_database(server_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as c_conn:
        # the database this test runs in reads letters beyond ASCII, the "C" one not
        assert conn.execute("select lower('É') = 'é'").fetchone() == (True,)
        assert c_conn.execute("select lower('É') = 'é'").fetchone() == (False,)
        for analyzer in ("english_v6", "simple_v6"):
            for text in texts:
                assert _terms(c_conn, text, analyzer) == _terms(conn, text, analyzer), text
        assert _terms(c_conn, "CAFÉ Привет", "english_v6") == ["café", "привет"]
        # before v6 the "C" database cut accented letters out and dropped other scripts
        assert _terms(c_conn, "CAFÉ Привет 数据库", "english_v5") == ["caf"]
        assert _terms(conn, "CAFÉ Привет 数据库", "english_v5") == [
            "café", "привет", "数据", "据库"]


@pytest.mark.parametrize("analyzer", ["english_v6", "simple_v6"])
def test_v6_keeps_marks_in_words_and_pairs_scripts_written_without_spaces(
        conn: psycopg.Connection[Any], analyzer: str) -> None:
    older = analyzer.replace("_v6", "_v5")
    # the virama (्) and the Tamil pulli (்) are marks: under v5 they cut words apart
    assert _terms(conn, "हिन्दी", analyzer) == ["हिन्दी"]
    assert _terms(conn, "हिन्दी", older) == ["हिन", "दी"]
    assert _terms(conn, "தமிழ்", analyzer) == ["தமிழ்"]
    # Greek's final sigma is read as the sigma that Σ lowers to
    assert _terms(conn, "ΛΟΓΟΣ λογος", analyzer) == ["λογοσ", "λογοσ"]
    assert _terms(conn, "ΛΟΓΟΣ λογος", older) == ["λογοσ", "λογος"]
    # Thai runs are read as pairs of characters, tone marks and vowel signs kept in them
    assert _terms(conn, "ข้อมูล", analyzer) == ["ข้", "้อ", "อม", "มู", "ูล"]
    # Burmese punctuation (၊ ။) and Thai digits are not letters of a pair
    assert _terms(conn, "ရှာ။ ๑๒", analyzer) == ["ရှ", "ှာ", "๑๒"]
    # Latin beside Thai is a word of its own; identifiers keep their rules
    assert _terms(conn, "ค้นหาERR-4029", analyzer) == \
        ["ค้", "้น", "นห", "หา"] + _terms(conn, "ERR-4029", older)
    # text of letters and digits without marks reads as under v5 (in a UTF-8 locale)
    texts = [json.loads(line)["text"] for line in SAMPLE.read_text().splitlines()]
    marked = re.compile("[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u0900-\u0dff]")
    others = [t for t in texts + _random_strings(100, seed=6) + _CJK_TEXTS
              if not marked.search(t) and not any(
                  unicodedata.category(ch).startswith("M")
                  for ch in unicodedata.normalize("NFKC", t))]
    assert len(others) > 200
    for text in others:
        assert _terms(conn, text, analyzer) == _terms(conn, text, older), text


_UNICODE_DASHES = ("\u2010", "\u2011", "\u2012", "\u2013", "\u2212")


@pytest.mark.parametrize("analyzer", ["english_v7", "simple_v7"])
def test_v7_reads_unicode_hyphens_inside_words_as_hyphens(conn: psycopg.Connection[Any],
                                                          analyzer: str) -> None:
    older = analyzer.replace("_v7", "_v6")
    plain = _terms(conn, "ERR-4029 jsonb-path 10-20", analyzer)
    assert plain == _terms(conn, "ERR-4029 jsonb-path 10-20", older)
    assert "err4029" in plain and "1020" in plain
    for dash in _UNICODE_DASHES:
        text = f"ERR{dash}4029 jsonb{dash}path 10{dash}20"
        assert _terms(conn, text, analyzer) == plain, ascii(dash)
        # v6 read the dash as a break between words: the parts, not the joined form
        assert "err4029" not in _terms(conn, text, older), ascii(dash)
    # a dash set between spaces, or one at the edge of a word, joins nothing; nor does the
    # em dash, which prose sets between words without spaces
    for text in ("refunds \u2013 annual plans", "refunds\u2014annual plans",
                 "\u22125 refunds annual\u2010 plans"):
        assert _terms(conn, text, analyzer) == _terms(conn, text, older), ascii(text)
    # text without those characters reads as under v6
    texts = [json.loads(line)["text"] for line in SAMPLE.read_text().splitlines()]
    texts += _random_strings(100, seed=8) + _CJK_TEXTS + _OTHER_SCRIPT_TEXTS
    others = [t for t in texts if not any(d in unicodedata.normalize("NFKC", t)
                                          for d in _UNICODE_DASHES)]
    assert len(others) > 200
    for text in others:
        assert _terms(conn, text, analyzer) == _terms(conn, text, older), text


def test_an_identifier_written_with_a_unicode_hyphen_is_found_whole_under_v7(
        conn: psycopg.Connection[Any]) -> None:
    from funnel_util import make_collection

    records = [doc("nbsp-hyphen", "Code ERR\u20114029 means the refund window has closed."),
               # the parts, more often: under v6 this outranked the identifier's own chunk
               doc("parts", "Err codes: err 4029, err 4030 and 4029 again for each err.")]
    for name, analyzer in (("v7", "english_v7"), ("v6", "english_v6")):
        make_collection(conn, name, 16, analyzer=analyzer)
        ingest(conn, records, collection=name)
    for query in ("ERR-4029", "err4029", "ERR\u20134029"):
        assert [r[1] for r in lexical(conn, query, collection="v7")] == \
            ["nbsp-hyphen", "parts"], ascii(query)
    assert [r[1] for r in lexical(conn, "ERR-4029", collection="v6")] == \
        ["parts", "nbsp-hyphen"]
    # typed joined, the query still shares only the parts with v6's index of the chunk
    assert [r[1] for r in lexical(conn, "err4029", collection="v6")] == \
        ["parts", "nbsp-hyphen"]


_UNDERSCORED_TEXTS = ["__all__", "__init__", '__name__ == "__main__"', "sys.__stdout__",
                      "_thread", "__future__", "os._exit", "_Bool", "__attribute__",
                      "author__name", "class_", "_ __ ___", "__init__.py _2 x_1_"]


def test_v7_reads_underscored_identifiers_as_before(conn: psycopg.Connection[Any]) -> None:
    # v8 is a new analyzer: versions built with v7 keep these terms
    assert [_terms(conn, t, "english_v7") for t in _UNDERSCORED_TEXTS] == [
        [], ["init"], ["name", "main"], ["sys", "stdout"], ["thread"], ["futur"],
        ["os", "exit"], ["bool"], ["attribut"], ["author", "name"], ["class"], [],
        ["init", "py", "2", "x_1", "x", "1"]]


@pytest.mark.parametrize("analyzer", ["english_v8", "simple_v8"])
def test_v8_indexes_underscored_identifiers_whole_and_in_parts(
        conn: psycopg.Connection[Any], analyzer: str) -> None:
    expected = {
        "__all__": ["__all__", "all"], "__init__": ["__init__", "init"],
        '__name__ == "__main__"': ["__name__", "name", "__main__", "main"],
        "sys.__stdout__": ["sys.__stdout__", "sys", "stdout", "__stdout__"],
        "_thread": ["_thread", "thread"], "__future__": ["__future__", "future"],
        "os._exit": ["os._exit", "os", "exit", "_exit"], "_Bool": ["_bool", "bool"],
        "__attribute__": ["__attribute__", "attribute"],
        "author__name": ["author__name", "author", "name"], "class_": ["class_", "class"],
        # a lone underscore or a run of them is no term
        "_ __ ___": [],
        "__init__.py _2 x_1_": ["__init__.py", "init", "py", "__init__", "_2", "2",
                                "x_1_", "x", "1"],
        # a name takes up to four underscores in a run; five or more are a fill-in blank
        # or a rule, and separate words (a word beside a longer one was no term at all)
        "____cacheline_aligned x____y": ["____cacheline_aligned", "cacheline", "aligned",
                                         "x____y", "x", "y"],
        "Total__________ x_____y _____z x._____y": ["total", "x", "y", "z", "x", "y"],
        "Heading" + "_" * 120: ["heading"], "_" * 96 + "x": ["x"]}
    english = analyzer.startswith("english")
    for text, terms in expected.items():
        if english:
            # parts are stemmed and stop words dropped; the whole identifier is not
            terms = [{"future": "futur", "attribute": "attribut", "heading": "head",
                      "cacheline": "cachelin", "aligned": "align"}.get(t, t) for t in terms
                     if t != "all"]
        assert _terms(conn, text, analyzer) == terms, text
        # a query reads it the same way
        for_query = conn.execute("select pgfunnel.analyze(%s, %s, true)",
                                 (text, analyzer)).fetchone()
        assert for_query is not None and list(for_query[0]) == terms, text
    # a question about one keeps it
    assert _terms(conn, "what is __all__ for", analyzer) != []
    older = analyzer.replace("_v8", "_v7")
    # identifiers v7 read whole read alike, and so does text with no underscore at the
    # edge of a word or in a run
    for text in ("jsonb_path_exists os.path.join", "ERR-4029 err 4029 err4029",
                 "csv.QUOTE_ALL xml.etree.ElementTree", "ERR\u20114029"):
        assert _terms(conn, text, analyzer) == _terms(conn, text, older), text
    texts = [json.loads(line)["text"] for line in SAMPLE.read_text().splitlines()]
    texts += _random_strings(100, seed=9) + _CJK_TEXTS + _OTHER_SCRIPT_TEXTS
    # (beside a non-ASCII letter, an underscore may be at a word's edge once Chinese or
    # Thai is read as pairs of characters: `Y_本` is `y_` and `本` under v8)
    others = [t for t in texts
              if not re.search(r"(?<![^\W_])_|_(?![^\W_])|__|[^\x00-\x7f]_|_[^\x00-\x7f]",
                               unicodedata.normalize("NFKC", t))]
    assert len(others) > 200
    for text in others:
        assert _terms(conn, text, analyzer) == _terms(conn, text, older), text


# pieces of hostile text for the v8 analyzers: identifiers with underscores, dots, digits
# and hyphens, Markdown emphasis, Chinese and Thai beside underscores, URLs and paths,
# emoji, combining marks, full-width and compatibility forms, controls, question words
_HOSTILE_PIECES = ("_", "__", "___", ".", "-", "a", "Init", "x9", "4029", "os", "sys", "_word_",
                   "__bold__", "*", "`", "'", "\"", "(", ")", "/", ":", "数据", "本", "ข้อ",
                   "<\u0338", "데이터", "é", "e\u0301", "\u0301", "\u0338", "<", "＿", "．",
                   "\ufe4d", "\u2011", "\u2013", "\u00ad", "\u200b", "ﬁ", "①", "²", "😀",
                   "\U0001f44d\U0001f3fd", "Σ", "ς", "https://", "www.", ".py", "__init__",
                   "sys.__stdout__", "author__name", "\x07", "\x1f", "\u0085", "what", "How",
                   "do", "mean", "the", "EXPLAIN", "x" * 45, "_" * 40)
_CONTEXTS = (("", ""), ("see ", " here."), ("(", "),"), ("Use `", "` to"), ("*", "*"),
             ("> ", "\n"), ("数据 ", " 库"), ("\t", "\u00a0"))


def _hostile_strings(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(_HOSTILE_PIECES) for _ in range(rng.randint(1, 9)))
            for _ in range(n)]


@pytest.mark.parametrize("analyzer", ["english_v8", "simple_v8", "german_v8"])
def test_v8_query_terms_are_in_the_chunk_that_holds_the_query(
        conn: psycopg.Connection[Any], analyzer: str) -> None:
    # What ingest indexes (the word cache, word by word) is what the SQL analyzer reads in
    # the whole text, and a query's terms are all in a chunk that holds its text between
    # spaces or punctuation, or written into Chinese prose
    rng = random.Random(5)
    queries = [q for q in _hostile_strings(1500, seed=3) if q.strip()]
    chunks = []
    for q in queries:
        left, right = rng.choice(_CONTEXTS)
        if q[0].isascii() and q[-1].isascii() and rng.random() < 0.3:
            # Chinese sets a name between its words without spaces
            left, right = "调用", "方法"
        chunks.append(left + q + right)
    ta = TermAnalyzer(conn, analyzer)
    ta.prepare(chunks)
    cols = ("select input_ordinal, coalesce(array_agg(term) filter (where term is not null),"
            " '{}') from pgfunnel.analyze_each(%s, %s, %s) group by 1")
    whole = dict(conn.execute(cols, (chunks, analyzer, False)).fetchall())
    asked = dict(conn.execute(cols, (queries, analyzer, True)).fetchall())
    assert sum(bool(t) for t in asked.values()) > 1000
    for i, (q, chunk) in enumerate(zip(queries, chunks, strict=True), start=1):
        indexed = ta.terms(chunk)
        assert indexed == Counter(whole.get(i, [])), chunk
        assert set(asked.get(i, [])) <= set(indexed), (q, chunk)


def test_an_underscored_identifier_outranks_its_bare_word_under_v8(
        conn: psycopg.Connection[Any]) -> None:
    from funnel_util import make_collection

    records = [doc("dunder", "Define __init__ to set up a new instance."),
               # the bare word, more often: under v7 this outranked the identifier's chunk
               doc("bare", "Run init once; init sets defaults, and init again resets them."),
               doc("all", "A module's __all__ lists the names that import * takes."),
               doc("other", "Unrelated text about refunds and invoices.")]
    for name, analyzer in (("v8", "english_v8"), ("v7", "english_v7")):
        make_collection(conn, name, 16, analyzer=analyzer)
        ingest(conn, records, collection=name)
    assert [r[1] for r in lexical(conn, "__init__", collection="v8")] == ["dunder", "bare"]
    assert [r[1] for r in lexical(conn, "__init__", collection="v7")] == ["bare", "dunder"]
    # the bare word still finds the identifier
    assert {r[1] for r in lexical(conn, "init", collection="v8")} == {"dunder", "bare"}
    assert [r[1] for r in lexical(conn, "__all__", collection="v8")] == ["all"]
    assert lexical(conn, "__all__", collection="v7") == []


def test_german_v8_stems_german_and_folds_accents_after_stemming(
        conn: psycopg.Connection[Any]) -> None:
    expected = {
        # German's stemmer and stop words: a noun's plural and a verb's forms meet
        "Die Verzeichnisse werden angelegt": ["verzeichnis", "angelegt"],
        "ein Verzeichnis anlegen": ["verzeichnis", "anleg"],
        # the stemmer folds umlauts and ß itself, and reads the transliteration alike
        "Größe der Dateien": ["gross", "datei"], "Grösse der Datei": ["gross", "datei"],
        # the fold takes other accents off, after the stemmer has read the word
        "Café-Bar": ["cafebar", "cafe", "bar"],
        "Übersicht über Änderungen": ["ubersicht", "ander"],
        "Ubersicht Anderungen": ["ubersicht", "ander"],
        "cœur": ["coeur"],
        # a word of marks alone stays a term (folded, it was an empty one)
        "\u0301 x": ["\u0301", "x"]}
    # the transliteration (oe for ö) is the server's stemmer's: Postgres 18's Snowball
    # reads it as the umlaut, Postgres 16's does not (`groess`)
    row = conn.execute("select ts_lexize('german_stem', 'groesse')").fetchone()
    if row is not None and row[0] == ["gross"]:
        expected["Groesse"] = ["gross"]
    for text, terms in expected.items():
        assert _terms(conn, text, "german_v8") == terms, text
        for_query = conn.execute("select pgfunnel.analyze(%s, 'german_v8', true)",
                                 (text,)).fetchone()
        assert for_query is not None and list(for_query[0]) == terms, text
    # identifiers, hyphenated codes and underscored names as english_v8 reads them
    for text in ("__init__ os.path.join ERR-4029 jsonb_path_exists", "sys.__stdout__ 4029"):
        assert _terms(conn, text, "german_v8") == _terms(conn, text, "english_v8"), text
    # the analyzer says what it is
    row = conn.execute("select stem_dictionary from pgfunnel.analyzers() "
                       "where name = 'german_v8'").fetchone()
    assert row == ("german_stem",)


def test_german_question_words_are_dropped_from_queries_and_reported(
        db: str, conn: psycopg.Connection[Any]) -> None:
    """Under german_v8 only English's question words were dropped: `warum`, `wieso`, the
    `finde` of `wo finde ich` and the `bedeutet` of `was bedeutet` were searched as words.
    German's are dropped from queries under the German analyzers, reported as English's
    are, and never from documents or under the English ones."""
    from funnel_util import make_collection

    def analyze(text: str, analyzer: str = "german_v8", for_query: bool = True) -> list[str]:
        row = conn.execute("select pgfunnel.analyze(%s, %s, %s)",
                           (text, analyzer, for_query)).fetchone()
        assert row is not None
        return list(row[0])

    for query, terms in (
            ("wie kann ich eine Datei löschen", ["datei", "losch"]),
            ("warum startet der Dienst nicht", ["startet", "dien"]),
            ("wo finde ich die Konfiguration", ["konfiguration"]),
            ("was bedeutet ERR-4029", ["err4029", "err", "4029"]),
            ("wofür ist grep", ["grep"]), ("Wofuer ist grep?", ["grep"]),
            ("gibt es ein Werkzeug zum Packen", ["werkzeug", "pack"]),
            # the other persons and moods of the modals, and interrogatives past `wo-`'s
            # first few: `könnten`, `sollten`, `wieviel`, `inwiefern` were searched
            ("wie könnten wir das lösen", ["los"]), ("Koennten wir upgraden", ["upgrad"]),
            ("Sollten wir upgraden?", ["upgrad"]), ("Möchtest du kündigen", ["kundig"]),
            ("Wieviel kostet das Abo?", ["kostet", "abo"]),
            ("Inwiefern hilft Caching", ["hilft", "caching"]),
            ("Wonach sucht der Index", ["sucht", "index"]), ("Gibts eine API", ["api"]),
            ("Dateien, die wir löschen konnten", ["datei", "losch", "konnt"]),
            # `können` and `könnte` are stop words; typed without the umlaut they were not
            ("Koennte ich das Konto sperren", ["konto", "sperr"]),
            ("Konnen wir upgraden", ["upgrad"]),
            ("Die Datei konnte nicht geöffnet werden", ["datei", "konnt", "geoffnet"]),
            # words that also name things are searched where the question does not put
            # them: after what it asks about, or opening a request that is no question
            ("Dateien finden, die gelöscht werden dürfen", ["datei", "find", "geloscht",
                                                             "durf"]),
            ("Bedeutung der Exit-Codes", ["bedeut", "exitcodes", "exit", "cod"]),
            # an article opens the run, as `the meaning of exit codes` drops `meaning`
            ("Die Bedeutung der Exit-Codes", ["exitcodes", "exit", "cod"]),
            # English's are dropped under german_v8 as before
            ("what is a Verzeichnis", ["verzeichnis"])):
        assert analyze(query) == terms, query
    # a naming word is dropped only where it is a question word at all: each of the two
    # lists must hold it, or it is searched everywhere
    [(unlisted,)] = conn.execute(
        "select array(select unnest(pgfunnel._naming_question_words()) except "
        "select unnest(pgfunnel._question_words('german_v8')))").fetchall()
    assert unlisted == []
    # the reason is the same as English's, and dropped_query_words names them
    reasons = dict(conn.execute(
        "select token, dropped from pgfunnel.analyze_tokens('warum startet der Dienst', "
        "'german_v8', true)").fetchall())
    assert reasons == {"warum": "question word", "startet": None, "der": "question word",
                       "dienst": None}
    dropped = conn.execute("select pgfunnel.dropped_query_words('wo finde ich die "
                           "Konfiguration', 'german_v8')").fetchone()
    assert dropped is not None and set(dropped[0]) == {"wo", "finde", "ich", "die"}
    # documents keep them, and the English analyzers search them
    assert analyze("warum startet der Dienst", for_query=False) == ["warum", "startet",
                                                                     "dien"]
    assert analyze("warum wieso weshalb", "english_v8") == ["warum", "wieso", "weshalb"]
    assert analyze("warum wieso weshalb", "simple_v8") == ["warum", "wieso", "weshalb"]
    # a query of nothing else searches them (never silently empty)
    assert analyze("warum?") == ["warum"]

    make_collection(conn, "de", 16, analyzer="german_v8")
    ingest(conn, [doc("dienst", "Der Dienst startet beim Hochfahren nicht, wenn die "
                                "Konfiguration fehlt."),
                  doc("warum", "Warum, wieso, weshalb: ein Kinderlied.")], collection="de")
    seen = _capture(conn)
    assert [r[1] for r in lexical(conn, "warum startet der Dienst nicht",
                                  collection="de")] == ["dienst"]
    [notice] = [m for s, m in seen if s == "NOTICE" and "query words not searched" in m]
    assert set(notice.split(": ", 2)[2].split(", ")) == {"warum", "der", "nicht"}
    seen.clear()
    assert [r[1] for r in lexical(conn, "warum", collection="de")] == ["warum"]
    assert not [m for s, m in seen if "no searchable term" in m]
    # stop words and question words alone: said, not an empty answer left to tell it
    assert lexical(conn, "wie kann ich", collection="de") == []
    [warning] = [m for s, m in seen if s == "WARNING"]
    assert "no searchable term left in query_text (dropped: " in warning
    assert all(w in warning for w in ("wie", "kann", "ich"))
    # and in Python, a warning
    with Funnel(db, collection="de", embedder=None) as f, \
            warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        resp = f.search("warum startet der Dienst nicht", k=3)
    assert [r.citekey for r in resp.results] == ["dienst"]
    [warned] = [w for w in got if "query words not searched" in str(w.message)]
    assert "warum" in str(warned.message)


def test_a_german_word_finds_its_inflected_forms_under_german_v8(
        conn: psycopg.Connection[Any]) -> None:
    from funnel_util import make_collection

    records = [doc("verzeichnisse", "Die Verzeichnisse werden beim Start angelegt."),
               doc("groesse", "Die Größe der Dateien wird in Blöcken angegeben."),
               doc("other", "Rückerstattungen und Rechnungen.")]
    for name, analyzer in (("de", "german_v8"), ("en", "english_v8")):
        make_collection(conn, name, 16, analyzer=analyzer)
        ingest(conn, records, collection=name)
    # the singular, and a spelling without the umlaut's dots or ß
    assert [r[1] for r in lexical(conn, "Verzeichnis anlegen", collection="de")] == [
        "verzeichnisse"]
    assert [r[1] for r in lexical(conn, "Grosse der Datei", collection="de")] == ["groesse"]
    # under english_v8 neither finds its page
    assert lexical(conn, "Verzeichnis anlegen", collection="en") == []
    assert lexical(conn, "Grosse", collection="en") == []
    assert [r[1] for r in lexical(conn, "Grosse", collection="de")] == ["groesse"]


def test_a_thai_word_finds_the_sentence_that_holds_it_under_v6(
        conn: psycopg.Connection[Any]) -> None:
    from funnel_util import make_collection

    records = [doc("backup", "วิธีสำรองฐานข้อมูลของคุณทุกวัน"),
               doc("search", "การค้นหาเอกสารด้วยคำสำคัญ"),
               doc("en", "How to back up a database.")]
    for name, analyzer in (("v6", "english_v6"), ("v5", "english_v5")):
        make_collection(conn, name, 16, analyzer=analyzer)
        ingest(conn, records, collection=name)
    assert [r[1] for r in lexical(conn, "ฐานข้อมูล", collection="v6")][:1] == ["backup"]
    # all five pairs of the word against one the other sentence happens to share
    assert [r[1] for r in lexical(conn, "เอกสาร", collection="v6")][:1] == ["search"]
    assert [r[1] for r in lexical(conn, "database", collection="v6")] == ["en"]
    # under v5 the word was matched only where a fragment between two marks equals it
    assert lexical(conn, "เอกสาร", collection="v5") == []


def test_a_decomposed_accent_finds_its_composed_spelling_under_v3(
        conn: psycopg.Connection[Any]) -> None:
    import unicodedata

    from funnel_util import make_collection

    nfd = unicodedata.normalize("NFD", "Le résumé du café à Zürich")
    for name, analyzer in (("v3", "english_v3"), ("v2", "english_v2")):
        make_collection(conn, name, 16, analyzer=analyzer)
        ingest(conn, [doc("cafe", nfd), doc("other", "A plain text about refunds.")],
               collection=name)
    for query in ("résumé Zürich", "ＺÜＲＩＣＨ", unicodedata.normalize("NFD", "café")):
        hits = [r[1] for r in lexical(conn, query, collection="v3")]
        assert hits == ["cafe"], (query, hits)
    # a composed query misses the decomposed text under v2: the reason for v3
    assert [r[1] for r in lexical(conn, "résumé Zürich", collection="v2")] == []


@pytest.mark.parametrize("analyzer, first", [("english_v2", "csv"), ("english_v1", None)])
def test_an_unqualified_name_finds_its_qualified_spelling(
        conn: psycopg.Connection[Any], analyzer: str, first: str | None) -> None:
    from funnel_util import make_collection

    make_collection(conn, "t", 16, analyzer=analyzer)
    ingest(conn, [
        doc("csv", "The csv module defines constants. csv.QUOTE_ALL instructs writer objects "
                   "to put every field in quotes."),
        doc("quoting", "Quoting rules: quote a value, quoted values, quotes inside quotes, "
                       "and when not to quote at all."),
    ])
    rows = lexical(conn, "QUOTE_ALL", collection="t")
    if first is not None:
        assert rows[0][1] == first
    else:
        # english_v1 indexes csv.quote_all whole and as csv / quot: the bare name is lost
        assert "csv" not in [r[1] for r in rows[:1]]


@pytest.mark.parametrize("analyzer", ["english_v1", "simple_v1", "english_v2", "simple_v2",
                                      "english_v3", "simple_v3", "english_v4", "simple_v4",
                                      "english_v5", "simple_v5", "english_v6", "simple_v6",
                                      "english_v7", "simple_v7", "english_v8", "simple_v8",
                                      "german_v8"])
@pytest.mark.parametrize("for_query", [False, True])
def test_plain_words_take_a_shorter_path_to_the_same_rows(conn: psycopg.Connection[Any],
                                                          analyzer: str, for_query: bool) -> None:
    # inputs without a digit or a joiner (. _ -) take the plain-word path; one input with
    # a digit sends the whole call down the general path, whose rows for the other inputs
    # must be the same
    rng = random.Random(11)
    words = ["What", "is", "the", "refund", "window", "Éclair", "naïve", "straße", "日本語",
             "don't", "(annual)", "plan?", "How", "DO", "i", "a" * 101, "x" * 100, "ΩMEGA",
             "und", "Größe"]
    seps = [" ", "  ", ", ", "; ", "! ", "\u00a0", "\u2014", "\n"]
    inputs: list[str | None] = ["", None, "?!", "a" * 150]
    for _ in range(120):
        inputs.append("".join(rng.choice(words) + rng.choice(seps)
                              for _ in range(rng.randint(1, 8))))
    cols = "input_ordinal, token_position, token, term, dropped"
    plain = conn.execute(f"select {cols} from pgfunnel.analyze_each(%s, %s, %s)",
                         (inputs, analyzer, for_query)).fetchall()
    general = conn.execute(f"select {cols} from pgfunnel.analyze_each(%s, %s, %s) "
                           "where input_ordinal <= %s",
                           (inputs + ["4029"], analyzer, for_query, len(inputs))).fetchall()
    assert plain == general
    assert any(r[4] == "stop word" for r in plain) or analyzer.startswith("simple")
    assert any(r[4] == "question word" for r in plain) == for_query


def test_the_one_text_helpers_refuse_text_past_their_limit_before_analysing_it(
        conn: psycopg.Connection[Any]) -> None:
    """analyze, analyze_tokens and dropped_query_words on a megabyte took seconds (11 s
    for dotted words); each now takes a query of at most 10,000 characters (funnel_search's
    limit) and a document's text of at most 100,000, and names `input` past that. The
    refusal comes from the length check, before the text reaches the analysis: the error's
    context names _check_analyze_input and neither analyze_each nor _analyze_pass.
    analyze_each takes as much in all (the test below)."""
    megabyte = "x.y_z " * 170_000
    calls = [("select pgfunnel.analyze(%s)", megabyte, 100_000),
             ("select count(*) from pgfunnel.analyze_tokens(%s)", megabyte, 100_000),
             ("select pgfunnel.analyze(%s, for_query => true)", megabyte, 10_000),
             ("select count(*) from pgfunnel.analyze_tokens(%s, 'simple_v8', true)",
              "a" * 10_001, 10_000),
             ("select pgfunnel.dropped_query_words(%s)", "the " * 2_501, 10_000)]
    for stmt, text, limit in calls:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
            conn.execute(stmt, (text,))
        conn.rollback()
        context = err.value.diag.context or ""
        assert "function _check_analyze_input(text,boolean)" in context, context
        assert "function analyze_each(" not in context, context
        assert "function _analyze_pass(" not in context, context
        said = str(err.value).splitlines()[0]
        assert said.startswith(f"input: is {len(text)} characters long; the limit "), said
        assert (f"the limit for a query is {limit}," if limit == 10_000
                else f"the limit is {limit} (split the text over several calls)") in said, said
    # at the limits they answer as before
    assert len(one_row(conn.execute("select pgfunnel.analyze(%s)", ("ab " * 33_333,)))[0]) \
        == 33_333
    assert one_row(conn.execute("select pgfunnel.analyze(%s, for_query => true)",
                                ("refund " * 1_428,)))[0] == ["refund"] * 1_428
    assert one_row(conn.execute("select pgfunnel.dropped_query_words(%s)",
                                ("the " * 2_500,)))[0] == ["the"]
    rows = conn.execute("select count(*) from pgfunnel.analyze_each(array[%s])",
                        ("refund " * 14_285,)).fetchone()
    assert rows == (14_285,)


def test_analyze_each_refuses_a_call_past_its_limits(conn: psycopg.Connection[Any]) -> None:
    """analyze_each took any number of texts of any length: one call analysed megabytes
    (11 s a megabyte of dotted words). It takes what analyze takes for one text, 100,000
    characters, across all its inputs, and with for_query each input at most 10,000
    (funnel_search's query_text), naming `inputs` (or the input) past that, before any
    analysis. Ingest, which analyses a batch's distinct words whatever their length, is
    not bound by it (test_ingest's long chunk is 198,003 characters)."""
    calls = [
        (["x.y_z " * 10_000, "x.y_z " * 10_000], False,
         "inputs: hold 120000 characters in all; the limit is 100000, as for analyze's "
         "input (split the texts over several calls)"),
        (["refund " * 1_000] * 15, True,
         "inputs: hold 105000 characters in all; the limit is 100000"),
        (["refund", "a" * 10_001], True,
         "inputs[2]: is 10001 characters long; the limit for a query is 10000, as for "
         "funnel_search's query_text"),
    ]
    for inputs, for_query, said in calls:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
            conn.execute("select count(*) from pgfunnel.analyze_each(%s, 'english_v8', %s)",
                         (inputs, for_query))
        conn.rollback()
        assert str(err.value).splitlines()[0].startswith(said), err.value
    # at the limits: answered, a NULL input counted as none
    rows = conn.execute("select count(*) from pgfunnel.analyze_each(%s)",
                        (["refund " * 10_000, "refund " * 4_285 + "abcd", None],)).fetchone()
    assert rows == (14_286,)
    rows = conn.execute("select count(*) from pgfunnel.analyze_each(%s, 'english_v8', true)",
                        (["refund " * 1_428 + "abcd"] * 2,)).fetchone()
    assert rows == (2 * 1_429,)


def test_the_text_limit_is_written_once_and_the_docs_state_it(
        conn: psycopg.Connection[Any]) -> None:
    """analyze's per-input check, analyze_each's total and _analyze_pass's bound on readers
    each wrote 100000 into their check and message; all read pgfunnel._text_limit() now,
    and sql/ writes the number nowhere else. The docs state it."""
    [(limit,)] = conn.execute("select pgfunnel._text_limit()").fetchall()
    sql_text = (Path(__file__).resolve().parent.parent / "sql" / "010_analyzer.sql").read_text()
    assert re.findall(r"(?<![0-9a-fA-F\\])100000(?![0-9])", sql_text) == [str(limit)]
    for name in ("_analyze_pass", "analyze_each", "_check_analyze_input"):
        [(body,)] = conn.execute(
            "select p.prosrc from pg_catalog.pg_proc p where p.pronamespace = "
            "'pgfunnel'::regnamespace and p.proname = %s", (name,)).fetchall()
        assert str(limit) not in body, name
    docs = Path(__file__).resolve().parent.parent / "docs"
    for page in ("sql.md", "security.md"):
        assert f"{limit:,} characters" in (docs / page).read_text(), page
    # at the limit, and one past it
    assert len(one_row(conn.execute("select pgfunnel.analyze(%s)",
                                    ("ab " * (limit // 3) + " " * (limit % 3),)))[0]) \
        == limit // 3
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=f"the limit is {limit} "):
        conn.execute("select pgfunnel.analyze(%s)", ("a" * (limit + 1),))
    conn.rollback()
    with pytest.raises(psycopg.errors.InvalidParameterValue,
                       match=f"hold {limit + 1} characters in all; the limit is {limit},"):
        conn.execute("select count(*) from pgfunnel.analyze_each(%s)", (["a" * limit, "b"],))
    conn.rollback()


def test_analyze_each_calls_analyze_pass_with_bound_all_each_time(
        conn: psycopg.Connection[Any]) -> None:
    """analyze_each's re-read of a question that is nothing but question words called
    _analyze_pass without bound_all, so those inputs, already held to the limit in all,
    were counted again for the bound on readers. Every call passes true now."""
    [(body,)] = conn.execute(
        "select p.prosrc from pg_catalog.pg_proc p where p.pronamespace = "
        "'pgfunnel'::regnamespace and p.proname = 'analyze_each'").fetchall()
    calls = re.findall(r"pgfunnel\._analyze_pass\(((?:[^()]|\([^()]*\))*)\)", body)
    assert len(calls) == 3, calls
    for args in calls:
        assert re.search(r",\s*true\s*$", args), args
    # the re-read still reads a bare question's words
    rows = conn.execute("select input_ordinal, term from pgfunnel.analyze_each(%s, "
                        "'english_v8', true) where term is not null",
                        (["what does it mean", "quasar drift"],)).fetchall()
    assert sorted(rows) == [(1, "mean"), (2, "drift"), (2, "quasar")], rows


def test_a_letter_alone_after_an_apostrophe_is_not_searched(
        sample_conn: psycopg.Connection[Any]) -> None:
    """An apostrophe splits `gibt's`, `don't`, `I'm` into a word and a letter. Where the
    language's stop words lack the letter (german_v8: `s`, `t`; english_v8: `m`, `d`) a
    query searched it, a one-letter term that most chunks hold. On the query side it is
    dropped now, and reported as the stop words are; documents index it as before (an
    indexed term changes only with a new analyzer), and a letter the query writes alone
    (`Vitamin D`), or one before the apostrophe (`o'reilly`), is searched."""
    conn = sample_conn

    def analyze(text: str, analyzer: str, for_query: bool = True) -> list[str]:
        return list(one_row(conn.execute("select pgfunnel.analyze(%s, %s, %s)",
                                         (text, analyzer, for_query)))[0])

    assert analyze("Gibt's eine API für Vitamin D?", "german_v8") == ["api",
                                                                     "vitamin", "d"]
    assert analyze("what's new, it's broken, don’t retry", "german_v8") == [
        "new", "brok", "don", "retry"]
    assert analyze("I'm locked out, I'd say; o'reilly", "english_v8") == [
        "lock", "say", "o", "reilli"]
    # a compound ahead of the apostrophe, and the path that reads compounds
    assert analyze("s3's bucket", "german_v8") == ["s3", "s", "3", "bucket"]
    # documents keep the letter
    assert analyze("Gibt's, don't, I'm", "german_v8", False) == ["gibt", "s", "don", "t",
                                                                "i", "m"]
    rows = conn.execute("select token, term, dropped from pgfunnel.analyze_tokens("
                        "'gibt''s mehr', 'german_v8', true)").fetchall()
    assert ("s", None, "letter after an apostrophe") in rows, rows
    dropped = one_row(conn.execute("select pgfunnel.dropped_query_words('I''m locked out', "
                                   "'english_v8')"))[0]
    assert set(dropped) == {"i", "m", "out"}, dropped

    seen = _capture(conn)
    lexical(conn, "I'm locked out of billing")
    notices = [m for s, m in seen if s == "NOTICE" and "query words not searched" in m]
    assert notices and "m" in notices[0].split(": ", 1)[1].split(", "), notices


def test_clitics_are_not_searched_in_a_bare_question_nor_two_letter_ones(
        conn: psycopg.Connection[Any]) -> None:
    """Two gaps of the rule above: `Gibt's` as the whole query searched `s` (a query of
    nothing but question words is read again without them, and that read kept every
    word), and English's two-letter clitics (`I'll`, `we're`, `they've`) were searched as
    `ll`, `re`, `ve`. Both are dropped on the query side now, reported as the letters are;
    a query they leave with no term still warns."""
    from funnel_util import make_collection

    def analyze(text: str, analyzer: str, for_query: bool = True) -> list[str]:
        return list(one_row(conn.execute("select pgfunnel.analyze(%s, %s, %s)",
                                         (text, analyzer, for_query)))[0])

    assert analyze("Gibt's", "german_v8") == ["gibt"]
    assert analyze("Gibt’s?", "german_v8") == ["gibt"]
    rows = conn.execute("select token, term, dropped from pgfunnel.analyze_tokens("
                        "'Gibt''s', 'german_v8', true)").fetchall()
    assert rows == [("gibt", "gibt", None), ("s", None, "letter after an apostrophe")], rows
    assert analyze("I'll retry; we're locked out, they've paid", "english_v8") == [
        "retri", "lock", "paid"]
    assert analyze("They’RE locked", "simple_v8") == ["they", "locked"]
    # after anything but a letter the word is the query's own (Python's `re`), and a
    # longer word after an apostrophe is searched (`o'neill`)
    assert analyze("the ('re') module of o'neill", "english_v8") == ["re", "modul", "o",
                                                                     "neill"]
    # documents index them as before
    assert analyze("I'll, we're, they've", "english_v8", False) == ["ll", "re", "ve"]
    assert analyze("Gibt's", "german_v8", False) == ["gibt", "s"]

    make_collection(conn, "de", 16, analyzer="german_v8")
    ingest(conn, [doc("gibt", "Gibt es eine API? Es gibt eine."),
                  doc("s", "s s s: the letter s, and what's new")], collection="de")
    seen = _capture(conn)
    assert [r[1] for r in lexical(conn, "Gibt's", collection="de")] == ["gibt"]
    notices = [m for s, m in seen if "query words not searched" in m]
    assert notices == ["pgfunnel: query words not searched: s"], seen
    seen.clear()
    # a query left with no term (`wie` is a stop word too; it searched `s`) is said to
    # be, not answered empty
    assert lexical(conn, "Wie's?", collection="de") == []
    [warning] = [m for s, m in seen if s == "WARNING"]
    assert warning.startswith("pgfunnel: no searchable term left in query_text (dropped: "
                              "s, wie)"), warning
    with Funnel(conn, "de", embedder=None) as f, warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        assert [r.citekey for r in f.search("Gibt's", k=3).results] == ["gibt"]
        assert f.search("Wie's?", k=3).results == []
    said = [str(w.message) for w in got]
    assert "pgfunnel: query words not searched: s" in said, said
    assert any(m.startswith("pgfunnel: no searchable term left in query_text (dropped: s, wie)")
               for m in said), said


def test_a_bare_question_read_again_reports_every_word_not_searched(
        conn: psycopg.Connection[Any]) -> None:
    """A query of nothing but question words, stop words and clitics is read again with
    its question words searched. The notice then named only the clitics (`Gibt's das`:
    `s`, `explain it`: no notice at all) while dropped_query_words, and the notice of
    every other query (`I'm locked out`: `i, m, out`), name the stop words too: what
    docs/sql.md promises, every word not searched."""
    from funnel_util import make_collection

    make_collection(conn, "de", 16, analyzer="german_v8")
    ingest(conn, [doc("gibt", "Gibt es eine API? Es gibt eine. Explain it.")],
           collection="de")
    ingest(conn, [doc("explain", "Explain it: the explain phase of a test run.")],
           collection="en")
    seen = _capture(conn)
    for query, collection, analyzer in [("Gibt's das?", "de", "german_v8"),
                                        ("explain it", "en", "english_v1"),
                                        ("I'm locked out", "en", "english_v1")]:
        dropped = one_row(conn.execute("select pgfunnel.dropped_query_words(%s, %s)",
                                       (query, analyzer)))[0]
        seen.clear()
        lexical(conn, query, collection=collection)
        notices = [m for s, m in seen if "query words not searched" in m]
        assert notices == ["pgfunnel: query words not searched: " + ", ".join(dropped)], (
            query, seen)
    assert set(dropped) == {"i", "m", "out"}
    assert [r[1] for r in lexical(conn, "Gibt's das?", collection="de")] == ["gibt"]
    # the search() warning and the CLI's `warning:` line are this notice's text
    for query, collection, words in [("Gibt's das?", "de", "das, s"),
                                     ("explain it", "en", "it")]:
        with Funnel(conn, collection, embedder=None) as f, \
                warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            assert [r.citekey for r in f.search(query, k=3).results] == [
                "gibt" if collection == "de" else "explain"]
        said = [str(w.message) for w in got]
        assert f"pgfunnel: query words not searched: {words}" in said, said
