"""The lexical leg is exact BM25: scores and top-depth sets against an independent reference."""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

import psycopg
import pytest
from funnel_util import active, doc, ingest, one_row

from pgfunnel.errors import ConfigError
from pgfunnel.ingest import Ingester, create_version, delete_documents, get_or_create_collection
from pgfunnel.sources import DocumentRecord, lexical_input

K1, B = 1.2, 0.75


def _terms(conn: psycopg.Connection[Any], text: str, for_query: bool = False) -> list[str]:
    # every test database here holds one collection: analyse as its active version does
    return list(one_row(conn.execute(
        "select pgfunnel.analyze(%s, coalesce((select v.analyzer from pgfunnel.index_version v "
        "where v.state = 'active' order by v.id limit 1), 'english_v1'), %s)",
        (text, for_query)))[0])


class Reference:
    """BM25 computed in Python from the chunk texts (with their document titles where
    the version indexes them), sharing nothing with the SQL scorer."""

    def __init__(self, conn: psycopg.Connection[Any], collection: str) -> None:
        rows = conn.execute(
            "select ch.id, d.title, ch.text, d.is_public and d.tenant is null, "
            "       coalesce(v.params->>'lexical_input', 'text'), ch.heading_level "
            "from pgfunnel.chunk ch join pgfunnel.document d on d.id = ch.document_id "
            "join pgfunnel.collection c on c.id = d.collection_id "
            "join pgfunnel.index_version v on v.collection_id = c.id and v.state = 'active' "
            "where c.name = %s", (collection,)).fetchall()
        self.tf: dict[int, Counter[str]] = {}
        self.visible: set[int] = set()
        for cid, title, text, public, mode, level in rows:
            self.tf[int(cid)] = Counter(_terms(conn, lexical_input(title, text, mode, level)))
            if public:
                self.visible.add(int(cid))
        self.n = len(self.tf)
        self.length = {c: sum(t.values()) for c, t in self.tf.items()}
        self.avg = sum(self.length.values()) / self.n
        self.df: Counter[str] = Counter()
        for t in self.tf.values():
            self.df.update(t.keys())

    def idf(self, term: str) -> float:
        df = self.df[term]
        return math.log(1 + (self.n - df + 0.5) / (df + 0.5))

    def score(self, chunk: int, terms: set[str]) -> float:
        s = 0.0
        for t in terms:
            tf = self.tf[chunk][t]
            if tf:
                s += self.idf(t) * tf * (K1 + 1) / (
                    tf + K1 * (1 - B + B * self.length[chunk] / self.avg))
        return s

    def top(self, terms: set[str], depth: int) -> list[tuple[int, float]]:
        scored = [(c, self.score(c, terms)) for c in self.visible
                  if any(self.tf[c][t] for t in terms)]
        scored.sort(key=lambda x: (-x[1], x[0]))
        return scored[:depth]


def leg(conn: psycopg.Connection[Any], collection: str, query: str,
        depth: int) -> list[tuple[int, float, int]]:
    vid, cid, _ = active(conn, collection)
    return [(int(a), float(b), int(c)) for a, b, c in conn.execute(
        "select chunk_id, score, rank from pgfunnel._lexical_leg(%s, "
        "pgfunnel.analyze(%s, (select analyzer from pgfunnel.index_version where id = %s), "
        "true), %s, 1.2, 0.75, '{}'::text[], null, null, now(), null, %s)",
        (vid, query, vid, depth, cid)).fetchall()]


def assert_matches(ref: Reference, got: list[tuple[int, float, int]], terms: set[str],
                   depth: int) -> None:
    want = ref.top(terms, depth)
    assert len(got) == len(want), (len(got), len(want))
    assert [r for _, _, r in got] == list(range(1, len(got) + 1))
    for (gid, gscore, _), (_wid, wscore) in zip(got, want, strict=True):
        # every returned score is the exact score of that chunk
        exact = ref.score(gid, terms)
        assert abs(gscore - exact) <= 1e-6 * max(abs(exact), 1e-12), (gid, gscore, exact)
        assert abs(gscore - wscore) <= 1e-6 * abs(wscore)
    # the set is the reference's exact top-depth; only exact float ties at the cut may differ
    if want:
        cut = want[-1][1]
        differ = {g for g, _, _ in got} ^ {w for w, _ in want}
        assert all(abs(ref.score(c, terms) - cut) <= 1e-9 * cut for c in differ), differ


QUERIES = ["refund annual plan", "how do I export my invoices", "ERR-4321",
           "plan", "account workspace owner", "the charge card billing plan account"]


@pytest.mark.parametrize("depth", [5, 40])
def test_sample_scores_equal_reference(sample_conn: psycopg.Connection[Any], depth: int) -> None:
    ref = Reference(sample_conn, "default")
    for q in QUERIES:
        terms = set(_terms(sample_conn, q, True))
        assert terms
        assert_matches(ref, leg(sample_conn, "default", q, depth), terms, depth)


def _zipf_corpus(n_docs: int, seed: int, mean_words: int) -> tuple[list[Any], list[str]]:
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("bcdfghjklmnpqrstvwz") + rng.choice("aeiou")
                     for _ in range(3)) for _ in range(300)]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    docs = []
    for i in range(n_docs):
        words = rng.choices(vocab, weights, k=max(5, int(rng.gauss(mean_words, mean_words / 3))))
        docs.append(doc(f"z{seed}-{i}", " ".join(words)))
    return docs, vocab


def _queries(vocab: list[str]) -> list[str]:
    # the most common words (df in the hundreds) mixed with rarer ones
    return [vocab[0], f"{vocab[0]} {vocab[1]}", f"{vocab[0]} {vocab[1]} {vocab[2]} {vocab[3]}",
            f"{vocab[2]} {vocab[150]}", f"{vocab[250]}", f"{vocab[5]} {vocab[40]} {vocab[299]}"]


def test_common_terms_rank_safe(conn: psycopg.Connection[Any]) -> None:
    docs, vocab = _zipf_corpus(400, seed=1, mean_words=60)
    ingest(conn, docs)
    ref = Reference(conn, "t")
    df_max = max(ref.df.values())
    assert df_max > 200  # the leg must go past the first round of postings
    for q in _queries(vocab):
        terms = set(_terms(conn, q, True))
        for depth in (1, 10, 40):
            assert_matches(ref, leg(conn, "t", q, depth), terms, depth)


def _recount(conn: psycopg.Connection[Any], collection: str) -> tuple[Counter[str], int, int]:
    ref = Reference(conn, collection)
    return ref.df, ref.n, sum(ref.length.values())


def _stored(conn: psycopg.Connection[Any], collection: str) -> tuple[Counter[str], int, int]:
    vid, _, _ = active(conn, collection)
    df = Counter({t: int(n) for t, n in conn.execute(
        "select term, df from pgfunnel.term_stat where index_version_id = %s", (vid,))})
    row = conn.execute("select chunk_count, total_length from pgfunnel.index_version "
                       "where id = %s", (vid,)).fetchone()
    assert row is not None
    recount = Counter({t: int(n) for t, n in conn.execute(
        "select term, df from pgfunnel.bm25_recount(%s)", (vid,))})
    assert recount == df
    return df, int(row[0]), int(row[1])


def test_statistics_exact_through_replace_and_delete(conn: psycopg.Connection[Any]) -> None:
    docs, vocab = _zipf_corpus(60, seed=2, mean_words=40)
    ingest(conn, docs)
    assert _stored(conn, "t") == _recount(conn, "t")

    # replace: a changed document is re-ingested (its old chunks leave the statistics)
    changed = [doc(docs[0].citekey, f"{vocab[7]} entirely new text " * 30),
               doc(docs[1].citekey, "short")]
    ingest(conn, changed, seed=5)
    assert _stored(conn, "t") == _recount(conn, "t")

    # delete
    delete_documents(conn, "t", [docs[2].citekey, docs[3].citekey, docs[0].citekey])
    stored = _stored(conn, "t")
    assert stored == _recount(conn, "t")
    assert all(n > 0 for n in stored[0].values())  # no zero-df rows left behind


def _orphan_postings(conn: psycopg.Connection[Any]) -> int:
    return int(one_row(conn.execute(
        "select count(*) from pgfunnel.posting p where not exists (select 1 from "
        "pgfunnel.lexical l where l.index_version_id = p.index_version_id "
        "and l.chunk_id = p.chunk_id)"))[0])


def test_plain_deletes_keep_statistics_exact(conn: psycopg.Connection[Any]) -> None:
    # a web app deleting rows itself (SQL or an ORM) rather than through pgfunnel
    docs, vocab = _zipf_corpus(80, seed=8, mean_words=40)
    ingest(conn, docs)
    conn.execute("delete from pgfunnel.document where citekey = any(%s)",
                 ([d.citekey for d in docs[:10]],))
    assert _stored(conn, "t") == _recount(conn, "t")
    assert _orphan_postings(conn) == 0
    conn.execute("delete from pgfunnel.chunk where id = (select min(id) from pgfunnel.chunk)")
    assert _stored(conn, "t") == _recount(conn, "t")
    # inside a transaction that rolls back, nothing changes
    before = _stored(conn, "t")
    with pytest.raises(RuntimeError), conn.transaction():
        conn.execute("delete from pgfunnel.document where citekey = %s", (docs[20].citekey,))
        assert _stored(conn, "t") == _recount(conn, "t") != before
        raise RuntimeError("roll back")
    assert _stored(conn, "t") == before == _recount(conn, "t")
    ref = Reference(conn, "t")
    for q in _queries(vocab):
        terms = set(_terms(conn, q, True))
        assert_matches(ref, leg(conn, "t", q, 20), terms, 20)
    # a term whose every chunk went leaves no zero-df row behind
    conn.execute("delete from pgfunnel.document")
    assert _stored(conn, "t") == (Counter(), 0, 0)
    assert _orphan_postings(conn) == 0


def test_indexed_columns_are_not_updated_in_place(conn: psycopg.Connection[Any]) -> None:
    from pgfunnel.errors import ConflictError, translate

    docs, _ = _zipf_corpus(20, seed=9, mean_words=30)
    ingest(conn, docs)
    before = _stored(conn, "t")
    chunk_id, text = one_row(conn.execute(
        "select id, text from pgfunnel.chunk order by id limit 1"))
    refused = [("update pgfunnel.chunk set text = 'entirely new words' where id = %s",
                (chunk_id,)),
               ("update pgfunnel.chunk set document_id = (select max(id) from "
                "pgfunnel.document) where id = %s", (chunk_id,)),
               ("update pgfunnel.document set collection_id = (select max(id) + 1 from "
                "pgfunnel.collection) where id = (select min(id) from pgfunnel.document)", None)]
    for statement, params in refused:
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as exc:
            conn.execute(statement, params)
        err = translate(exc.value)
        assert isinstance(err, ConflictError)
        assert "cannot be updated in place" in str(err)
        assert "re-ingest" in (exc.value.diag.message_hint or "")
    # what the index was not made from stays editable, and a no-op write of the text passes
    conn.execute("update pgfunnel.chunk set heading = 'Renamed', text = text where id = %s",
                 (chunk_id,))
    conn.execute("update pgfunnel.document set title = 'Renamed', readers = '{bob}', "
                 "is_public = false where id = (select min(id) from pgfunnel.document)")
    assert one_row(conn.execute("select text from pgfunnel.chunk where id = %s",
                                (chunk_id,)))[0] == text
    assert _stored(conn, "t") == before


def test_scores_stay_exact_as_the_average_length_drifts(conn: psycopg.Connection[Any]) -> None:
    short, vocab = _zipf_corpus(200, seed=3, mean_words=30)
    ingest(conn, short)
    before = one_row(conn.execute(
        "select total_length::float8 / chunk_count from pgfunnel.index_version"))[0]
    # longer documents move the average length up; every score must follow at once
    longer = [doc(f"long-{i}", " ".join(random.Random(i).choices(vocab[:60], k=40)))
              for i in range(120)]
    ingest(conn, longer, seed=4)
    avg_up = one_row(conn.execute(
        "select total_length::float8 / chunk_count from pgfunnel.index_version"))[0]
    assert avg_up > before * 1.05
    ref = Reference(conn, "t")
    for q in _queries(vocab):
        terms = set(_terms(conn, q, True))
        assert_matches(ref, leg(conn, "t", q, 20), terms, 20)

    # and down again when they are deleted
    delete_documents(conn, "t", [d.citekey for d in longer[:100]])
    avg_down = one_row(conn.execute("select total_length::float8 / chunk_count "
                                    "from pgfunnel.index_version"))[0]
    assert avg_down < avg_up * 0.97
    ref = Reference(conn, "t")
    for q in _queries(vocab):
        terms = set(_terms(conn, q, True))
        assert_matches(ref, leg(conn, "t", q, 20), terms, 20)


def test_non_default_k1_b_exact(conn: psycopg.Connection[Any]) -> None:
    docs, vocab = _zipf_corpus(150, seed=6, mean_words=40)
    ingest(conn, docs)
    vid, cid, _ = active(conn, "t")
    global K1, B
    try:
        K1, B = 2.0, 0.3
        ref = Reference(conn, "t")
        for q in _queries(vocab)[:3]:
            terms = set(_terms(conn, q, True))
            got = [(int(a), float(b), int(c)) for a, b, c in conn.execute(
                "select chunk_id, score, rank from pgfunnel._lexical_leg(%s, "
                "pgfunnel.analyze(%s, (select analyzer from pgfunnel.index_version where id = %s), "
                "true), 15, 2.0, 0.3, '{}'::text[], null, null, now(), null, %s)",
                (vid, q, vid, cid)).fetchall()]
            assert_matches(ref, got, terms, 15)
    finally:
        K1, B = 1.2, 0.75


def _readable_by(conn: psycopg.Connection[Any], principal: str) -> set[int]:
    return {int(c) for (c,) in conn.execute(
        "select ch.id from pgfunnel.chunk ch join pgfunnel.document d "
        "on d.id = ch.document_id where d.readers @> array[%s]", (principal,)).fetchall()}


def _leg_as(conn: psycopg.Connection[Any], query: str, principals: list[str],
            depth: int = 40) -> list[tuple[int, float, int]]:
    vid, cid, _ = active(conn, "t")
    return [(int(a), float(b), int(c)) for a, b, c in conn.execute(
        "select chunk_id, score, rank from pgfunnel._lexical_leg(%s, "
        "pgfunnel.analyze(%s, (select analyzer from pgfunnel.index_version where id = %s), "
        "true), %s, 1.2, 0.75, %s, null, null, now(), null, %s)",
        (vid, query, vid, depth, principals, cid)).fetchall()]


@pytest.mark.parametrize("every", [20, 5])
def test_selective_filter_scores_only_visible_chunks_exactly(
        conn: psycopg.Connection[Any], every: int) -> None:
    # alice reads one document in `every`: the leg's first candidates are mostly hidden,
    # so it switches to scoring visible chunks only (by probing their postings when they
    # are few, by filtering every scored match when the postings are fewer)
    docs, vocab = _zipf_corpus(600, seed=8, mean_words=40)
    for i, d in enumerate(docs):
        d.readers = ["alice"] if i % every == 0 else ["bob"]
    ingest(conn, docs)
    ref = Reference(conn, "t")
    ref.visible = _readable_by(conn, "alice")
    for q in _queries(vocab) + [vocab[10], vocab[30], f"{vocab[8]} {vocab[60]}"]:
        terms = set(_terms(conn, q, True))
        got = _leg_as(conn, q, ["alice"])
        assert {g for g, _, _ in got} <= ref.visible
        assert_matches(ref, got, terms, 40)


def test_selective_filter_with_sparse_terms_checks_every_match(
        conn: psycopg.Connection[Any]) -> None:
    # 95 chunks hold a query term, alice reads one document in ten: fewer postings (95)
    # than visible chunks x terms (200 x 2), so the leg scores every match and checks each
    rng = random.Random(4)
    filler = ["lorem", "ipsum", "dolor", "sit", "amet", "tempor", "incididunt", "labore"]
    docs = []
    for i in range(2000):
        words = rng.choices(filler, k=rng.randint(8, 30))
        if i < 50:
            words += ["alpha"] * rng.randint(1, 3)
        elif i < 95:
            words += ["beta"] * rng.randint(1, 3)
        docs.append(doc(f"s{i}", " ".join(words), readers=["alice"] if i % 10 == 0 else ["bob"]))
    ingest(conn, docs)
    ref = Reference(conn, "t")
    ref.visible = _readable_by(conn, "alice")
    got = _leg_as(conn, "alpha beta", ["alice"])
    assert len(got) == 10  # every visible match: 5 alpha and 5 beta documents
    assert_matches(ref, got, {"alpha", "beta"}, 40)


def test_a_sampled_selective_filter_skips_scoring_every_posting(
        conn: psycopg.Connection[Any]) -> None:
    # seven words in nearly every one of 4,000 documents: over 20,000 postings, so the
    # leg first samples the visibility of chunks holding the rarest query term. alice
    # reads one document in a hundred; the sample finds almost none visible, the leg lists
    # the 40 visible chunks (its visible share is then exact: 40 / 4,000) and probes only
    # their postings, with the same scores as full scoring
    rng = random.Random(11)
    words = ["zorp", "quib", "flenn", "mork", "trazz", "velk", "plim", "drob"]
    docs = [doc(f"c{i}", " ".join(rng.choices(words, k=rng.randint(16, 30))),
                readers=["alice"] if i % 100 == 0 else ["bob"]) for i in range(4000)]
    ingest(conn, docs)
    ref = Reference(conn, "t")
    ref.visible = _readable_by(conn, "alice")
    query = "zorp quib flenn mork trazz velk plim"
    terms = set(_terms(conn, query, True))
    vid, cid, _ = active(conn, "t")
    assert conn.execute("select sum(df) from pgfunnel.term_stat where index_version_id = %s "
                        "and term = any(%s)", (vid, list(terms))).fetchone()[0] >= 20000  # type: ignore[index]
    share = conn.execute(
        "select visible_share from pgfunnel._lexical_hits(%s, %s, 40, 1.2, 0.75, '{alice}', "
        "null, null, now(), null, %s)", (vid, sorted(terms), cid)).fetchone()
    assert share == (40 / 4000,)
    got = _leg_as(conn, query, ["alice"])
    assert len(got) == 40 and {g for g, _, _ in got} == ref.visible
    assert_matches(ref, got, terms, 40)
    # a reader who sees everything gets the full scoring; the sample changes nothing
    both = _leg_as(conn, query, ["alice", "bob"])
    ref.visible = set(ref.tf)
    assert_matches(ref, both, terms, 40)


@pytest.mark.parametrize("aggregate", ["hash", "sort"])
def test_identical_chunks_tie_exactly_and_rank_by_chunk_id(conn: psycopg.Connection[Any],
                                                           aggregate: str) -> None:
    # Copies of one text score the same, so their order must be chunk id whatever order the
    # plan adds a chunk's terms in (a sort-based aggregate gives each chunk its own order).
    rng = random.Random(7)
    vocab = [f"w{i}x" for i in range(40)]
    base = " ".join(rng.choices(vocab, k=80))
    # one title for all: BM25 indexes each chunk under its document's title
    docs = [doc(f"copy-{i}", base, title="copy") for i in range(60)]
    docs += [doc(f"other-{i}", " ".join(rng.choices(vocab, k=70))) for i in range(60)]
    ingest(conn, docs)
    if aggregate == "sort":
        conn.execute("set enable_hashagg = off")
    copies = {int(r[0]) for r in conn.execute(
        "select ch.id from pgfunnel.chunk ch join pgfunnel.document d on d.id = ch.document_id "
        "where d.citekey like 'copy-%%'")}
    query = " ".join(vocab[:12])
    got = leg(conn, "t", query, 200)
    copy_rows = [(cid, score) for cid, score, _ in got if cid in copies]
    assert len(copy_rows) == len(copies)
    assert len({score for _, score in copy_rows}) == 1, sorted({s for _, s in copy_rows})
    assert [cid for cid, _ in copy_rows] == sorted(copies)


def _grouped(conn: psycopg.Connection[Any], collection: str, terms: list[str],
             k1: float = K1, b: float = B) -> list[tuple[int, float]]:
    """Every chunk holding a query term, scored by the leg's grouping statement (a sum per
    chunk of each term's share, rounded to a whole number of 2^-32), best first, ties by
    chunk id: what the leg returned for every term count before one and two terms got
    their own statements."""
    vid, _, _ = active(conn, collection)
    return [(int(c), float(s)) for c, s in conn.execute(
        "with v as (select v.total_length::float8 / v.chunk_count as avg_len, v.chunk_count "
        "             from pgfunnel.index_version v where v.id = %(v)s), "
        "     q as (select ts.term, pgfunnel._bm25_idf(ts.df, v.chunk_count) * (%(k1)s + 1) "
        "                           * 4294967296.0::float8 as weight "
        "             from v, pgfunnel._term_df(%(v)s, %(t)s) ts) "
        "select p.chunk_id, sum(round(q.weight * p.tf / (p.tf + %(k1)s * (1 - %(b)s) "
        "                                 + %(k1)s * %(b)s / v.avg_len * p.length)))"
        "                   / 4294967296.0::float8 "
        "  from v, q join pgfunnel.posting p on p.index_version_id = %(v)s and p.term = q.term "
        " group by p.chunk_id order by 2 desc, 1",
        {"v": vid, "t": terms, "k1": k1, "b": b}).fetchall()]


def _hits(conn: psycopg.Connection[Any], collection: str, terms: list[str], depth: int,
          principals: list[str], k1: float = K1, b: float = B) -> list[tuple[int, float]]:
    vid, cid, _ = active(conn, collection)
    row = conn.execute(
        "select chunk_ids, scores from pgfunnel._lexical_hits(%s, %s, %s, %s, %s, %s, null, "
        "null, now(), null, %s)", (vid, terms, depth, k1, b, principals, cid)).fetchone()
    assert row is not None
    return [(int(c), float(s)) for c, s in zip(row[0], row[1], strict=True)]


@pytest.mark.parametrize("public", [True, False])
def test_one_and_two_term_queries_score_to_the_bit_as_the_grouping_did(
        conn: psycopg.Connection[Any], public: bool) -> None:
    # One query term is scored without grouping and two by a merge full join of their
    # postings; the chunks, their scores (compared as floats, not within a tolerance) and
    # the order of ties (copies of one text) must be what the grouping statement gives,
    # on every path: every chunk visible (public), a reader who sees everything, one who
    # sees a third (deeper reads) and one who sees one in fifty (every match scored, or
    # the visible chunks probed). Three and more terms keep the grouping statement.
    docs, vocab = _zipf_corpus(500, seed=21, mean_words=40)
    copy = " ".join(random.Random(5).choices(vocab[:30], k=40))
    docs += [doc(f"copy-{i}", copy, title="copy") for i in range(40)]
    if not public:
        for i, d in enumerate(docs):
            d.readers = (["alice"] * (i % 3 == 0) + ["carol"] * (i % 50 == 0)) or ["bob"]
    ingest(conn, docs)
    readers = [["alice", "bob", "carol"]] if public else [["alice", "bob", "carol"], ["alice"],
                                                          ["carol"]]
    queries = [[vocab[0]], [vocab[3]], [vocab[200]], [vocab[0], vocab[1]],
               [vocab[2], vocab[150]], [vocab[5], vocab[6], vocab[7]], vocab[:8]]
    tied = 0
    for words in queries:
        terms = _terms(conn, " ".join(words), True)
        assert len(set(terms)) == len(words)
        every = _grouped(conn, "t", terms)
        assert every
        tied += len(every) - len({s for _, s in every})
        for principals in readers:
            seen = _readable_by_any(conn, principals) if not public else None
            want = [(c, s) for c, s in every if seen is None or c in seen]
            for depth in (1, 7, 40, 1000):
                assert _hits(conn, "t", terms, depth, principals) == want[:depth], (
                    words, principals, depth)
    assert tied > 100  # the copies tie on every query that holds their words
    # other k1 and b: the same statements, other constants
    terms = _terms(conn, f"{vocab[0]} {vocab[4]}", True)
    assert _hits(conn, "t", terms, 40, ["alice", "bob", "carol"], 2.0, 0.3) == _grouped(
        conn, "t", terms, 2.0, 0.3)[:40]


def _readable_by_any(conn: psycopg.Connection[Any], principals: list[str]) -> set[int]:
    return {int(c) for (c,) in conn.execute(
        "select ch.id from pgfunnel.chunk ch join pgfunnel.document d "
        "on d.id = ch.document_id where d.readers && %s", (principals,)).fetchall()}


def _lexical_length(conn: psycopg.Connection[Any], citekey: str) -> list[int]:
    return [int(r[0]) for r in conn.execute(
        "select l.length from pgfunnel.lexical l join pgfunnel.chunk ch on ch.id = l.chunk_id "
        "join pgfunnel.document d on d.id = ch.document_id "
        "join pgfunnel.index_version v on v.id = l.index_version_id and v.state = 'active' "
        "where d.citekey = %s order by ch.ordinal", (citekey,))]


def test_a_new_version_indexes_each_chunk_under_its_document_title(
        conn: psycopg.Connection[Any]) -> None:
    # the page's subject is in its title, and its later sections do not repeat it: a query
    # naming the subject finds them by the title, as the dense leg does
    body = "\n\n".join(f"## Part {i}\n\n" + " ".join(["lorem ipsum dolor"] * 70)
                        for i in range(3))
    ingest(conn, [doc("guide", body, title="Zanzibar ferry guide"),
                  doc("opens", "Zanzibar ferry guide\n\nboarding starts at the pier",
                      title="Zanzibar ferry guide"),
                  doc("other", "boarding starts at the pier", title="Pier rules")])
    vid, _, _ = active(conn, "t")
    assert conn.execute("select params->>'lexical_input' from pgfunnel.index_version "
                        "where id = %s", (vid,)).fetchone() == ("title2_term2",)
    guide_chunks = {int(r[0]) for r in conn.execute(
        "select ch.id from pgfunnel.chunk ch join pgfunnel.document d on d.id = ch.document_id "
        "where d.citekey = 'guide'")}
    assert len(guide_chunks) >= 3
    found = {cid for cid, _, _ in leg(conn, "t", "zanzibar", 40)}
    assert guide_chunks <= found
    # the title counts twice: a chunk that opens with it gets it once more, every other
    # chunk twice
    title = len(_terms(conn, "Zanzibar ferry guide"))
    assert _lexical_length(conn, "opens") == [
        title + len(_terms(conn, "Zanzibar ferry guide\n\nboarding starts at the pier"))]
    assert _lexical_length(conn, "other") == [
        len(_terms(conn, "boarding starts at the pier")) + 2 * len(_terms(conn, "Pier rules"))]


def test_the_title_counted_twice_outweighs_a_name_mentioned_in_passing(
        conn: psycopg.Connection[Any]) -> None:
    # `module tornado.ioloop`: the module's page names it in its title, a release note in
    # one short section; counted once, the short note outscored the page's sections
    page = "callbacks timers sockets handles events loops run until stopped here"
    note = "Zanzibar ferry now boards faster"
    docs = [doc("page", page, title="Zanzibar ferry"),
            doc("notes", note, title="Release notes")]
    assert _first_by_lexical_input(conn, docs, ("title", "title2"), "zanzibar ferry") == {
        "title": "notes", "title2": "page"}


def _first_by_lexical_input(conn: psycopg.Connection[Any], docs: list[DocumentRecord],
                            modes: tuple[str, ...], query: str) -> dict[str, str]:
    """The citekey BM25 ranks first for ``query`` in a collection per lexical input, each
    holding ``docs`` and eight fillers; and checks the first score against the reference
    BM25 over what that version indexed (the reference reads the mode)."""
    docs = docs + [doc(f"filler{i}", f"unrelated harbour crane text number {i} " * 3)
                   for i in range(8)]
    winners = {}
    for mode in modes:
        coll = get_or_create_collection(conn, mode, analyzer="english_v6")
        create_version(conn, coll, "random-unit", 16, "english_v6", "active",
                       {"lexical_input": mode})
        ingest(conn, docs, collection=mode)
        [(first, score, _), *_] = leg(conn, mode, query, 40)
        want = Reference(conn, mode).score(first, set(_terms(conn, query, True)))
        assert score == pytest.approx(want, rel=1e-6)
        winners[mode] = one_row(conn.execute(
            "select d.citekey from pgfunnel.chunk ch join pgfunnel.document d "
            "on d.id = ch.document_id where ch.id = %s", (first,)))[0]
    return winners


# an API page as the HTML reader writes it (each object's signature a level-6 heading)
# and release notes that name the object in passing, in short chunks
_API_PAGE = ("# Settings\n\nHow to configure runs.\n\n"
             "###### settings.register_profile(name, parent=None)\n\n"
             + "Registers a collection of values to be used as a settings object, which "
               "can then be loaded by name with load_profile and applied to every run of "
               "the suite.")
_NOTES = "\n\n".join(f"## {v}.0\n\nThis release fixes register_profile." for v in (3, 4))


def test_a_terms_heading_counts_twice_and_outranks_mentions_in_passing(
        conn: psycopg.Connection[Any]) -> None:
    # Hypothesis' changelog came first for `register_profile`, `uuids`, `from_type`:
    # its entries are short, which BM25's length normalisation rewards
    docs = [doc("settings", _API_PAGE, title="Settings"),
            doc("changes", _NOTES, title="Changelog")]
    assert _first_by_lexical_input(conn, docs, ("title2", "title2_term2"),
                                   "register_profile") == {
        "title2": "changes", "title2_term2": "settings"}
    levels = conn.execute(
        "select ch.heading, ch.heading_level from pgfunnel.chunk ch join pgfunnel.document d "
        "on d.id = ch.document_id join pgfunnel.collection c on c.id = d.collection_id "
        "where c.name = 'title2_term2' and d.citekey in ('settings', 'changes') "
        "order by d.citekey, ch.ordinal").fetchall()
    assert levels == [("3.0", 2), ("4.0", 2), ("Settings", 1),
                      ("settings.register_profile(name, parent=None)", 6)]
    # only the term's heading is counted again: prose headings and the title as before
    heading = "settings.register_profile(name, parent=None)"
    for mode, extra in (("title2", 0), ("title2_term2", len(_terms(conn, heading)))):
        lengths = dict(conn.execute(
            "select ch.heading, l.length from pgfunnel.lexical l "
            "join pgfunnel.chunk ch on ch.id = l.chunk_id "
            "join pgfunnel.document d on d.id = ch.document_id "
            "join pgfunnel.collection c on c.id = d.collection_id "
            "where c.name = %s and d.citekey = 'settings'", (mode,)).fetchall())
        text = _API_PAGE.split("\n\n", 3)[3]
        assert lengths[heading] == extra + len(_terms(conn, f"Settings\nSettings\n{heading}\n\n"
                                                          f"{text}"))
        assert lengths["Settings"] == len(_terms(conn, "Settings\n# Settings\n\n"
                                                      "How to configure runs."))


def test_reindex_counts_a_terms_heading_twice_from_the_stored_level(
        conn: psycopg.Connection[Any]) -> None:
    from pgfunnel import versions

    coll = get_or_create_collection(conn, "t", analyzer="english_v6")
    create_version(conn, coll, "random-unit", 16, "english_v6", "active",
                   {"lexical_input": "title2"})
    ingest(conn, [doc("settings", _API_PAGE, title="Settings"),
                  doc("changes", _NOTES, title="Changelog")])
    before = leg(conn, "t", "register_profile", 40)
    res = versions.reindex(conn, "t", activate_after=True)
    assert conn.execute("select params ->> 'lexical_input' from pgfunnel.index_version "
                        "where id = %s", (res.version_id,)).fetchone() == ("title2_term2",)
    after = leg(conn, "t", "register_profile", 40)
    term = one_row(conn.execute("select id from pgfunnel.chunk where heading_level = 6"))[0]
    assert before[0][0] != term and after[0][0] == term
    # a row stored before levels were kept (0) is indexed as under title2
    conn.execute("update pgfunnel.chunk set heading_level = 0")
    again = versions.reindex(conn, "t", activate_after=True)
    assert again.version_id != res.version_id
    assert [c for c, _, _ in leg(conn, "t", "register_profile", 40)] == [
        c for c, _, _ in before]


def test_a_version_can_index_the_chunk_text_alone(conn: psycopg.Connection[Any]) -> None:
    coll = get_or_create_collection(conn, "t", analyzer="english_v1")
    create_version(conn, coll, "random-unit", 16, "english_v1", "active",
                   {"lexical_input": "text"})
    ingest(conn, [doc("guide", "boarding starts at the pier", title="Zanzibar ferry guide")])
    assert leg(conn, "t", "zanzibar", 40) == []
    assert _lexical_length(conn, "guide") == [len(_terms(conn, "boarding starts at the pier"))]
    with pytest.raises(ConfigError, match="lexical_input: unknown 'body'"):
        Ingester(conn, "u", lexical_input="body")


def test_reindex_of_a_version_that_indexed_the_text_alone_adds_titles_without_the_model(
        sample_conn: psycopg.Connection[Any]) -> None:
    from pgfunnel import versions

    conn = sample_conn
    # a word of a title that no chunk holds, in any form its stem could take
    title_word = next(w for (w,) in conn.execute(
        "select w from pgfunnel.document d, regexp_split_to_table(lower(d.title), '\\W+') w "
        "where length(w) > 5 and not exists (select 1 from pgfunnel.chunk ch "
        "  where ch.text ilike '%%' || left(w, 5) || '%%') order by w").fetchall())
    assert leg(conn, "default", title_word, 40)
    text_alone = versions.reindex(conn, "default", activate_after=True, lexical_input="text")
    # BM25's input is no reason to embed again
    assert any("vectors copied from version 1" in n for n in text_alone.notes)
    assert leg(conn, "default", title_word, 40) == []
    # a version made before the choice was recorded indexed the text alone; its reindex
    # moves on to titles
    conn.execute("update pgfunnel.index_version set params = params - 'lexical_input' "
                 "where id = %s", (text_alone.version_id,))
    res = versions.reindex(conn, "default", activate_after=True)
    assert any("vectors copied from version" in n for n in res.notes)
    assert conn.execute("select params ->> 'lexical_input' from pgfunnel.index_version "
                        "where id = %s", (res.version_id,)).fetchone() == ("title2_term2",)
    assert leg(conn, "default", title_word, 40)


def test_recount_of_a_version_that_does_not_exist_is_an_error(
        conn: psycopg.Connection[Any]) -> None:
    # no rows would read as "term_stat matches the postings" for a mistyped id
    with pytest.raises(psycopg.errors.NoDataFound, match="index version id 999999"), \
            conn.transaction():
        conn.execute("select * from pgfunnel.bm25_recount(999999)")
    with pytest.raises(psycopg.errors.InvalidParameterValue,
                       match="^version_id: must not be NULL"), conn.transaction():
        conn.execute("select * from pgfunnel.bm25_recount(null)")
