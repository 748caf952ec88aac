"""Property tests (hypothesis) over random small corpora, readers, filters and queries.

Each example ingests a fresh collection (random vectors, no model) and checks:
every result is visible to its reader; no citekey exceeds the cap; the final list
is a subset of the pool; rerank only reorders the pool; the same input gives the
same output. Examples are bounded so the file runs in well under a minute.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from _security_helpers import DIM, Doc, ingest_docs, unit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgfunnel.db import connect
from pgfunnel.sources import chunk_text

VOCAB = ["refund", "invoice", "plan", "login", "password", "export", "billing", "team",
         "error", "upload"]
USERS = ["u1", "u2", "u3"]


@pytest.fixture(scope="module")
def prop_db(server_dsn: str, schema_template: str) -> Iterator[str]:
    from conftest import _create_db, _drop_db

    name = f"pgf_t_props_{uuid.uuid4().hex[:8]}"
    dsn = _create_db(server_dsn, name, schema_template)
    yield dsn
    _drop_db(server_dsn, name)


@pytest.fixture(scope="module")
def reranker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from pgfunnel.rerank import Reranker
    from pgfunnel.tiny_models import build_tiny_cross_encoder

    return Reranker(str(build_tiny_cross_encoder(tmp_path_factory.mktemp("ce") / "ce")))


doc_st = st.fixed_dictionaries({
    "words": st.lists(st.sampled_from(VOCAB), min_size=1, max_size=12),
    "readers": st.lists(st.sampled_from(USERS), max_size=2, unique=True),
    "tenant": st.sampled_from([None, None, "t1"]),
    "color": st.sampled_from(["red", "blue"]),
    "chunks": st.integers(1, 3),
    "seed": st.integers(0, 10_000),
})
case_st = st.fixed_dictionaries({
    "docs": st.lists(doc_st, min_size=2, max_size=20),
    "principals": st.lists(st.sampled_from(USERS), max_size=2, unique=True),
    "tenant": st.sampled_from([None, "t1"]),
    "color": st.sampled_from([None, "red", "blue"]),
    "query": st.lists(st.sampled_from(VOCAB), min_size=1, max_size=4),
    "qseed": st.integers(0, 10_000),
    "k": st.integers(1, 8),
    "cap": st.integers(1, 3),
    "fusion": st.sampled_from(["rrf", "minmax", "zscore"]),
})


def _visible(doc: dict[str, Any], principals: list[str], tenant: str | None,
             color: str | None) -> bool:
    return ((not doc["readers"] or bool(set(doc["readers"]) & set(principals)))
            and (doc["tenant"] is None or doc["tenant"] == tenant)
            and (color is None or doc["color"] == color))


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=case_st)
def test_search_properties(prop_db: str, reranker: Any, case: dict[str, Any]) -> None:
    from pgfunnel.search import Funnel

    collection = f"c{uuid.uuid4().hex[:10]}"
    docs = []
    for i, d in enumerate(case["docs"]):
        # one section per chunk: chunk_text cuts at headings
        body = "\n\n".join(f"# part {j}\n\n" + " ".join(d["words"]) + f" item{i}x{j}"
                           for j in range(d["chunks"]))
        docs.append(Doc(f"doc{i}", body, readers=d["readers"], tenant=d["tenant"],
                        metadata={"color": d["color"]},
                        vector=unit(np.random.default_rng(d["seed"]).normal(size=DIM))))
    ingest_docs(prop_db, docs, collection=collection)
    by_key = {f"doc{i}": d for i, d in enumerate(case["docs"])}
    q_text = " ".join(case["query"])
    q_vec = unit(np.random.default_rng(case["qseed"]).normal(size=DIM))
    params = dict(k=case["k"], principals=case["principals"], tenant=case["tenant"],
                  metadata_filter=None if case["color"] is None else {"color": case["color"]},
                  per_source_cap=case["cap"], fusion=case["fusion"])
    with connect(prop_db, autocommit=True) as conn:
        plain = Funnel(conn, collection, embedder=None)
        ranked = Funnel(conn, collection, embedder=None, reranker=reranker)
        a = plain.search(q_text, query_embedding=q_vec, **params)
        b = plain.search(q_text, query_embedding=q_vec, **params)
        r1 = ranked.search(q_text, query_embedding=q_vec, **params)
        r2 = ranked.search(q_text, query_embedding=q_vec, **params)

    for res in (a, r1):
        for r in res.results:
            assert _visible(by_key[r.citekey], case["principals"], case["tenant"], case["color"])
        counts: dict[str, int] = {}
        for r in res.results:
            counts[r.citekey] = counts.get(r.citekey, 0) + 1
        assert all(c <= case["cap"] for c in counts.values())
        assert len(res.results) <= case["k"]
        assert [r.final_rank for r in res.results] == list(range(1, len(res.results) + 1))
    for c in r1.pool:
        assert _visible(by_key[c.citekey], case["principals"], case["tenant"], case["color"])
    # final ⊆ pool; rerank reorders the same pool (same chunks as the plain funnel's)
    pool_ids = [c.chunk_id for c in r1.pool]
    assert {r.chunk_id for r in r1.results} <= set(pool_ids)
    assert len(pool_ids) == len(set(pool_ids))
    plain_pool = {r.chunk_id for r in a.results}
    assert plain_pool <= set(pool_ids)
    # how many visible chunks there are bounds what the cap/k allow; the funnel fills up to it
    visible_docs = [d for d in case["docs"]
                    if _visible(d, case["principals"], case["tenant"], case["color"])]
    n_chunks = {id(d): len(chunk_text(doc.text, 200)) for d, doc in zip(case["docs"], docs,
                                                                      strict=True)}
    best = sum(min(n_chunks[id(d)], case["cap"]) for d in visible_docs)
    assert len(a.results) == min(case["k"], best)
    assert len(r1.results) == min(case["k"], best)
    # deterministic
    assert [(r.chunk_id, r.final_rank) for r in a.results] == \
        [(r.chunk_id, r.final_rank) for r in b.results]
    assert [(r.chunk_id, r.final_rank) for r in r1.results] == \
        [(r.chunk_id, r.final_rank) for r in r2.results]
