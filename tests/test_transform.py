"""Query transformations: pure Python, deterministic, no model, no database."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from pgfunnel.errors import ConfigError
from pgfunnel.transform import (
    FollowupResolver,
    GuardedRewriter,
    content_words,
    decompose,
    multi_query,
    protected_tokens,
    round_robin_merge,
    rrf_merge,
)

PLANS = ("monthly", "annual", "trial")

# -- multi-query + RRF --------------------------------------------------------------------


def test_multi_query_drops_empties_and_duplicates() -> None:
    mq = multi_query(["Reset password", "reset  PASSWORD", "", "recover account login"])
    assert mq.queries == ["Reset password", "recover account login"]
    assert mq.dropped == ["reset  PASSWORD", ""]
    assert "dropped" in mq.reason
    assert multi_query(["a b", "c d", "e f"], max_queries=2).queries == ["a b", "c d"]


def test_rrf_merge_hand_computed() -> None:
    merged = rrf_merge([["a", "b", "c"], ["b", "a", "d"]], k=60)
    expected = {
        "a": 1 / 61 + 1 / 62,
        "b": 1 / 62 + 1 / 61,
        "c": 1 / 63,
        "d": 1 / 63,
    }
    assert [key for key, _ in merged] == ["a", "b", "c", "d"]  # ties: first met
    for key, score in merged:
        assert score == pytest.approx(expected[key])


def test_rrf_merge_weights_and_small_k() -> None:
    merged = dict(rrf_merge([["a", "b"], ["b", "a"]], k=1, weights=[2.0, 1.0]))
    assert merged["a"] == pytest.approx(2 / 2 + 1 / 3)
    assert merged["b"] == pytest.approx(2 / 3 + 1 / 2)
    # A key repeated in one list counts once, at its best rank.
    assert dict(rrf_merge([["x", "x"]], k=1)) == {"x": pytest.approx(0.5)}


def test_rrf_merge_validates() -> None:
    with pytest.raises(ConfigError) as exc:
        rrf_merge([["a"]], k=0)
    assert exc.value.parameter == "rrf_k"
    with pytest.raises(ConfigError) as exc:
        rrf_merge([["a"], ["b"]], weights=[1.0])
    assert exc.value.parameter == "weights"


# -- decomposition + round robin ----------------------------------------------------------


def test_round_robin_gives_each_list_its_share() -> None:
    a = ["a1", "shared", "a3", "a4"]
    b = ["shared", "b2", "b3", "b4"]
    merged = round_robin_merge([a, b], 4)
    assert merged == ["a1", "shared", "a3", "b2"]
    assert sum(x.startswith("a") for x in merged) >= 1
    assert sum(x.startswith("b") for x in merged) >= 1
    # Without k everything comes back once.
    assert sorted(round_robin_merge([a, b])) == sorted(set(a + b))
    # RRF, by contrast, puts the compromise item first.
    assert rrf_merge([a, b])[0][0] == "shared"


def test_round_robin_skips_a_taken_item_without_losing_the_turn() -> None:
    assert round_robin_merge([["x", "y"], ["x", "z"]], 3) == ["x", "z", "y"]


@pytest.mark.parametrize(
    "query",
    [
        "terms and conditions",
        "difference between refunds and credits",
        'search "salt and pepper" recipes',
        "compare monthly and annual plans",
        "how do refunds work",
    ],
)
def test_decompose_leaves_single_intent_queries_whole(query: str) -> None:
    d = decompose(query, qualifiers=PLANS)
    assert d.parts == [query]
    assert not d.split
    assert d.reason.startswith("not split")


def test_decompose_splits_clauses_with_their_own_qualifiers() -> None:
    d = decompose("currency on monthly plans and levy on annual plans", qualifiers=PLANS)
    assert d.parts == ["currency on monthly plans", "levy on annual plans"]
    assert d.split and d.reason.startswith("split")


def test_decompose_distributes_a_shared_qualifier() -> None:
    d = decompose("refund policy and cancellation fees on annual plans", qualifiers=PLANS)
    assert d.parts == ["refund policy annual", "cancellation fees on annual plans"]
    assert "shared qualifier" in d.reason


def test_decompose_question_marks_and_cap() -> None:
    d = decompose("How do refunds work? What does ERR-4029 mean?")
    assert d.parts == ["How do refunds work?", "What does ERR-4029 mean?"]
    d = decompose("red apples and green pears and blue plums and white grapes", max_parts=2)
    assert len(d.parts) == 2
    assert d.parts[0] == "red apples"
    assert "capped" in d.reason
    with pytest.raises(ConfigError):
        decompose("x", max_parts=0)


# -- guarded rewrite ----------------------------------------------------------------------


def test_protected_tokens() -> None:
    toks = protected_tokens(
        'what does ERR-4029 mean on "Pro plan" v2.3 with SSO for 42 monthly', PLANS
    )
    assert toks == ['"Pro plan"', "ERR-4029", "v2.3", "SSO", "42", "monthly"]
    assert protected_tokens("how do refunds work") == []


def test_rewrite_that_keeps_identifier_is_used() -> None:
    g = GuardedRewriter(lambda q: "meaning of error code err-4029")
    r = g.rewrite("what does ERR-4029 mean")
    assert r.used_rewrite and r.query == "meaning of error code err-4029"
    assert r.original == "what does ERR-4029 mean"
    # Re-spaced identifiers survive too.
    assert GuardedRewriter(lambda q: "error ERR 4029 meaning").rewrite("ERR-4029?").used_rewrite


def test_rewrite_that_drops_identifier_falls_back() -> None:
    g = GuardedRewriter(lambda q: "what does this error number mean")
    r = g.rewrite("what does ERR-4029 mean")
    assert not r.used_rewrite
    assert r.query == "what does ERR-4029 mean"
    assert r.missing == ("ERR-4029",)
    assert "ERR-4029" in r.reason


def test_rewrite_that_drops_a_plan_word_falls_back() -> None:
    g = GuardedRewriter(lambda q: "refund policy", protected_terms=PLANS)
    r = g.rewrite("refunds on monthly plans")
    assert not r.used_rewrite and r.missing == ("monthly",)


def test_rewriter_that_raises_falls_back() -> None:
    def boom(q: str) -> str:
        raise RuntimeError("model unavailable")

    r = GuardedRewriter(boom).rewrite("what does ERR-4029 mean")
    assert not r.used_rewrite and r.query == "what does ERR-4029 mean"
    assert "RuntimeError" in r.reason


def test_rewriter_that_times_out_falls_back() -> None:
    release = threading.Event()
    finished = threading.Event()

    def slow(q: str) -> str:
        release.wait(60)
        finished.set()
        return "too late ERR-4029"

    r = GuardedRewriter(slow, timeout_s=0.2).rewrite("what does ERR-4029 mean")
    # returned while the rewriter still ran (it ends only once released): it did not
    # wait for it, which a wall-clock bound checked only as loosely as the machine's load
    # allowed
    assert not finished.is_set()
    release.set()
    assert not r.used_rewrite and "timed out" in r.reason


def test_a_rewrite_the_search_would_refuse_falls_back() -> None:
    for proposed, why in (("refund\x00policy", "NUL"),
                          ("refund " + "word " * 3000, "at most 10,000")):
        def propose(q: str, p: str = proposed) -> str:
            return p

        r = GuardedRewriter(propose).rewrite("how do refunds work")
        assert not r.used_rewrite and r.query == "how do refunds work"
        assert r.reason.startswith("fallback: rewrite is not a usable query") and why in r.reason


def test_a_rewrite_that_is_not_text_falls_back_naming_what_came_back() -> None:
    # None, bytes (an HTTP client's body) and a list of choices all read "returned no
    # text", which sent whoever debugged it looking for an empty answer
    for value, said in ((None, "None"), (b"refund", "bytes"), (["refund policy"], "list"),
                        (5, "int")):
        r = GuardedRewriter(lambda q, v=value: v).rewrite("how do refunds work")  # type: ignore[misc]
        assert not r.used_rewrite and r.query == "how do refunds work"
        assert r.reason == f"fallback: rewriter returned {said}, not a str", r.reason


def test_empty_rewrite_falls_back() -> None:
    r = GuardedRewriter(lambda q: "   ").rewrite("how do refunds work")
    assert not r.used_rewrite and "empty" in r.reason
    with pytest.raises(ConfigError):
        GuardedRewriter(lambda q: q, timeout_s=0)


# -- follow-up resolution -----------------------------------------------------------------


def test_followup_carries_the_topic() -> None:
    res = FollowupResolver().resolve(["how do refunds work?"], "what about monthly plans?")
    assert "refunds" in res.query and "monthly" in res.query
    assert res.carried_terms == ["refunds"]
    assert res.original == "what about monthly plans?"


def test_followup_skips_turns_without_a_topic_and_respects_qualifiers() -> None:
    r = FollowupResolver(qualifiers=("monthly", "annual", "plan"))
    history = ["how do refunds work?", "and monthly plans?"]
    res = r.resolve(history, "and annual plans?")
    assert res.carried_terms == ["refunds"]
    assert res.query == "refunds annual plans?"


def test_standalone_query_is_unchanged() -> None:
    res = FollowupResolver().resolve(["how do refunds work?"], "how do I export my invoices")
    assert res.query == "how do I export my invoices" and res.carried_terms == []


def test_topic_terms_restrict_what_counts_as_topic() -> None:
    r = FollowupResolver(topic_terms=["refund", "export", "invoice"])
    res = r.resolve(["can I get a refund"], "is it different on monthly plans")
    assert res.carried_terms == ["refund"]
    assert r.resolve([], "what about monthly plans?").carried_terms == []


def test_and_opening_is_a_followup() -> None:
    res = FollowupResolver().resolve(["how do I cancel?"], "and on the annual plan?")
    assert res.carried_terms == ["cancel"]
    # the opening "and" goes: it would join the carried topic to the rest as a second clause
    assert res.query == "cancel on the annual plan?"
    assert res.original == "and on the annual plan?"


def test_resolved_and_followup_is_not_decomposed_apart() -> None:
    res = FollowupResolver().resolve(["what happens to deleted projects?"],
                                     "and on the enterprise plan?")
    assert res.query == "deleted projects on the enterprise plan?"
    assert decompose(res.query).parts == [res.query]
    # an "and" that opens a question of its own cue is dropped the same way
    what = FollowupResolver().resolve(["how do refunds work?"], "and what about trials?")
    assert what.query == "refunds what about trials?"


def test_pronoun_opening_carries_the_topic_only_for_short_queries() -> None:
    r = FollowupResolver()
    history = ["what happens when a payment fails?"]
    res = r.resolve(history, "is it different for monthly plans?")
    assert res.carried_terms == ["payment", "fails"]
    # a pronoun opening that names its own subject is a question of its own
    own = r.resolve(history, "is it possible to export my invoices as pdf?")
    assert own.carried_terms == [] and own.query == "is it possible to export my invoices as pdf?"
    # "and" must be its own word, not the start of one
    assert r.resolve(history, "android app login").carried_terms == []


def test_a_pronoun_anywhere_in_a_short_query_carries_the_topic() -> None:
    # "how do I undo it" named "undo" and counted as a question of its own: it searched
    # for undo anything, not the deleted project the turn before asked about
    r = FollowupResolver()
    deleted = ["How do I delete a project?"]
    res = r.resolve(deleted, "how do I undo it")
    assert res.query == "delete project how do I undo it"
    assert res.carried_terms == ["delete", "project"] and res.reason.startswith("pronoun 'it'")
    assert r.resolve(deleted, "can I undo that?").carried_terms == ["delete", "project"]
    assert r.resolve(["How do I export invoices?"],
                     "can I schedule them?").carried_terms == ["export", "invoices"]
    assert r.resolve(["what happens when a payment fails?"],
                     "how long does it take?").carried_terms == ["payment", "fails"]
    # a query that names its subject, or whose "that"/"this" is not the pronoun, is its own
    for own in ("I forgot my password, how do I reset it",
                "what does this plan cost", "invoices that failed"):
        assert r.resolve(deleted, own).query == own


def test_an_and_opening_a_question_of_its_own_is_unchanged() -> None:
    # the "and" cue carried the earlier topic into any question it opened:
    # "refund annual plan how do I export invoices as CSV?"
    r = FollowupResolver()
    history = ["How do I get a refund on an annual plan?"]
    own = "And how do I export invoices as CSV?"
    res = r.resolve(history, own)
    assert res.query == own and res.carried_terms == []
    # a short "and" follow-up still carries it; a contraction is no topic word
    assert r.resolve(history, "and on Windows?").query == "refund annual plan on Windows?"
    assert r.resolve(history, "and what if I'm on the enterprise plan?").carried_terms == [
        "refund", "annual"]


def test_a_what_if_naming_more_than_two_topic_words_is_a_question_of_its_own() -> None:
    # "what if" opened a follow-up whatever followed it: "what if I exceed my storage
    # quota?" after a question about refunds searched "refunds what if I exceed ..."
    r = FollowupResolver()
    history = ["How do I get a refund on an annual plan?"]
    for own in ("what if I exceed my storage quota?", "What if I lose my 2FA device?",
                "ok, what if I delete my account and create a new one"):
        res = r.resolve(history, own)
        assert res.query == own and res.carried_terms == [], own
    # with at most two topic words of its own it still continues the last question
    assert r.resolve(history, "what if I'm on the enterprise plan?").query == (
        "refund annual what if I'm on the enterprise plan?")
    assert r.resolve(history, "what if it fails?").carried_terms == ["refund", "annual", "plan"]


def test_fragments_and_thanks_before_a_cue_are_follow_ups() -> None:
    # "for teams?", "how much?" and "that one?" each named a word of their own and
    # counted as questions of their own; "Thanks! And on mobile?" hid its cue
    r = FollowupResolver()
    history = ["How do I get a refund on an annual plan?"]
    carried = "refund annual plan"
    for q, searched in (("for teams?", f"{carried} for teams?"),
                        ("on mobile?", f"{carried} on mobile?"),
                        ("how much?", f"{carried} how much?"),
                        ("that one?", f"{carried} that one?"),
                        ("same question for monthly", f"{carried} same question for monthly"),
                        ("Thanks! And on mobile?", f"{carried} on mobile?"),
                        ("ok, what about teams?", f"{carried} ok, what about teams?")):
        assert r.resolve(history, q).query == searched, q
    # a fragment opening that names its own subject, and "no" as a word, stay as they are
    for own in ("in Germany, how is VAT charged on invoices?", "no refund received",
                "Also, how do I export invoices as CSV?"):
        assert r.resolve(history, own).query == own


def test_a_preposition_naming_a_term_of_its_own_is_no_follow_up() -> None:
    # "for loop syntax?" opened with a fragment cue and named two topic words, few
    # enough for a fragment: the last question's topic was put in front of it
    r = FollowupResolver()
    history = ["How do I get a refund on an annual plan?"]
    for own in ("for loop syntax?", "from import statement", "from yield from expression",
                "For loop syntax?"):
        res = r.resolve(history, own)
        assert res.query == own and res.carried_terms == [], own
    # a fragment whose phrase qualifies (a determiner, a plural, a name, a number) is one
    carried = "refund annual plan"
    for q, searched in (("on the enterprise plan?", "refund annual on the enterprise plan?"),
                        ("for monthly plans?", "refund annual for monthly plans?"),
                        ("on Windows 11?", f"{carried} on Windows 11?"),
                        ("with a free account?", f"{carried} with a free account?"),
                        ("for teams?", f"{carried} for teams?")):
        assert r.resolve(history, q).query == searched, q


def test_a_fragment_after_keywords_is_a_keyword_search_of_its_own() -> None:
    # "with statement" after "HAS_TLSv1" searched "has_tlsv1 with statement": a search box
    # that sends its earlier searches as history joined two unrelated keyword searches
    r = FollowupResolver()
    for history, own in ((["HAS_TLSv1"], "with statement"), (["object slice"], "in operator"),
                         (["setAttribute"], "and operator"), (["proxy"], "in keyword")):
        res = r.resolve(history, own)
        assert res.query == own and res.carried_terms == [], own
        assert "phrased as a question" in res.reason
    # a fragment asked as a question continues keywords, and any fragment a question
    assert r.resolve(["refund policy"], "and for teams?").query == "refund policy for teams?"
    assert r.resolve(["refund policy"], "on mobile?").query == "refund policy on mobile?"
    assert r.resolve(["how do refunds work"], "for teams").query == "refunds for teams"
    assert r.resolve(["how do refunds work"], "in operator").query == "refunds in operator"


def test_one_word_that_is_no_question_is_a_keyword_search_of_its_own() -> None:
    # "Any", "X" or "__all__" (typing.Any, a variable, a module attribute) have no topic
    # word of the resolver's, and were searched as "<the last turn's topic> Any"
    r = FollowupResolver()
    history = ["How do I delete a project?"]
    for own in ("Any", "X", "__all__", "and_", "Compare", "with", "for", "above"):
        res = r.resolve(history, own)
        assert res.query == own and res.carried_terms == [], own
        assert res.reason.startswith("one word of its own")
    # a question word, a pronoun, a comparison or any question still points back
    for q in ("why", "why?", "how", "it?", "that", "more", "same", "else", "Any?", "X?"):
        assert r.resolve(history, q).carried_terms == ["delete", "project"], q


def test_one_word_that_is_a_qualifier_or_outside_the_topic_terms_still_points_back() -> None:
    # "annual" after "how do I cancel my subscription?" (plan names passed as qualifiers,
    # so not topics of their own) was searched alone, without the subscription: the
    # one-word rule is for words that name nothing of the resolver's ("Any", "with")
    history = ["how do I cancel my subscription?"]
    r = FollowupResolver(qualifiers=("monthly", "annual"))
    for q in ("annual", "Monthly", "annual?"):
        res = r.resolve(history, q)
        assert res.carried_terms == ["cancel", "subscription"], q
        assert res.query == f"cancel subscription {q}"
    assert r.resolve(history, "Any").query == "Any"
    vocab = FollowupResolver(topic_terms=["cancel", "subscription", "refund"])
    assert vocab.resolve(history, "teams").query == "cancel subscription teams"
    assert vocab.resolve(history, "refund").query == "refund"


def test_comparison_words_are_not_topics() -> None:
    r = FollowupResolver()
    assert r.topic_words("is it different or the same?") == []
    assert r.topic_words("different invoices") == ["invoices"]


def test_followup_does_not_carry_a_word_too_long_to_search() -> None:
    # a pasted blob in an earlier turn must not make the follow-up too long to search
    res = FollowupResolver().resolve([f"refund {'x' * 20_000} plan"], "what about it?")
    assert res.query == "refund plan what about it?"


def test_a_follow_up_near_the_length_limit_is_not_made_too_long_to_search() -> None:
    # "what about" and 9,990 characters the search takes came back over 10,000 with the
    # carried words in front: the search refused text the caller never wrote
    from pgfunnel.search import check_query_text

    query = "what about " + "x " * 4_994
    assert len(query) <= 10_000
    res = FollowupResolver().resolve(["how do refunds work?"], query)
    assert res.query == query and res.carried_terms == [] and "10,000" in res.reason
    check_query_text(res.query)


def test_words_of_any_script_are_words() -> None:
    # the word pattern was ASCII-only: accented words were cut apart and a Greek,
    # Russian or Chinese query had no words at all
    assert content_words("Rückerstattung für Jahrespläne") == [
        "rückerstattung", "für", "jahrespläne"]
    assert content_words("remboursement élevé") == ["remboursement", "élevé"]
    # vowel signs, viramas and tone marks are part of their word (Python's \\w leaves
    # marks out: हिन्दी came out as ह, न, द)
    assert content_words("हिन्दी में खोज") == ["हिन्दी", "में", "खोज"]
    assert content_words("தமிழ் தேடல்") == ["தமிழ்", "தேடல்"]
    assert content_words("ฐานข้อมูล") == ["ฐานข้อมูล"]


@pytest.mark.parametrize("query", [
    "Как экспортировать счета?",
    "Πώς λειτουργούν οι επιστροφές χρημάτων;",
    "如何导出发票？",
    "चालान कैसे निर्यात करें?",
    "วิธีส่งออกใบแจ้งหนี้",
])
def test_a_non_latin_query_with_its_own_topic_is_not_a_follow_up(query: str) -> None:
    # it counted as a turn with no topic word, and got "refunds" put in front of it
    res = FollowupResolver().resolve(["how do refunds work?"], query)
    assert res.query == query and res.carried_terms == []


def test_a_non_latin_topic_is_carried_and_protected() -> None:
    res = FollowupResolver().resolve(["Как работают возвраты?"], "what about monthly plans?")
    assert "возвраты" in res.carried_terms
    assert protected_tokens("refund año", ["año"]) == ["año"]


def test_one_string_where_a_list_is_expected_is_config_error() -> None:
    # iterated, one string was a list of one-character items: a history with no topic,
    # protected terms "m", "o", "n", ..., three phrasings "a", "b", "c"
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: FollowupResolver().resolve("how do refunds work?", "and for annual?"),
         "history"),
        (lambda: FollowupResolver().resolve(None, "and for annual?"), "history"),  # type: ignore[arg-type]
        (lambda: GuardedRewriter(str.upper, protected_terms="monthly"), "protected_terms"),
        (lambda: multi_query("abc"), "phrasings"),
        (lambda: multi_query(["a", None]), "phrasings"),  # type: ignore[list-item]
        (lambda: decompose("a and b", qualifiers="monthly"), "qualifiers"),
        (lambda: FollowupResolver(qualifiers="annual"), "qualifiers"),
        # numbers as text, or a fraction of a query: bare TypeErrors, or accepted
        (lambda: rrf_merge([["a"], ["b"]], weights=["1", "1"]), "weights"),  # type: ignore[list-item]
        (lambda: multi_query(["a", "b"], max_queries=2.5), "max_queries"),  # type: ignore[arg-type]
    ]
    for call, parameter in cases:
        with pytest.raises(ConfigError) as exc:
            call()
        assert exc.value.parameter == parameter


def test_a_history_past_its_limits_is_refused_naming_the_turn() -> None:
    """A turn of a megabyte took 1.3 s to read for its topic words, and a million empty
    turns 3 s; a history holds at most 100,000 characters in all and 1,000 turns. One turn
    may be longer than a search's query (a pasted blob: above)."""
    from pgfunnel.errors import InvalidInputError

    r = FollowupResolver()
    for history, said in (
            (["refund plan", "refund plan billing " * 50_000],
             "history[1]: is 1,000,000 characters long; a history holds at most 100,000 in "
             "all"),
            (["refund plan " * 833] * 11,
             "history: holds 109,956 characters in 11 turns; the limit is 100,000 in all "
             "(pass the latest turns)"),
            ([""] * 1_001, "history: has 1,001 turns; the limit is 1,000 (pass the latest "
                           "turns)")):
        # CPU time of this process: the refusal's own work, not the other processes a
        # loaded machine runs meanwhile (wall-clock, a busy CI box overran 0.2 s)
        started = time.process_time()
        with pytest.raises(InvalidInputError) as err:
            r.resolve(history, "what about annual?")
        assert str(err.value) == said
        assert time.process_time() - started < 0.2
    # at the limits a follow-up is resolved as before
    res = r.resolve(["refund plan " * 833] * 10, "what about annual?")
    assert res.carried_terms == ["refund", "plan"]
    assert r.resolve([""] * 999 + ["refund plan"], "what about annual?").carried_terms \
        == ["refund", "plan"]
    assert r.resolve(["refund " + "x" * 99_993], "what about it?").carried_terms == ["refund"]
