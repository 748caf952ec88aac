"""Backup and restore with pg_dump: a database with two collections (one with a retired
index version beside its active one), documents for readers and tenants and traced
searches, dumped (custom format and plain SQL) and restored into a fresh database. The
copy must be one doctor finds clean, that answers every search with the same rows and
scores, that ingests, reindexes and switches versions, and that init and migrate find at
the head revision; in RLS mode also when restored with --no-owner by another role."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _security_helpers import create_app_role, with_user
from funnel_util import conninfo_part, doc, ingest, make_collection, one_row, pg_bin, with_conninfo
from psycopg import sql

from pgfunnel import schema, versions
from pgfunnel.db import connect
from pgfunnel.doctor import Finding, run_checks
from pgfunnel.ingest import Ingester
from pgfunnel.search import Funnel
from pgfunnel.security import enable_rls
from pgfunnel.sources import DocumentRecord

QUERIES = ("refund on a monthly plan", "ERR-4029", "export my data as csv")


def _with_db(dsn: str, dbname: str) -> str:
    return with_conninfo(dsn, dbname=dbname)


@contextmanager
def fresh_database(server_dsn: str, owner: str | None = None) -> Iterator[str]:
    name = f"pgf_restore_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name))
                     + (sql.SQL(" owner {}").format(sql.Identifier(owner)) if owner
                        else sql.SQL("")))
    try:
        yield _with_db(server_dsn, name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(
                sql.Identifier(name)))


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=False)


def _not_info(findings: list[Finding]) -> list[tuple[str, str, str]]:
    return [(f.level, f.check, f.message) for f in findings if f.level != "info"]


def _answers(dsn: str, embedder: Any) -> list[Any]:
    """Every search a caller could run, with its chunk ids and scores at each stage."""
    query = ("select chunk_id, lexical_rank, lexical_score, dense_rank, dense_score, "
             "fused_score, final_rank from funnel_search(%(q)s, %(v)s, k => 8, "
             "collection => %(c)s, fusion => %(f)s, principals => %(p)s, tenant => %(t)s)")
    out = []
    with connect(dsn, autocommit=True) as conn:
        for q in QUERIES:
            vectors = {"default": embedder.embed_query(q),
                       "t": one_row(conn.execute(
                           "select e.embedding from pgfunnel.embedding e "
                           "join pgfunnel.index_version v on v.id = "
                           "e.index_version_id and v.state = 'active' "
                           "join pgfunnel.chunk c on c.id = e.chunk_id "
                           "and c.collection_id = v.collection_id "
                           "join pgfunnel.collection l on l.id = v.collection_id "
                           "and l.name = 't' order by e.chunk_id "
                           "limit 1 offset %s", (len(q) % 5,)))[0]}
            for c, v in vectors.items():
                for f in ("minmax", "rrf", "zscore"):
                    for p, t in (([], None), (["alice"], "acme"), (["bob"], None)):
                        for text, vec in ((q, v), (q, None), (None, v)):
                            out.append(conn.execute(query, {"q": text, "v": vec, "c": c,
                                                            "f": f, "p": p, "t": t}).fetchall())
    return out


def _layout(dsn: str) -> dict[str, Any]:
    """What the restore must bring back beside the rows: the revision, each version's
    posting partition and partial HNSW index, the cached graph walks, the sequences."""
    with connect(dsn, autocommit=True) as conn:
        return {
            "revision": schema.current_revision(conn),
            "partitions": conn.execute(
                "select c.relname, pg_get_expr(c.relpartbound, c.oid) from pg_inherits i "
                "join pg_class c on c.oid = i.inhrelid "
                "where i.inhparent = 'pgfunnel.posting'::regclass order by 1").fetchall(),
            "hnsw": conn.execute("select indexname, indexdef from pg_indexes "
                                 "where schemaname = 'pgfunnel' "
                                 "and indexname like 'embedding_hnsw_v%' order by 1").fetchall(),
            "walks": conn.execute("select prosrc from pg_proc "
                                  "where oid = 'pgfunnel._hnsw_walk'::regproc").fetchone(),
            "sequences": conn.execute("select sequencename, last_value from pg_sequences "
                                      "where schemaname = 'pgfunnel' order by 1").fetchall(),
            "versions": conn.execute("select c.name, v.version, v.state, v.chunk_count, "
                                     "v.total_length from pgfunnel.index_version v "
                                     "join pgfunnel.collection c on c.id = v.collection_id "
                                     "order by v.id").fetchall(),
            "traces": conn.execute("select (select count(*) from pgfunnel.search_log), "
                                   "(select count(*) from pgfunnel.search_trace)").fetchone(),
        }


@pytest.fixture()
def source(sample_db: str, embedder: Any) -> str:
    """The help-center sample in 'default' (some documents for readers, some in a tenant),
    and collection 't' whose version 1 is retired behind an analyzer reindex, version 2;
    searches of both traced."""
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("update pgfunnel.document set readers = '{alice,team-a}', "
                     "is_public = false where id % 5 = 1")
        conn.execute("update pgfunnel.document set tenant = 'acme' where id % 7 = 2")
        make_collection(conn, "t", 16)
        ingest(conn, [doc(f"t{i}", f"zephyr note {i} about monthly refunds and exports",
                          readers=["bob"] if i % 3 == 0 else [],
                          tenant="acme" if i % 4 == 1 else None) for i in range(12)])
        versions.reindex(conn, "t", analyzer="simple_v3", activate_after=True)
    with Funnel(sample_db, embedder=embedder) as funnel:
        for q in QUERIES:
            funnel.search(q, principals=["alice"], tenant="acme", trace=True)
            funnel.search(q, collection="t", weights=[1, 0], trace=True)
    return sample_db


def _works_after_restore(restored: str, embedder: Any) -> None:
    """Ingest (sequences and BM25 statistics go on exactly: doctor recounts), reindex,
    activate the retired version and drop one, on the restored copy."""
    with connect(restored, autocommit=True) as conn:
        before = conn.execute("select max(id) from pgfunnel.chunk").fetchone()
        Ingester(conn, embedder=embedder).ingest(
            [DocumentRecord(citekey="restored-1", title="Restored",
                            text="zanzibar quokka refunds after the restore")])
        ingest(conn, [doc("t-restored", "zephyr quokka after the restore")], seed=3)
        assert conn.execute("select min(c.id) > %s from pgfunnel.chunk c "
                            "join pgfunnel.document d on d.id = c.document_id "
                            "where d.citekey in ('restored-1', 't-restored')",
                            before).fetchone() == (True,)
        versions.reindex(conn, "t", analyzer="english_v3", activate_after=True)
        versions.activate(conn, "t", 1)
        versions.drop(conn, "t", 2)
        assert [(v.version, v.state) for v in versions.list_versions(conn, "t")] == [
            (1, "active"), (3, "retired")]
        assert _not_info(run_checks(conn)) == []
    with Funnel(restored, embedder=embedder) as funnel:
        assert funnel.search("zanzibar quokka", trace=True).results[0].citekey == "restored-1"


def test_a_dump_restores_a_copy_that_answers_and_ingests_like_the_source(
        source: str, server_dsn: str, embedder: Any, tmp_path: Path) -> None:
    answers, layout = _answers(source, embedder), _layout(source)
    assert sum(bool(rows) for rows in answers) > 0.8 * len(answers)
    assert layout["walks"] is not None and "version_id = 2" in layout["walks"][0]
    assert [v[2] for v in layout["versions"]] == ["active", "retired", "active"]
    with connect(source, autocommit=True) as conn:
        assert _not_info(run_checks(conn)) == []
    archive, plain = tmp_path / "db.dump", tmp_path / "db.sql"
    dumped = _run(pg_bin("pg_dump"), "-Fc", "-d", source, "-f", str(archive))
    assert dumped.returncode == 0 and dumped.stderr == "", dumped.stderr
    dumped = _run(pg_bin("pg_dump"), "-d", source, "-f", str(plain))
    assert dumped.returncode == 0 and dumped.stderr == "", dumped.stderr
    for how in ("pg_restore", "psql"):
        with fresh_database(server_dsn) as restored:
            done = (_run(pg_bin("pg_restore"), "--exit-on-error", "-d", restored, str(archive))
                    if how == "pg_restore" else
                    _run(pg_bin("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", restored,
                         "-f", str(plain)))
            # no warning either (a circular foreign key, say)
            assert done.returncode == 0 and done.stderr == "", (how, done.stderr)
            with connect(restored, autocommit=True) as conn:
                assert _not_info(run_checks(conn)) == [], how
            assert _layout(restored) == layout, how
            assert _answers(restored, embedder) == answers, how
            head = schema.head_revision()
            assert schema.migrate(restored)["revision_before"] == head
            init = schema.init(restored)
            assert (init["revision_before"], init["revision"], init["created"]) == (
                head, head, False)
            _works_after_restore(restored, embedder)


def test_a_dump_of_schema_pgfunnel_alone_is_told_to_run_init(
        source: str, server_dsn: str, tmp_path: Path) -> None:
    """`pg_dump -n pgfunnel` leaves out public.funnel_search (and pgvector): the copy
    answered `funnel_search(...)` with "function does not exist" while doctor found
    nothing wrong."""
    archive = tmp_path / "pgfunnel.dump"
    assert _run(pg_bin("pg_dump"), "-Fc", "-n", "pgfunnel", "-d", source, "-f",
                str(archive)).returncode == 0
    with fresh_database(server_dsn) as restored:
        with connect(restored, autocommit=True) as conn:
            conn.execute("create extension vector")
        done = _run(pg_bin("pg_restore"), "--exit-on-error", "-d", restored, str(archive))
        assert done.returncode == 0, done.stderr
        with connect(restored, autocommit=True) as conn:
            assert [(level, check) for level, check, _ in _not_info(run_checks(conn))] == [
                ("warning", "schema")]
            [(_, _, message)] = _not_info(run_checks(conn))
            assert message.startswith("public.funnel_search is missing") and \
                "`pgfunnel init`" in message
        schema.init(restored)
        with connect(restored, autocommit=True) as conn:
            assert _not_info(run_checks(conn)) == []
            assert conn.execute("select count(*) from funnel_search('refund')").fetchone() \
                != (0,)


def test_an_rls_database_restored_with_no_owner_by_another_role(
        source: str, server_dsn: str, embedder: Any, tmp_path: Path) -> None:
    """The restoring role owns every table after --no-owner; FORCEd row-level security
    holds it until a superuser makes it a member of pgfunnel_writer (doctor says so), and
    then init, doctor, searches as the application role and ingest work as before."""
    with connect(source, autocommit=True) as conn:
        enable_rls(conn)
    app = create_app_role(source)
    app_role = conninfo_part(app, "user")

    def app_answers(dsn: str) -> list[Any]:
        with Funnel(dsn, embedder=embedder) as funnel:
            return [[(r.chunk_id, r.fused_score, r.final_rank)
                     for r in funnel.search(q, principals=who, tenant=tenant).results]
                    for q in QUERIES for who, tenant in (([], None), (["alice"], "acme"))]

    answers = app_answers(app)
    archive = tmp_path / "rls.dump"
    assert _run(pg_bin("pg_dump"), "-Fc", "-d", source, "-f", str(archive)).returncode == 0
    owner = f"pgf_app_owner_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_dsn, autocommit=True) as su:
        su.execute(sql.SQL("create role {} login").format(sql.Identifier(owner)))
    with fresh_database(server_dsn, owner=owner) as restored:
        with connect(restored, autocommit=True) as conn:
            conn.execute("create extension vector")  # not a trusted extension
        as_owner = with_user(restored, owner)
        done = _run(pg_bin("pg_restore"), "--no-owner", "-d", as_owner, str(archive))
        # the one error: the extension's comment belongs to the extension's owner
        errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
        assert errors == ["pg_restore: error: could not execute query: ERROR:  must be "
                          "owner of extension vector"], done.stderr
        with connect(as_owner, autocommit=True) as conn:
            [(level, message)] = [(f.level, f.message) for f in run_checks(conn)
                                  if f.check == "doctor_role"]
            assert level == "error" and f"grant pgfunnel_writer to {owner}" in message
        with psycopg.connect(server_dsn, autocommit=True) as su:
            su.execute(sql.SQL("grant pgfunnel_writer to {}").format(sql.Identifier(owner)))
            # the source's application role searches the copy: it may connect, not every
            # role of the cluster (else doctor warns, security.database_connect: a reader
            # of the source may search the copy, and one of the copy the source)
            copy = sql.Identifier(conninfo_part(restored, "dbname"))
            su.execute(sql.SQL("revoke connect on database {} from public").format(copy))
            su.execute(sql.SQL("grant connect on database {} to {}").format(
                copy, sql.Identifier(app_role)))
        assert schema.init(as_owner)["rls"] is True
        with connect(as_owner, autocommit=True) as conn:
            assert _not_info(run_checks(conn, app_role=app_role)) == []
        assert app_answers(with_user(restored, app_role)) == answers
        with connect(as_owner, autocommit=True) as conn:
            Ingester(conn, embedder=embedder).ingest(
                [DocumentRecord(citekey="restored-1", title="Restored", readers=["alice"],
                                text="zanzibar quokka refunds after the restore")])
            assert _not_info(run_checks(conn, app_role=app_role)) == []
        with Funnel(with_user(restored, app_role), embedder=embedder) as funnel:
            assert funnel.search("zanzibar quokka", principals=["alice"], trace=True
                                 ).results[0].citekey == "restored-1"
            assert all(r.citekey != "restored-1"
                       for r in funnel.search("zanzibar quokka").results)
