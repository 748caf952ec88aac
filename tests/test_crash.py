"""Crash safety: kill -9 the Postgres postmaster during an ingest batch, restart it,
and check that every document is wholly present or absent, that no acknowledged
batch was lost, and that BM25 statistics equal a recount. Slow: `pytest -m slow`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest

pytestmark = pytest.mark.slow

CHUNKS_PER_DOC = 3
INGEST_SCRIPT = textwrap.dedent("""
    import sys, warnings
    warnings.simplefilter("ignore")
    sys.path.insert(0, {tests!r})
    from _security_helpers import Doc, ingest_docs
    dsn = sys.argv[1]
    batch = 0
    while True:
        docs = [Doc(f"b{{batch:04d}}d{{i:02d}}",
                    "\\n\\n".join(f"# part {{j}}\\n\\n" + " ".join(
                        f"word{{(batch * 7 + i * 3 + j + w) % 400}}" for w in range(60))
                        for j in range({chunks})))
                for i in range(20)]
        ingest_docs(dsn, docs, seed=batch)
        print(f"committed {{batch}}", flush=True)
        batch += 1
""")


def _start(pgdata: Path) -> object:
    from pgserver.postgres_server import PostgresServer, get_server

    # pgserver caches one handle per pgdata; after a kill -9 that handle is stale
    for key in [k for k in PostgresServer._instances if Path(k).resolve() == pgdata.resolve()]:
        PostgresServer._instances.pop(key, None)
    deadline = time.time() + 90
    while True:
        try:
            return get_server(pgdata, cleanup_mode=None)
        except Exception:
            if time.time() > deadline:
                raise
            time.sleep(1)


def test_kill_postmaster_during_ingest(tmp_path: Path) -> None:
    os.environ.setdefault("XDG_RUNTIME_DIR", str(tmp_path))
    from pgfunnel import schema

    pgdata = tmp_path / "pgdata"
    server = _start(pgdata)
    dsn = str(server.get_uri())  # type: ignore[attr-defined]
    schema.init(dsn)
    script = tmp_path / "ingest.py"
    script.write_text(INGEST_SCRIPT.format(tests=str(Path(__file__).parent),
                                           chunks=CHUNKS_PER_DOC))
    proc = subprocess.Popen([sys.executable, str(script), dsn], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    acknowledged = -1
    try:
        assert proc.stdout is not None
        while acknowledged < 3:
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else "ingest died"
            acknowledged = int(line.split()[1])
        time.sleep(0.3)  # somewhere inside the next batch
        pid = server.get_pid()  # type: ignore[attr-defined]
        assert pid
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=60)
        assert proc.stdout is not None
        for line in proc.stdout.read().splitlines():
            if line.startswith("committed"):
                acknowledged = max(acknowledged, int(line.split()[1]))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    time.sleep(2)
    server = _start(pgdata)
    dsn = str(server.get_uri())  # type: ignore[attr-defined]
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            per_doc = conn.execute(
                "select d.citekey, count(distinct c.id), count(distinct e.chunk_id), "
                "count(distinct l.chunk_id) from pgfunnel.document d "
                "left join pgfunnel.chunk c on c.document_id = d.id "
                "left join pgfunnel.embedding e on e.chunk_id = c.id "
                "left join pgfunnel.lexical l on l.chunk_id = c.id group by d.citekey"
            ).fetchall()
            # wholly present: every chunk, embedding and lexical row of every document
            partial = [r for r in per_doc if r[1:] != (CHUNKS_PER_DOC,) * 3]
            assert partial == []
            present = {r[0] for r in per_doc}
            batches = {int(k[1:5]) for k in present}
            # whole batches only, and nothing acknowledged was lost
            for b in batches:
                assert {f"b{b:04d}d{i:02d}" for i in range(20)} <= present
            lost = [b for b in range(acknowledged + 1) if b not in batches]
            assert lost == []
            vid = conn.execute("select id from pgfunnel.index_version "
                               "where state = 'active'").fetchone()
            assert vid is not None
            stored: dict[str, int] = dict(conn.execute(
                "select term, df from pgfunnel.term_stat where index_version_id = %s",
                vid).fetchall())
            recount: dict[str, int] = dict(conn.execute(
                "select term, df from pgfunnel.bm25_recount(%s)", vid).fetchall())
            assert stored == recount
            totals = conn.execute(
                "select v.chunk_count = (select count(*) from pgfunnel.lexical l "
                "where l.index_version_id = v.id), v.total_length = (select coalesce(sum("
                "l.length), 0) from pgfunnel.lexical l where l.index_version_id = v.id) "
                "from pgfunnel.index_version v where v.id = %s", vid).fetchone()
            assert totals == (True, True)
            print(f"crash test: {len(present)} documents present, batches acknowledged "
                  f"{acknowledged + 1}, documents lost {20 * len(lost)}")
    finally:
        server.cleanup()  # type: ignore[attr-defined]
