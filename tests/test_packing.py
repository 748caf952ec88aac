"""Context packing: dedupe, budget, edge order."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pgfunnel.errors import ConfigError, InvalidInputError
from pgfunnel.packing import estimate_tokens, pack_context, tokenizer_counter


@dataclass
class Chunk:
    id: str
    text: str


def _chunks(n: int, words: int = 5) -> list[Chunk]:
    return [Chunk(f"c{i}", " ".join(f"w{i}_{j}" for j in range(words))) for i in range(n)]


def test_edges_order_puts_best_first_and_second_last() -> None:
    res = pack_context(_chunks(5), token_budget=10_000)
    assert [c.id for c in res.kept] == ["c0", "c2", "c4", "c3", "c1"]
    assert res.dropped == []
    rank = pack_context(_chunks(5), token_budget=10_000, order="rank")
    assert [c.id for c in rank.kept] == ["c0", "c1", "c2", "c3", "c4"]


def test_near_duplicate_keeps_the_better_ranked_one() -> None:
    base = "drain the queue then scale the consumer group to restart checkout safely today"
    passages = [
        {"id": "a", "text": base},
        {"id": "b", "text": "never restart the database to fix a queue backlog"},
        {"id": "c", "text": base + " now"},
    ]
    res = pack_context(passages, token_budget=10_000, near_duplicate_threshold=0.8)
    assert [p["id"] for p in res.kept] == ["a", "b"]
    assert res.dropped == [(passages[2], "near-duplicate of a")]
    # With a strict threshold both survive.
    strict = pack_context(passages, token_budget=10_000, near_duplicate_threshold=1.0)
    assert len(strict.kept) == 3


def test_budget_drops_what_does_not_fit_and_fills_the_rest() -> None:
    passages = [
        {"text": "one two three four five six seven eight nine ten"},  # 13 tokens
        {"text": " ".join(["long"] * 40)},  # 52 tokens
        {"text": "short one"},  # 3 tokens
    ]
    res = pack_context(passages, token_budget=20, order="rank")
    assert [p["text"] for p in res.kept] == [passages[0]["text"], "short one"]
    assert res.dropped == [(passages[1], "over token budget")]
    assert res.tokens_used == 16
    assert pack_context(passages, token_budget=0).kept == []


def test_default_counter_is_words_times_1_3_rounded_up() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("one") == 2
    assert estimate_tokens(" ".join(["w"] * 10)) == 13
    assert estimate_tokens(" ".join(["w"] * 3)) == 4


def test_custom_and_tokenizer_counters() -> None:
    class FakeTokenizer:
        def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
            assert add_special_tokens is False
            return list(range(len(text)))

    res = pack_context(
        [{"text": "abcd"}, {"text": "efgh"}],
        token_budget=5,
        count_tokens=tokenizer_counter(FakeTokenizer()),
    )
    assert res.tokens_used == 4 and len(res.kept) == 1
    assert res.dropped[0][1] == "over token budget"


def test_real_tokenizer_counter() -> None:
    from transformers import AutoTokenizer

    from pgfunnel.tiny_models import bundled_tokenizer_path

    tok = AutoTokenizer.from_pretrained(str(bundled_tokenizer_path()), local_files_only=True)
    count = tokenizer_counter(tok)
    assert count("hello world") == 2


def test_tokenizer_counter_does_not_warn_about_long_passages() -> None:
    # counting a passage longer than the tokenizer's model reads (512 tokens) logged
    # transformers' "Running this sequence through the model will result in indexing
    # errors", though counting runs no model (the packing example with
    # Reranker.tokenizer, on any chunk of 513 tokens or more)
    from funnel_util import logged
    from transformers import AutoTokenizer

    from pgfunnel.tiny_models import bundled_tokenizer_path

    tok = AutoTokenizer.from_pretrained(str(bundled_tokenizer_path()), local_files_only=True)
    with logged("transformers") as messages:
        res = pack_context([{"id": 1, "text": "word " * 700}], token_budget=1000,
                           count_tokens=tokenizer_counter(tok))
    assert res.tokens_used == 700
    assert not any("indexing errors" in m for m in messages), messages



def test_validation() -> None:
    with pytest.raises(ConfigError) as exc:
        pack_context([], token_budget=-1)
    assert exc.value.parameter == "token_budget"
    for threshold in (0, "0.5", None, True):
        with pytest.raises(ConfigError) as exc:
            pack_context([], token_budget=1, near_duplicate_threshold=threshold)  # type: ignore[arg-type]
        assert exc.value.parameter == "near_duplicate_threshold"
    with pytest.raises(InvalidInputError):
        pack_context([{"body": "x"}], token_budget=10)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), None, "3", True])
def test_count_tokens_must_return_a_count(bad: object) -> None:
    # NaN compared as "fits" with any budget, so every passage was kept over budget
    passages = [{"id": i, "text": f"passage number {i} about refunds"} for i in range(3)]
    with pytest.raises(ConfigError) as exc:
        pack_context(passages, token_budget=1, count_tokens=lambda _t: bad)  # type: ignore[arg-type,return-value]
    assert exc.value.parameter == "count_tokens"


def test_count_tokens_may_return_numpy_ints_and_floats() -> None:
    import numpy as np

    passages = [{"id": 1, "text": "a"}, {"id": 2, "text": "b c"}]
    # count_tokens is annotated to return int: these counters (a tokenizer's numpy count,
    # a words-times-ratio estimate) are off-type on purpose
    res = pack_context(passages, token_budget=3,
                       count_tokens=lambda t: np.int64(len(t)))  # type: ignore[arg-type,return-value]
    assert res.tokens_used == 1 and type(res.tokens_used) is int  # "b c" (3) did not fit
    res = pack_context(passages, token_budget=3,
                       count_tokens=lambda t: len(t) / 2)  # type: ignore[arg-type,return-value]
    assert res.tokens_used == 1 + 2 and type(res.tokens_used) is int  # 0.5 -> 1, 1.5 -> 2


def test_text_without_spaces_is_counted_per_character() -> None:
    # 800 characters of Chinese were one "word": an estimate of 2 tokens, so a budget
    # of 50 let the whole passage in
    zh = "退款政策适用于所有月度计划用户在购买后十四天内可以申请全额退款超过期限则不予退款" * 20
    assert estimate_tokens(zh) == len(zh)
    assert estimate_tokens("返金は月額プランの購入後14日以内に申請できます") == 22 + 2
    assert estimate_tokens("ten words here and there and more words to count") == 13
    res = pack_context([{"id": 1, "text": zh}], token_budget=50)
    assert res.kept == [] and res.dropped[0][1] == "over token budget"


def test_near_duplicates_without_spaces_are_found() -> None:
    # each passage was one shingle, so one changed character made them unrelated
    zh = "退款政策适用于所有月度计划用户在购买后十四天内可以申请全额退款超过期限则不予退款" * 5
    res = pack_context([{"id": 1, "text": zh}, {"id": 2, "text": zh[:-1] + "。"}],
                       token_budget=10_000)
    assert [reason for _, reason in res.dropped] == ["near-duplicate of 1"]


def test_passages_may_be_any_iterable_and_are_checked() -> None:
    # a generator was used up by reading the texts, and naming a near-duplicate's twin
    # then failed with "TypeError: 'generator' object is not subscriptable"; None failed
    # with a bare TypeError, and a non-callable count_tokens with "'str' object is not
    # callable"
    passages = [{"id": 1, "text": "refund policy for annual plans"},
                {"id": 2, "text": "refund policy for annual plans"},
                {"id": 3, "text": "password reset steps"}]
    res = pack_context((p for p in passages), token_budget=100)
    assert [p["id"] for p in res.kept] == [1, 3]
    assert res.dropped == [(passages[1], "near-duplicate of 1")]
    for bad in (None, "some text", {"text": "x"}, 42):
        with pytest.raises(InvalidInputError, match="passages"):
            pack_context(bad, token_budget=10)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as exc:
        pack_context(passages, token_budget=10, count_tokens="tokenizer")  # type: ignore[arg-type]
    assert exc.value.parameter == "count_tokens"


def test_a_passage_the_budget_left_out_does_not_remove_its_near_duplicate() -> None:
    # deduplication ran against every better-ranked passage before the budget: "b" was
    # dropped as a near-duplicate of "a", which the budget then dropped too, so their
    # content never reached the prompt although "b" fitted
    words = [f"w{i}" for i in range(100)]
    a = {"id": "a", "text": " ".join(words)}        # 130 tokens (estimate)
    b = {"id": "b", "text": " ".join(words[:97])}   # 127 tokens, Jaccard 0.97 with a
    res = pack_context([a, b], token_budget=128)
    assert res.kept == [b] and res.tokens_used == 127
    assert res.dropped == [(a, "over token budget")]
    # with room for both, the better-ranked one is kept and the other is its duplicate
    res = pack_context([a, b], token_budget=1000)
    assert res.kept == [a] and res.dropped == [(b, "near-duplicate of a")]
