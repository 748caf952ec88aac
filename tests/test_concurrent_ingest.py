"""Two `pgfunnel ingest` runs of one collection at once: overlapping cron jobs, a CI job
retried while the first still runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgfunnel.db import connect


def _folder(tmp_path: Path, n_docs: int) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(n_docs):
        (folder / f"page{i:04d}.md").write_text(
            f"# Page {i}\n\n" + " ".join(f"word{i}x{j}" for j in range(24)) + "\n")
    return folder


def test_a_second_ingest_of_a_collection_waits_then_embeds_nothing(
        db: str, tmp_path: Path) -> None:
    """Both runs embedded every document (minutes on a CPU), and the one that lost the
    race for the writer lock threw its vectors away ("texts embedded then found written
    by another ingest"). The second now waits for the first, saying for whom, then finds
    every document unchanged and embeds nothing."""
    from pgfunnel.tiny_models import build_tiny_bi_encoder

    model = build_tiny_bi_encoder(tmp_path / "bi", dim=32)
    folder = _folder(tmp_path, 300)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    args = [sys.executable, "-m", "pgfunnel.cli.main", "ingest", str(folder), "-c", "both",
            "--chunk-words", "20", "--model", str(model), "--dsn", db, "--json"]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    runs = sorted((json.loads(out) for out, _ in outs), key=lambda r: r["texts_embedded"])
    # two chunks a page of 26 words at --chunk-words 20
    assert [r["texts_embedded"] for r in runs] == [0, 600], runs
    assert [r["documents_written"] for r in runs] == [0, 300]
    assert runs[0]["documents_unchanged"] == 300 and runs[0]["texts_unused"] == 0
    waited = [n for n in runs[0]["notes"] if n.startswith("waiting for")]
    assert len(waited) == 1 and waited[0].startswith(
        "waiting for another ingest of collection 'both' to finish: pid "), runs[0]["notes"]
    assert "application_name 'pgfunnel ingest both'" in waited[0], waited


def test_a_waiting_ingest_gives_up_at_the_lock_timeout_and_a_dry_run_never_waits(
        db: str, tmp_path: Path) -> None:
    """Under a lock_timeout (a role's, PGOPTIONS) the wait ends in a refusal naming the
    running ingest, nothing written; --dry-run (with --prune: it reads the collection)
    and an ingest of another collection do not wait."""
    from pgfunnel.cli.main import app, do_ingest
    from typer.testing import CliRunner

    from pgfunnel.errors import ConflictError
    from pgfunnel.ingest import INGEST_RUN_LOCK

    folder = _folder(tmp_path, 3)
    with connect(db, autocommit=True) as first:
        first.execute("select set_config('application_name', 'pgfunnel ingest held', false)")
        first.execute("select pg_advisory_lock(hashtext(%s))", (INGEST_RUN_LOCK + "held",))
        pid = first.info.backend_pid
        with pytest.raises(ConflictError) as refused:
            do_ingest(make_conninfo(db, options="-c lock_timeout=300"), [folder], "held",
                      20, None, False, show_progress=False)
        ran = CliRunner().invoke(app, ["ingest", str(folder), "-c", "held", "--dry-run",
                                       "--prune", "--dsn", db])
        assert ran.exit_code == 0, ran.output
        stored = first.execute("select count(*) from pgfunnel.collection where name = 'held'"
                               ).fetchone()
        assert stored == (0,)
    message = str(refused.value)
    assert message.startswith(
        f"another ingest of collection 'held' is running: pid {pid} (application_name "
        "'pgfunnel ingest held', connected for "), message
    assert message.endswith(
        "; this ingest waited for it as long as the session's lock_timeout (300ms) allows "
        "and wrote nothing: run it again when that one has finished"), message


def test_the_run_lock_goes_with_the_session(db: str) -> None:
    """A run that crashed (its connection gone) holds up no later one."""
    from pgfunnel.ingest import INGEST_RUN_LOCK, one_ingest_at_a_time

    crashed = psycopg.connect(db, autocommit=True)
    with one_ingest_at_a_time(crashed, "c"):
        crashed.close()
    said: list[str] = []
    with connect(db, autocommit=True) as conn, one_ingest_at_a_time(conn, "c", said.append):
        held: Any = conn.execute(
            "select count(*) from pg_locks where locktype = 'advisory' and granted "
            "and ((classid::bigint << 32) | objid::bigint) = hashtext(%s)::bigint",
            (INGEST_RUN_LOCK + "c",)).fetchone()
    assert (said, held) == ([], (1,))


def _run_lock_granted(conn: psycopg.Connection[Any], collection: str) -> bool:
    from pgfunnel.ingest import INGEST_RUN_LOCK

    row = conn.execute(
        "select count(*) from pg_locks where locktype = 'advisory' and granted "
        "and ((classid::bigint << 32) | objid::bigint) = hashtext(%s)::bigint",
        (INGEST_RUN_LOCK + collection,)).fetchone()
    return bool(row and row[0])


def test_two_python_ingests_of_a_collection_take_turns(db: str, tmp_path: Path) -> None:
    """Ingester took no run lock: a web app's ingest beside another (or beside a cron
    job's `pgfunnel ingest`) embedded every changed document twice, and the loser threw
    its vectors away. The second now waits, told whom for (on_wait, and a note), then
    finds every document unchanged and embeds nothing. Here the second starts once the
    first has committed a batch, and the first goes on only once the second waits."""
    import threading

    from pgfunnel.embedder import Embedder
    from pgfunnel.ingest import Ingester
    from pgfunnel.sources import read_path
    from pgfunnel.tiny_models import build_tiny_bi_encoder

    model = build_tiny_bi_encoder(tmp_path / "bi", dim=32)
    embedder = Embedder(str(model))
    records = list(read_path(_folder(tmp_path, 120)))
    waits: list[str] = []
    waiting = threading.Event()
    second: dict[str, Any] = {}

    def run_second() -> None:
        def told(line: str) -> None:
            waits.append(line)
            waiting.set()

        try:
            with connect(db, autocommit=True) as conn:
                conn.execute("set application_name = 'second'")
                second["stats"] = Ingester(conn, "turns", embedder=embedder, chunk_words=20,
                                           batch_documents=40, on_wait=told).ingest(records)
        except BaseException as exc:  # the test thread re-raises it
            second["error"] = exc
            waiting.set()

    thread = threading.Thread(target=run_second)

    def progress(stage: str, n: int, total: int | None) -> None:
        if stage == "documents" and not thread.is_alive() and "stats" not in second:
            thread.start()
            # the first holds its lock until it returns: the second waits now, or never
            assert waiting.wait(120), "the second ingest did not wait for the first"

    with connect(db, autocommit=True) as conn:
        conn.execute("set application_name = 'first'")
        pid = conn.info.backend_pid
        first = Ingester(conn, "turns", embedder=embedder, chunk_words=20,
                         batch_documents=40, progress=progress).ingest(records)
        assert not _run_lock_granted(conn, "turns")
    thread.join(300)
    assert "error" not in second, second.get("error")
    later = second["stats"]
    # two chunks a page of 26 words at chunk_words 20
    assert (first.texts_embedded, first.documents_written) == (240, 120)
    assert (later.texts_embedded, later.documents_written, later.documents_unchanged,
            later.texts_unused) == (0, 0, 120, 0)
    assert len(waits) == 1 and waits[0].startswith(
        f"waiting for another ingest of collection 'turns' to finish: pid {pid} "
        "(application_name 'first'"), waits
    assert later.notes[0] == waits[0] and not any(
        n.startswith("waiting for") for n in first.notes), (first.notes, later.notes)


def test_a_python_ingest_waits_for_a_cli_ingest_of_its_collection(
        db: str, tmp_path: Path) -> None:
    """`pgfunnel ingest` (a cron job) and Ingester (a web app) on one collection: the
    library's ingest waits for the command's, then embeds nothing; one of a collection
    the command does not write does not wait."""
    from pgfunnel.embedder import Embedder
    from pgfunnel.ingest import Ingester
    from pgfunnel.sources import read_path
    from pgfunnel.tiny_models import build_tiny_bi_encoder

    model = build_tiny_bi_encoder(tmp_path / "bi", dim=32)
    embedder = Embedder(str(model))
    folder = _folder(tmp_path, 200)
    records = list(read_path(folder))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgfunnel.cli.main", "ingest", str(folder), "-c", "shared",
         "--chunk-words", "20", "--model", str(model), "--dsn", db, "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    said: list[str] = []
    try:
        with connect(db, autocommit=True) as conn:
            # the command takes the lock before it loads its model (seconds)
            for _ in range(1200):
                if _run_lock_granted(conn, "shared") or proc.poll() is not None:
                    break
                time.sleep(0.05)
            assert _run_lock_granted(conn, "shared"), proc.communicate()
            other = Ingester(conn, "elsewhere", embedder=embedder, chunk_words=20,
                             on_wait=said.append).ingest(records[:2])
            assert said == [] and other.texts_embedded == 4
            stats = Ingester(conn, "shared", embedder=embedder, chunk_words=20,
                             on_wait=said.append).ingest(records)
    finally:
        out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    ran = json.loads(out)
    assert (ran["texts_embedded"], ran["documents_written"]) == (400, 200), ran
    assert (stats.texts_embedded, stats.documents_written, stats.documents_unchanged) == (
        0, 0, 200)
    assert len(said) == 1 and said[0].startswith(
        "waiting for another ingest of collection 'shared' to finish: pid "), said
    assert "application_name 'pgfunnel ingest shared'" in said[0], said


def test_a_python_ingest_gives_up_at_the_lock_timeout_naming_the_running_one(db: str) -> None:
    """Under the connection's lock_timeout the library's wait ends as the command's does:
    a ConflictError naming the running ingest, nothing written, the lock not left held."""
    from pgfunnel.errors import ConflictError
    from pgfunnel.ingest import INGEST_RUN_LOCK, Ingester
    from pgfunnel.sources import DocumentRecord

    said: list[str] = []
    with connect(db, autocommit=True) as first, connect(db, autocommit=True) as conn:
        first.execute("set application_name = 'pgfunnel ingest held'")
        first.execute("select pg_advisory_lock(hashtext(%s))", (INGEST_RUN_LOCK + "held",))
        conn.execute("set lock_timeout = '300ms'")
        ingester = Ingester(conn, "held", on_wait=said.append)
        with pytest.raises(ConflictError) as refused:
            ingester.ingest([DocumentRecord("a", "a document that waits")])
        assert conn.execute("select count(*) from pgfunnel.collection where name = 'held'"
                            ).fetchone() == (0,)
        assert conn.execute("select count(*) from pg_locks where locktype = 'advisory' "
                            "and pid = pg_backend_pid()").fetchone() == (0,)
        pid = first.info.backend_pid
    assert str(refused.value).startswith(
        f"another ingest of collection 'held' is running: pid {pid} (application_name "
        "'pgfunnel ingest held', "), refused.value
    assert len(said) == 1 and said[0].startswith(
        "waiting for another ingest of collection 'held' to finish: pid "), said
