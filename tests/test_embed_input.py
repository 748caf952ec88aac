"""What the embedder reads per chunk: the document title above the chunk, per version."""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
import pytest

from pgfunnel import versions
from pgfunnel.ingest import Ingester
from pgfunnel.sources import DocumentRecord, chunk_text, embedding_input

TEXT = ("Owners of an annual plan can ask for a refund inside the refund window.\n\n"
        "## What cannot be refunded\n\n"
        "Usage-based add-ons and overage charges are never refunded, whatever the plan.")


def _stored(conn: psycopg.Connection[Any], citekey: str) -> np.ndarray:
    rows = conn.execute(
        "select e.embedding from pgfunnel.embedding e join pgfunnel.chunk c on c.id = e.chunk_id "
        "join pgfunnel.document d on d.id = c.document_id "
        "join pgfunnel.index_version v on v.id = e.index_version_id and v.state = 'active' "
        "where d.citekey = %s order by c.ordinal", (citekey,)).fetchall()
    return np.stack([np.asarray(r[0].to_numpy(), dtype=np.float32) for r in rows])


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.all(np.sum(a * b, axis=1) > 0.9999))


def test_embedding_input_puts_the_title_above_the_chunk() -> None:
    assert embedding_input("Refunds", "Ask within 32 days.") == "Refunds\nAsk within 32 days."
    # a chunk that opens with the title (a page's first section) is not given it twice
    assert embedding_input("Refunds", "Refunds\nAsk within 32 days.") == \
        "Refunds\nAsk within 32 days."
    assert embedding_input("  Refunds \n on  plans", "Body") == "Refunds on plans\nBody"
    assert embedding_input("", "Body") == "Body"
    assert embedding_input("Refunds", "Body", "text") == "Body"
    with pytest.raises(ValueError, match="embed_input"):
        embedding_input("Refunds", "Body", "summary")


def test_ingest_embeds_the_title_with_each_chunk(conn: psycopg.Connection[Any],
                                                 embedder: Any) -> None:
    rec = DocumentRecord(citekey="refunds", title="Refunds on annual plans", text=TEXT)
    chunks = chunk_text(TEXT)
    assert len(chunks) == 2
    Ingester(conn, "docs", embedder=embedder).ingest([rec])
    assert conn.execute("select params ->> 'embed_input' from pgfunnel.index_version"
                        ).fetchone() == ("title",)
    stored = _stored(conn, "refunds")
    with_title = embedder.embed([embedding_input(rec.title, c.text) for c in chunks])
    text_alone = embedder.embed([c.text for c in chunks])
    assert _close(stored, with_title)
    assert not _close(stored[1:], text_alone[1:])

    # a new title makes every stored vector stale: none is reused
    renamed = DocumentRecord(citekey="refunds", title="Money back", text=TEXT)
    stats = Ingester(conn, "docs", embedder=embedder).ingest([renamed])
    assert (stats.chunks_reused, stats.chunks_embedded) == (0, 2)
    assert _close(_stored(conn, "refunds"),
                  embedder.embed([embedding_input("Money back", c.text) for c in chunks]))

    # the same title and one new section: the unchanged chunks keep their vectors
    longer = DocumentRecord(citekey="refunds", title="Money back",
                            text=TEXT + "\n\n## Disputes\n\nA chargeback closes the account.")
    stats = Ingester(conn, "docs", embedder=embedder).ingest([longer])
    assert (stats.chunks_reused, stats.chunks_embedded) == (2, 1)


def test_a_version_made_before_embed_input_keeps_embedding_text_alone(
        sample_conn: psycopg.Connection[Any], embedder: Any) -> None:
    conn = sample_conn
    conn.execute("update pgfunnel.index_version set params = params - 'embed_input'")
    rec = DocumentRecord(citekey="refunds", title="Refunds on annual plans", text=TEXT)
    Ingester(conn, "default", embedder=embedder).ingest([rec])
    assert _close(_stored(conn, "refunds"), embedder.embed([c.text for c in chunk_text(TEXT)]))

    # a reindex makes a version that reads the title, so it cannot copy these vectors
    res = versions.reindex(conn, "default", activate_after=True, embedder=embedder)
    assert not any("copied from version" in n for n in res.notes)
    assert conn.execute("select params ->> 'embed_input' from pgfunnel.index_version "
                        "where id = %s", (res.version_id,)).fetchone() == ("title",)
    assert _close(_stored(conn, "refunds"),
                  embedder.embed([embedding_input(rec.title, c.text) for c in chunk_text(TEXT)]))


def test_loading_the_bundled_model_prints_no_progress_bar(
        capfd: pytest.CaptureFixture[str]) -> None:
    from transformers.utils import logging as transformers_logging

    from pgfunnel.embedder import Embedder

    assert transformers_logging.is_progress_bar_enabled()
    Embedder()
    assert "Loading weights" not in capfd.readouterr().err
    # switched off for the load only: downloads elsewhere keep their bars
    assert transformers_logging.is_progress_bar_enabled()


def test_unknown_embedding_model_fails_in_one_line_with_the_fix(monkeypatch: Any) -> None:
    from pgfunnel.embedder import Embedder
    from pgfunnel.errors import ModelLoadError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError) as exc:
        Embedder("pgfunnel-test/no-such-embedder", device="cpu")
    msg = str(exc.value)
    assert msg.startswith("embedding_model='pgfunnel-test/no-such-embedder' could not be loaded")
    assert "\n" not in msg and "available locally" in msg


def test_batches_formed_by_length_keep_each_vector_in_its_place(embedder: Any) -> None:
    # texts of mixed lengths, in an order where length-sorted batches differ from the
    # input's: every vector must still be the one its own text gets alone
    texts = [("refund policy " * (n % 7 * 9 + 1)).strip() + f" {n}" for n in range(40)]
    embedder.batch_size = 8
    try:
        seen: list[int] = []
        together = embedder.embed(texts, progress=seen.append)
    finally:
        embedder.batch_size = 64
    assert sum(seen) == len(texts) and len(seen) == 5
    alone = np.stack([embedder.embed([t])[0] for t in texts])
    assert np.abs(together - alone).max() < 1e-5
