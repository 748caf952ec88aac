"""What the embedder reads per chunk: the document title (and, opted in, the section path)
above the chunk, per version."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from pgfunnel import versions
from pgfunnel.errors import ConfigError
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
    assert embedding_input("Refunds", "Body", "title", "Plans > Annual") == "Refunds\nBody"
    with pytest.raises(ValueError, match="embed_input"):
        embedding_input("Refunds", "Body", "summary")


def test_embedding_input_writes_the_sections_above_the_chunk_as_a_path() -> None:
    assert embedding_input("CLI", "-Q, --queues\nQueues to purge.", "section",
                           "CLI > purge") == "CLI > purge\n-Q, --queues\nQueues to purge."
    # no section, or only the title: the same text as with the title alone
    for path in ("", "CLI", " CLI "):
        assert embedding_input("CLI", "Body", "section", path) == \
            embedding_input("CLI", "Body", "title")
    assert embedding_input("", "Body", "section", "Setup > Linux") == "Setup > Linux\nBody"
    # a signature in the path is named, not spelt out with its parameters
    assert embedding_input("m", "Body", "section",
                           "Reference > class m.Cluster(nodes, cmd=None, env=None)") == \
        "m > Reference > class m.Cluster\nBody"
    long_heading = " ".join(f"w{i}" for i in range(30))
    assert embedding_input("T", "B", "section", long_heading) == \
        "T > " + " ".join(f"w{i}" for i in range(12)) + "\nB"


def test_markdown_chunks_know_the_headings_above_their_section() -> None:
    text = ("# Guide\n\nIntro.\n\n## Install\n\nSteps.\n\n### On Linux\n\napt.\n\n"
            "#### Debian\n\ndeb.\n\n## Upgrade\n\nRun migrate.")
    assert [(c.heading, c.section_path) for c in chunk_text(text)] == [
        ("Guide", ""), ("Install", "Guide"), ("On Linux", "Guide > Install"),
        ("Debian", "Guide > Install > On Linux"), ("Upgrade", "Guide")]


NESTED = ("Plans compared.\n\n## Annual\n\nBilled once a year.\n\n"
          "### Refunds\n\nWithin 30 days of the renewal.")


def test_ingest_embeds_and_keeps_each_chunks_section_path(conn: psycopg.Connection[Any],
                                                          embedder: Any) -> None:
    rec = DocumentRecord(citekey="plans", title="Plans", text=NESTED)
    chunks = chunk_text(NESTED)
    assert [c.section_path for c in chunks] == ["", "", "Annual"]
    Ingester(conn, "docs", embedder=embedder, embed_input="section").ingest([rec])
    assert conn.execute("select params ->> 'embed_input' from pgfunnel.index_version"
                        ).fetchone() == ("section",)
    assert [r[0] for r in conn.execute(
        "select section_path from pgfunnel.chunk order by ordinal")] == ["", "", "Annual"]
    expected = embedder.embed([embedding_input("Plans", c.text, "section", c.section_path)
                               for c in chunks])
    assert _close(_stored(conn, "plans"), expected)
    assert not _close(_stored(conn, "plans")[2:],
                      embedder.embed([embedding_input("Plans", chunks[2].text)]))

    # the refunds section moves under another heading, its words unchanged: its vector
    # was embedded from the old path, so it is embedded again; the others are reused
    moved = NESTED.replace("## Annual\n\nBilled once a year.",
                           "## Annual\n\nBilled once a year.\n\n## Monthly\n\nBilled monthly.")
    stats = Ingester(conn, "docs", embedder=embedder).ingest(
        [DocumentRecord(citekey="plans", title="Plans", text=moved)])
    assert (stats.chunks_reused, stats.chunks_embedded) == (2, 2)
    assert conn.execute("select section_path from pgfunnel.chunk where heading = 'Refunds'"
                        ).fetchone() == ("Monthly",)


def test_reindex_to_section_paths_embeds_only_chunks_under_a_heading(
        conn: psycopg.Connection[Any], embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    Ingester(conn, "docs", embedder=embedder).ingest(
        [DocumentRecord(citekey="plans", title="Plans", text=NESTED)])
    with pytest.raises(ConfigError, match="embed_input"):
        versions.reindex(conn, "docs", embedder=embedder, embed_input="summary")
    embedded: list[str] = []
    model_embed = embedder.embed

    def counting_embed(texts: list[str], **kwargs: Any) -> np.ndarray:
        embedded.extend(texts)
        return model_embed(texts, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(embedder, "embed", counting_embed)
    res = versions.reindex(conn, "docs", activate_after=True, embedder=embedder,
                           embed_input="section")
    # two chunks read the same either way and are copied; the one under "Annual" is not
    assert (res.chunks_indexed, res.chunks_embedded, res.chunks_copied) == (3, 1, 2)
    assert embedded == ["Plans > Annual\nRefunds\n\nWithin 30 days of the renewal."]
    assert any("copied from version 1" in n and "'title'" in n for n in res.notes)
    chunks = chunk_text(NESTED)
    assert _close(_stored(conn, "plans"), embedder.embed(
        [embedding_input("Plans", c.text, "section", c.section_path) for c in chunks]))
    # a later reindex keeps the active version's input
    again = versions.reindex(conn, "docs", embedder=embedder, analyzer="simple_v2")
    assert conn.execute("select params ->> 'embed_input' from pgfunnel.index_version "
                        "where id = %s", (again.version_id,)).fetchone() == ("section",)
    assert any("copied from version 2 (same model all-MiniLM-L6-v2)" in n for n in again.notes)


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
    assert res.chunks_embedded == conn.execute("select count(*) from pgfunnel.chunk"
                                               ).fetchone()[0]  # type: ignore[index]
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


def test_the_batch_size_defaults_to_narrow_batches_on_a_cpu(embedder: Any) -> None:
    # batches of 16 embedded 1.18x the texts per second of batches of 64 on two cores;
    # a GPU keeps wide ones, and a size given is used as given
    from pgfunnel.embedder import CPU_BATCH_SIZE, DEVICE_BATCH_SIZE, Embedder
    from pgfunnel.errors import ConfigError

    assert embedder.device == "cpu" and embedder.batch_size == CPU_BATCH_SIZE == 16
    assert DEVICE_BATCH_SIZE == 64
    assert Embedder(device="cpu", batch_size=64).batch_size == 64
    with pytest.raises(ConfigError, match="^batch_size: must be at least 1, got 0"):
        Embedder(batch_size=0)


def test_batches_formed_by_length_keep_each_vector_in_its_place(embedder: Any) -> None:
    # texts of mixed lengths, in an order where length-sorted batches differ from the
    # input's: every vector must still be the one its own text gets alone
    texts = [("refund policy " * (n % 7 * 9 + 1)).strip() + f" {n}" for n in range(40)]
    default = embedder.batch_size
    embedder.batch_size = 8
    try:
        seen: list[int] = []
        together = embedder.embed(texts, progress=seen.append)
    finally:
        embedder.batch_size = default
    assert sum(seen) == len(texts) and len(seen) == 5
    alone = np.stack([embedder.embed([t])[0] for t in texts])
    assert np.abs(together - alone).max() < 1e-5


@pytest.mark.parametrize(("embed_input", "reused", "embedded"), [("section", 2, 1),
                                                                 ("title", 3, 0)])
def test_the_first_ingest_after_upgrading_stores_section_paths_and_keeps_vectors(
        conn: psycopg.Connection[Any], embedder: Any, embed_input: str, reused: int,
        embedded: int) -> None:
    rec = DocumentRecord(citekey="plans", title="Plans", text=NESTED)
    Ingester(conn, "docs", embedder=embedder, embed_input=embed_input).ingest([rec])
    # as the release before section paths stored it: no path, the text's own hash, and a
    # document hash of its own
    for (chunk_id, text) in conn.execute("select id, text from pgfunnel.chunk").fetchall():
        conn.execute("update pgfunnel.chunk set section_path = '', content_hash = %s "
                     "where id = %s", (hashlib.sha256(text.encode()).hexdigest(), chunk_id))
    conn.execute("update pgfunnel.document set content_hash = 'before'")
    stats = Ingester(conn, "docs", embedder=embedder).ingest([rec])
    # the same text is a changed document once, so its chunks get their paths; a vector
    # is embedded again only where the version embeds the path
    assert (stats.documents_written, stats.chunks_reused, stats.chunks_embedded) == \
        (1, reused, embedded)
    assert [r[0] for r in conn.execute(
        "select section_path from pgfunnel.chunk order by ordinal")] == ["", "", "Annual"]
    assert Ingester(conn, "docs", embedder=embedder).ingest([rec]).documents_unchanged == 1
    with pytest.raises(ConfigError, match="embed_input"):
        Ingester(conn, "docs", embed_input="summary")


def test_activation_embeds_chunks_ingested_since_the_build_with_its_own_input(
        sample_conn: psycopg.Connection[Any], embedder: Any) -> None:
    conn = sample_conn
    # the active version predates titles; a title version is built beside it
    conn.execute("update pgfunnel.index_version set params = params - 'embed_input'")
    built = versions.reindex(conn, "default", embedder=embedder)
    rec = DocumentRecord(citekey="refunds", title="Refunds on annual plans", text=TEXT)
    Ingester(conn, "default", embedder=embedder).ingest([rec])  # into the active one only
    versions.activate(conn, "default", built.version, embedder=embedder)
    # the active version holds vectors of the chunk alone: copying them would have put
    # vectors of another text into the title version
    assert _close(_stored(conn, "refunds"),
                  embedder.embed([embedding_input(rec.title, c.text) for c in chunk_text(TEXT)]))


def test_a_renamed_parent_heading_costs_model_time_only_where_the_path_is_embedded(
        conn: psycopg.Connection[Any], embedder: Any) -> None:
    renamed = NESTED.replace("## Annual", "## Yearly")
    for collection, embed_input, embedded in (("t", "title", 1), ("s", "section", 2)):
        ingester = Ingester(conn, collection, embedder=embedder, embed_input=embed_input)
        ingester.ingest([DocumentRecord(citekey="plans", title="Plans", text=NESTED)])
        stats = Ingester(conn, collection, embedder=embedder).ingest(
            [DocumentRecord(citekey="plans", title="Plans", text=renamed)])
        # the "Yearly" chunk's text changed; "Refunds" kept its words under a new parent,
        # which only a section version embeds
        assert (stats.chunks_embedded, stats.chunks_reused) == (embedded, 3 - embedded)
        assert conn.execute(
            "select c.section_path from pgfunnel.chunk c join pgfunnel.collection k "
            "on k.id = c.collection_id where k.name = %s and c.heading = 'Refunds'",
            (collection,)).fetchone() == ("Yearly",)


CODE = ("Clients retry failed calls.\n\n## Configure\n\nSet the limit:\n\n"
        "    client = Client(\n        retries=3,\n    )\n\nThen call it as before.")


@pytest.mark.parametrize("embed_input", ["title", "section", "text"])
def test_chunks_stored_single_spaced_keep_their_vectors_when_they_gain_line_breaks(
        conn: psycopg.Connection[Any], embedder: Any, embed_input: str) -> None:
    rec = DocumentRecord(citekey="retries", title="Retries", text=CODE)
    Ingester(conn, "docs", embedder=embedder, embed_input=embed_input).ingest([rec])
    kept = _stored(conn, "retries")
    # as releases before line breaks were kept stored it: the heading on a line of its
    # own, then the words single-spaced, under a document hash of its own (the same terms,
    # so the lexical rows stay right while the guard against text updates is off)
    conn.execute("alter table pgfunnel.chunk disable trigger chunk_indexed_columns")
    for chunk_id, heading, text in conn.execute(
            "select id, heading, text from pgfunnel.chunk").fetchall():
        body = text.split("\n", 1)[1] if heading else text
        flat = f"{heading}\n{' '.join(body.split())}" if heading else " ".join(body.split())
        conn.execute("update pgfunnel.chunk set text = %s where id = %s", (flat, chunk_id))
    conn.execute("alter table pgfunnel.chunk enable trigger chunk_indexed_columns")
    conn.execute("update pgfunnel.document set content_hash = 'before'")
    assert conn.execute("select count(*) from pgfunnel.chunk where text like '%%\n    %%'"
                        ).fetchone() == (0,)
    stats = Ingester(conn, "docs", embedder=embedder).ingest([rec])
    # the document is rewritten with its line breaks; the model reads the same words
    assert (stats.documents_written, stats.chunks_embedded, stats.chunks_reused) == (1, 0, 2)
    assert [r[0] for r in conn.execute("select text from pgfunnel.chunk order by ordinal")] \
        == [c.text for c in chunk_text(CODE)]
    assert "\n    client = Client(\n        retries=3," in chunk_text(CODE)[1].text
    assert np.array_equal(_stored(conn, "retries"), kept)
    # and what it read for them is what a fresh embedding of the new text gives
    assert _close(kept, embedder.embed([embedding_input(rec.title, c.text, embed_input,
                                                        c.section_path)
                                        for c in chunk_text(CODE)]))


def test_a_model_path_that_does_not_exist_is_named_as_a_missing_directory(
        tmp_path: Path) -> None:
    """`--model /path/to/model` with a typo failed with the hub's rules for repository
    names ("Repo id must use alphanumeric chars"), as the reranker no longer does."""
    from pgfunnel.embedder import Embedder
    from pgfunnel.errors import ModelLoadError

    missing = str(tmp_path / "no-such-model")
    with pytest.raises(ModelLoadError, match="no such directory") as exc:
        Embedder(missing, device="cpu")
    assert exc.value.setting == "embedding_model" and exc.value.model == missing
    assert "Repo id" not in str(exc.value)


def test_a_cross_encoder_given_as_the_embedding_model_is_refused(tmp_path: Path) -> None:
    """`ingest --model path/to/cross-encoder` loaded it as an embedding model: its hidden
    states mean-pooled without its head, vectors of noise for the dense leg. A cross-encoder
    as transformers saves it and as sentence-transformers saves it are both refused; a
    bi-encoder of the same tiny shape still loads."""
    from sentence_transformers import CrossEncoder

    from pgfunnel.embedder import Embedder
    from pgfunnel.errors import ModelLoadError
    from pgfunnel.tiny_models import build_tiny_bi_encoder, build_tiny_cross_encoder

    raw = build_tiny_cross_encoder(tmp_path / "raw")
    saved = tmp_path / "saved"
    CrossEncoder(str(raw), device="cpu").save(str(saved))
    for path in (raw, saved):
        with pytest.raises(ModelLoadError, match="BertForSequenceClassification is a "
                                                 "cross-encoder") as exc:
            Embedder(str(path), device="cpu")
        assert exc.value.setting == "embedding_model"
    assert Embedder(str(build_tiny_bi_encoder(tmp_path / "bi", 16)), device="cpu").dimensions == 16


def test_a_cross_encoder_folder_is_refused_as_embedding_model_before_it_loads(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """It was loaded first, and transformers printed a load report of the classification
    head's weights as "UNEXPECTED" ("can be ignored when loading from different task")
    above the ModelLoadError. Its config.json names its architecture: refused from that,
    nothing printed."""
    from pgfunnel.embedder import Embedder
    from pgfunnel.errors import ModelLoadError
    from pgfunnel.tiny_models import build_tiny_cross_encoder

    path = build_tiny_cross_encoder(tmp_path / "ce")
    capfd.readouterr()
    with pytest.raises(ModelLoadError, match="BertForSequenceClassification is a "
                                             "cross-encoder") as exc:
        Embedder(str(path), device="cpu")
    assert exc.value.setting == "embedding_model"
    out, err = capfd.readouterr()
    assert out + err == "", out + err


def test_a_model_given_as_embedder_that_does_not_load_names_embedder(
        sample_db: str, sample_conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    """`Ingester(embedder=Path(...))` and `Funnel(embedder=...)` with a model that does not
    load raised ModelLoadError.setting == "embedding_model", an argument the caller never
    passed: the message began `embedding_model='/.../no-such-model' could not be loaded`."""
    from pgfunnel.errors import ModelLoadError
    from pgfunnel.search import Funnel

    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelLoadError) as ingesting:
        Ingester(sample_conn, "default", embedder=missing)
    with Funnel(sample_db, embedder=str(missing)) as funnel, \
            pytest.raises(ModelLoadError) as searching:
        funnel.search("refund", k=3, principals=[])
    for err in (ingesting.value, searching.value):
        assert err.setting == "embedder" and err.model == str(missing), err
        assert str(err).startswith(f"embedder='{missing}' could not be loaded: "
                                   "no such directory"), err
    # the collection's own model, loaded for it, is still its embedding_model
    sample_conn.execute("update pgfunnel.index_version set embedding_model = %s",
                        (str(missing),))
    sample_conn.commit()
    with Funnel(sample_db) as funnel, pytest.raises(ModelLoadError) as own:
        funnel.search("refund", k=3, principals=[])
    assert own.value.setting == "embedding_model"
