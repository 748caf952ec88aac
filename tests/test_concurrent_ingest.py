"""Two `pgfunnel ingest` runs of one collection at once: overlapping cron jobs, a CI job
retried while the first still runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
