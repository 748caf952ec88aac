"""The public functions that take an application's connection give the same answer on one
opened with ``row_factory=dict_row`` as on a plain one, and put its row factory back.

pgfunnel reads rows by position; before ``db.rows_by_position`` the doctor, security, eval
and query-plan functions failed there with KeyError 0 (or an unpacking error). Searches and
ingest are covered in test_search_api.py and test_ingest.py, versions in test_versions.py.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pgfunnel import doctor, security
from pgfunnel.db import connect, rows_by_position
from pgfunnel.eval.harness import stage_recall_in_db, store_qrels
from pgfunnel.eval.qrels import JudgedQuery
from pgfunnel.query_plans import collection_settings
from pgfunnel.search import Funnel

_QUERIES = [
    JudgedQuery("q1", "refund an annual plan", "paraphrase", {"refunds-annual": 1}),
    JudgedQuery("q2", "ERR-4029", "identifier", {"err-4029": 2}),
]


def _findings(found: list[Any]) -> list[tuple[str, str, str]]:
    return [(f.check, f.level, f.message) for f in found]


def _answers(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    return {
        "doctor": _findings(doctor.run_checks(conn)),
        "security": [(f.level, f.message) for f in security.security_findings(conn)],
        "rls_enabled": security.rls_enabled(conn),
        "collection_settings": collection_settings(conn, "default"),
        "stage_recall": stage_recall_in_db(conn, "default"),
    }


def test_read_only_functions_answer_alike_on_a_dict_row_connection(sample_db: str,
                                                                  embedder: Any) -> None:
    with connect(sample_db, autocommit=True) as plain:
        # nothing judged yet: no recall at all, not a TypeError over the empty total
        assert stage_recall_in_db(plain, "default") == {}
        assert store_qrels(plain, "default", _QUERIES) == 2
    with Funnel(sample_db, "default", embedder=embedder) as funnel:
        for q in _QUERIES:
            funnel.search(q.query, k=5, trace=True)
    with connect(sample_db, autocommit=True) as plain:
        expected = _answers(plain)
    assert expected["stage_recall"]["all"]["n_queries"] == 2
    with psycopg.connect(sample_db, autocommit=True, row_factory=dict_row) as conn:
        assert _answers(conn) == expected
        assert store_qrels(conn, "default", _QUERIES) == 2
        assert conn.row_factory is dict_row  # put back
        assert conn.execute("select 1 as one").fetchone() == {"one": 1}


@pytest.mark.parametrize("change", [security.ensure_roles, security.grant_privileges,
                                    security.enable_rls, security.check_rls_setup,
                                    security.disable_rls])
def test_security_setup_runs_on_a_dict_row_connection(
        db: str, change: Callable[[psycopg.Connection[Any]], Any]) -> None:
    with psycopg.connect(db, autocommit=True, row_factory=dict_row) as conn:
        if change in (security.check_rls_setup, security.disable_rls):
            security.enable_rls(conn)
        change(conn)
        assert conn.row_factory is dict_row
    with connect(db, autocommit=True) as plain:
        assert security.rls_enabled(plain) is (change in (security.enable_rls,
                                                           security.check_rls_setup))


def test_rows_by_position_names_a_missing_connection() -> None:
    @rows_by_position
    def reads(conn: psycopg.Connection[Any]) -> None:
        raise AssertionError("not reached")

    with pytest.raises(TypeError, match="reads: the first argument must be a psycopg "
                                        "Connection, not str"):
        reads("postgresql:///db")  # type: ignore[arg-type]
