"""The all-visible path: when no document of a collection can be hidden from a search
(every one public, in no tenant, without validity bounds) and the search sets no
language or metadata filter, both legs take their best rows as they come instead of
checking each one. It must give exactly the rows of the checked path, and must be off
as soon as one document could be hidden."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from funnel_util import active, doc, ingest
from psycopg.types.json import Jsonb

QUERIES = ["refund", "cancel my subscription", "reset password two factor",
           "invoice billing address", "api rate limit error", "export data csv"]


def _all_visible(conn: psycopg.Connection[Any], collection_id: int,
                 language: str | None = None, metadata: dict[str, Any] | None = None) -> bool:
    row = conn.execute("select pgfunnel._all_visible(%s, %s, %s)",
                       (collection_id, language,
                        None if metadata is None else Jsonb(metadata))).fetchone()
    assert row is not None
    return bool(row[0])


@pytest.mark.parametrize("change", [
    "is_public = false",
    "is_public = false, readers = '{alice}'",
    "tenant = 'acme'",
    "valid_from = now() - interval '1 day'",
    "valid_to = now() + interval '1 day'",
])
def test_one_document_that_could_be_hidden_turns_it_off(
        conn: psycopg.Connection[Any], change: str) -> None:
    ingest(conn, [doc(f"d{i}", f"note {i} about refunds and invoices") for i in range(6)])
    _, coll_id, _ = active(conn, "t")
    assert _all_visible(conn, coll_id)
    assert not _all_visible(conn, coll_id, language="en")
    assert not _all_visible(conn, coll_id, metadata={})
    with conn.transaction(force_rollback=True):
        # an update in the same transaction is seen: the probe reads the search's snapshot
        conn.execute(f"update pgfunnel.document set {change} where citekey = 'd3'")
        assert not _all_visible(conn, coll_id)
    assert _all_visible(conn, coll_id)


def test_the_probe_is_one_scan_of_the_restricted_index(conn: psycopg.Connection[Any]) -> None:
    ingest(conn, [doc(f"d{i}", f"note {i}") for i in range(3)])
    conn.execute("analyze pgfunnel.document")
    conn.execute("set enable_seqscan = off")  # a three-row table is read whole otherwise
    plan = "\n".join(r[0] for r in conn.execute(
        "explain select exists (select from pgfunnel.document d where d.collection_id = 1 "
        "and (not d.is_public or d.tenant is not null or d.valid_from is not null "
        "or d.valid_to is not null))"))
    assert "document_restricted_idx" in plan, plan


def test_legs_return_the_checked_rows(sample_conn: psycopg.Connection[Any]) -> None:
    version_id, coll_id, _ = active(sample_conn)
    assert _all_visible(sample_conn, coll_id)  # the help-center sample is all public
    vectors = [r[0] for r in sample_conn.execute(
        "select embedding from pgfunnel.embedding where index_version_id = %s "
        "order by chunk_id limit 6", (version_id,))]
    for query, vector in zip(QUERIES, vectors, strict=True):
        lexical = [sample_conn.execute(
            "select chunk_ids, scores, visible_share from pgfunnel._lexical_hits("
            "%s, pgfunnel.analyze(%s, 'english_v2', true), 40, 1.2, 0.75, '{}', null, null, "
            "now(), null, %s, %s)", (version_id, query, coll_id, flag)).fetchone()
            for flag in (True, False)]
        assert lexical[0] == lexical[1], query
        assert lexical[0] is not None and len(lexical[0][0]) > 0, query
        dense = [sample_conn.execute(
            "select chunk_ids, scores from pgfunnel._dense_hits(%s, %s, 40, 100, '{}', null, "
            "null, now(), null, %s, 1, null, %s)",
            (version_id, vector, coll_id, flag)).fetchone() for flag in (True, False)]
        assert dense[0] == dense[1], query
        assert dense[0] is not None and len(dense[0][0]) == 40, query


def test_funnel_search_same_rows_as_the_checked_path(
        sample_conn: psycopg.Connection[Any]) -> None:
    """metadata_filter => '{}' holds for every document but turns the all-visible path off."""
    version_id, _, _ = active(sample_conn)
    vectors = [r[0] for r in sample_conn.execute(
        "select embedding from pgfunnel.embedding where index_version_id = %s "
        "order by chunk_id desc limit 6", (version_id,))]
    stmt = ("select chunk_id, lexical_rank, lexical_score, dense_rank, dense_score, "
            "fused_score, final_rank from funnel_search(%s, %s, k => 10, fusion => %s{})")
    for fusion in ("minmax", "rrf", "zscore"):
        for query, vector in zip(QUERIES, vectors, strict=True):
            fast = sample_conn.execute(stmt.format(""), (query, vector, fusion)).fetchall()
            checked = sample_conn.execute(stmt.format(", metadata_filter => '{}'"),
                                          (query, vector, fusion)).fetchall()
            assert fast == checked, (fusion, query)
            assert len(fast) == 10


def test_a_document_made_private_is_hidden_at_once(
        sample_conn: psycopg.Connection[Any]) -> None:
    query = "how do I get a refund"
    top = sample_conn.execute(
        "select citekey from funnel_search(%s, k => 5)", (query,)).fetchall()[0][0]
    sample_conn.execute("update pgfunnel.document set is_public = false, readers = '{alice}' "
                        "where citekey = %s", (top,))
    for principals in ([], ["bob"]):
        keys = [r[0] for r in sample_conn.execute(
            "select citekey from funnel_search(%s, k => 5, principals => %s)",
            (query, principals))]
        assert top not in keys and len(keys) == 5, principals
    alice = [r[0] for r in sample_conn.execute(
        "select citekey from funnel_search(%s, k => 5, principals => '{alice}')", (query,))]
    assert alice[0] == top


def test_agrees_with_the_visibility_predicate_on_every_combination(
        conn: psycopg.Connection[Any]) -> None:
    """_all_visible must say yes exactly when _document_visible (the one definition the legs
    apply) lets every search without language or metadata filter see the document, so a
    column added to one and not the other fails here."""
    ingest(conn, [doc("d0", "a note about refunds")])
    _, coll_id, _ = active(conn, "t")
    searches = [(principals, tenant, as_of)
                for principals in ([], ["alice"], ["bob"])
                for tenant in (None, "acme", "other")
                for as_of in ("-infinity", "now", "infinity")]
    combos = 0
    for is_public in (True, False):
        for readers in ([], ["alice"]):
            if is_public and readers:
                continue  # refused since migration 0007 (document_with_readers_is_not_public)
            for tenant in (None, "acme"):
                for valid_from in (None, "-2 days", "+2 days"):
                    for valid_to in (None, "+2 days", "-2 days"):
                        if valid_from and valid_to and \
                                int(valid_to.split()[0]) <= int(valid_from.split()[0]):
                            continue  # valid at no time: refused since migration 0010
                        with conn.transaction(force_rollback=True):
                            conn.execute(
                                "update pgfunnel.document set is_public = %s, readers = %s, "
                                "tenant = %s, valid_from = now() + %s::interval, "
                                "valid_to = now() + %s::interval",
                                (is_public, readers, tenant, valid_from, valid_to))
                            seen_by_all = all(conn.execute(
                                "select pgfunnel._document_visible(d, %s, %s, null, "
                                "%s::timestamptz, null) from pgfunnel.document d",
                                (p, t, a)).fetchone() == (True,) for p, t, a in searches)
                            assert _all_visible(conn, coll_id) == seen_by_all, (
                                is_public, readers, tenant, valid_from, valid_to)
                            combos += 1
    assert combos == 36


def test_under_rls_a_caller_passing_all_visible_still_cannot_see_a_hidden_chunk(
        db: str) -> None:
    """The legs' all_visible argument is the caller's word, like principals; under RLS the
    legs read postings and embeddings through the policies whatever it says."""
    import numpy as np
    from _security_helpers import DIM, Doc, create_app_role, ingest_docs, unit

    from pgfunnel import schema
    from pgfunnel.db import connect

    query_vector = unit(np.linspace(1.0, 2.0, DIM))
    schema.init(db, rls=True)
    ingest_docs(db, [Doc("secret", "refund invoice refund invoice", readers=["alice"],
                         vector=query_vector)]
                + [Doc(f"pub{i}", f"public note {i} on a refund") for i in range(20)])
    app = create_app_role(db)
    with connect(db, autocommit=True) as owner:
        version_id, coll_id, _ = active(owner)
        secret = owner.execute(
            "select ch.id from pgfunnel.chunk ch join pgfunnel.document d "
            "on d.id = ch.document_id where d.citekey = 'secret'").fetchone()
    assert secret is not None
    with connect(app) as conn:
        for reader, should_see in (("alice", True), ("bob", False)):
            with conn.transaction():
                conn.execute("select set_config('pgfunnel.principals', %s, true)",
                             (f'["{reader}"]',))
                lexical = conn.execute(
                    "select chunk_ids from pgfunnel._lexical_hits(%s, '{refund,invoic}', 40, "
                    "1.2, 0.75, '{alice}', null, null, now(), null, %s, true)",
                    (version_id, coll_id)).fetchone()
                dense = conn.execute(
                    "select chunk_ids from pgfunnel._dense_hits(%s, %s, 40, 100, '{alice}', "
                    "null, null, now(), null, %s, 1, null, true)",
                    (version_id, query_vector, coll_id)).fetchone()
            assert lexical is not None and dense is not None
            assert (secret[0] in lexical[0]) is should_see, reader
            assert (secret[0] in dense[0]) is should_see, reader


def test_off_under_rls(db: str) -> None:
    """Under RLS the probe would have to pass every restricted document it cannot see
    through the policy; the path is off there, even for a collection of public documents."""
    from _security_helpers import Doc, create_app_role, ingest_docs

    from pgfunnel import schema
    from pgfunnel.db import connect

    schema.init(db, rls=True)
    ingest_docs(db, [Doc(f"pub{i}", f"public note {i}") for i in range(5)])
    with connect(db, autocommit=True) as owner:
        _, coll_id, _ = active(owner)
    with connect(create_app_role(db)) as conn, conn.transaction():
        conn.execute("select set_config('pgfunnel.principals', '[\"bob\"]', true)")
        assert not _all_visible(conn, coll_id)
        assert len(conn.execute("select * from funnel_search('public note', k => 3)"
                                ).fetchall()) == 3
