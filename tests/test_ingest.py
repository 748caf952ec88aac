"""Ingest: idempotent re-ingest, replacement, deletion, exact BM25 statistics, atomicity."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import shlex
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from funnel_util import one_row

from pgfunnel.errors import (
    ConfigError,
    InvalidDocumentError,
    InvalidInputError,
    InvalidVectorError,
)
from pgfunnel.ingest import Ingester, delete_documents, get_or_create_collection
from pgfunnel.sources import (
    HEADING_REPEAT_WORDS,
    DocumentRecord,
    _table_header,
    chunk_text,
    read_path,
)


def _counts(conn: psycopg.Connection[Any]) -> tuple[int, int, int, int]:
    row = conn.execute(
        "select (select count(*) from pgfunnel.document), (select count(*) from pgfunnel.chunk),"
        " (select count(*) from pgfunnel.embedding), (select count(*) from pgfunnel.posting)"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def assert_stats_exact(conn: psycopg.Connection[Any]) -> None:
    """Maintained BM25 statistics equal a recount done in plain SQL."""
    drift = conn.execute("""
        select count(*) from (
            select coalesce(t.index_version_id, r.index_version_id), coalesce(t.term, r.term)
              from pgfunnel.term_stat t
              full join (select index_version_id, term, count(*) as df from pgfunnel.posting
                          group by 1, 2) r
                on r.index_version_id = t.index_version_id and r.term = t.term
             where t.df is distinct from r.df) d""").fetchone()
    assert drift is not None and drift[0] == 0, "term_stat.df differs from a recount"
    bad = conn.execute("""
        select count(*) from pgfunnel.index_version v
         where (v.chunk_count, v.total_length) is distinct from
               (select (count(*), coalesce(sum(l.length), 0))::record from pgfunnel.lexical l
                 where l.index_version_id = v.id)""").fetchone()
    assert bad is not None and bad[0] == 0, "chunk_count/total_length differ from a recount"


def _random_vectors(records: list[DocumentRecord], dim: int = 384,
                    seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for r in records:
        v = rng.normal(size=(len(chunk_text(r.text)), dim)).astype(np.float32)
        out[r.citekey] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def test_sample_corpus_stats_are_exact(sample_conn: psycopg.Connection[Any]) -> None:
    docs, chunks, embeddings, postings = _counts(sample_conn)
    assert docs > 100 and chunks >= docs and embeddings == chunks and postings > chunks
    assert_stats_exact(sample_conn)


def test_reingest_is_idempotent_and_reuses_vectors(sample_conn: psycopg.Connection[Any],
                                                   embedder: Any) -> None:
    sample = Path(__file__).resolve().parent.parent / "pgfunnel" / "data" / "helpcenter.jsonl"
    before = _counts(sample_conn)
    stats = Ingester(sample_conn, "default", embedder=embedder).ingest(read_path(sample))
    assert stats.documents_unchanged == before[0] and stats.documents_written == 0
    assert stats.chunks_embedded == 0
    assert _counts(sample_conn) == before


def test_replace_and_delete_keep_stats_exact(sample_conn: psycopg.Connection[Any],
                                             embedder: Any) -> None:
    sample = Path(__file__).resolve().parent.parent / "pgfunnel" / "data" / "helpcenter.jsonl"
    originals = [r for r in read_path(sample) if r.citekey.startswith("guide-")]
    guide = originals[0]
    changed = DocumentRecord(citekey=guide.citekey, title=guide.title,
                             text=guide.text + "\n\nA brand new closing paragraph about llamas.")
    rows = [(guide.citekey,), (originals[1].citekey,)]
    ing = Ingester(sample_conn, "default", embedder=embedder)
    stats = ing.ingest([changed])
    assert stats.documents_written == 1 and stats.chunks_reused >= 1
    assert stats.chunks_embedded >= 1
    n = sample_conn.execute("select count(*) from pgfunnel.chunk c join pgfunnel.document d "
                            "on d.id = c.document_id where d.citekey = %s",
                            (rows[0][0],)).fetchone()
    assert n is not None and n[0] == len(chunk_text(changed.text))
    assert_stats_exact(sample_conn)
    llama = sample_conn.execute("select df from pgfunnel.term_stat where term = 'llama'").fetchone()
    assert llama is not None and llama[0] == 1
    assert delete_documents(sample_conn, "default", [rows[0][0], rows[1][0]]) == 2
    assert_stats_exact(sample_conn)
    gone = sample_conn.execute("select count(*) from pgfunnel.term_stat where term = 'llama'"
                               ).fetchone()
    assert gone is not None and gone[0] == 0


def test_markdown_folder_ingest(conn: psycopg.Connection[Any], tmp_path: Path,
                                embedder: Any) -> None:
    (tmp_path / "guides").mkdir()
    (tmp_path / "guides" / "setup.md").write_text(
        "# Setup\n\n## Install\n\nRun the installer.\n\n## Configure\n\n" + "word " * 450)
    (tmp_path / "notes.txt").write_text("Plain text notes about backups.\n\nSecond paragraph.")
    (tmp_path / "page.html").write_text(
        "<html><head><title>Status page</title></head><body><nav>menu</nav>"
        "<h2>Uptime</h2><p>We report uptime monthly.</p></body></html>")
    stats = Ingester(conn, "docs", embedder=embedder).ingest(read_path(tmp_path))
    assert stats.documents_written == 3
    keys = {r[0]: r[1] for r in conn.execute("select citekey, title from pgfunnel.document")}
    assert keys == {"guides/setup": "Setup", "notes": "notes", "page": "Status page"}
    headings = {r[0] for r in conn.execute("select heading from pgfunnel.chunk")}
    assert {"Install", "Configure", "Uptime"} <= headings
    again = Ingester(conn, "docs", embedder=embedder).ingest(read_path(tmp_path))
    assert again.documents_unchanged == 3 and again.chunks_written == 0
    assert_stats_exact(conn)


@pytest.mark.parametrize("bad, message", [
    ({"title": "x", "text": "y"}, "citekey"),
    ({"citekey": 5, "text": "y"}, "'citekey' must be a string, got int 5"),
    ({"citekey": "a", "title": "x"}, "text"),
    ({"citekey": "a", "text": "  "}, "text"),
    ({"citekey": "a", "text": "t", "readers": "alice"}, "readers"),
    ({"citekey": "a", "text": "t", "valid_from": "yesterday"}, "valid_from"),
])
def test_bad_jsonl_lines_are_named_and_nothing_written(
        conn: psycopg.Connection[Any], tmp_path: Path, embedder: Any,
        bad: dict[str, Any], message: str) -> None:
    path = tmp_path / "docs.jsonl"
    good = {"citekey": "ok", "title": "fine", "text": "a fine document"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(InvalidDocumentError, match=rf"docs.jsonl:2.*{message}"):
        Ingester(conn, "c", embedder=embedder).ingest(list(read_path(path)))
    assert _counts(conn) == (0, 0, 0, 0)


@pytest.mark.parametrize("vector, message", [
    (np.ones(12, dtype=np.float32), "dimensions"),
    (np.full(384, np.nan, dtype=np.float32), "NaN"),
    (np.concatenate([[np.inf], np.ones(383)]).astype(np.float32), "Inf"),
    (np.zeros(384, dtype=np.float32), "zero"),
])
def test_bad_vectors_are_rejected_and_nothing_written(
        sample_conn: psycopg.Connection[Any], vector: np.ndarray, message: str) -> None:
    before = _counts(sample_conn)
    recs = [DocumentRecord("fresh-1", "one short chunk"),
            DocumentRecord("fresh-2", "another short chunk")]
    vectors = _random_vectors(recs)
    vectors["fresh-2"] = vector[None, :]
    with pytest.raises(InvalidVectorError, match=message):
        Ingester(sample_conn, "default").ingest(recs, vectors=vectors)
    assert _counts(sample_conn) == before
    assert_stats_exact(sample_conn)


@pytest.mark.parametrize("late, error, message", [
    (np.full((1, 384), np.nan, dtype=np.float32), InvalidVectorError,
     r"vectors\['doc-2'\]\[0\]: contains NaN"),
    (np.ones((1, 12), dtype=np.float32), InvalidVectorError,
     r"vectors\['doc-2'\]\[0\]: has 12 dimensions; collection 'c' is new, and its index "
     r"version is made with the default embedder, 'all-MiniLM-L6-v2', which makes "
     r"384-dimension vectors"),
    (np.ones(384, dtype=np.float32), InvalidInputError,
     r"vectors for 'doc-2': one vector of 384 numbers; give an array with one row per chunk"),
    (7, InvalidInputError, r"vectors for 'doc-2': must be an array with one row per chunk"),
])
def test_a_bad_vector_late_in_the_input_is_refused_before_any_batch_is_written(
        conn: psycopg.Connection[Any], late: Any, error: type[Exception], message: str) -> None:
    # one document per batch: a per-batch check alone would commit doc-0 and doc-1 first
    recs = [DocumentRecord(f"doc-{i}", f"document number {i} about invoices") for i in range(3)]
    vectors = _random_vectors(recs)
    vectors["doc-2"] = late
    with pytest.raises(error, match=message):
        Ingester(conn, "c", batch_documents=1).ingest(recs, vectors=vectors)
    assert _counts(conn) == (0, 0, 0, 0)


def test_vectors_of_another_size_for_a_new_collection_name_the_model_before_it_loads(
        conn: psycopg.Connection[Any]) -> None:
    # they were refused only once the default model had loaded, as "has 768 dimensions;
    # the index version expects 384", naming neither the model nor what to do
    recs = [DocumentRecord("doc-0", "one short chunk"), DocumentRecord("doc-1", "another")]
    ing = Ingester(conn, "c")
    with pytest.raises(InvalidVectorError) as err:
        ing.ingest(recs, vectors=_random_vectors(recs, dim=768))
    assert str(err.value) == (
        "vectors['doc-0'][0]: has 768 dimensions; collection 'c' is new, and its index "
        "version is made with the default embedder, 'all-MiniLM-L6-v2', which makes "
        "384-dimension vectors; pass the model that made these vectors as "
        "Ingester(embedder=...) (a model id or local path), or give vectors of that model")
    assert ing._embedder is None  # said before the model loaded
    assert _counts(conn) == (0, 0, 0, 0)


def test_a_models_vector_size_is_read_from_its_files(embedder: Any, tmp_path: Path) -> None:
    from pgfunnel.embedder import saved_embedding_dimension

    assert saved_embedding_dimension("all-MiniLM-L6-v2") == embedder.dimensions == 384

    def model(*modules: tuple[str, dict[str, Any] | None]) -> str:
        folder = tmp_path / f"m{len(list(tmp_path.iterdir()))}"
        listed = []
        for i, (kind, config) in enumerate(modules):
            path = f"{i}_{kind}" if config is not None else ""
            if config is not None:
                (folder / path).mkdir(parents=True)
                (folder / path / "config.json").write_text(json.dumps(config))
            listed.append({"idx": i, "name": str(i), "path": path,
                           "type": f"sentence_transformers.models.{kind}"})
        folder.mkdir(exist_ok=True)
        (folder / "modules.json").write_text(json.dumps(listed))
        return str(folder)

    pooling = ("Pooling", {"word_embedding_dimension": 768, "pooling_mode_mean_tokens": True,
                           "pooling_mode_max_tokens": True, "pooling_mode_cls_token": False})
    # two pooling modes are concatenated; a Dense layer sets the size after them
    assert saved_embedding_dimension(model(("Transformer", None), pooling)) == 1536
    assert saved_embedding_dimension(model(("Transformer", None), pooling,
                                           ("Dense", {"in_features": 1536, "out_features": 256}),
                                           ("Normalize", None))) == 256
    # a module of the model's own: its size is the load's to tell
    assert saved_embedding_dimension(model(("Transformer", None), pooling,
                                           ("Truncate", {"dim": 64}))) is None
    assert saved_embedding_dimension(str(tmp_path / "nowhere")) is None


def test_vectors_of_another_size_for_a_new_collection_name_the_model_given(
        conn: psycopg.Connection[Any], embedder: Any) -> None:
    recs = [DocumentRecord("doc-0", "one short chunk")]
    with pytest.raises(InvalidVectorError, match=(
            r"has 768 dimensions; collection 'c' is new, and its index version is made "
            r"with the model given as embedder, 'all-MiniLM-L6-v2', which makes "
            r"384-dimension vectors; pass the model that made these vectors")):
        Ingester(conn, "c", embedder=embedder).ingest(recs, vectors=_random_vectors(recs, 768))


def test_a_collection_an_ingester_made_is_not_called_new_by_its_next_ingest(
        conn: psycopg.Connection[Any]) -> None:
    ing = Ingester(conn, "c")
    first = [DocumentRecord("doc-0", "one short chunk")]
    ing.ingest(first, vectors=_random_vectors(first))
    later = [DocumentRecord("doc-1", "another")]
    with pytest.raises(InvalidVectorError, match=(
            r"has 768 dimensions; collection 'c' is indexed with 'all-MiniLM-L6-v2'")):
        ing.ingest(later, vectors=_random_vectors(later, 768))


def test_vectors_of_another_size_for_an_existing_collection_name_its_model(
        sample_conn: psycopg.Connection[Any]) -> None:
    recs = [DocumentRecord("fresh-1", "one short chunk")]
    with pytest.raises(InvalidVectorError) as err:
        Ingester(sample_conn, "default").ingest(recs, vectors=_random_vectors(recs, 768))
    assert str(err.value) == (
        "vectors['fresh-1'][0]: has 768 dimensions; collection 'default' is indexed with "
        "'all-MiniLM-L6-v2', which makes 384-dimension vectors; give vectors of that model, "
        "or change the collection's model with `pgfunnel reindex --model`")


def test_the_wrong_size_message_is_built_only_for_a_vector_refused(
        sample_conn: psycopg.Connection[Any], embedder: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # every batch built it (the collection's model and size, read for a new collection
    # from the model's files), given vectors or none; it is needed only to refuse one
    asked: list[object] = []
    real = Ingester._vector_size

    def counted(self: Ingester, version: Any) -> tuple[int | None, str | None]:
        asked.append(version)
        return real(self, version)

    monkeypatch.setattr(Ingester, "_vector_size", counted)
    recs = [DocumentRecord(f"fresh-{i}", f"a new document {i} about invoices")
            for i in range(3)]
    stats = Ingester(sample_conn, "default", embedder=embedder,
                     batch_documents=1).ingest(recs)
    assert stats.chunks_embedded == 3 and asked == []
    more = [DocumentRecord("fresh-3", "one short chunk")]
    Ingester(sample_conn, "default", embedder=embedder).ingest(
        more, vectors=_random_vectors(more))
    assert len(asked) == 1  # the up-front check of the vectors given, once per ingest
    wrong = [DocumentRecord("fresh-4", "one short chunk")]
    with pytest.raises(InvalidVectorError, match="collection 'default' is indexed with "
                       "'all-MiniLM-L6-v2', which makes 384-dimension vectors"):
        Ingester(sample_conn, "default", embedder=embedder).ingest(
            wrong, vectors=_random_vectors(wrong, 768))


def test_a_vector_past_single_precision_is_refused_without_a_numpy_warning(
        conn: psycopg.Connection[Any]) -> None:
    # numpy's "overflow encountered in cast" RuntimeWarning came out beside the error
    import warnings

    recs = [DocumentRecord("doc-0", "one short chunk"), DocumentRecord("doc-1", "another")]
    vectors = _random_vectors(recs)
    vectors["doc-1"] = np.full((1, 384), 1e39)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InvalidVectorError, match=r"vectors\['doc-1'\]\[0\]: contains "
                           "values beyond single precision"):
            Ingester(conn, "c").ingest(recs, vectors=vectors)
    assert _counts(conn) == (0, 0, 0, 0)


@pytest.mark.parametrize("late", [DocumentRecord("doc-1", "a citekey given twice"),
                                  DocumentRecord("", "no citekey")])
def test_a_record_refused_late_in_the_input_says_what_the_ingest_stored(
        conn: psycopg.Connection[Any], late: DocumentRecord) -> None:
    """Records are checked as they stream in, so batches before a bad one commit; the
    error said "batches that were complete before document 9 stay written" (eight
    documents) where the batches read ahead had not been written (four were stored)."""
    recs = [DocumentRecord(f"doc-{i}", f"document number {i} about invoices")
            for i in range(8)]
    with pytest.raises(InvalidInputError) as caught:
        Ingester(conn, "c", batch_documents=1).ingest(recs + [late],
                                                       vectors=_random_vectors(recs))
    stored = conn.execute("select count(*) from pgfunnel.document").fetchone()[0]  # type: ignore[index]
    assert 0 < stored < 8
    assert f"; {stored:,} document(s) of this ingest, in the batches written before it, " \
        "are stored in collection 'c', each whole" in str(caught.value), str(caught.value)
    assert "stay written" not in str(caught.value)
    # each stored document is whole
    assert conn.execute("select count(*) from pgfunnel.document d where not exists ("
                        "select from pgfunnel.chunk ch join pgfunnel.embedding e "
                        "on e.chunk_id = ch.id where ch.document_id = d.id)").fetchone() == (0,)
    assert_stats_exact(conn)


def test_a_record_refused_before_any_batch_says_nothing_was_written(
        conn: psycopg.Connection[Any]) -> None:
    recs = [DocumentRecord("a", "alpha"), DocumentRecord("a", "alpha again")]
    with pytest.raises(InvalidInputError, match=r"^citekey 'a' appears twice in this ingest "
                       r"\(documents 1 and 2\); nothing of this ingest was written to "
                       r"collection 'c'$"):
        Ingester(conn, "c").ingest(recs, vectors=_random_vectors(recs[:1]))
    assert _counts(conn) == (0, 0, 0, 0)


@pytest.mark.parametrize("prepare_ahead", [True, False])
def test_a_chunk_with_more_term_bytes_than_a_tsvector_holds_is_named(
        conn: psycopg.Connection[Any], prepare_ahead: bool) -> None:
    """A run of text without spaces (an inline base64 image) is one chunk of thousands
    of terms; past a tsvector's 1 MB of lexemes the ingest failed with Postgres' bare
    "string is too long for tsvector (1048587 bytes, max 1048575 bytes)", naming no
    document. It is named, chunk and all, and nothing of its batch is written."""
    rng = np.random.default_rng(3)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    run = "/".join("".join(rng.choice(letters, 90)) for _ in range(14_000))
    recs = [DocumentRecord("fine", "a fine document about invoices"),
            DocumentRecord("blob", f"# Blob\n\nintro words here\n\n{run}\n\nafter words\n")]
    with pytest.raises(InvalidDocumentError, match=(
            r"^document 'blob', chunk blob#0: holds 14,0\d\d distinct terms, 1,2\d\d,\d\d\d "
            r"bytes of them, more than a Postgres tsvector indexes \(1,048,575 bytes\): a run "
            r"of text without spaces")):
        Ingester(conn, "c", prepare_ahead=prepare_ahead).ingest(
            recs, vectors=_random_vectors(recs))
    assert _counts(conn) == (0, 0, 0, 0)


def test_failure_mid_batch_leaves_no_partial_document(conn: psycopg.Connection[Any]) -> None:
    recs = [DocumentRecord(f"doc-{i}", f"document number {i} about invoices") for i in range(5)]
    vectors = _random_vectors(recs)
    Ingester(conn, "c").ingest(recs[:2], vectors={k: vectors[k] for k in ("doc-0", "doc-1")})
    before = _counts(conn)
    # a database-side failure after some rows of the batch were written: too-long title index?
    # use a tenant value that violates nothing but a check we add for the test
    conn.execute("alter table pgfunnel.chunk add constraint no_boom check (text !~ 'boom')")
    boom = [DocumentRecord("doc-5", "fine text"), DocumentRecord("doc-6", "this will boom")]
    with pytest.raises(Exception, match="no_boom"):
        Ingester(conn, "c").ingest(boom, vectors=_random_vectors(boom, seed=1))
    assert _counts(conn) == before
    assert_stats_exact(conn)


def test_duplicate_citekey_in_one_ingest_is_refused(conn: psycopg.Connection[Any]) -> None:
    recs = [DocumentRecord("same", "one"), DocumentRecord("same", "two")]
    with pytest.raises(InvalidInputError, match=r"twice in this ingest \(documents 1 and 2\)"):
        Ingester(conn, "c").ingest(recs, vectors=_random_vectors(recs))
    assert _counts(conn) == (0, 0, 0, 0)
    with pytest.raises(InvalidInputError, match="document 1: expected a pgfunnel.sources."
                                                "DocumentRecord, got dict"):
        Ingester(conn, "c").ingest([{"citekey": "a", "text": "t"}])  # type: ignore[list-item]
    for name in ("a\x00b", "de\ud800"):
        with pytest.raises(ConfigError, match="^collection: "):
            Ingester(conn, name)


BAD_RECORDS = [
    (DocumentRecord("  ", "text"), "missing or empty 'citekey'"),
    (DocumentRecord("k", "   "), "missing or empty 'text'"),
    (DocumentRecord("k", "\u200b\u200b\x01\n"), "missing or empty 'text'"),
    (DocumentRecord(" k ", "text"), "'citekey' ' k ' has leading or trailing whitespace"),
    (DocumentRecord("k", "nul\x00byte"), "text contains a NUL byte"),
    (DocumentRecord("k", "text", readers=["alice", None]), "'readers' must be a list"),  # type: ignore[list-item]
    (DocumentRecord("k", "text", readers=[""]), "'readers' must be a list"),
    # a reader no principal matches: ingested without a word, hidden from everyone
    (DocumentRecord("k", "text", readers=["bob", " alice "]),
     "a reader ' alice ' has leading or trailing whitespace, which no search's principal"),
    (DocumentRecord("k", "text", readers=[" "]), "a reader ' ' has leading or trailing"),
    (DocumentRecord("k", "text", tenant="acme "), "'tenant' 'acme ' has leading or"),
    (DocumentRecord("k", "text", language=" en"), "'language' ' en' has leading or"),
    (DocumentRecord("k", "text", metadata=["a"]), "'metadata' must be an object"),  # type: ignore[arg-type]
    # what jsonb cannot hold, named before any batch is written
    (DocumentRecord("k", "text", metadata={"on": dt.date(2026, 1, 1)}),
     "'metadata' is not JSON .*date"),
    (DocumentRecord("k", "text", metadata={"score": float("nan")}), "'metadata' is not JSON"),
    (DocumentRecord("k", "text", metadata={"note": "a\x00b"}), "'metadata' contains a NUL"),
    (DocumentRecord("k", "text", metadata={"note": "\udc80"}), "'metadata' is not valid Unicode"),
    # json.dumps stored {1: 1} as {"1": 1} without a word, as it sent a metadata filter
    (DocumentRecord("k", "text", metadata={1: 1}),  # type: ignore[dict-item]
     r"^document 2 \(citekey 'k'\): 'metadata' has the key 1 \(int\); JSON object keys are "
     r"strings, and it would be stored as '1': pass '1' if that is the key meant;"),
    (DocumentRecord("k", "text", metadata={"tags": [{"a": 1}, {None: 1}]}),
     r"'metadata' has the key None \(NoneType\) in metadata\['tags'\]\[1\]; .* stored "
     r"as 'null'"),
    (DocumentRecord("k", "lone \udc80 surrogate"), "text is not valid Unicode"),
    # said as a JSONL line is told, not as "missing or empty"
    (DocumentRecord("k", "\udc80"), "text is not valid Unicode"),
    (DocumentRecord(5, "text"), "'citekey' must be a string, got int 5"),  # type: ignore[arg-type]
    (DocumentRecord("k", b"text"), "'text' must be a string, got bytes"),  # type: ignore[arg-type]
    (DocumentRecord("k", "text", title="\ud800"), "title is not valid Unicode"),
    (DocumentRecord("k", "text", tenant=7), "'tenant' must be a non-empty string"),  # type: ignore[arg-type]
    (DocumentRecord("k", "text", tenant=""), "'tenant' must be a non-empty string"),
    (DocumentRecord("k", "text", language=""), "'language' must be a non-empty string"),
    (DocumentRecord("k", "text", valid_from=dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
                    valid_to=dt.datetime(2020, 1, 1, tzinfo=dt.UTC)),
     "valid_to must be after valid_from"),
    # a time without a zone is UTC: 13:00 UTC is after 14:00+02:00
    (DocumentRecord("k", "text", valid_from=dt.datetime(2020, 1, 1, 13),
                    valid_to=dt.datetime(2020, 1, 1, 14,
                                         tzinfo=dt.timezone(dt.timedelta(hours=2)))),
     "valid_to must be after valid_from"),
    # keys of document indexes: longer ones failed the batch with the index's error
    (DocumentRecord("k" * 1001, "text"), "citekey is 1,001 bytes long; the limit is 1,000"),
    (DocumentRecord("k", "text", tenant="t" * 600 + "é" * 201),
     "tenant is 1,002 bytes long"),
    (DocumentRecord("k", "text", readers=["ok", "r" * 3000]), "readers is 3,000 bytes long"),
]


@pytest.mark.parametrize("bad,message", BAD_RECORDS, ids=[m for _, m in BAD_RECORDS])
def test_records_built_in_python_are_checked_like_jsonl_lines(
        conn: psycopg.Connection[Any], bad: DocumentRecord, message: str) -> None:
    good = DocumentRecord("fine", "a fine document")
    with pytest.raises(InvalidDocumentError, match=message) as exc:
        Ingester(conn, "c").ingest([good, bad], vectors=_random_vectors([good]))
    assert "document 2" in str(exc.value)
    assert _counts(conn) == (0, 0, 0, 0)


def test_metadata_with_string_keys_at_every_depth_is_taken() -> None:
    # the refusal of a key that is not a string walks the whole structure: one that is
    # a string everywhere (the "1" the refusal suggests) passes
    from pgfunnel.sources import check_record

    check_record(DocumentRecord("k", "text", metadata={"1": {"2.5": [{"null": 1}, 2]}}),
                 "document 1")


def test_chunking_follows_sections_and_size() -> None:
    text = "# Title\n\nIntro words.\n\n## Part A\n\n" + "alpha " * 450 + "\n\n## Part B\n\nshort"
    chunks = chunk_text(text, chunk_words=200)
    assert [c.heading for c in chunks] == ["Title", "Part A", "Part A", "Part A", "Part B"]
    assert all(c.token_count <= 200 + len(c.heading.split()) for c in chunks)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))


def test_a_long_heading_is_cut_above_its_sections_later_chunks() -> None:
    # a Sphinx signature is a section's heading; repeated whole above every chunk of the
    # section it filled the embedder's window and counted for BM25 in each chunk
    params = ", ".join(f"p{i}: int = {i}" for i in range(10))  # 40 words
    text = f"# Client\n\n###### Client({params})\n\n" + "\n\n".join(
        " ".join(f"w{j}_{i}" for i in range(30)) for j in range(3))
    chunks = chunk_text(text, chunk_words=50)
    assert [c.heading for c in chunks] == ["Client"] + [f"Client({params})"] * 3
    first, *later = (c.text.split("\n\n", 1)[0] for c in chunks[1:])
    assert first == f"Client({params})"  # the section's first chunk: whole
    cut = " ".join(f"Client({params})".split()[:HEADING_REPEAT_WORDS]) + " \u2026"
    assert later == [cut, cut]
    assert [c.token_count for c in chunks[2:]] == [HEADING_REPEAT_WORDS + 1 + 30] * 2
    # above its first chunk a heading keeps up to a chunk's words (rdflib's docs wrote a
    # class's 8,303-word __annotations__ as one attribute's heading)
    value = " ".join(f"v{i}" for i in range(500))
    (_, alone) = chunk_text(f"# T\n\n###### attr = {value}", chunk_words=40)
    assert alone.text == "attr = " + " ".join(f"v{i}" for i in range(38)) + " \u2026"
    assert alone.heading == f"attr = {value}" and alone.token_count == 41
    # headings of ordinary length are left as they were, in every chunk
    short = chunk_text("## Configure the client\n\n" + "word " * 90, chunk_words=40)
    assert {c.text.split("\n\n", 1)[0] for c in short} == {"Configure the client"}


CODE_DOC = ("# Retries\n\nSet the limit in the client:\n\n"
            "    client = Client(\n        retries=3,   \n        backoff=0.5,\n    )\n\n"
            "A second paragraph\nover two lines.")


def test_chunks_keep_line_breaks_and_code_indentation() -> None:
    (chunk,) = chunk_text(CODE_DOC)
    # as written, less the trailing spaces; a blank line between paragraphs
    assert chunk.text == ("Retries\n\nSet the limit in the client:\n\n"
                          "    client = Client(\n        retries=3,\n        backoff=0.5,\n"
                          "    )\n\nA second paragraph\nover two lines.")
    assert chunk.token_count == len(chunk.text.split())
    # a section that opens with code keeps its first line's indentation
    (code,) = chunk_text("## Example\n\n\n    x = 1\n    y = 2\n\n")
    assert code.text == "Example\n\n    x = 1\n    y = 2"
    # a block of code longer than the target is cut between lines, each kept whole with
    # its indentation
    lines = "\n".join(f"    call_{i}(a, b)" for i in range(30))
    parts = chunk_text(lines, chunk_words=20)
    assert [len(p.text.split()) for p in parts] == [20, 20, 20]
    assert parts[0].text.startswith("    call_0(a, b)\n    call_1(a, b)")
    assert parts[1].text.startswith("    call_10(a, b)\n    call_11(a, b)")
    assert "\n".join(p.text for p in parts) == lines
    # so is a fenced block without a blank line, even where it holds 3-word lines a
    # 20-word cut would halve (fences closed and reopened at the cut)
    fenced = "```python\n" + "\n".join(f"value = compute({i})" for i in range(15)) + "\n```"
    parts = chunk_text(fenced, chunk_words=20)
    assert [p.text.split("\n")[1:-1] for p in parts] == \
        [[f"value = compute({i})" for i in range(j, min(j + 6, 15))] for j in (0, 6, 12)]
    # and a table, between its rows, its header and delimiter rows repeated at the top of
    # each chunk it goes on in (rows alone do not render as a table)
    header = "| key | value |\n|:---|---:|"
    rows = [f"| k{i} | v {i} w |" for i in range(20)]
    parts = chunk_text(header + "\n" + "\n".join(rows), chunk_words=20)
    assert len(parts) > 2 and all(p.text.startswith(header + "\n") for p in parts)
    assert sum((p.text.split("\n")[2:] for p in parts), []) == rows
    assert _table_header("| a |\nnot a delimiter\n| b |") is None
    # GFM tables need no pipes at either end; the HTML reader writes a table's rows as
    # cells parted by " | " without a delimiter row: both are cut between rows
    bare_header = "key | value\n:--- | ---:"
    bare_rows = [f"k{i} | v {i} w" for i in range(20)]
    parts = chunk_text(bare_header + "\n" + "\n".join(bare_rows), chunk_words=20)
    assert len(parts) > 2 and all(p.text.startswith(bare_header + "\n") for p in parts)
    assert sum((p.text.split("\n")[2:] for p in parts), []) == bare_rows
    assert all(_rendered_blocks(p.text)[0][0] == "table" for p in parts)
    parts = chunk_text("\n".join(bare_rows), chunk_words=20)
    assert len(parts) > 2 and sum((p.text.split("\n") for p in parts), []) == bare_rows
    # a paragraph of prose longer than the target is cut between words, its line breaks
    # kept
    prose = "\n".join(f"word{i} more{i}" for i in range(15))
    parts = chunk_text(prose, chunk_words=20)
    assert [len(p.text.split()) for p in parts] == [20, 10]
    assert parts[1].text.startswith("word10 more10\nword11")
    # blank lines between paragraphs as written, two in a row at most (PEP 8 code)
    two_defs = "    def a():\n        pass\n\n\n    def b():\n        pass"
    (spaced,) = chunk_text(f"{two_defs}\n\n\n\n\nEnd.")
    assert spaced.text == f"{two_defs}\n\n\nEnd."
    # blanks are kept as written up to a run of 64: a padded document is not returned
    # padded (5 MB of spaces between two words)
    (padded,) = chunk_text("a" + " " * 5_000_000 + "b\n" + " " * 200 + "c d")
    assert padded.text == "a" + " " * 64 + "b\n" + " " * 64 + "c d"


def _rendered_blocks(markdown: str) -> list[tuple[str, str]]:
    """The top-level blocks a CommonMark renderer makes of a chunk: (kind, text)."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    blocks = []
    for i, tok in enumerate(tokens):
        if tok.level != 0 or tok.nesting == -1:
            continue
        kind = tok.type.removesuffix("_open")
        text = tokens[i + 1].content if tok.nesting == 1 else tok.content
        blocks.append((kind, text.strip()))
    return blocks


def test_a_chunk_heading_renders_apart_from_the_code_or_prose_below_it() -> None:
    # the HTML and reST readers write code indented four spaces; on the line right below
    # the heading it would be read as the heading's paragraph going on
    html_like = "## Example\n\n    import os\n    os.getcwd()\n\nReturns the directory."
    (chunk,) = chunk_text(html_like)
    assert _rendered_blocks(chunk.text) == [
        ("paragraph", "Example"), ("code_block", "import os\nos.getcwd()"),
        ("paragraph", "Returns the directory.")]
    # and in every chunk of a section cut in several, prose first
    prose = "## Limits\n\n" + " ".join(f"w{i}" for i in range(30)) + "\n\n    x = 1"
    parts = chunk_text(prose, chunk_words=20)
    assert [_rendered_blocks(p.text) for p in parts] == [
        [("paragraph", "Limits"), ("paragraph", " ".join(f"w{i}" for i in range(20)))],
        [("paragraph", "Limits"), ("paragraph", " ".join(f"w{i}" for i in range(20, 30))),
         ("code_block", "x = 1")]]


def test_a_heading_that_starts_like_a_block_renders_as_its_text() -> None:
    from html import escape

    from markdown_it import MarkdownIt

    render = MarkdownIt("commonmark").render
    # numbered sections ("1. Whetting Your Appetite" in the Python tutorial) and headings
    # such as "- Notes" would render as a one-item list at the top of every chunk
    for heading in ("1. Install", "10) Run", "- Notes", "+ Extras", "# of users",
                    "> Quoted", "--- rules", "* * *", "```", "~~~ tilde", "<div> tag"):
        (with_body, alone) = chunk_text(f"## {heading}\n\nSome text.\n\n## {heading}")
        assert with_body.heading == alone.heading == heading
        assert render(alone.text) == f"<p>{escape(heading, quote=False)}</p>\n"
        assert render(with_body.text) == \
            f"<p>{escape(heading, quote=False)}</p>\n<p>Some text.</p>\n"
    # nothing else is escaped: "3.1." and a number alone open no block
    for heading in ("3.1. Using Python", "2024", "-flag", "<3", "#tag", "Plain",
                    "<b>Bold</b> words"):
        (chunk,) = chunk_text(f"## {heading}\n\nSome text.")
        assert chunk.text == f"{heading}\n\nSome text."


def test_a_raw_html_block_is_cut_between_its_lines() -> None:
    # READMEs write option tables and <details> in HTML; cut between words, a row (and
    # a tag) was split across two chunks
    rows = [f"<tr><td>opt{i}</td><td>" + " ".join(f"w{i}x{j}" for j in range(8))
            + "</td></tr>" for i in range(8)]
    doc = "## Options\n\nIntro.\n\n<TABLE>\n" + "\n".join(rows) + "\n</TABLE>\n\nAfter."
    parts = chunk_text(doc, chunk_words=30)
    lines = doc.split("\n")
    bodies = [p.text.removeprefix("Options\n\n") for p in parts]
    assert all(line in lines for body in bodies for line in body.split("\n") if line)
    assert " ".join(bodies).split() == doc.removeprefix("## Options").split()
    assert [_rendered_blocks(b)[0][0] for b in bodies[1:]] == ["html_block"] * 3
    # a paragraph that only starts with an inline tag is prose, cut between words
    prose = "<kbd>Ctrl</kbd> " + " ".join(f"w{i}" for i in range(40))
    assert [len(p.text.split()) for p in chunk_text(prose, chunk_words=20)] == [20, 20, 1]


def test_a_long_list_is_cut_between_its_items() -> None:
    # a changelog: one paragraph of 12 items of 9 words; cut between words, chunks would
    # end on the next item's bare marker and split items in two
    items = [f"- item{i} " + " ".join(f"w{i}x{j}" for j in range(7)) for i in range(12)]
    parts = chunk_text("## Changes\n\n" + "\n".join(items), chunk_words=30)
    bodies = [p.text.removeprefix("Changes\n\n").split("\n") for p in parts]
    assert bodies == [items[i:i + 3] for i in range(0, 12, 3)]
    assert all(_rendered_blocks(p.text)[1][0] == "bullet_list" for p in parts)
    # an item longer than a chunk is cut between its words, from its introduction on;
    # the items after it are whole again
    numbered = "Steps:\n1. first " + "x " * 40 + "\n2. second step\n   wrapped\n3. third"
    parts = chunk_text(numbered, chunk_words=20)
    assert [p.text for p in parts] == [
        "Steps:\n1. first" + " x" * 17, ("x " * 20).strip(),
        "x x x\n2. second step\n   wrapped\n3. third"]
    # prose without items is cut between words as before
    prose = " ".join(f"w{i}" for i in range(50))
    assert [len(p.text.split()) for p in chunk_text(prose, chunk_words=20)] == [20, 20, 10]


def test_a_chunk_cut_inside_a_list_item_does_not_start_as_code() -> None:
    # an item's second paragraph and its nested items are indented four spaces or more
    # (the "*   item" style, or a "- " list nested in one); cut out of the item, at the
    # top of a chunk, that indentation would make them a code block
    def words(tag: str, n: int) -> str:
        return " ".join(f"{tag}{i}" for i in range(n))

    for marker, step in (("*   ", "    "), ("1.  ", "    ")):
        inner = step + marker
        doc = (f"## Install\n\n{marker}{words('first', 11)}\n\n"
               f"{step}  {words('more', 11)}\n\n"
               f"{inner}{words('nested', 8)}\n{inner}{words('sibling', 8)}\n\n"
               f"{step}{' ' * len(marker)}    call({', '.join('abcdefghijk')})\n\n"
               f"{marker}{words('second', 11)}\n\nAfter the list.")
        parts = chunk_text(doc, chunk_words=20)
        kinds = [[kind for kind, _ in _rendered_blocks(p.text)][1:] for p in parts]
        items = "ordered_list" if marker[0].isdigit() else "bullet_list"
        assert kinds == [[items], ["paragraph"], [items], ["code_block"],
                         [items, "paragraph"]], (marker, [p.text for p in parts])
        # only indentation changes: the words, and so the chunks' vectors, stay
        assert " ".join(p.text.removeprefix("Install\n\n") for p in parts).split() == \
            doc.removeprefix("## Install").split()
        # the code keeps four spaces past the item it is in
        assert parts[3].text == "Install\n\n    call(a, b, c, d, e, f, g, h, i, j, k)"
    # under a narrow item ("- ", "1. ") a block indented four spaces may be code that a
    # converter indented after a list (pgfunnel's HTML and RST readers do): it stays
    # as written, and code; a list nested two spaces in is a list at the top of a chunk
    for marker in ("- ", "1. "):
        code = "    x = compute(1, 2)\n    >>> print(x)\n    3"
        doc = (f"{marker}{words('first', 19)}\n\n{code}\n\n  - {words('nested', 8)}"
               f"\n  - {words('sibling', 10)}")
        parts = chunk_text(doc, chunk_words=20)
        assert [p.text for p in parts[1:]] == [
            code, f"  - {words('nested', 8)}\n  - {words('sibling', 10)}"], marker
        assert [kind for kind, _ in _rendered_blocks(parts[1].text)] == ["code_block"]
        assert [kind for kind, _ in _rendered_blocks(parts[2].text)] == ["bullet_list"]
    # a list begun after the margin keeps its own nesting
    doc = ("*   " + words("a", 19) + "\n\n      " + words("b", 19) + "\n\nText.\n\n- top\n"
           "  - nested\n\n    nested paragraph")
    parts = chunk_text(doc, chunk_words=20)
    assert [p.text for p in parts[1:]] == [
        f"  {words('b', 19)}\n\nText.", "- top\n  - nested\n\n    nested paragraph"]
    # a nested list cut inside its deepest items: the piece loses their indentation,
    # and an item less deep after them keeps its depth relative to what follows it
    deep = "\n".join(f"    - c{i} x y z" for i in range(8))
    parts = chunk_text(f"- a\n  - b\n{deep}\n  - d x y z\n    - e x y z", chunk_words=20)
    assert [p.text for p in parts[1:]] == [
        "\n".join(f"- c{i} x y z" for i in range(3, 7)), "- c7 x y z\n- d x y z\n  - e x y z"]
    assert all([kind for kind, _ in _rendered_blocks(p.text)] == ["bullet_list"]
               for p in parts)
    # a paragraph cut between its words goes on at the margin: its lines stay as written
    doc = ("*   " + words("a", 10) + "\n    " + words("c", 20) + "\n    end\n\n      "
           + words("d", 5))
    parts = chunk_text(doc, chunk_words=20)
    assert parts[1].text == "c9 " + " ".join(f"c{i}" for i in range(10, 20)) + \
        "\n    end\n\n  " + words("d", 5)


def test_a_cut_between_words_does_not_start_a_chunk_with_a_block_marker() -> None:
    # "-", ">=" or "1." first on a line would make the rest of the chunk a list item or
    # a quote: the cut moves back a word
    for marker in ("-", ">=", "1.", "+", "```", "#"):
        prose = " ".join(f"w{i}" for i in range(20)) + f" {marker} " + \
            " ".join(f"v{i}" for i in range(10))
        parts = chunk_text(prose, chunk_words=20)
        assert [len(p.text.split()) for p in parts] == [19, 12], marker
        assert parts[1].text.startswith(f"w19 {marker} v0"), marker
        assert all(_rendered_blocks(p.text)[0][0] == "paragraph" for p in parts), marker
    # a run of markers moves it back no further than half a chunk
    parts = chunk_text(" ".join(["w"] * 5 + ["-"] * 40), chunk_words=20)
    assert [len(p.text.split()) for p in parts] == [20, 20, 5]


def test_a_paragraph_of_megabytes_is_cut_without_a_list_of_its_words() -> None:
    # a 50 MB file of one paragraph peaked near 2 GB: every word's span and a list of
    # its words were held at once. Memory is measured by allocation, not by time.
    import tracemalloc

    from pgfunnel.sources import count_words

    words = [f"w{i % 997}" for i in range(400_000)]
    words[200_200] = "-"  # a block marker at a cut moves it back a word, as before
    text = "  " + " ".join(words)
    tracemalloc.start()
    try:
        parts = chunk_text(text, chunk_words=200)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * len(text), f"peak {peak:,} bytes for a text of {len(text):,}"
    assert [w for p in parts for w in p.text.split()] == words
    assert parts[0].text.startswith("  w0 ")
    sizes = [len(p.text.split()) for p in parts]
    assert sizes.count(200) == len(parts) - 2 and 199 in sizes
    assert parts[1001].text.startswith(f"{words[200_199]} - ")
    # counted in place past a megabyte, the same count as str.split gives
    odd = "a\u3000b\x1cc\u00a0d \u2028e\u200bf " * 100_000
    assert count_words(odd) == len(odd.split())


def test_a_block_quote_cut_between_chunks_stays_quoted_in_each() -> None:
    # cut between words, the next chunk's first line would lose its ">" and render as a
    # paragraph above the rest of the quote
    lines = ["> " + " ".join(f"l{i}w{j}" for j in range(8)) for i in range(3)]
    doc = "\n".join([*lines, "> " + " ".join(f"long{j}" for j in range(30)),
                     "> > nested " + " ".join(f"n{j}" for j in range(30))])
    parts = chunk_text(doc, chunk_words=20)
    assert len(parts) > 3
    for p in parts:
        assert [kind for kind, _ in _rendered_blocks(p.text)] == ["blockquote"], p.text
    # whole lines stay whole: the first chunk ends at a line's end, not mid-line
    assert parts[0].text == "\n".join(lines[:2])
    # a nested quote's slice keeps both marks; the words are the quote's, in order
    assert parts[-1].text.startswith("> > n")
    assert [w for p in parts for w in p.text.split() if w != ">"] == \
        [w for w in doc.split() if w != ">"]


def test_a_long_item_after_a_nearly_full_chunk_starts_the_next_one() -> None:
    # the items before it fill all but a word of the chunk: joined to them, the long
    # item would leave only its bare marker at the chunk's end
    first = "- " + " ".join(f"a{i}" for i in range(18))  # 19 words
    long_item = "- " + " ".join(f"b{i}" for i in range(30))
    parts = chunk_text(f"{first}\n{long_item}", chunk_words=20)
    assert parts[0].text == first
    assert parts[1].text.startswith("- b0 b1")
    assert not any(p.text.split("\n")[-1].strip() in ("-", "*", "1.") for p in parts)


def test_a_code_block_cut_between_chunks_is_fenced_in_each() -> None:
    def code(name: str) -> str:
        return "\n".join(f"{name}_{i}(a)" for i in range(12))

    doc = (f"# Setup\n\nRun this first:\n\n```python\n{code('a')}\n\n{code('b')}\n\n"
           f"{code('c')}\n```\n\nThen read the log.")
    parts = chunk_text(doc, chunk_words=20)
    # the block is cut twice: the first chunk closes it, the next reopens it with its
    # info string and closes it, the last reopens it and closes it where the document does
    assert len(parts) == 3
    assert parts[0].text.endswith("a_11(a)\n```")
    assert parts[1].text.startswith("Setup\n\n```python\nb_0(a)")
    assert parts[1].text.endswith("\n```")
    assert parts[2].text.startswith("Setup\n\n```python\nc_0(a)")
    assert parts[2].text.endswith("```\n\nThen read the log.")
    for part in parts:
        fences = [line for line in part.text.split("\n") if line.startswith("```")]
        assert len(fences) % 2 == 0, part.text

    # boundaries and words as without the added fences
    def words(text: str) -> list[str]:
        return [w for w in text.split()[1:] if not w.startswith("```")]  # less the heading

    assert sum((words(p.text) for p in parts), []) == words(chunk_text(doc)[0].text)
    assert [p.token_count for p in parts] == [len(p.text.split()) for p in parts]
    # a bare fence reopened is not read as the block's end; tildes and longer fences
    # close with their own run; a block the document leaves open stays open
    lines = "\n".join(f"x{i}" for i in range(30))
    for opener in ("```", "~~~~sh", "````"):
        run = opener.rstrip("sh")
        parts = chunk_text(f"{opener}\n{lines}\n{run}\n\nAfter it.", chunk_words=20)
        assert [p.text.split("\n")[0] for p in parts] == [opener, opener]
        assert parts[0].text.endswith(f"x18\n{run}")
        assert parts[1].text.endswith(f"x29\n{run}\n\nAfter it.")
    parts = chunk_text(f"```\n{lines}", chunk_words=20)
    assert parts[0].text.endswith("x18\n```") and parts[1].text.endswith("x29")
    # a fenced block indented under a list item is cut between its lines too; out of
    # their list, its pieces lose the item's indentation (else the fence lines would be
    # code themselves) and are fenced again
    items = "\n".join(f"    key_{i}: value {i}" for i in range(30))
    parts = chunk_text(f"1. Set up:\n\n    ```yaml\n{items}\n    ```\n\n2. Run it.", 20)
    fenced = [_rendered_blocks(p.text) for p in parts[1:-1]]
    assert [p.text for p in (parts[0], parts[-1])] == ["1. Set up:", "2. Run it."]
    assert all(len(blocks) == 1 and blocks[0][0] == "fence" for blocks in fenced)
    assert "\n".join(blocks[0][1] for blocks in fenced) == items.replace("    ", "")
    # one indented less than four spaces is closed where it was cut at its own
    # indentation: at the margin the closing line would end the item and open a second,
    # empty block
    steps = "\n".join(f"  run step {i}" for i in range(30))
    parts = chunk_text(f"- Install:\n  ```sh\n{steps}\n  ```\n\nDone.", 20)
    assert parts[0].text.startswith("- Install:\n  ```sh\n  run step 0")
    assert [kind for kind, _ in _rendered_blocks(parts[0].text)] == ["bullet_list"]
    assert all([kind for kind, _ in _rendered_blocks(p.text)] == ["fence"]
               for p in parts[1:-1])
    assert parts[-1].text.endswith("  ```\n\nDone.")
    # a piece that starts with an item's fenced block loses the item's indentation up to
    # the next item at the margin, whose own lines stay as written
    intro = "- " + " ".join(f"w{i}" for i in range(18))
    doc = f"{intro}\n\n  ```python\n  x = 1\n  ```\n- Then run it\n  from the top."
    parts = chunk_text(doc, 20)
    assert [p.text for p in parts] == [
        intro, "```python\nx = 1\n```\n- Then run it\n  from the top."]
    # a closing fence never starts a chunk alone (it would be reopened as an empty block)
    exact = "```sh\n" + "\n".join(f"step {i} now" for i in range(10)) + "\n```\n\nDone."
    parts = chunk_text(exact, chunk_words=31)  # the closing fence is the 32nd word
    assert [p.text for p in parts] == [exact.split("\n\n")[0], "Done."]
    # "```foo``` ..." at the start of a line is inline code, not a fence: the heading
    # after it still starts a section
    inline = "```foo``` is inline code.\n\n## Next\n\nMore text."
    assert [p.heading for p in chunk_text(inline)] == ["", "Next"]
    # code indented instead of fenced, and prose, are left as they were
    indented = chunk_text("Intro\n\n" + lines.replace("\n", "\n    "), 20)
    assert len(indented) == 3 and not any("```" in p.text for p in indented)


def test_chunk_boundaries_depend_on_the_words_and_paragraphs_alone() -> None:
    # the same document with other whitespace inside its paragraphs (spaces for line
    # breaks, runs of spaces and tabs, indentation, trailing blanks): the chunks hold the
    # same words in the same places, so a stored vector can follow them (vector_key)
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(60)]
    for _ in range(30):
        paras = []
        for _ in range(int(rng.integers(1, 12))):
            n = int(rng.integers(1, 90))
            paras.append([str(w) for w in rng.choice(words, n)])
        plain = "# Head\n\n" + "\n\n".join(" ".join(p) for p in paras)
        seps = [" ", "  ", "\t", "\n", "\n    ", " \n", "\u00a0"]
        varied = "# Head\n\n" + "\n \n\n".join(
            "  " + "".join(w + str(rng.choice(seps)) for w in p) + "  " for p in paras)
        for size in (20, 57, 200):
            a, b = chunk_text(plain, size), chunk_text(varied, size)
            assert [(c.heading, c.token_count, " ".join(c.text.split())) for c in a] == \
                [(c.heading, c.token_count, " ".join(c.text.split())) for c in b]


def test_postings_and_lexical_rows_equal_the_analyzers_counts(
        conn: psycopg.Connection[Any]) -> None:
    # the rows ingest builds in Python, recounted with the SQL analyzer itself: a posting
    # per distinct term with its tf (capped at the smallint column), the length uncapped,
    # and a chunk of stop words alone gets a lexical row with no postings
    texts = {"ids": "Error ERR-4029, err 4029 and err4029 in os.path.join(a, b)",
             "stops": "the and of the",
             "repeats": "alpha beta alpha gamma alpha beta",
             "long": "omega " * 33000 + "psi"}
    docs = [DocumentRecord(citekey=k, text=t) for k, t in texts.items()]
    rng = np.random.default_rng(0)
    vectors = {d.citekey: rng.normal(size=(len(chunk_text(d.text, 40000)), 384)).astype(np.float32)
               for d in docs}
    Ingester(conn, "c", chunk_words=40000).ingest(docs, vectors=vectors)
    rows = conn.execute("""
        select d.citekey, v.analyzer, c.text, l.length, l.terms::text,
               (select coalesce(jsonb_object_agg(p.term, p.tf), '{}') from pgfunnel.posting p
                 where p.index_version_id = l.index_version_id and p.chunk_id = c.id)
          from pgfunnel.document d join pgfunnel.chunk c on c.document_id = d.id
          join pgfunnel.lexical l on l.chunk_id = c.id
          join pgfunnel.index_version v on v.id = l.index_version_id""").fetchall()
    assert sorted(r[0] for r in rows) == sorted(texts)
    for citekey, analyzer, text, length, lexemes, postings in rows:
        # the pass analyze() runs on one text: analyze() and analyze_each take at most
        # 100,000 characters, and the long chunk is 198,003
        terms = one_row(conn.execute(
            "select coalesce(array_agg(e.term order by e.token_position), '{}') "
            "from pgfunnel._analyze_pass(array[%s], %s, '{}') e where e.term is not null",
            (text, analyzer)))[0]
        expected = {t: min(n, 32767) for t, n in Counter(terms).items()}
        assert postings == expected, citekey
        assert length == len(terms), citekey
        assert lexemes == " ".join(f"'{t}'" for t in sorted(expected)), citekey
    by_key = {r[0]: r for r in rows}
    assert by_key["stops"][5] == {} and by_key["stops"][3] == 0
    assert by_key["long"][5]["omega"] == 32767 and by_key["long"][3] == 33001
    assert by_key["ids"][5]["err4029"] == 2  # ERR-4029 and err4029
    assert_stats_exact(conn)


def test_copy_text_escaping_round_trips(conn: psycopg.Connection[Any]) -> None:
    from pgfunnel.ingest import _copy_text

    values = ["plain", "back\\slash", "tab\there", "new\nline", "cr\rhere", "\\t literal"]
    conn.execute("create temp table copied (v text)")
    with conn.cursor().copy("copy copied (v) from stdin") as cp:
        cp.write("".join(_copy_text(v) + "\n" for v in values))
    assert [r[0] for r in conn.execute("select v from copied").fetchall()] == values


def test_documents_of_a_batch_keep_their_fields(conn: psycopg.Connection[Any]) -> None:
    import datetime as dt

    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    docs = [DocumentRecord(citekey="a", text="alpha text", title="A", metadata={"n": 1},
                           tenant="t1", readers=["x", "y"], language="en",
                           valid_from=when, valid_to=when + dt.timedelta(days=1)),
            DocumentRecord(citekey="b", text="beta text", title="B")]
    from funnel_util import ingest

    ingest(conn, docs, dims=8)
    rows = {r[0]: r[1:] for r in conn.execute(
        "select citekey, title, metadata, tenant, readers, is_public, language, valid_from, "
        "valid_to from pgfunnel.document order by citekey").fetchall()}
    assert rows["a"] == ("A", {"n": 1}, "t1", ["x", "y"], False, "en", when,
                         when + dt.timedelta(days=1))
    assert rows["b"] == ("B", {}, None, [], True, None, None, None)


def test_batches_end_at_the_document_or_the_chunk_limit(conn: psycopg.Connection[Any]) -> None:
    from pgfunnel.errors import ConfigError

    def batches(recs: list[DocumentRecord], **kw: Any) -> list[int]:
        sizes: list[int] = []
        Ingester(conn, kw.pop("collection"), progress=lambda stage, n, total: (
            sizes.append(n) if stage == "documents" else None), **kw).ingest(
                recs, vectors=_random_vectors(recs))
        return sizes

    short = [DocumentRecord(f"s{i}", f"short document {i}") for i in range(10)]
    assert batches(short, collection="a", batch_chunks=3) == [3, 3, 3, 1]
    assert batches(short, collection="b", batch_documents=4) == [4, 4, 2]
    # about 450 words at 200 words a chunk: three chunks each, so two documents fill 6
    long = [DocumentRecord(f"l{i}", " ".join(["word"] * 450)) for i in range(5)]
    assert batches(long, collection="c", batch_chunks=6) == [2, 2, 1]
    assert _counts(conn)[1] == 10 + 10 + 15
    assert_stats_exact(conn)
    for bad in ({"batch_chunks": 0}, {"batch_documents": -1}, {"chunk_words": 5},
                {"prepare_ahead": "no"}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            Ingester(conn, "d", **bad)


def test_private_must_be_a_bool(conn: psycopg.Connection[Any]) -> None:
    from pgfunnel.errors import ConfigError

    # was accepted
    with pytest.raises(ConfigError, match=r"^private: must be True or False, got 'yes'$"):
        Ingester(conn, "shape", private="yes")  # type: ignore[arg-type]


def _nothing_written(conn: psycopg.Connection[Any]) -> None:
    assert _counts(conn) == (0, 0, 0, 0)
    assert conn.execute("select count(*) from pgfunnel.collection where name = 'shape'"
                        ).fetchone() == (0,)


def test_vectors_must_be_a_mapping(conn: psycopg.Connection[Any]) -> None:
    from pgfunnel.errors import ConfigError

    # was a raw AttributeError: 'list' object has no attribute 'get'
    vec = np.ones((1, 384), dtype=np.float32)
    with pytest.raises(ConfigError, match=r"^vectors: must be a mapping citekey -> array of "
                       r"chunk vectors \(\{'a': \[\[\.\.\.\]\]\}\), got list$"):
        Ingester(conn, "shape").ingest([DocumentRecord("a", "one short document")],
                                       vectors=[vec])  # type: ignore[arg-type]
    _nothing_written(conn)


def test_records_must_be_an_iterable_of_records(conn: psycopg.Connection[Any]) -> None:
    from pgfunnel.errors import ConfigError

    # was a raw TypeError: 'DocumentRecord' object is not iterable
    ingester = Ingester(conn, "shape")
    with pytest.raises(ConfigError, match=r"^records: must be an iterable of DocumentRecord, "
                       r"got one DocumentRecord: pass \[record\]$"):
        ingester.ingest(DocumentRecord("a", "one short document"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^records: must be an iterable of DocumentRecord, "
                       r"got NoneType$"):
        ingester.ingest(None)  # type: ignore[arg-type]
    _nothing_written(conn)


def test_hnsw_build_memory_holds_the_graph() -> None:
    from pgfunnel.ingest import HNSW_BUILD_MEMORY_CAP_BYTES, hnsw_build_memory

    # pgvector 0.8.2 reported a 384-dimension, m = 16 graph full after 7,450 tuples in
    # 16MB (vector), and after 5,653 in 8MB (halfvec)
    for hnsw_type, memory, tuples in (("vector", 16 * 2**20, 7450), ("halfvec", 8 * 2**20, 5653)):
        per_element = (hnsw_build_memory(10_000, 384, 16, hnsw_type)
                       - hnsw_build_memory(0, 384, 16, hnsw_type)) / 10_000
        assert memory / tuples <= per_element <= 1.1 * memory / tuples, hnsw_type
    assert hnsw_build_memory(2000, 768, 16) > hnsw_build_memory(2000, 384, 16)
    assert hnsw_build_memory(2000, 384, 32) > hnsw_build_memory(2000, 384, 16)
    assert hnsw_build_memory(10**9, 384, 16) == HNSW_BUILD_MEMORY_CAP_BYTES


def _smallest_maintenance_work_mem(conn: psycopg.Connection[Any]) -> str:
    """64kB from Postgres 17 on, 1MB before."""
    row = conn.execute("select min_val::int from pg_settings "
                       "where name = 'maintenance_work_mem'").fetchone()
    assert row is not None
    return "64kB" if int(row[0]) < 1024 else "1MB"


def test_ingest_sizes_maintenance_work_mem_for_the_hnsw_build(
        conn: psycopg.Connection[Any]) -> None:
    # the smallest setting the server takes: 64kB (Postgres 17+) holds about 28 elements,
    # 1MB (earlier) about 460; without the sizing pgvector says the graph no longer fits
    # and finishes the build on disk
    smallest = _smallest_maintenance_work_mem(conn)
    conn.execute(f"set maintenance_work_mem = '{smallest}'")
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
    docs = [DocumentRecord(f"d{i}", f"document number {i} about topic {i % 7}")
            for i in range(300 if smallest == "64kB" else 1000)]
    Ingester(conn, "sized").ingest(docs, vectors=_random_vectors(docs))
    assert not [n for n in notices if "maintenance_work_mem" in n], notices
    row = conn.execute("select indisvalid from pg_index where indexrelid = "
                       "'pgfunnel.embedding_hnsw_v1'::regclass").fetchone()
    assert row == (True,)
    # the raised setting was local to the build's transaction
    assert conn.execute("show maintenance_work_mem").fetchone() == (smallest,)
    # the same build at the session's setting does spill, so the check above can fail
    conn.execute("drop index pgfunnel.embedding_hnsw_v1")
    from pgfunnel.ingest import create_hnsw_index

    create_hnsw_index(conn, 1, 384, size_memory=False)
    assert [n for n in notices if "maintenance_work_mem" in n], notices


def _index_rows_by_citekey(conn: psycopg.Connection[Any], collection: str) -> dict[str, Any]:
    """A collection's index, keyed by what does not depend on chunk ids."""
    where = ("from pgfunnel.chunk c join pgfunnel.document d on d.id = c.document_id "
             "join pgfunnel.collection k on k.id = d.collection_id and k.name = %s ")
    postings = conn.execute(
        "select d.citekey, c.ordinal, p.term, p.tf, p.length " + where
        + "join pgfunnel.posting p on p.chunk_id = c.id order by 1, 2, 3",
        (collection,)).fetchall()
    lexical = conn.execute(
        "select d.citekey, c.ordinal, l.length, l.terms::text " + where
        + "join pgfunnel.lexical l on l.chunk_id = c.id order by 1, 2", (collection,)).fetchall()
    stats = conn.execute(
        "select t.term, t.df from pgfunnel.term_stat t join pgfunnel.index_version v "
        "on v.id = t.index_version_id join pgfunnel.collection k on k.id = v.collection_id "
        "where k.name = %s order by 1", (collection,)).fetchall()
    totals = conn.execute(
        "select v.chunk_count, v.total_length from pgfunnel.index_version v "
        "join pgfunnel.collection k on k.id = v.collection_id where k.name = %s",
        (collection,)).fetchall()
    return {"postings": postings, "lexical": lexical, "stats": stats, "totals": totals}


def test_batches_prepared_ahead_write_the_same_index(conn: psycopg.Connection[Any],
                                                     embedder: Any) -> None:
    docs = read_path(Path(__file__).resolve().parents[1] / "pgfunnel" / "data"
                     / "helpcenter.jsonl")
    records = list(docs)[:60]
    vectors = _random_vectors(records)
    used: list[bool] = []

    class Recording(Ingester):
        """Notes whether each batch was written from rows prepared ahead."""

        def _write(self, *args: Any) -> None:
            used.append(args[-1] is not None)
            super()._write(*args)

    Recording(conn, "ahead", batch_documents=10, embedder=embedder).ingest(records, vectors=vectors)
    assert len(used) > 2 and all(used), used
    used.clear()
    Recording(conn, "inline", batch_documents=10, embedder=embedder, prepare_ahead=False).ingest(
        records, vectors=vectors)
    assert used and not any(used)
    ahead, inline = (_index_rows_by_citekey(conn, c) for c in ("ahead", "inline"))
    assert ahead["postings"] and ahead == inline
    assert_stats_exact(conn)

    # a batch mixing unchanged and changed documents is prepared for the changed ones only
    changed = [DocumentRecord(r.citekey, r.text + " appendix") if i % 3 == 0 else r
               for i, r in enumerate(records)]
    prepared_for: list[list[str]] = []

    class Preparing(Recording):
        def _analyse(self, *args: Any) -> Any:
            ready = super()._analyse(*args)
            prepared_for.append([r.citekey for r, _ in ready.chunked])
            return ready

    used.clear()
    new_vectors = _random_vectors(changed)
    Preparing(conn, "ahead", batch_documents=10, embedder=embedder).ingest(
        changed, vectors=new_vectors)
    assert used and all(used)
    assert [ck for batch in prepared_for for ck in batch] == [
        r.citekey for i, r in enumerate(changed) if i % 3 == 0]
    Recording(conn, "inline", batch_documents=10, embedder=embedder, prepare_ahead=False).ingest(
        changed, vectors=new_vectors)
    assert _index_rows_by_citekey(conn, "ahead") == _index_rows_by_citekey(conn, "inline")
    assert_stats_exact(conn)

    # a document that changes between the preparing and the writing: the writing
    # transaction finds other documents to write than were prepared, and builds the rows
    from pgfunnel.db import connect

    class Racing(Recording):
        def _analyse(self, *args: Any) -> Any:
            ready = super()._analyse(*args)
            if not used:
                with connect(conn.info.dsn, autocommit=True) as other:
                    other.execute("update pgfunnel.document set content_hash = 'stale' "
                                  "where citekey = %s", (records[1].citekey,))
            return ready

    used.clear()
    Racing(conn, "ahead", batch_documents=10, embedder=embedder).ingest(
        changed, vectors=new_vectors)
    assert used[0] is False and all(used[1:]), used
    assert _index_rows_by_citekey(conn, "ahead") == _index_rows_by_citekey(conn, "inline")
    assert_stats_exact(conn)


def test_batches_analysed_beside_the_rows_of_the_one_before_keep_their_order(
        conn: psycopg.Connection[Any], embedder: Any) -> None:
    """The preparer analyses a batch's words while it builds the rows of the batch before
    it; each stage still takes batches in order, so chunk ids ascend with the documents
    as in a single-threaded ingest, and a batch's rows wait for its own analysis."""
    import threading

    records = [DocumentRecord(f"d{i:03}", f"document {i} names widget_{i} and ERR-{4000 + i}")
               for i in range(70)]
    analysed_in: list[str] = []
    rows_in: list[str] = []
    written_from_prepared: list[bool] = []

    class Recording(Ingester):
        def _write(self, *args: Any) -> None:
            written_from_prepared.append(args[-1] is not None)
            super()._write(*args)

        def _analyse(self, *args: Any) -> Any:
            analysed_in.append(threading.current_thread().name)
            return super()._analyse(*args)

        def _prepare(self, *args: Any) -> Any:
            rows_in.append(threading.current_thread().name)
            return super()._prepare(*args)

    stats = Recording(conn, "ordered", batch_documents=10, embedder=embedder).ingest(
        records, vectors=_random_vectors(records))
    assert stats.chunks_written == 70
    assert len(analysed_in) == len(rows_in) == 7
    assert written_from_prepared == [True] * 7
    # two threads, one per stage, neither of them the writing one
    assert len(set(analysed_in)) == len(set(rows_in)) == 1
    assert set(analysed_in) != set(rows_in)
    assert threading.current_thread().name not in set(analysed_in) | set(rows_in)
    by_id = [str(r[0]) for r in conn.execute(
        "select d.citekey from pgfunnel.chunk c join pgfunnel.document d on d.id = c.document_id "
        "order by c.id").fetchall()]
    assert by_id == [r.citekey for r in records]
    # every identifier went in with its own terms: no batch was built before its analysis
    for i in (0, 35, 69):
        hits = conn.execute("select citekey from pgfunnel.funnel_search(%s, null, 1, "
                            "collection => 'ordered')", (f"widget_{i}",)).fetchall()
        assert hits == [(f"d{i:03}",)]
    assert_stats_exact(conn)


def test_first_ingest_reports_the_index_build(conn: psycopg.Connection[Any]) -> None:
    stages: list[tuple[str, int, int | None]] = []
    docs = [DocumentRecord(f"d{i}", f"document {i}") for i in range(30)]
    Ingester(conn, "p", progress=lambda s, n, t: stages.append((s, n, t))).ingest(
        docs, vectors=_random_vectors(docs))
    names = [s for s, _, _ in stages]
    # the build is announced with its size before it starts; ANALYZE comes after it
    assert ("index", 0, 30) in stages and ("index", 30, 30) in stages
    assert names.index("index") > max(i for i, s in enumerate(names) if s == "documents")
    assert names[-1] == "analyze"
    # a later ingest adds to the existing index: nothing to build
    stages.clear()
    more = [DocumentRecord("e0", "one more document")]
    Ingester(conn, "p", progress=lambda s, n, t: stages.append((s, n, t))).ingest(
        more, vectors=_random_vectors(more))
    assert "index" not in [s for s, _, _ in stages]


def test_preparing_ahead_shortens_the_gil_switch_interval_for_the_ingest_only(
        conn: psycopg.Connection[Any], embedder: Any) -> None:
    import sys

    from pgfunnel.ingest import INGEST_SWITCH_INTERVAL_S

    records = [DocumentRecord(f"d{i}", f"document number {i} about topic {i % 7}")
               for i in range(40)]
    seen: list[float] = []

    class Recording(Ingester):
        def _write(self, *args: Any) -> None:
            seen.append(sys.getswitchinterval())
            super()._write(*args)

    before = sys.getswitchinterval()
    assert before > INGEST_SWITCH_INTERVAL_S  # Python's default, 5 ms
    Recording(conn, "fast", batch_documents=10, embedder=embedder).ingest(
        records, vectors=_random_vectors(records))
    assert seen and set(seen) == {INGEST_SWITCH_INTERVAL_S}
    assert sys.getswitchinterval() == before
    # without a preparing thread there is no one to hand the GIL to
    seen.clear()
    Recording(conn, "inline", batch_documents=10, embedder=embedder, prepare_ahead=False).ingest(
        records, vectors=_random_vectors(records))
    assert seen and set(seen) == {before}

    # a failing ingest puts it back too
    class Failing(Ingester):
        def _write(self, *args: Any) -> None:
            raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        Failing(conn, "failing", batch_documents=10, embedder=embedder).ingest(
            records, vectors=_random_vectors(records))
    assert sys.getswitchinterval() == before


def test_embedding_progress_carries_the_chunks_queued_so_far(
        conn: psycopg.Connection[Any], embedder: Any) -> None:
    ticks: list[tuple[int, int | None]] = []
    docs = [DocumentRecord(f"d{i}", f"document {i} about topic {i % 3}") for i in range(5)]
    stats = Ingester(conn, "p", embedder=embedder, batch_documents=2, prepare_ahead=False,
                     progress=lambda s, n, t: ticks.append((n, t)) if s == "embedding"
                     else None).ingest(docs)
    # each batch announces its chunks (n = 0) before the model runs, so a bar has a total
    assert ticks[0] == (0, 2)
    announced = [t for n, t in ticks if n == 0]
    assert announced == [2, 4, 5]
    assert sum(n for n, _ in ticks) == stats.chunks_embedded == 5
    for (_n, total), done in zip(ticks, itertools.accumulate(n for n, _ in ticks), strict=True):
        assert total is not None and done <= total


def test_the_model_runs_outside_the_writing_transaction(conn: psycopg.Connection[Any],
                                                        embedder: Any) -> None:
    # Managed Postgres and poolers end sessions that sit idle in a transaction (Supabase,
    # RDS parameter groups: idle_in_transaction_session_timeout). Embedding a batch takes
    # minutes on a CPU, so it must not happen while the batch's transaction is open
    # holding the collection's writer lock.
    from funnel_util import SlowEmbedder

    conn.execute("set idle_in_transaction_session_timeout = '300ms'")
    slow = SlowEmbedder(embedder)
    docs = [DocumentRecord(f"d{i}", f"document {i} about topic {i % 3}") for i in range(5)]
    # SlowEmbedder stands in for an Embedder (Ingester calls embed, reads model_name and
    # dimensions) without being one
    stats = Ingester(conn, "slow", embedder=slow,  # type: ignore[arg-type]
                     batch_documents=2).ingest(docs)
    assert stats.chunks_embedded == 5 and stats.documents_written == 5
    assert slow.calls == 3  # one call per batch: nothing embedded twice
    # a re-ingest with one changed document embeds only that one, still outside
    docs[1] = DocumentRecord("d1", "document 1, rewritten")
    again = Ingester(conn, "slow", embedder=slow,  # type: ignore[arg-type]
                     batch_documents=2).ingest(docs)
    assert again.chunks_embedded == 1 and again.documents_unchanged == 4
    assert_stats_exact(conn)


def test_index_builds_and_vacuum_outlive_a_statement_timeout(conn: psycopg.Connection[Any],
                                                             embedder: Any) -> None:
    # a role- or database-level statement_timeout (managed Postgres sets one) is meant
    # for queries; the index builds at the end of an ingest run with none, and the
    # session gets its own back. An event trigger records what CREATE INDEX ran under.
    conn.execute("create table public.seen_timeout (tag text, setting text)")
    conn.execute("create function public.seen_timeout() returns event_trigger language plpgsql "
                 "as $$ begin insert into public.seen_timeout values (tg_tag, "
                 "current_setting('statement_timeout')); end $$")
    conn.execute("create event trigger seen_timeout on ddl_command_start "
                 "when tag in ('CREATE INDEX') execute function public.seen_timeout()")
    try:
        conn.execute("set statement_timeout = '5min'")
        docs = [DocumentRecord(f"d{i}", f"document {i} about topic {i % 3}") for i in range(5)]
        Ingester(conn, "timed", embedder=embedder).ingest(docs)
        seen = conn.execute("select setting from public.seen_timeout").fetchall()
        # the version's posting index and its HNSW graph
        assert len(seen) >= 2 and {s[0] for s in seen} == {"0"}
        assert one_row(conn.execute("show statement_timeout"))[0] == "5min"
    finally:
        conn.execute("drop event trigger seen_timeout")


def test_given_vectors_are_counted_as_given_and_unused_ones_named(
        conn: psycopg.Connection[Any], embedder: Any) -> None:
    docs = [DocumentRecord(f"d{i}", f"document {i} about refunds") for i in range(3)]
    vectors = _random_vectors(docs[:2])
    vectors["d2-typo"] = vectors["d0"]
    with pytest.warns(UserWarning, match=r"vectors given for 1 citekey\(s\) not in this "
                                         r"ingest, not used: 'd2-typo'") as caught:
        stats = Ingester(conn, "given", embedder=embedder).ingest(docs, vectors=vectors)
    # the warning points at the caller's line
    assert any(w.filename == __file__ for w in caught)
    assert (stats.chunks_given, stats.chunks_reused, stats.chunks_embedded) == (2, 0, 1)
    assert any("d2-typo" in n for n in stats.notes)
    # the version by its number in the collection, and by the id SQL functions take
    assert (stats.index_version, stats.index_version_id) == conn.execute(
        "select v.version, v.id from pgfunnel.index_version v join pgfunnel.collection c "
        "on c.id = v.collection_id where c.name = 'given' and v.state = 'active'").fetchone()
    # a re-ingest of the same texts keeps their vectors: reused, not given
    again = Ingester(conn, "given", embedder=embedder).ingest(
        [DocumentRecord(d.citekey, d.text + " (edited)") if d.citekey == "d1" else d
         for d in docs])
    assert again.chunks_given == 0 and again.documents_unchanged == 2


def test_each_ingest_call_reports_its_own_stats(conn: psycopg.Connection[Any],
                                                embedder: Any) -> None:
    ingester = Ingester(conn, "calls", embedder=embedder)
    doc = DocumentRecord("d0", "document about refunds")
    first = ingester.ingest([doc])
    second = ingester.ingest([doc])
    third = ingester.ingest([doc])
    assert (first.documents_written, first.documents_unchanged, first.chunks_embedded) == \
        (1, 0, 1)
    # not running totals, and a stats object handed out before stays as it was
    assert (second.documents_written, second.documents_unchanged) == (0, 1)
    assert third.documents_unchanged == 1 and third is not second
    assert first.documents_unchanged == 0 and first.documents_written == 1


def test_vectors_given_for_an_unchanged_document_are_checked_and_noted(
        conn: psycopg.Connection[Any], embedder: Any) -> None:
    docs = [DocumentRecord(f"d{i}", f"document {i} about refunds") for i in range(2)]
    vectors = _random_vectors(docs)
    Ingester(conn, "given", embedder=embedder).ingest(docs, vectors=vectors)
    stored = conn.execute("select count(*), sum(vector_dims(embedding)) from pgfunnel.embedding"
                          ).fetchone()
    for bad, match in ((np.full((1, 384), np.nan, dtype=np.float32), "d0.*(NaN|finite)"),
                       (np.ones((1, 3), dtype=np.float32), r"d0.*\b384\b"),
                       (np.ones((2, 384), dtype=np.float32), r"'d0': 2 given for 1 chunks")):
        with pytest.raises((InvalidVectorError, InvalidInputError), match=match):
            Ingester(conn, "given", embedder=embedder).ingest(docs, vectors={**vectors, "d0": bad})
    again = Ingester(conn, "given", embedder=embedder).ingest(docs, vectors=vectors)
    assert again.documents_unchanged == 2 and again.chunks_given == 0
    assert any("2 unchanged document(s) were checked and not written" in n and "'d0'" in n
               for n in again.notes)
    assert conn.execute("select count(*), sum(vector_dims(embedding)) from pgfunnel.embedding"
                        ).fetchone() == stored


def test_another_chunk_size_chunks_unchanged_documents_again(
        conn: psycopg.Connection[Any], embedder: Any) -> None:
    """The chunk size is part of what a stored document was written from: a re-ingest
    with another --chunk-words used to find every document unchanged and keep the old
    chunks, silently."""
    text = " ".join(f"word{i}" for i in range(600))
    docs = [DocumentRecord("long", text), DocumentRecord("short", "a short note")]

    def chunks() -> int:
        row = conn.execute("select count(*) from pgfunnel.chunk c join pgfunnel.document d "
                           "on d.id = c.document_id where d.citekey = 'long'").fetchone()
        assert row is not None
        return int(row[0])

    first = Ingester(conn, "sized", embedder=embedder).ingest(docs)
    at_default = chunks()
    smaller = Ingester(conn, "sized", embedder=embedder, chunk_words=100).ingest(docs)
    assert (smaller.documents_written, smaller.documents_unchanged) == (2, 0)
    assert chunks() > at_default
    again = Ingester(conn, "sized", embedder=embedder, chunk_words=100).ingest(docs)
    assert (again.documents_written, again.documents_unchanged) == (0, 2)
    back = Ingester(conn, "sized", embedder=embedder).ingest(docs)
    assert back.documents_written == 2 and chunks() == at_default
    assert first.documents_written == 2
    assert_stats_exact(conn)
    # hashes made at the default size are the ones made before the size counted, so an
    # upgrade does not chunk every stored document again
    import hashlib

    from pgfunnel.sources import CHUNKING_PREFIX, CHUNKING_VERSION

    doc = docs[0]
    before = json.dumps([CHUNKING_VERSION, "", text, {}, None, [], None, None, None],
                        sort_keys=True, ensure_ascii=False)
    assert doc.content_hash() == doc.content_hash(200) == (
        CHUNKING_PREFIX + hashlib.sha256(before.encode()).hexdigest()) != doc.content_hash(100)


def test_an_older_chunking_version_rewrites_only_the_documents_it_cut_otherwise(
        conn: psycopg.Connection[Any], embedder: Any) -> None:
    """A new chunking version used to rewrite every stored document at its next ingest,
    though version 9 cuts only Thai, Lao, Khmer and Burmese text otherwise: a document
    whose fields are unchanged and whose stored chunks the new version gives again keeps
    its rows, and only its hash is brought up to date."""
    from pgfunnel.sources import CHUNKING_PREFIX, CHUNKING_VERSION

    thai = "".join(["ฐานข้อมูล", "การค้นหา", "เอกสาร", "สำหรับ"] * 60)
    docs = [DocumentRecord("en", "# Refunds\n\nRefunds take five days.", title="Refunds"),
            DocumentRecord("long", " ".join(f"word{i}" for i in range(500))),
            DocumentRecord("th", thai, title="ค้นหา")]
    Ingester(conn, "t", embedder=embedder).ingest(docs)

    def rows() -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for ck, cid in conn.execute(
                "select d.citekey, c.id from pgfunnel.document d join pgfunnel.chunk c "
                "on c.document_id = d.id order by c.id").fetchall():
            out.setdefault(ck, []).append(cid)
        return out

    before = rows()
    older = CHUNKING_VERSION - 1
    # as the version before stored them: the same fields, its hash; the Thai document's
    # chunks counted otherwise (that version counted a run of Thai as one word)
    for d in docs:
        conn.execute("update pgfunnel.document set content_hash = %s where citekey = %s",
                     (d.content_hash(chunking=older), d.citekey))
    conn.execute("update pgfunnel.chunk set token_count = 1 where document_id = "
                 "(select id from pgfunnel.document where citekey = 'th')")
    stats = Ingester(conn, "t", embedder=embedder).ingest(docs)
    assert (stats.documents_written, stats.documents_unchanged) == (1, 2)
    assert stats.chunks_embedded == 0
    after = rows()
    assert after["en"] == before["en"] and after["long"] == before["long"]
    assert not set(after["th"]) & set(before["th"])
    assert any("2 document(s) chunked by an older pgfunnel come out the same" in n
               for n in stats.notes), stats.notes
    assert any("1 document(s) had been chunked by an older pgfunnel" in n
               for n in stats.notes), stats.notes
    hashes = dict(conn.execute("select citekey, content_hash from pgfunnel.document"
                               ).fetchall())
    assert all(h.startswith(CHUNKING_PREFIX) for h in hashes.values())
    assert hashes == {d.citekey: d.content_hash() for d in docs}
    # a document whose fields changed is written whatever version stored it
    changed = [DocumentRecord("en", "# Refunds\n\nRefunds take ten days.", title="Refunds")]
    conn.execute("update pgfunnel.document set content_hash = %s where citekey = 'en'",
                 (docs[0].content_hash(chunking=older),))
    assert Ingester(conn, "t", embedder=embedder).ingest(changed).documents_written == 1
    assert_stats_exact(conn)


def test_documents_stored_before_heading_levels_are_rewritten_where_a_term_heads_a_chunk(
        conn: psycopg.Connection[Any], embedder: Any) -> None:
    """Chunking version 11 keeps each chunk's heading level, which a version counting a
    term's heading twice reads: a document stored before it whose chunks hold a term's
    heading (level 6, an API object's signature) is rewritten at the next ingest, its
    vectors kept; one without only has its hash brought up to date."""
    from pgfunnel.sources import CHUNKING_VERSION

    docs = [DocumentRecord("api", "# Settings\n\nHow to configure.\n\n"
                                  "###### settings.load_profile(name)\n\nLoads a profile.",
                           title="Settings"),
            DocumentRecord("guide", "# Guide\n\nRefunds take five days.", title="Guide")]
    Ingester(conn, "t", embedder=embedder).ingest(docs)
    # as chunking version 10 stored them: no level, its hash
    conn.execute("update pgfunnel.chunk set heading_level = 0")
    for d in docs:
        conn.execute("update pgfunnel.document set content_hash = %s where citekey = %s",
                     (d.content_hash(chunking=CHUNKING_VERSION - 1), d.citekey))
    stats = Ingester(conn, "t", embedder=embedder).ingest(docs)
    assert (stats.documents_written, stats.documents_unchanged) == (1, 1)
    assert stats.chunks_embedded == 0
    assert conn.execute(
        "select d.citekey, c.heading_level from pgfunnel.chunk c join pgfunnel.document d "
        "on d.id = c.document_id order by d.citekey, c.ordinal").fetchall() == [
        ("api", 1), ("api", 6), ("guide", 0)]
    # stored before levels were kept, a prose heading reads 0 (nothing counts it twice)
    assert_stats_exact(conn)


def test_another_model_of_the_same_size_is_refused_on_an_existing_collection(
        sample_db: str, embedder: Any, tmp_path: Path) -> None:
    """A model with the version's dimension but another name used to embed into the
    version's graph unnoticed (`ingest --model` on an existing collection): refused, by the
    CLI before the model loads and by Ingester, and nothing is written."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.db import connect
    from pgfunnel.errors import InvalidInputError
    from pgfunnel.ingest import same_model

    class Renamed:
        model_name = "/models/another-384-dim-model"
        dimensions = embedder.dimensions

        def embed(self, texts: Any, progress: Any = None) -> Any:
            raise AssertionError("nothing may be embedded")

    (tmp_path / "yak.md").write_text("# Yaks\n\nYak grooming twice a year.")
    with connect(sample_db, autocommit=True) as conn:
        before = conn.execute("select count(*) from pgfunnel.chunk").fetchone()
        with pytest.raises(InvalidInputError, match="indexed with 'all-MiniLM-L6-v2'"):
            Ingester(conn, "default", embedder=Renamed())  # type: ignore[arg-type]
        res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--model", "/models/other",
                                       "--dsn", sample_db])
        assert res.exit_code == 1, res.output
        assert "--model: collection 'default' is indexed with 'all-MiniLM-L6-v2'" in res.output
        assert "Traceback" not in res.output
        assert conn.execute("select count(*) from pgfunnel.chunk").fetchone() == before
    # the same model under its hub name or in a folder of its name is the same model
    assert same_model("sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2")
    assert same_model("/opt/models/all-MiniLM-L6-v2/", "all-MiniLM-L6-v2")
    assert not same_model("/tmp/tiny384", "all-MiniLM-L6-v2")


@pytest.mark.parametrize("name, message", [
    ("", "non-empty"), ("   ", "non-empty"), ("x" * 201, "at most 200"),
    ("tab\there", "control characters"),
    # a C1 control (U+0085 ends a line) and invisible format characters (a bidirectional
    # override showed the name reversed; a zero-width space not at all) were taken
    ("next\x85line", "control characters"), ("x\x9by", "control characters"),
    ("a\u202eb", "invisible format characters"), ("a\u200bb", "invisible format"),
    ("\ufeffdocs", "invisible format"),
    # a joiner belongs between letters; at an end it is invisible
    ("\u200cdocs", "invisible format"), ("docs\u200d", "invisible format")])
def test_a_collection_name_no_one_could_type_back_is_refused(conn: psycopg.Connection[Any],
                                                             name: str, message: str) -> None:
    from pgfunnel.errors import ConfigError

    with pytest.raises(ConfigError, match=f"collection: .*{message}"):
        Ingester(conn, name)
    with pytest.raises(ConfigError, match=message):
        get_or_create_collection(conn, name)
    assert conn.execute("select count(*) from pgfunnel.collection").fetchone() == (0,)


@pytest.mark.parametrize("name", ["docs ", " docs", "docs\u00a0", "\u3000docs"])
def test_a_new_collection_name_with_whitespace_at_an_end_is_refused(
        conn: psycopg.Connection[Any], name: str) -> None:
    # `-c "docs "` made a second collection beside `docs`: the ingest went into it and
    # searches of `docs` never read it
    with pytest.raises(ConfigError, match=r"^collection: a new collection's name must not "
                       "begin or end with whitespace"):
        Ingester(conn, name)
    with pytest.raises(ConfigError, match="must not begin or end with whitespace"):
        get_or_create_collection(conn, name)
    assert conn.execute("select count(*) from pgfunnel.collection").fetchone() == (0,)


def test_a_collection_that_has_whitespace_at_an_end_already_stays_reachable(
        conn: psycopg.Connection[Any]) -> None:
    # made before the rule (or by SQL): ingest and search still reach it by its name
    conn.execute("insert into pgfunnel.collection (name) values ('old ')")
    recs = [DocumentRecord("a", "alpha invoices")]
    stats = Ingester(conn, "old ").ingest(recs, vectors=_random_vectors(recs))
    assert stats.documents_written == 1
    assert get_or_create_collection(conn, "old ") == conn.execute(
        "select id from pgfunnel.collection where name = 'old '").fetchone()[0]  # type: ignore[index]


@pytest.mark.parametrize("dry_run", [True, False])
def test_ingest_refuses_a_new_collection_with_whitespace_at_an_end_before_the_model(
        db: str, tmp_path: Path, dry_run: bool) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    (tmp_path / "a.md").write_text("# A\n\nSome words here.")
    # a model that does not exist: refused before it would load, or the error names it
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", "docs ", "--dsn", db,
                                   "--model", str(tmp_path / "no-model"),
                                   *(["--dry-run"] if dry_run else [])],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 1, res.output
    assert ("error: --collection: a new collection's name must not begin or end with "
            "whitespace, got 'docs '") in res.output, res.output
    with psycopg.connect(db) as c:
        assert c.execute("select count(*) from pgfunnel.collection").fetchone() == (0,)


def test_ingest_dry_run_takes_a_collection_that_has_whitespace_at_an_end_already(
        db: str, tmp_path: Path) -> None:
    # a real ingest into an existing 'old ' works; --dry-run refused the name as a new
    # collection's without looking, though it had the database to look in
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    with psycopg.connect(db, autocommit=True) as c:
        c.execute("insert into pgfunnel.collection (name) values ('old ')")
    (tmp_path / "a.md").write_text("# A\n\nSome words here.")
    for prune in ([], ["--prune"]):
        res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", "old ", "--dsn", db,
                                       "--dry-run", *prune], env={"COLUMNS": "300"})
        assert res.exit_code == 0, res.output
        assert "1 document, 1 chunk" in res.output and "dry run: nothing written" in \
            res.output, res.output
    # a new one is still refused, as the real ingest refuses it
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", "new ", "--dsn", db,
                                   "--dry-run"], env={"COLUMNS": "300"})
    assert res.exit_code == 1 and "a new collection's name must not begin or end with " \
        "whitespace, got 'new '" in res.output, res.output
    with psycopg.connect(db) as c:
        assert c.execute("select name from pgfunnel.collection").fetchall() == [("old ",)]


def test_a_collection_name_may_join_its_letters(conn: psycopg.Connection[Any]) -> None:
    # Persian writes a zero-width non-joiner inside words, emoji sequences join with a
    # zero-width joiner: both were refused as invisible format characters
    for name in ("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
                 "team-\U0001F469\u200d\U0001F4BB"):
        assert get_or_create_collection(conn, name) > 0
    assert conn.execute("select count(*) from pgfunnel.collection").fetchone() == (2,)


def test_ingest_names_the_collection_flag_for_a_name_it_refuses(db: str,
                                                                tmp_path: Path) -> None:
    """The CLI names the flag a refused value was typed with (docs/cli.md, exit codes)."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    (tmp_path / "a.md").write_text("# A\n\nSome words here.")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", " ", "--dsn", db],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 1, res.output
    assert "error: --collection: must be a non-empty name" in res.output, res.output


def test_dry_run_refuses_the_collection_name_a_real_run_refuses(tmp_path: Path) -> None:
    """A dry run that passed with `-c ""` promised an ingest that then refused the name."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    (tmp_path / "a.md").write_text("# A\n\nSome words here.")
    for name in ("", " ", "a\tb"):
        res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", name, "--dry-run"],
                                 env={"COLUMNS": "300"})
        assert res.exit_code == 1, (name, res.output)
        assert "error: --collection: must " in res.output, res.output


@pytest.mark.parametrize("dry_run", [True, False])
def test_chunk_words_under_20_is_a_usage_error_with_or_without_dry_run(
        tmp_path: Path, dry_run: bool) -> None:
    # the dry run used to end in a traceback (ValueError from chunk_text)
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    (tmp_path / "a.md").write_text("# A\n\nSome words here.")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--chunk-words", "5",
                                   *(["--dry-run"] if dry_run else []), "--dsn", "bogus"],
                           env={"COLUMNS": "200"})
    assert res.exit_code == 2, res.output
    assert "--chunk-words" in res.output and "20" in res.output
    assert "Traceback" not in res.output


def test_cli_ingest_of_a_folder_names_the_documents_it_did_not_read(db: str,
                                                                    tmp_path: Path) -> None:
    """Ingest never deletes (docs/cli.md): after a file was removed from the folder, the
    next ingest said `1 document written, 1 unchanged` and nothing of the third document,
    still searchable. A note now names it and what deletes it; --prune, which deletes it,
    and a folder that gives every document, add none."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in (("a", "Apples ripen in autumn."), ("b", "Bananas ripen in heat."),
                       ("c", "Cherries ripen in spring.")):
        (docs / f"{name}.md").write_text(f"# {name.upper()}\n\n{text}\n")
    args = ["ingest", str(docs), "-c", "fruit", "--dsn", db]
    env = {"COLUMNS": "400"}
    res = CliRunner().invoke(app, args, env=env)
    assert res.exit_code == 0, res.output
    assert "did not give" not in res.stderr, res.stderr
    (docs / "c.md").unlink()
    (docs / "a.md").write_text("# A\n\nApples ripen in late autumn.\n")
    res = CliRunner().invoke(app, args, env=env)
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("1 document written, 1 unchanged;"), res.stdout
    assert ("note: collection 'fruit' holds 1 document that the folder did not give ('c'): "
            "a file removed since, or written by another source. Ingest never deletes: "
            "`pgfunnel delete --dsn") in res.stderr, res.stderr
    assert "-c fruit CITEKEY...` does, and --prune makes" in res.stderr, res.stderr
    res = CliRunner().invoke(app, [*args, "--json"], env=env)
    assert res.exit_code == 0, res.output
    assert [n for n in json.loads(res.stdout)["notes"] if "did not give ('c')" in n], res.stdout
    res = CliRunner().invoke(app, [*args, "--prune"], env=env)
    assert res.exit_code == 0, res.output
    assert "did not give" not in res.stderr, res.stderr
    assert res.stdout.endswith("1 document of collection 'fruit' pruned (not read by this "
                               "ingest):\n  c\n"), res.stdout
    res = CliRunner().invoke(app, args, env=env)
    assert res.exit_code == 0 and "did not give" not in res.stderr, res.output


def test_cli_ingest_of_one_file_without_root_says_the_collection_holds_it_twice(
        db: str, tmp_path: Path) -> None:
    """A user ingests a folder, edits one file and ingests that file by itself: its citekey
    is then its name (`setup`), not its path from the folder (`guides/setup`), so the
    collection held the file twice, the old text searchable beside the new, and the
    summary said `1 document written` and nothing more. A note now names both, the
    --root that replaces the older and the delete that takes the new one out; a file of
    one name in another folder (api/index beside index) is not taken for it."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "api").mkdir()
    (docs / "guides" / "setup.md").write_text("# Setup\n\nInstall the walrus package.\n")
    (docs / "api" / "index.md").write_text("# API\n\nThe walrus API.\n")
    (docs / "index.md").write_text("# Home\n\nWelcome.\n")
    env = {"COLUMNS": "400"}
    res = CliRunner().invoke(app, ["ingest", str(docs), "-c", "d", "--dsn", db], env=env)
    assert res.exit_code == 0, res.output
    assert "twice" not in res.stderr, res.stderr
    (docs / "guides" / "setup.md").write_text("# Setup\n\nInstall the narwhal package.\n")
    alone = docs / "guides" / "setup.md"
    res = CliRunner().invoke(app, ["ingest", str(alone), "-c", "d", "--dsn", db], env=env)
    assert res.exit_code == 0, res.output
    said = " ".join(res.stderr.split())
    assert ("note: collection 'd' now holds 1 file twice, under the citekey this ingest gave "
            "and under its path from a folder above, which an earlier ingest gave ('setup' "
            "beside 'guides/setup'): both are searchable, the older with the file's text as "
            "it was then.") in said, said
    assert f"--root {docs}`), and `pgfunnel delete --dsn" in said, said
    assert "-c d setup` takes out the documents this ingest added" in said, said
    # what it says to run replaces the older document, and leaves no second note
    res = CliRunner().invoke(app, ["ingest", str(alone), "--root", str(docs), "-c", "d",
                                   "--dsn", db, "--json"], env=env)
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout)
    assert stats["documents_written"] == 1 and stats["chunks_removed"] == 1, stats
    assert not [n for n in stats["notes"] if "twice" in n], stats["notes"]
    res = CliRunner().invoke(app, ["delete", "setup", "-c", "d", "--dsn", db])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["ingest", str(alone), "--root", str(docs), "-c", "d",
                                   "--dsn", db], env=env)
    assert res.exit_code == 0 and "twice" not in res.stderr, res.output
    # index.md ingested by itself is index, and api/index is another file's
    res = CliRunner().invoke(app, ["ingest", str(docs / "index.md"), "-c", "d", "--dsn", db],
                             env=env)
    assert res.exit_code == 0 and "twice" not in res.stderr, res.output


def test_delete_documents_report_names_the_citekeys_not_stored_with_hints(
        sample_conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    """`pgfunnel delete` named the citekeys it did not find and the stored ones each may
    have meant, but from the CLI only: a Python caller of delete_documents got a count,
    and which of its citekeys were not there was its to find. delete_documents_report
    gives them, in one transaction with the delete; delete_documents still returns the
    count."""
    from pgfunnel.ingest import CitekeyHint, delete_documents_report

    sample_conn.autocommit = True
    decomposed = "re\u0301sume\u0301"
    sample_conn.execute("update pgfunnel.document set citekey = 'billing/refunds-annual' "
                        "where citekey = 'refunds-annual'")
    sample_conn.execute("update pgfunnel.document set citekey = %s "
                        "where citekey = 'err-6358'", (decomposed,))
    stored = sample_conn.execute("select count(*) from pgfunnel.document").fetchone()
    assert stored is not None
    report = delete_documents_report(
        sample_conn, "default",
        ["refunds-annual", "billing/refunds-annual", "typo", "r\u00e9sum\u00e9", "typo"])
    assert report.deleted == 1
    # in the order given, once each; the one deleted is named in no hint
    assert report.missing == ["refunds-annual", "typo", "r\u00e9sum\u00e9"]
    assert report.hints == {"refunds-annual": CitekeyHint(),
                            "typo": CitekeyHint(),
                            "r\u00e9sum\u00e9": CitekeyHint(other_forms=[decomposed])}
    assert not report.hints["typo"] and report.hints["r\u00e9sum\u00e9"]
    sample_conn.execute("update pgfunnel.document set citekey = 'guides/billing/' || citekey "
                        "where citekey = 'refunds-monthly'")
    report = delete_documents_report(sample_conn, "default", ["refunds-monthly", "a", "b"],
                                     hints=1)
    assert report.deleted == 0 and report.missing == ["refunds-monthly", "a", "b"]
    assert report.hints == {"refunds-monthly": CitekeyHint(
        longer=["guides/billing/refunds-monthly"])}
    assert delete_documents_report(sample_conn, "default", ["x"], hints=0).hints == {}
    for bad in (-1, 1.5, True, "5"):
        with pytest.raises(ConfigError, match="hints: must be an integer of at least 0"):
            delete_documents_report(sample_conn, "default", ["x"], hints=bad)  # type: ignore[arg-type]
    after = sample_conn.execute("select count(*) from pgfunnel.document").fetchone()
    assert after is not None and after[0] == stored[0] - 1
    assert delete_documents(sample_conn, "default", [decomposed, "typo"]) == 1


def test_moved_files_names_a_file_stored_under_its_longer_path(
        conn: psycopg.Connection[Any], tmp_path: Path, embedder: Any) -> None:
    """The note on a file ingested by itself that the collection also holds under its
    path from a folder above was the CLI's: moved_files gives it to a Python caller of
    read_paths and Ingester."""
    from pgfunnel.ingest import MovedFile, moved_files
    from pgfunnel.sources import read_paths

    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "api").mkdir()
    (docs / "guides" / "setup.md").write_text("# Setup\n\nInstall the walrus package.\n")
    (docs / "api" / "index.md").write_text("# API\n\nThe walrus API.\n")
    (docs / "index.md").write_text("# Home\n\nWelcome.\n")
    conn.autocommit = True
    Ingester(conn, "d", embedder=embedder).ingest(list(read_paths([docs])))
    origins: dict[str, Path] = {}
    alone = docs / "guides" / "setup.md"
    # index.md is index wherever it is read from, and api/index another file's
    records = list(read_paths([alone, docs / "index.md"], origins=origins))
    Ingester(conn, "d", embedder=embedder).ingest(records)
    assert moved_files(conn, "d", origins) == [MovedFile("setup", "guides/setup", alone)]
    # a file of one name in another folder is not it; a collection not there holds none
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "setup.md").write_text("# Setup\n\nElsewhere.\n")
    assert moved_files(conn, "d", {"setup": tmp_path / "other" / "setup.md"}) == []
    assert moved_files(conn, "nope", origins) == []


def test_citekey_hints_and_moved_files_read_the_collection_once_at_most(
        sample_conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    """Each citekey's two hints read every citekey of the collection, normalizing each
    (0.5 s a query on 100,000 documents: a delete of five missing citekeys took 4 s),
    and moved_files fetched them all into Python to find the few a file's path could be
    (1 s for one file). The hints now take one pass for all the citekeys, and
    moved_files asks the citekey index for the paths the files lie at; the answers are
    those of the comparisons they replace."""
    from pgfunnel.ingest import CitekeyHint, MovedFile, _citekey_hints, collection_id, moved_files

    sample_conn.autocommit = True
    renames = {"refunds-annual": "billing/refunds-annual",
               "refunds-monthly": "guides/billing/refunds-monthly",
               "err-6358": "errors/Cafe\u0301/err-6358",
               "sso-trial": "Cafe\u0301"}
    for old, new in renames.items():
        renamed = sample_conn.execute("update pgfunnel.document set citekey = %s "
                                      "where citekey = %s", (new, old))
        assert renamed.rowcount == 1, old
    coll = collection_id(sample_conn, "default")
    assert coll is not None
    statements: list[tuple[str, int]] = []
    execute = sample_conn.execute

    def counted(query: Any, *args: Any, **kwargs: Any) -> Any:
        cur = execute(query, *args, **kwargs)
        statements.append((str(query), cur.rowcount))
        return cur

    sample_conn.execute = counted  # type: ignore[method-assign]
    keys = ["refunds-annual", "billing/refunds-monthly", "refunds-monthly", "err-6358",
            "Caf\u00e9/err-6358", "Caf\u00e9", "nothing-like-it"]
    assert _citekey_hints(sample_conn, coll, keys) == {
        "refunds-annual": CitekeyHint(longer=["billing/refunds-annual"]),
        "billing/refunds-monthly": CitekeyHint(longer=["guides/billing/refunds-monthly"]),
        "refunds-monthly": CitekeyHint(longer=["guides/billing/refunds-monthly"]),
        "err-6358": CitekeyHint(longer=["errors/Cafe\u0301/err-6358"]),
        "Caf\u00e9/err-6358": CitekeyHint(longer=["errors/Cafe\u0301/err-6358"]),
        "Caf\u00e9": CitekeyHint(other_forms=["Cafe\u0301"]),
        "nothing-like-it": CitekeyHint()}
    # the encoding, then one query, whatever the number of citekeys
    assert len(statements) == 2, statements
    statements.clear()
    docs = tmp_path / "docs"
    origins = {"refunds-annual": docs / "billing" / "refunds-annual.md",
               "refunds-monthly": docs / "guides" / "billing" / "refunds-monthly.md",
               "billing/refunds-monthly": docs / "guides" / "billing" / "refunds-monthly.md",
               "err-6358": docs / "other" / "err-6358.md"}
    assert moved_files(sample_conn, "default", origins) == [
        MovedFile("billing/refunds-monthly", "guides/billing/refunds-monthly",
                  origins["billing/refunds-monthly"]),
        MovedFile("refunds-annual", "billing/refunds-annual", origins["refunds-annual"]),
        MovedFile("refunds-monthly", "guides/billing/refunds-monthly",
                  origins["refunds-monthly"])]
    # the collection's id, then the citekeys the paths could be: not every citekey of it
    assert len(statements) == 2 and statements[-1][1] == 2, statements


def test_citekey_hints_in_a_latin1_database(server_dsn: str) -> None:
    """Postgres normalizes only in a UTF8 database: elsewhere the hints compare citekeys
    as stored, and name no other Unicode form."""
    from funnel_util import c_locale_database

    from pgfunnel.db import connect
    from pgfunnel.ingest import CitekeyHint, _citekey_hints

    with c_locale_database(server_dsn, "LATIN1") as dsn, connect(dsn, autocommit=True) as c:
        coll = get_or_create_collection(c, "l")
        for key in ("guides/Caf\u00e9", "notes/Caf\u00e9", "Cafe"):
            c.execute("insert into pgfunnel.document (collection_id, citekey, is_public, "
                      "content_hash) values (%s, %s, true, 'h')", (coll, key))
        assert _citekey_hints(c, coll, ["Caf\u00e9", "guides/Cafe"]) == {
            "Caf\u00e9": CitekeyHint(longer=["guides/Caf\u00e9", "notes/Caf\u00e9"]),
            "guides/Cafe": CitekeyHint()}


def test_a_citekey_the_database_cannot_spell_is_not_there(server_dsn: str) -> None:
    """A citekey with a character the database's encoding lacks (Chinese in a LATIN1
    database) raised a raw UnicodeEncodeError from delete_documents and
    delete_documents_report, and `pgfunnel delete` with it failed the whole delete: no
    document can have it, so it is one of those not found, with no hint, and the
    others given are deleted."""
    from funnel_util import c_locale_database

    from pgfunnel.db import connect
    from pgfunnel.ingest import CitekeyHint, delete_documents_report, get_or_create_collection

    with c_locale_database(server_dsn, "LATIN1") as dsn, connect(dsn, autocommit=True) as c:
        coll = get_or_create_collection(c, "l")
        for key in ("guides/Caf\u00e9", "Cafe"):
            c.execute("insert into pgfunnel.document (collection_id, citekey, is_public, "
                      "content_hash) values (%s, %s, true, 'h')", (coll, key))
        report = delete_documents_report(c, "l", ["\u7528\u6237", "Caf\u00e9", "Cafe"])
        assert (report.deleted, report.missing) == (1, ["\u7528\u6237", "Caf\u00e9"])
        assert report.hints == {"\u7528\u6237": CitekeyHint(),
                                "Caf\u00e9": CitekeyHint(longer=["guides/Caf\u00e9"])}
        assert delete_documents(c, "l", ["\u7528\u6237"]) == 0


def test_moved_files_under_a_folder_the_database_cannot_spell(
        server_dsn: str, tmp_path: Path) -> None:
    """moved_files sent the database every path a file could have from each folder above
    it, the folders outside the ingest's root included: a file under a folder whose name
    the database's encoding cannot hold (Chinese in a LATIN1 database, a name of bytes
    that are no UTF-8 on Linux, which Python holds as surrogates) stopped the ingest that
    had just written it, with an encoding error. Those paths are no citekey the
    collection can hold and are not asked for; the ones it can are still found."""
    from funnel_util import c_locale_database

    from pgfunnel.db import connect
    from pgfunnel.ingest import MovedFile, collection_id, get_or_create_collection, moved_files

    for encoding, folder in (("LATIN1", "\u7528\u6237"), ("UTF8", "bad\udcff"),
                             ("LATIN1", "bad\udcff")):
        with c_locale_database(server_dsn, encoding) as dsn, \
                connect(dsn, autocommit=True) as c:
            coll = get_or_create_collection(c, "m")
            for key in ("guides/Caf\u00e9", "x/guides/setup"):
                c.execute("insert into pgfunnel.document (collection_id, citekey, "
                          "is_public, content_hash) values (%s, %s, true, 'h')", (coll, key))
            assert collection_id(c, "m") == coll
            docs = tmp_path / folder / "docs"
            origins = {"Caf\u00e9": docs / "guides" / "Caf\u00e9.md",
                       "setup": docs / "guides" / "setup.md"}
            assert moved_files(c, "m", origins) == [
                MovedFile("Caf\u00e9", "guides/Caf\u00e9", origins["Caf\u00e9"])], encoding


def test_cli_ingest_of_a_gzip_file_past_the_limit_writes_nothing(
        db: str, tmp_path: Path, monkeypatch: Any) -> None:
    """A .jsonl.gz that expands past the limit on a compressed file's expanded size stops
    the ingest with an error naming the file and the limit, exit 1, before any document
    of the folder is written."""
    import gzip

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel import sources

    monkeypatch.setattr(sources, "MAX_EXPANDED_BYTES", 1 << 20)
    (tmp_path / "a.md").write_text("# A\n\nA page read before the archive.\n")
    lines = "".join(json.dumps({"citekey": f"k{i}", "text": "word " * 50}) + "\n"
                    for i in range(5000))
    assert len(lines) > 1 << 20
    (tmp_path / "z.jsonl.gz").write_bytes(gzip.compress(lines.encode()))
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", "gz", "--dsn", db],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 1, res.output
    said = " ".join(res.output.split())
    assert "z.jsonl.gz: expands past 1 MiB decompressed, the most pgfunnel reads of a " \
        "gzip-compressed file" in said, said
    with psycopg.connect(db) as conn:
        assert conn.execute("select count(*) from pgfunnel.document").fetchone() == (0,)
        assert conn.execute("select count(*) from pgfunnel.collection where name = 'gz'"
                            ).fetchone() == (0,)


def test_cli_ingest_takes_a_larger_gzip_limit_and_its_refusal_names_the_flag(
        tmp_path: Path) -> None:
    """The limit on a compressed file's expanded size (1 GiB) had no flag: a file that
    expands past it was refused with no way to read it but to gunzip it first.
    `--max-expanded-mib N` sets it for the run (`--dry-run` too), and the refusal names
    the flag."""
    import gzip

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    (tmp_path / "big.txt.gz").write_bytes(gzip.compress(b"word " * 420_000))
    assert 420_000 * 5 > 2 << 20
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run",
                                   "--max-expanded-mib", "2"], env={"COLUMNS": "300"})
    assert res.exit_code == 1, res.output
    said = " ".join(res.stderr.split())
    assert "big.txt.gz: expands past 2 MiB decompressed, the most pgfunnel reads of a " \
        "gzip-compressed file" in said, said
    assert "--max-expanded-mib" in said, said
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run", "--json",
                                   "--max-expanded-mib", "3"])
    assert res.exit_code == 0, res.output
    [planned] = json.loads(res.stdout)["documents"]
    assert planned["citekey"] == "big" and planned["words"] == 420_000
    for bad in ("0", "-1"):
        res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run",
                                       "--max-expanded-mib", bad])
        assert res.exit_code == 2, res.output
        assert "Invalid value for '--max-expanded-mib': must be at least 1" in res.output, \
            res.output


def test_cli_ingest_says_when_chunks_shared_a_text(db: str, tmp_path: Path) -> None:
    """The progress bar counts the texts the model read, the summary the chunks: an object
    documented on two pages read "902/902" above "916 embedded", as if 14 were lost."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    page = "# Request\n\nThe request object holds the headers and the body of a call.\n"
    (tmp_path / "a.md").write_text(page)
    # in another folder (two versions of a manual): in one folder it is a copy, left out
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "b.md").write_text(page)
    (tmp_path / "c.md").write_text("# Response\n\nThe response object.\n")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", "twice", "--dsn", db],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "3 chunks (3 embedded as 2 distinct texts, 0 reused)" in said, said
    # not a terminal, so no bars: each stage's last count as a line of its own
    assert "ingest: documents 3/3 (100%)" in said and "ingest: embedding (texts queued so " \
        "far) 2/2 (100%)" in said, said
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", "twice", "--dsn", db,
                                   "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["texts_embedded"] == 0


def test_cli_ingest_beaten_by_another_says_its_texts_were_embedded_for_nothing(
        db: str, tmp_path: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ingests of the same files at once: both embed every text before taking the
    collection's lock, and the one that waits finds the documents written by the other.
    Its summary read "0 embedded" beside "embed 50.9s", the time spent unaccounted."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.db import connect
    from pgfunnel.embedder import Embedder

    (tmp_path / "a.md").write_text("# Request\n\nThe request object holds the headers.\n")
    (tmp_path / "b.md").write_text("# Response\n\nThe response object holds the body.\n")
    with connect(db, autocommit=True) as conn:
        Ingester(conn, "race", embedder=embedder).ingest(
            [DocumentRecord("seed", "a document that makes the collection exist")])
    real_embed = Embedder.embed
    raced: list[int] = []

    def embed_while_another_ingest_writes(self: Embedder, texts: Any, progress: Any = None
                                          ) -> np.ndarray:
        vectors = real_embed(self, texts, progress)
        if not raced:
            # the other writer, on its own connection, commits the same files while this
            # one is still embedding, before it takes the lock. Another Ingester.ingest()
            # would wait for this run's run lock (here: forever, on this thread), so it
            # is a writer that takes none, as an older release's ingest is
            raced.append(1)
            with connect(db, autocommit=True) as other:
                Ingester(other, "race", embedder=embedder)._ingest(
                    list(read_path(tmp_path)), None)
        return vectors

    monkeypatch.setattr(Embedder, "embed", embed_while_another_ingest_writes)
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", "race", "--dsn", db],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert raced
    said = " ".join(res.output.split())
    assert "0 documents written, 2 unchanged; 0 chunks (0 embedded, 0 reused, 2 texts " \
        "embedded then found written by another ingest)" in said, said
    monkeypatch.setattr(Embedder, "embed", real_embed)
    (tmp_path / "c.md").write_text("# Cookie\n\nThe cookie jar.\n")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", "race", "--dsn", db,
                                   "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout)
    # an ingest that ran alone used every text it embedded
    assert (stats["texts_embedded"], stats["texts_unused"]) == (1, 0), stats


def test_cli_reingest_of_a_file_edited_into_a_copy_keeps_no_old_text(db: str,
                                                                      tmp_path: Path) -> None:
    """A file edited into another's text in its folder is a copy, left out of the ingest;
    its document from an earlier ingest kept its old text, searchable under its name, with
    a note saying only that it was left out. A copy whose citekey is stored is written."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    (tmp_path / "README.md").write_text("# Readme\n\nThe readme text about widgets.\n")
    (tmp_path / "notes.md").write_text("# Notes\n\nOld notes about gadgets.\n")
    args = ["ingest", str(tmp_path), "-c", "copies", "--dsn", db, "--json"]
    assert CliRunner().invoke(app, args).exit_code == 0
    (tmp_path / "notes.md").write_text((tmp_path / "README.md").read_text())
    (tmp_path / "copy.md").write_text((tmp_path / "README.md").read_text())
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["notes"] == [
        "left out 'copy': the same text as 'README' in its folder, a copy of that page",
        "kept 'notes', the same text as 'README' in its folder, a copy of that page: a "
        "document of that citekey is stored, and left out it would keep its old text "
        # the --dsn typed is named in the command to paste, in --json as in text
        f"(`pgfunnel delete --dsn {shlex.quote(db)} -c copies notes` takes it out)"]
    with psycopg.connect(db) as conn:
        stored: dict[str, str] = dict(conn.execute(
            "select d.citekey, string_agg(c.text, ' ') from pgfunnel.document d "
            "join pgfunnel.chunk c on c.document_id = d.id group by d.citekey").fetchall())
    assert stored == {"README": "Readme\n\nThe readme text about widgets.",
                      "notes": "Readme\n\nThe readme text about widgets."}
    # the dry run, with no database, says what a fresh collection would hold
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run", "--json"])
    assert [d["citekey"] for d in json.loads(res.stdout)["documents"]] == ["README"]


def test_cli_reingest_loads_no_model_when_no_chunk_needs_a_vector(db: str,
                                                                   tmp_path: Path) -> None:
    # importing torch and sentence-transformers and loading the model took about 10 s of
    # every `pgfunnel ingest`, also of one that finds every document unchanged
    import os
    import subprocess
    import sys

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# Refunds\n\nAsk within 30 days of the renewal.\n")
    (folder / "b.md").write_text("# Invoices\n\nDownload them under Billing.\n")
    script = ("import sys\nfrom pgfunnel.cli.main import app\ntry:\n    app()\n"
              "except SystemExit as exc:\n    code = exc.code\nelse:\n    code = 0\n"
              "print('model loaded' if 'sentence_transformers' in sys.modules else "
              "'no model', code, file=sys.stderr)\n")

    def ingest() -> str:
        res = subprocess.run([sys.executable, "-c", script, "ingest", str(folder), "-c", "lazy",
                              "--dsn", db], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"})
        return res.stderr.strip().splitlines()[-1] + " | " + res.stdout

    assert ingest().startswith("model loaded 0")          # a new collection: every chunk
    second = ingest()
    assert second.startswith("no model 0") and "2 unchanged" in second, second
    (folder / "b.md").write_text("# Invoices\n\nDownload them under Billing, Invoices.\n")
    third = ingest()                                      # one chunk needs the model
    assert third.startswith("model loaded 0") and "1 embedded" in third, third
    with psycopg.connect(db) as check:
        assert check.execute("select count(*) from pgfunnel.embedding").fetchone() == (2,)


def test_two_sources_of_one_citekey_are_named_and_one_path_twice_is_read_once(
        tmp_path: Path) -> None:
    from pgfunnel.sources import read_paths

    (tmp_path / "r.rst").write_text("Title\n=====\n\nA page.\n")
    (tmp_path / "lines.jsonl").write_text('{"citekey": "r", "text": "a line"}\n')
    (tmp_path / "a.md").write_text("# A\n\ntext\n")
    with pytest.raises(InvalidDocumentError, match=r"lines.jsonl and .*r.rst both give "
                                                  r"citekey 'r'"):
        list(read_paths([tmp_path / "lines.jsonl", tmp_path / "r.rst"]))
    one = tmp_path / "a.md"
    assert [d.citekey for d in read_paths([one, one, tmp_path / "." / "a.md"])] == ["a"]


def test_private_on_an_existing_public_collection_is_refused(
        conn: psycopg.Connection[Any], tmp_path: Path, embedder: Any) -> None:
    """Documents without readers asked to be private would have gone into the public
    collection, visible to every reader."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.errors import ConfigError

    docs = [DocumentRecord("open", "an open document")]
    Ingester(conn, "pub", embedder=embedder).ingest(docs, vectors=_random_vectors(docs))
    secret = [DocumentRecord("secret", "a document meant for nobody")]
    with pytest.raises(ConfigError, match="^private: collection 'pub' exists and is public"):
        Ingester(conn, "pub", embedder=embedder, private=True).ingest(
            secret, vectors=_random_vectors(secret))
    (tmp_path / "secret.md").write_text("# Secret\n\nmeant for nobody\n")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "secret.md"), "-c", "pub",
                                   "--private", "--dsn", conn.info.dsn],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 1 and "error: --private: collection" in res.output, res.output
    assert conn.execute("select count(*) from pgfunnel.document where citekey = 'secret'"
                        ).fetchone() == (0,)
    # a private collection takes more of its kind
    Ingester(conn, "priv", embedder=embedder, private=True).ingest(
        secret, vectors=_random_vectors(secret))
    Ingester(conn, "priv", embedder=embedder, private=True).ingest(
        docs, vectors=_random_vectors(docs))


def test_an_ingest_does_not_make_again_a_private_collection_dropped_under_it(
        db: str, embedder: Any) -> None:
    """`versions drop-collection` run while an ingest into the collection embedded: the
    ingest's next batch made the collection again with its own settings, public, so the
    documents without readers of a private collection came back readable by everyone."""
    from pgfunnel.db import connect
    from pgfunnel.embedder import Embedder
    from pgfunnel.errors import ConflictError
    from pgfunnel.versions import drop_collection

    class DropsTheCollectionFirst(Embedder):
        dropped = False

        def embed(self, texts: Sequence[str],
                  progress: Callable[[int], None] | None = None) -> np.ndarray:
            if not self.dropped:
                self.dropped = True
                with connect(db, autocommit=True) as other:
                    drop_collection(other, "pv")
            return super().embed(texts, progress=progress)

    dropper = DropsTheCollectionFirst.__new__(DropsTheCollectionFirst)
    dropper.__dict__.update(embedder.__dict__)
    with connect(db, autocommit=True) as conn:
        Ingester(conn, "pv", embedder=embedder, private=True).ingest(
            [DocumentRecord(citekey="a", text="Salaries of the whole staff, by name.")])
        with pytest.raises(ConflictError, match="'pv' was dropped while this ingest ran"):
            Ingester(conn, "pv", embedder=dropper, prepare_ahead=False).ingest(
                [DocumentRecord(citekey="b", text="Bonuses of the whole staff, by name.")])
        assert conn.execute("select count(*) from pgfunnel.collection").fetchone() == (0,)
        assert conn.execute("select count(*) from pgfunnel.document").fetchone() == (0,)


def test_hints_name_a_collection_with_a_space_as_a_shell_reads_it(
        db: str, embedder: Any) -> None:
    """The commands that errors and doctor findings give to paste named collection
    `my docs` as `-c my docs`, which a shell reads as collection `my` and a path `docs`;
    the CLI's own hints quote it."""
    from pgfunnel.db import connect
    from pgfunnel.doctor import run_checks
    from pgfunnel.errors import ConflictError

    with connect(db, autocommit=True) as conn:
        Ingester(conn, "my docs", embedder=embedder).ingest(
            [DocumentRecord(citekey="a", text="Some words to index.")])
        conn.execute("update pgfunnel.index_version set state = 'retired', "
                     "retired_at = now() where state = 'active'")
        with pytest.raises(ConflictError) as caught:
            Ingester(conn, "my docs", embedder=embedder).ingest(
                [DocumentRecord(citekey="b", text="More words.")])
        assert "pgfunnel versions activate N -c 'my docs'" in str(caught.value)
        findings = [f.message for f in run_checks(conn) if f.check == "active_index"]
    assert any("-c 'my docs'" in m for m in findings), findings
    assert not any("-c my docs" in m for m in findings), findings
def test_ingest_and_delete_on_a_connection_with_another_row_factory(
        conn: psycopg.Connection[Any], embedder: Any) -> None:
    # an application's connection opened with row_factory=dict_row failed Ingester() and
    # delete_documents with KeyError 0: pgfunnel reads its rows by position
    from psycopg.rows import dict_row

    conn.row_factory = dict_row
    docs = [DocumentRecord(citekey="a", text="refund policy for the annual plan"),
            DocumentRecord(citekey="b", text="how to reset a password")]
    stats = Ingester(conn, "dicts", embedder=embedder).ingest(docs)
    assert stats.documents_written == 2
    assert Ingester(conn, "dicts").embedder.model_name == embedder.model_name
    assert delete_documents(conn, "dicts", ["a"]) == 1
    assert conn.row_factory is dict_row  # put back
    assert conn.execute("select count(*) as n from pgfunnel.document").fetchone() == {"n": 1}


def test_ingest_on_a_connection_pgfunnel_did_not_open(db: str, embedder: Any) -> None:
    # a plain psycopg connection (the application's own, as a Funnel takes one) failed
    # with KeyError "couldn't find the type 'vector' in the types registry"
    with psycopg.connect(db, autocommit=True) as plain:
        stats = Ingester(plain, "plain", embedder=embedder).ingest(
            [DocumentRecord(citekey="a", text="refund policy for the annual plan")])
        assert stats.documents_written == 1 and stats.chunks_embedded == 1
        stats = Ingester(plain, "plain").ingest(
            [DocumentRecord(citekey="b", text="how to reset a password")],
            vectors={"b": embedder.embed(["how to reset a password"])})
        assert stats.chunks_given == 1


def test_an_ingester_takes_a_model_name_as_a_funnel_does_and_refuses_other_things(
        db: str) -> None:
    from pgfunnel.errors import ModelLoadError

    with psycopg.connect(db, autocommit=True) as conn:
        # a str had no .embed: an AttributeError from deep inside the first batch
        ing = Ingester(conn, "named", embedder="all-MiniLM-L6-v2")
        stats = ing.ingest([DocumentRecord(citekey="a", text="refund policy, annual plan")])
        assert stats.chunks_embedded == 1 and ing.embedder.dimensions == 384
        with pytest.raises(ModelLoadError, match="no such directory"):
            Ingester(conn, "named", embedder="/nonexistent/model-dir")
        with pytest.raises(ConfigError, match="^embedder: must be an Embedder"):
            Ingester(conn, "named", embedder=42)  # type: ignore[arg-type]
        assert conn.execute("select count(*) from pgfunnel.document").fetchone() == (1,)


def test_a_local_model_folder_given_as_a_path_object(db: str) -> None:
    """A Funnel took `embedder=Path(folder)` (docs: a string or os.PathLike), but an
    Ingester refused it ("embedder: must be an Embedder, a model id or local path ...,
    got PosixPath"), and the annotations of Funnel, Ingester and Embedder said `str`, so
    mypy --strict refused the Path all three take now."""
    import typing

    from pgfunnel.embedder import Embedder
    from pgfunnel.search import Funnel
    from pgfunnel.tiny_models import bundled_tokenizer_path

    folder = bundled_tokenizer_path()  # the bundled all-MiniLM-L6-v2, as a Path
    assert isinstance(folder, Path)
    for fn, name in ((Funnel.__init__, "embedder"), (Ingester.__init__, "embedder"),
                     (Embedder.__init__, "model")):
        hints = typing.get_type_hints(fn)
        assert any(typing.get_origin(h) is os.PathLike or h is os.PathLike
                   for h in typing.get_args(hints[name])), (fn, hints[name])
    with psycopg.connect(db, autocommit=True) as conn:
        ing = Ingester(conn, "bypath", embedder=folder)
        stats = ing.ingest([DocumentRecord(citekey="a", text="refund policy, annual plan")])
        assert stats.chunks_embedded == 1 and ing.embedder.dimensions == 384
        with Funnel(conn, "bypath", embedder=folder) as funnel:
            assert [r.citekey for r in funnel.search("refund", k=1).results] == ["a"]


def test_reingest_keeps_access_set_in_the_database_that_the_source_does_not_give(
        conn: psycopg.Connection[Any]) -> None:
    # A restriction set in SQL (docs invite it: files carry no readers) survived while the
    # file was unchanged, and was undone without a word at the first edit of its text: the
    # document was public again. Fields the record gives still win.
    from funnel_util import doc, ingest

    def search(text: str, principals: list[str], tenant: str | None = None) -> list[str]:
        return [r[0] for r in conn.execute(
            "select citekey from funnel_search(%s, null, 10, collection => 't', "
            "principals => %s, tenant => %s)", (text, principals, tenant))]

    ingest(conn, [doc("memo", "salary bands for the quarter"),
                  doc("plan", "office move timeline"),
                  doc("promo", "spring discount codes")])
    conn.execute("update pgfunnel.document set readers = '{hr}', is_public = false "
                 "where citekey = 'memo'")
    conn.execute("update pgfunnel.document set tenant = 'acme' where citekey = 'plan'")
    conn.execute("update pgfunnel.document set valid_to = now() - interval '1 day' "
                 "where citekey = 'promo'")
    edited = [doc("memo", "salary bands for the next quarter"),
              doc("plan", "office move timeline, revised"),
              doc("promo", "spring discount codes, extended")]
    ingester = Ingester(conn, "t")
    rng = np.random.default_rng(1)
    stats = ingester.ingest(edited, vectors={
        r.citekey: np.stack([v / np.linalg.norm(v) for v in rng.normal(size=(1, 16))])
        for r in edited})
    assert stats.documents_written == 3
    assert any("3 re-ingested document(s) keep readers, tenant or validity stored in the "
               "database that their source does not give ('memo', 'plan', 'promo')" in n
               for n in stats.notes), stats.notes
    rows = dict((r[0], r[1:]) for r in conn.execute(
        "select citekey, readers, is_public, tenant, valid_to is not null "
        "from pgfunnel.document order by citekey"))
    assert rows == {"memo": (["hr"], False, None, False), "plan": ([], True, "acme", False),
                    "promo": ([], True, None, True)}
    assert search("salary bands", []) == [] and search("salary bands", ["hr"]) == ["memo"]
    assert search("office move", []) == [] and search("office move", [], "acme") == ["plan"]
    assert search("discount codes", []) == []
    # what a record gives is written as given, and then nothing is kept to say
    again = [doc("memo", "salary bands for the next quarter", readers=["finance"]),
             doc("plan", "office move timeline, revised", tenant="globex")]
    stats = ingester.ingest(again, vectors={r.citekey: np.ones((1, 16)) / 4.0 for r in again})
    assert not any("keep readers" in n for n in stats.notes), stats.notes
    assert search("salary bands", ["finance"]) == ["memo"] and search("salary bands", ["hr"]) == []
    assert search("office move", [], "globex") == ["plan"]


def test_documents_without_readers_in_a_private_collection_are_named(
        conn: psycopg.Connection[Any]) -> None:
    # `pgfunnel ingest DIR --private` wrote documents that no search could find (files
    # carry no readers), without a word
    recs = [DocumentRecord("a", "alpha text"), DocumentRecord("b", "beta text"),
            DocumentRecord("c", "gamma text", readers=["alice"])]
    get_or_create_collection(conn, "vault", private=True)
    stats = Ingester(conn, "vault").ingest(recs, vectors=_random_vectors(recs))
    assert any("2 document(s) of private collection 'vault' have no readers, so no search "
               "finds them" in n for n in stats.notes), stats.notes
    conn.execute("update pgfunnel.document set readers = '{bob}' where citekey in ('a', 'b')")
    again = [DocumentRecord("a", "alpha text, edited"), DocumentRecord("b", "beta text, edited")]
    stats = Ingester(conn, "vault").ingest(again, vectors=_random_vectors(again))
    assert not any("have no readers" in n for n in stats.notes), stats.notes
    assert any("2 re-ingested document(s) keep readers" in n for n in stats.notes), stats.notes


def test_connection_that_ingest_cannot_use_is_named(db: str) -> None:
    from psycopg_pool import ConnectionPool

    from pgfunnel.errors import ConnectionFailedError

    # a DSN, a pool (what a Funnel takes) failed with a raw AttributeError: 'str' object
    # has no attribute 'row_factory'
    with pytest.raises(ConfigError, match=r"^conn: must be a psycopg Connection in "
                       r"autocommit mode, got builtins\.str: open one with "
                       r"pgfunnel\.db\.connect\(dsn, autocommit=True\)$"):
        Ingester(db, "c")  # type: ignore[arg-type]
    with (ConnectionPool(db, min_size=1, open=True) as pool,
          pytest.raises(ConfigError, match=r"^conn: .*got psycopg_pool\.pool\.ConnectionPool")):
        Ingester(pool, "c")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^conn: must be a psycopg Connection"):
        delete_documents(db, "c", ["a"])  # type: ignore[arg-type]
    # without autocommit: refused before any statement, so the connection is not left
    # idle in a transaction that nothing ends
    with psycopg.connect(db) as plain:
        with pytest.raises(ConfigError, match=r"^conn: Ingester needs a connection in "
                           r"autocommit mode$"):
            Ingester(plain, "c")
        assert plain.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    # a closed connection was a raw psycopg OperationalError
    closed = psycopg.connect(db, autocommit=True)
    closed.close()
    with pytest.raises(ConnectionFailedError, match="the connection is closed"):
        Ingester(closed, "c")


def _version_stats(conn: psycopg.Connection[Any], collection: str) -> tuple[Any, ...]:
    """The BM25 statistics of a collection's active version: chunks, total length, and
    each term's document frequency."""
    row = conn.execute(
        "select v.id, v.chunk_count, v.total_length from pgfunnel.index_version v "
        "join pgfunnel.collection c on c.id = v.collection_id "
        "where c.name = %s and v.state = 'active'", (collection,)).fetchone()
    assert row is not None
    terms = conn.execute("select term, df from pgfunnel.term_stat where index_version_id = %s "
                         "and df > 0 order by term", (row[0],)).fetchall()
    return row[1], row[2], terms


def _citekeys(conn: psycopg.Connection[Any], collection: str) -> list[str]:
    return [k for (k,) in conn.execute(
        "select d.citekey from pgfunnel.document d join pgfunnel.collection c "
        "on c.id = d.collection_id where c.name = %s order by 1", (collection,))]


def _synced_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "drafts").mkdir(parents=True)
    (folder / "setup.md").write_text("# Setup\n\nRun the installer, then sign in.\n")
    (folder / "billing.md").write_text("# Billing\n\nInvoices go out monthly.\n")
    (folder / "old.md").write_text("# Old\n\nThe legacy exporter writes zebra files.\n")
    (folder / "drafts" / "plan.md").write_text("# Plan\n\nA roadmap of quokka features.\n")
    (folder / "faq.jsonl").write_text(
        json.dumps({"citekey": "faq-1", "text": "Refunds take five days."}) + "\n"
        + json.dumps({"citekey": "faq-2", "text": "Passwords expire yearly."}) + "\n")
    return folder


def test_prune_deletes_exactly_the_documents_the_ingest_did_not_read(
        conn: psycopg.Connection[Any], tmp_path: Path, embedder: Any) -> None:
    """ingest(prune=True) makes the collection what a fresh ingest of the same records
    makes: the documents of files removed, or --exclude'd, since are deleted, a JSONL
    file's lines are read documents, and the BM25 statistics equal the fresh ingest's."""
    folder = _synced_folder(tmp_path)
    Ingester(conn, "sync", embedder=embedder).ingest(read_path(folder))
    Ingester(conn, "other", embedder=embedder).ingest([DocumentRecord("o", "other text")])
    assert _citekeys(conn, "sync") == ["billing", "drafts/plan", "faq-1", "faq-2", "old",
                                       "setup"]
    (folder / "old.md").unlink()
    (folder / "billing.md").write_text("# Billing\n\nInvoices go out yearly now.\n")
    from pgfunnel.sources import read_paths

    stats = Ingester(conn, "sync", embedder=embedder).ingest(
        read_paths([folder], exclude=["drafts"]), prune=True)
    assert stats.pruned == ["drafts/plan", "old"] and stats.documents_pruned == 2
    assert stats.documents_written == 1 and stats.documents_unchanged == 3
    assert _citekeys(conn, "sync") == ["billing", "faq-1", "faq-2", "setup"]
    assert _citekeys(conn, "other") == ["o"]  # another collection is not touched
    assert_stats_exact(conn)
    assert conn.execute("select count(*) from pgfunnel.term_stat where df > 0 and term in "
                        "('zebra', 'quokka')").fetchone() == (0,)
    Ingester(conn, "fresh", embedder=embedder).ingest(read_paths([folder], exclude=["drafts"]))
    assert _version_stats(conn, "sync") == _version_stats(conn, "fresh")
    # in sync: a second run prunes nothing
    again = Ingester(conn, "sync", embedder=embedder).ingest(
        read_paths([folder], exclude=["drafts"]), prune=True)
    assert again.pruned == [] and again.documents_unchanged == 4
    with pytest.raises(ConfigError, match="^prune: must be True or False"):
        Ingester(conn, "sync").ingest([], prune="yes")  # type: ignore[arg-type]


def test_prune_of_an_ingest_that_read_nothing_is_refused(conn: psycopg.Connection[Any],
                                                         embedder: Any) -> None:
    """An ingest of no records with prune=True would delete the whole collection (a
    folder path misspelt into an empty one): refused, nothing deleted."""
    Ingester(conn, "sync", embedder=embedder).ingest(
        [DocumentRecord("a", "alpha text"), DocumentRecord("b", "beta text")])
    before = _counts(conn)
    with pytest.raises(InvalidInputError, match="^prune: this ingest read no document, and "
                                                "pruning would delete every document of "
                                                "collection 'sync'; nothing was deleted"):
        Ingester(conn, "sync", embedder=embedder).ingest(iter([]), prune=True)
    assert _counts(conn) == before


def test_prune_deletes_nothing_when_the_ingest_fails_or_is_interrupted(
        conn: psycopg.Connection[Any], embedder: Any) -> None:
    """The batches commit one by one, so the prune waits for the last: an ingest that
    fails at a later batch, or is interrupted after its first, deletes nothing, the
    batches committed before stay."""
    Ingester(conn, "sync", embedder=embedder).ingest(
        [DocumentRecord("keep", "kept text"), DocumentRecord("stale", "stale text")])
    conn.execute("alter table pgfunnel.chunk add constraint no_boom check (text !~ 'boom')")
    run = [DocumentRecord("keep", "kept text, changed"), DocumentRecord("new", "this will boom")]
    with pytest.raises(Exception, match="no_boom"):
        Ingester(conn, "sync", embedder=embedder, batch_documents=1).ingest(run, prune=True)
    assert _citekeys(conn, "sync") == ["keep", "stale"]
    assert conn.execute("select text from pgfunnel.chunk c join pgfunnel.document d on "
                        "d.id = c.document_id where d.citekey = 'keep'"
                        ).fetchone() == ("kept text, changed",)

    def interrupt(stage: str, n: int, total: int | None) -> None:
        if stage == "documents":
            raise KeyboardInterrupt

    run = [DocumentRecord("keep", "kept text, again"), DocumentRecord("new", "new text")]
    with pytest.raises(KeyboardInterrupt):
        Ingester(conn, "sync", embedder=embedder, batch_documents=1,
                 progress=interrupt).ingest(run, prune=True)
    assert _citekeys(conn, "sync") == ["keep", "stale"]
    assert_stats_exact(conn)


def test_prune_by_a_role_that_may_not_delete_is_refused_before_anything_is_written(
        conn: psycopg.Connection[Any]) -> None:
    """A role that may insert documents but not delete them would have found out after
    the whole ingest, its batches written and the prune failing; it is refused first."""
    from funnel_util import make_collection

    from pgfunnel.errors import AccessError

    make_collection(conn, "t", 16)
    recs = [DocumentRecord("keep", "kept text"), DocumentRecord("stale", "stale text")]
    Ingester(conn, "t").ingest(recs, vectors=_random_vectors(recs, dim=16))
    before = _counts(conn)
    conn.execute("create role pgf_app_noprune")
    # a writer of its own, granted all but DELETE
    conn.execute("grant usage on schema pgfunnel to pgf_app_noprune")
    conn.execute("grant select, insert, update, delete on all tables in schema pgfunnel "
                 "to pgf_app_noprune")
    conn.execute("revoke delete on pgfunnel.document from pgf_app_noprune")
    conn.execute("grant usage on all sequences in schema pgfunnel to pgf_app_noprune")
    conn.execute("grant execute on all functions in schema pgfunnel to pgf_app_noprune")
    conn.execute("set role pgf_app_noprune")
    try:
        new = [DocumentRecord("keep", "kept text"), DocumentRecord("new", "new text")]
        with pytest.raises(AccessError, match="^role 'pgf_app_noprune' may not prune "
                                              "documents: it lacks DELETE on "
                                              "pgfunnel.document"):
            Ingester(conn, "t").ingest(new, vectors=_random_vectors(new, dim=16), prune=True)
    finally:
        conn.execute("reset role")
    assert _counts(conn) == before


def test_cli_ingest_reads_files_that_are_not_utf8_in_the_encoding_given(db: str,
                                                                       tmp_path: Path) -> None:
    """A Markdown, text, reST or AsciiDoc file in windows-1252 (older docs) was refused,
    with iconv as the only way on; --encoding reads it, and read_paths(encoding=) too."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.sources import read_paths

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "cafe.md").write_bytes("# Café\n\nThe café serves crème brûlée “daily”.\n"
                                   .encode("cp1252"))
    (docs / "notes.txt").write_bytes("Señor Muñoz wrote the notes.\n".encode("cp1252"))
    (docs / "guide.rst").write_bytes("Guide\n=====\n\nÉtude of the façade.\n".encode("cp1252"))
    (docs / "manual.adoc").write_bytes("= Manual\n\nDéjà vu.\n".encode("cp1252"))
    # a UTF-8 file beside them stays UTF-8, its byte order mark dropped as before
    (docs / "utf8.md").write_bytes(b"\xef\xbb\xbf# Utf\n\nna\xc3\xafve\n")
    # HTML: a declared charset wins; one that declares none is read in the encoding given
    (docs / "page.html").write_bytes(
        '<html><head><meta charset="koi8-r"><title>Page</title></head><body><h1>Page</h1>'
        "<p>Привет</p></body></html>".encode("koi8-r"))
    (docs / "bare.html").write_bytes("<html><body><h1>Bare</h1><p>Привет мир</p></body>"
                                     "</html>".encode("cp1251"))
    base = ["ingest", str(docs), "-c", "latin", "--dsn", db]
    res = CliRunner().invoke(app, base)
    assert res.exit_code == 1, res.output
    said = " ".join(res.output.split())
    assert "not valid UTF-8" in said and "--encoding cp1252" in said, said
    assert "iconv" not in said
    # an unknown name is refused, naming it, before anything is read or written
    for name in ("no-such-codec", "base64"):
        res = CliRunner().invoke(app, [*base, "--encoding", name])
        assert res.exit_code == 1, res.output
        assert f"--encoding: {name!r} is not a text encoding Python knows" in \
            " ".join(res.output.split()), res.output
    with psycopg.connect(db) as conn:
        assert conn.execute("select count(*) from pgfunnel.collection").fetchone() == (0,)
    with pytest.raises(ConfigError, match="encoding"):
        list(read_paths([docs], encoding="no-such-codec"))
    # a codec that does not fit the bytes is a named error
    res = CliRunner().invoke(app, [*base, "--encoding", "ascii"])
    assert res.exit_code == 1 and "nor the ascii given (--encoding)" in \
        " ".join(res.output.split()), res.output
    res = CliRunner().invoke(app, [*base, "--encoding", "cp1252", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["documents_written"] == 7
    with psycopg.connect(db) as conn:
        texts: dict[str, str] = dict(conn.execute(
            "select d.citekey, string_agg(c.text, ' ' order by c.ordinal) "
            "from pgfunnel.document d join pgfunnel.chunk c on c.document_id = d.id "
            "group by d.citekey").fetchall())
    assert "The café serves crème brûlée “daily”." in texts["cafe"]
    assert "Señor Muñoz" in texts["notes"]
    assert "Étude of the façade." in texts["guide"]
    assert "Déjà vu." in texts["manual"]
    assert texts["utf8"] == "Utf\n\nnaïve"
    assert "Привет" in texts["page"]
    # cp1252 reads cp1251's bytes as letters of its own: the page declares nothing, so
    # the encoding given is what it is read in, not the windows-1252 guess
    assert "Привет мир" not in texts["bare"]
    (rec,) = [r for r in read_paths([docs / "bare.html"], encoding="cp1251")]
    assert "Привет мир" in rec.text


def test_encoding_given_reads_a_page_that_declares_utf8_but_is_not(tmp_path: Path) -> None:
    """A page whose template declares UTF-8 around windows-1252 text (a common legacy
    mix) was refused as 'not valid UTF-8, nor the utf-8 it declares' even with
    --encoding cp1252: a declared UTF-8 says nothing the failed read did not."""
    from pgfunnel.sources import read_paths

    page = tmp_path / "page.html"
    page.write_bytes('<html><head><meta charset="utf-8"><title>Café</title></head><body>'
                     "<h1>Café</h1><p>Crème brûlée, served daily.</p></body></html>"
                     .encode("cp1252"))
    (rec,) = read_paths([page], encoding="cp1252")
    assert rec.title == "Café" and "Crème brûlée, served daily." in rec.text
    # without it, the refusal names the way out
    with pytest.raises(InvalidDocumentError, match="not valid UTF-8.*--encoding cp1252") as exc:
        list(read_paths([page]))
    assert "utf-8 it declares" not in str(exc.value)


def test_encoding_given_reads_utf16_without_a_byte_order_mark(tmp_path: Path) -> None:
    """UTF-16 written without a byte order mark (a .txt saved as 'Unicode' by some tools)
    holds ASCII letters as valid UTF-8 with a NUL after each: `--encoding utf-16-le` was
    passed over (the bytes were valid UTF-8) and the file refused for its NUL bytes."""
    from pgfunnel.sources import read_paths

    path = tmp_path / "notes.txt"
    path.write_bytes("Plain notes, written as UTF-16.\n".encode("utf-16-le"))
    (rec,) = read_paths([path], encoding="utf-16-le")
    assert rec.text == "Plain notes, written as UTF-16."
    # without the option, or with one that leaves the NULs, the refusal stays
    for encoding in (None, "latin-1"):
        with pytest.raises(InvalidDocumentError, match="NUL"):
            list(read_paths([path], encoding=encoding))
    # a UTF-8 file is still read as UTF-8 whatever is given
    path.write_bytes("Naïve notes.\n".encode())
    (rec,) = read_paths([path], encoding="utf-16-le")
    assert rec.text == "Naïve notes."


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "UTF16"])
def test_a_utf16_encoding_given_for_a_file_that_is_not_utf16_is_refused(
        tmp_path: Path, db: str, encoding: str) -> None:
    """`--encoding utf-16` on a windows-1252 file (not UTF-8, so read in the encoding
    given) decoded its bytes two at a time without an error and stored CJK-looking
    mojibake without a word. Such bytes hold no NUL, which UTF-16 holds
    beside every ASCII character: refused, naming the file and the encoding, as a file
    the encoding given cannot decode is, and nothing of the run is written."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.sources import read_paths

    docs = tmp_path / "docs"
    docs.mkdir()
    text = "# Café\n\nCrème brûlée “daily”, and refunds on the annual plan.\n"
    data = text.encode("cp1252")
    (docs / "cafe.md").write_bytes(data + (b"\n" if len(data) % 2 else b""))
    (docs / "plain.md").write_bytes(b"# Plain\n\nASCII notes, read as UTF-8.\n")
    with pytest.raises(InvalidDocumentError) as exc:
        list(read_paths([docs / "cafe.md"], encoding=encoding))
    said = str(exc.value)
    assert said.startswith(f"{docs / 'cafe.md'}: not valid UTF-8, nor the {encoding} "
                           "given (--encoding): read as"), said
    assert "mojibake" in said and "--encoding cp1252" in said, said
    res = CliRunner().invoke(app, ["ingest", str(docs), "-c", "enc", "--encoding", encoding,
                                   "--dsn", db], env={"COLUMNS": "300"})
    assert res.exit_code == 1, res.output
    assert f"error: {docs / 'cafe.md'}: not valid UTF-8, nor the {encoding} given" in \
        " ".join(res.output.split()), res.output
    # as for any file the run cannot decode: nothing written, the ASCII file neither
    with psycopg.connect(db) as conn:
        assert conn.execute("select count(*) from pgfunnel.document").fetchone() == (0,)
    # UTF-16 that is: CJK text with a line break (its NUL byte), with or without ASCII
    for real in ("日本語のテキスト\n", "# 日本語\n\nテキスト and text\n"):
        codec = "utf-16-le" if encoding in ("utf-16", "UTF16") else encoding
        (docs / "cafe.md").write_bytes(real.encode(codec))
        (rec,) = read_paths([docs / "cafe.md"], encoding=codec)
        assert rec.text.strip().endswith(real.strip().split("\n")[-1]), rec


@pytest.mark.parametrize("name, data", [
    ("pic.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))),
    ("prog.md", b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(128, 256)) * 4),
])
def test_a_binary_file_is_said_to_be_binary_not_sent_to_an_8_bit_encoding(
        tmp_path: Path, name: str, data: bytes) -> None:
    """A file of NUL bytes and others that are not UTF-8 (an image or a program saved
    with a text suffix) was told to give `--encoding cp1252`, which read it as mojibake
    or failed again; it is said to hold NUL bytes, as binary files do."""
    from pgfunnel.sources import read_paths

    (tmp_path / name).write_bytes(data)
    (tmp_path / "fine.md").write_text("# Fine\n\nText.\n")
    with pytest.raises(InvalidDocumentError) as exc:
        list(read_paths([tmp_path]))
    said = str(exc.value)
    assert said.startswith(f"{tmp_path / name}: not valid UTF-8 (byte "), said
    assert "it holds NUL bytes, as binary files (an image, an archive, a program) do" in said
    assert "leave it out with --exclude" in said and "cp1252" not in said, said
    assert [r.citekey for r in read_paths([tmp_path], exclude=[name])] == ["fine"]


def test_utf_16_text_without_a_byte_order_mark_is_pointed_at_its_encoding(
        tmp_path: Path) -> None:
    from pgfunnel.sources import read_paths

    path = tmp_path / "notes.md"
    path.write_bytes("# Ünïcode\n\ncafé text\n".encode("utf-16-le"))
    with pytest.raises(InvalidDocumentError, match=r"holds NUL bytes.*--encoding utf-16-le"):
        list(read_paths([path]))
    (rec,) = read_paths([path], encoding="utf-16-le")
    assert rec.title == "Ünïcode" and "café text" in rec.text


_CAFE_PAGE = ("<html><head>{meta}<title>Café</title></head><body><h1>Café</h1>"
              "<p>Crème brûlée “daily”.</p></body></html>")


@pytest.mark.parametrize("charset", ["utf-8-sig", "UTF-16", "utf-16le", "UTF-32BE"])
def test_a_page_declaring_a_utf_it_is_not_is_read_in_the_encoding_given(
        tmp_path: Path, charset: str) -> None:
    """A windows-1252 page whose <meta> says utf-8-sig was refused even with --encoding
    cp1252 ('nor the utf-8-sig it declares'); one whose <meta> says UTF-16 was read as
    UTF-16, whatever --encoding said, and stored as CJK mojibake without a word."""
    from pgfunnel.sources import read_paths

    page = tmp_path / "page.html"
    page.write_bytes(_CAFE_PAGE.format(meta=f'<meta charset="{charset}">').encode("cp1252"))
    (rec,) = read_paths([page], encoding="cp1252")
    assert rec.title == "Café" and rec.text.endswith("Crème brûlée “daily”."), rec
    with pytest.raises(InvalidDocumentError) as exc:
        list(read_paths([page]))
    said = str(exc.value)
    assert said.startswith(f"{page}: not valid UTF-8 (byte ") and "--encoding cp1252" in said
    if "16" in charset or "32" in charset:
        assert f"cannot be the {charset.lower().replace('le', '-le').replace('be', '-be')} " \
               "it declares" in said, said
    else:
        assert "it declares" not in said, said
    # a page that is UTF-8 is read as UTF-8, whatever it declares or is given
    page.write_bytes(_CAFE_PAGE.format(meta=f'<meta charset="{charset}">').encode())
    for encoding in (None, "cp1252"):
        (rec,) = read_paths([page], encoding=encoding)
        assert rec.text.endswith("Crème brûlée “daily”."), rec


def test_a_declared_charset_the_bytes_do_not_fit_gives_way_to_the_encoding_given(
        tmp_path: Path) -> None:
    """A page declaring shift_jis around windows-1252 text was refused even with
    --encoding cp1252; one declaring a codec that is not a text encoding ended the ingest
    in a LookupError traceback. A declaration the bytes fit still wins."""
    from pgfunnel.sources import read_paths

    page = tmp_path / "page.html"
    for charset in ("shift_jis", "base64", "rot13"):
        page.write_bytes(_CAFE_PAGE.format(meta=f'<meta charset="{charset}">')
                         .encode("cp1252"))
        (rec,) = read_paths([page], encoding="cp1252")
        assert rec.title == "Café" and rec.text.endswith("Crème brûlée “daily”."), rec
        with pytest.raises(InvalidDocumentError, match=f"^{page}: not valid UTF-8.*"
                                                       r"--encoding.*--exclude$"):
            list(read_paths([page]))
    page.write_bytes('<html><head><meta charset="koi8-r"><title>Кафе</title></head><body>'
                     "<h1>Кафе</h1><p>Меню дня.</p></body></html>".encode("koi8-r"))
    (rec,) = read_paths([page], encoding="cp1251")
    assert rec.title == "Кафе", rec


def test_a_byte_order_mark_is_read_only_when_it_agrees_with_the_encoding_given(
        db: str, tmp_path: Path) -> None:
    """A UTF-16 file's byte order mark won over --encoding cp1252 without a word; a UTF-32
    one was read as UTF-16 and refused for its NUL bytes; a UTF-8 mark before windows-1252
    text was refused with advice to give the --encoding cp1252 already given."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.sources import read_paths

    text = "# Notes\n\nCafé — done.\n"
    notes = tmp_path / "notes.md"
    for codec, said, agreeing in (
            ("utf-16-le", "UTF-16 (little-endian)", ("utf-16", "utf-16-le", "UTF_16LE")),
            ("utf-16-be", "UTF-16 (big-endian)", ("utf-16", "utf-16-be")),
            ("utf-32-le", "UTF-32 (little-endian)", ("utf-32", "utf-32-le")),
            ("utf-32-be", "UTF-32 (big-endian)", ("utf-32", "utf-32-be"))):
        notes.write_bytes(("\ufeff" + text).encode(codec))
        for encoding in (None, *agreeing):
            (rec,) = read_paths([notes], encoding=encoding)
            assert rec.text == "# Notes\n\nCafé — done.", (codec, encoding, rec.text)
        other = "utf-16-be" if codec.endswith("le") else "utf-16-le"
        for encoding in ("cp1252", "utf-8", other):
            with pytest.raises(InvalidDocumentError) as exc:
                list(read_paths([notes], encoding=encoding))
            assert str(exc.value).startswith(
                f"{notes}: starts with a {said} byte order mark, but --encoding {encoding} "
                f"was given; ingest it by itself with --encoding {agreeing[0]} (or without "
                "--encoding)"), str(exc.value)
    # the CLI says it on one line, exit 1, before anything is written
    notes.write_bytes(text.encode("utf-16"))
    (tmp_path / "old.md").write_bytes("# Old\n\nSeñor Muñoz.\n".encode("cp1252"))
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--encoding", "cp1252",
                                   "--dsn", db])
    said = " ".join(res.output.split())
    assert res.exit_code == 1 and said.startswith(f"error: {notes}: starts with a UTF-16 "), said
    assert "but --encoding cp1252 was given" in said and "Traceback" not in said, said
    with psycopg.connect(db) as conn:
        assert conn.execute("select count(*) from pgfunnel.document").fetchone() == (0,)
    # a UTF-8 mark before text that is not UTF-8
    notes.write_bytes(b"\xef\xbb\xbf" + text.encode("cp1252"))
    for encoding in (None, "utf-8", "cp1252"):
        with pytest.raises(InvalidDocumentError) as exc:
            list(read_paths([notes], encoding=encoding))
        said = str(exc.value)
        assert said.startswith(f"{notes}: starts with a UTF-8 byte order mark but is not "
                               "UTF-8 (byte "), said
        assert "--encoding cp1252" not in said
        assert ("not read in the cp1252 given" in said) == (encoding == "cp1252"), said
    # and one before UTF-8 is read as UTF-8, whatever is given
    notes.write_bytes(b"\xef\xbb\xbf" + text.encode())
    (rec,) = read_paths([notes], encoding="cp1252")
    assert rec.text == "# Notes\n\nCafé — done."


def test_a_text_line_opening_with_backticks_is_stored_and_shown_as_written(
        db: str, tmp_path: Path) -> None:
    """A reST or AsciiDoc line of text starting with three backticks (or a `#`) is escaped
    for the chunker lest it open a code block; the backslash showed in the stored chunk
    and in `pgfunnel search` ("\\```python ..."), text that is not in the document."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    (tmp_path / "guide.rst").write_text(
        "Guide\n=====\n\n```python opens a Markdown code block, zanzibar.\n\n"
        "# zanzibar is a root prompt here\n\n~~~ zanzibar tildes\n\n"
        ".. code-block:: md\n\n   \\```\n   kept as code\n\n"
        "Install\n-------\n\nRun the installer.\n")
    (tmp_path / "manual.adoc").write_text(
        "= Manual\n\n```bash is prose here, quokka.\n\n== Next\n\nAfter.\n")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", "fences", "--dsn", db,
                                   "--json"])
    assert res.exit_code == 0, res.output
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "select d.citekey, c.heading, c.text from pgfunnel.chunk c join pgfunnel.document"
            " d on d.id = c.document_id order by d.citekey, c.ordinal").fetchall()
    # still prose to the chunker: the sections below it are sections
    assert [(key, heading) for key, heading, _ in rows] == [
        ("guide", "Guide"), ("guide", "Install"), ("manual", "Manual"), ("manual", "Next")]
    guide = rows[0][2].split("\n")
    assert "```python opens a Markdown code block, zanzibar." in guide
    assert "# zanzibar is a root prompt here" in guide and "~~~ zanzibar tildes" in guide
    # a line inside a code block is code, kept as written
    assert [line.strip() for line in guide if "kept" in line or "`" in line][-2:] == [
        "\\```", "kept as code"]
    assert "```bash is prose here, quokka." in rows[2][2].split("\n")
    assert "\\```" not in rows[2][2]
    res = CliRunner().invoke(app, ["search", "quokka", "-c", "fences", "--dsn", db,
                                   "--lexical-only"], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert "```bash is prose here, quokka." in res.stdout and "\\```" not in res.stdout


def test_cli_ingest_prints_results_on_stdout_and_notes_on_stderr(db: str,
                                                                 tmp_path: Path) -> None:
    """`pgfunnel ingest DIR > log` kept the notes (files left out, a version created) in
    the log under the summary, while progress and warnings went to stderr; a note is
    not a result: it is a `note:` line on stderr, as init's and migrate's are."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    (tmp_path / "a.md").write_text("# Alpha\n\nThe alpha page about widgets.\n")
    (tmp_path / "empty.md").write_text("")
    (tmp_path / "old.md").write_text("# Old\n\nA page the next ingest no longer reads.\n")
    base = ["ingest", str(tmp_path), "-c", "streams", "--dsn", db]
    for args in ([*base, "--dry-run"], base):
        res = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert res.exit_code == 0, res.output
        assert "empty.md" not in res.stdout and "note:" not in res.stdout, res.stdout
        assert "note: " in res.stderr and "empty.md: no text, skipped" in res.stderr
        # the results stay on stdout: the listing, or the summary
        assert ("2 documents, 2 chunks" if "--dry-run" in args
                else "2 documents written") in " ".join(res.stdout.split()), res.stdout
    assert "created index version 1 (active)" in res.stderr
    # what --prune deletes is a result, on stdout
    (tmp_path / "old.md").unlink()
    res = CliRunner().invoke(app, [*base, "--prune"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "1 document of collection 'streams' pruned" in res.stdout
    assert "  old" in res.stdout.splitlines()


def test_ingest_makes_a_new_collection_with_the_analyzer_it_names(db: str,
                                                                  tmp_path: Path) -> None:
    """`ingest --analyzer german_v8` into a new collection: its first version reads German
    (before, every new collection got english_v8, and a reindex moved it); naming another
    analyzer for an existing collection, or an unknown one, is refused before the model
    loads and before anything is written."""
    from funnel_util import doc, lexical
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.db import connect

    recs = [doc("verz", "Die Verzeichnisse werden beim Start angelegt."),
            doc("andere", "Rückerstattungen und Rechnungen werden monatlich gestellt.")]
    with connect(db, autocommit=True) as conn:
        Ingester(conn, "de", analyzer="german_v8").ingest(recs, vectors=_random_vectors(recs))
        assert conn.execute(
            "select c.analyzer, v.analyzer from pgfunnel.collection c "
            "join pgfunnel.index_version v on v.collection_id = c.id "
            "where c.name = 'de' and v.state = 'active'").fetchone() == ("german_v8",
                                                                         "german_v8")
        # the singular finds the plural: German's stemmer indexed the chunk
        assert [r[1] for r in lexical(conn, "Verzeichnis", collection="de")] == ["verz"]
        # the same analyzer again is no change; another is refused, naming the reindex
        Ingester(conn, "de", analyzer="german_v8")
        with pytest.raises(ConfigError, match=r"collection 'de' is indexed with analyzer "
                                              r"'german_v8', not 'english_v8'; .*`pgfunnel "
                                              r"reindex -c de --analyzer english_v8 --activate`"):
            Ingester(conn, "de", analyzer="english_v8")
        with pytest.raises(ConfigError, match=r"unknown analyzer 'german' \(known: .*german_v8"):
            Ingester(conn, "new", analyzer="german")
        before = conn.execute("select count(*) from pgfunnel.chunk").fetchone()
    (tmp_path / "a.md").write_text("# A\n\nEin Verzeichnis.")
    # a model that does not exist: the analyzer is refused before it would load
    for collection, analyzer, message in (
            ("de", "english_v8", "error: --analyzer: collection 'de' is indexed with "
                                 "analyzer 'german_v8', not 'english_v8'"),
            ("new", "german", "error: --analyzer: unknown analyzer 'german'")):
        res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", collection, "--dsn", db,
                                       "--analyzer", analyzer,
                                       "--model", str(tmp_path / "no-model")],
                                 env={"COLUMNS": "300"})
        assert res.exit_code == 1, res.output
        assert message in res.output, res.output
        assert "Traceback" not in res.output
    with connect(db, autocommit=True) as conn:
        assert conn.execute("select count(*) from pgfunnel.chunk").fetchone() == before
        assert conn.execute("select count(*) from pgfunnel.collection where name = 'new'"
                            ).fetchone() == (0,)
