"""The example web app answers HTTP searches against the real database and enforces
the reader identity from the X-Principals header."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from funnel_util import load_module

from pgfunnel.db import connect
from pgfunnel.ingest import Ingester
from pgfunnel.sources import DocumentRecord

APP = Path(__file__).resolve().parent.parent / "examples" / "webapp" / "app.py"
SECRET = DocumentRecord(
    citekey="audit-zebra",
    title="Zebra audit checklist",
    text="# Audits\n\n## Quarterly\n\nThe quarterly zebra audit checklist lists every "
         "vault key holder, the zebra badge rotation and the escrow reconciliation steps "
         "for the finance team.",
    readers=["team-a"],
)


def _load_app_module() -> Any:
    return load_module("pgfunnel_example_webapp", APP)


@pytest.fixture()
def client(sample_db: str, embedder: Any) -> Iterator[TestClient]:
    with connect(sample_db, autocommit=True) as conn:
        Ingester(conn, "default", embedder=embedder).ingest([SECRET])
    app = _load_app_module().create_app(sample_db, embedder=embedder)
    with TestClient(app) as c:
        yield c


def test_http_search_returns_ranked_results(client: TestClient) -> None:
    r = client.get("/search", params={"q": "refund on an annual plan", "k": 5},
                   headers={"X-Principals": "alice"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [x["rank"] for x in body["results"]] == list(range(1, len(body["results"]) + 1))
    assert 1 <= len(body["results"]) <= 5
    assert body["results"][0]["citekey"] == "refunds-annual"
    # the ORM join added the document's own columns
    assert body["results"][0]["language"] == "en"
    # a NUL byte, which Postgres text cannot hold, is the client's mistake: 400, not 503
    bad = client.get("/search", params={"q": "refund\x00plan"}, headers={"X-Principals": "alice"})
    assert bad.status_code == 400, bad.text
    assert "NUL" in bad.json()["detail"]


def test_private_document_only_for_its_readers(client: TestClient) -> None:
    q: dict[str, str | int] = {"q": "zebra audit checklist", "k": 5}
    allowed = client.get("/search", params=q, headers={"X-Principals": "alice, team-a"})
    assert allowed.status_code == 200
    assert allowed.json()["results"][0]["citekey"] == "audit-zebra"
    # the chunk under both headings carries its breadcrumb
    assert ("Audits", "Quarterly") in [(r["section_path"], r["heading"])
                                       for r in allowed.json()["results"]
                                       if r["citekey"] == "audit-zebra"]

    denied = client.get("/search", params=q, headers={"X-Principals": "bob"})
    assert denied.status_code == 200
    assert "audit-zebra" not in [x["citekey"] for x in denied.json()["results"]]

    public_only = client.get("/search", params=q, headers={"X-Principals": ""})
    assert "audit-zebra" not in [x["citekey"] for x in public_only.json()["results"]]

    assert client.get("/documents/audit-zebra", headers={"X-Principals": "bob"}).status_code == 403
    ok = client.get("/documents/audit-zebra", headers={"X-Principals": "team-a"})
    assert ok.status_code == 200 and ok.json()["title"] == "Zebra audit checklist"


def test_missing_identity_is_refused_not_everyone(client: TestClient) -> None:
    r = client.get("/search", params={"q": "zebra audit checklist"})
    assert r.status_code == 401
    assert "X-Principals" in r.json()["detail"]
    assert client.get("/documents/nope", headers={"X-Principals": "a"}).status_code == 404


def test_documents_follow_the_search_rules_and_odd_input_is_a_client_error(
        client: TestClient, sample_db: str) -> None:
    # a document out of its validity window is hidden from search: /documents says 403 too
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("update pgfunnel.document set valid_to = '2000-01-01' "
                     "where citekey = 'audit-zebra'")
    assert client.get("/documents/audit-zebra",
                      headers={"X-Principals": "team-a"}).status_code == 403
    assert client.get("/documents/audit%00zebra", headers={"X-Principals": "a"}).status_code == 400
    assert client.get("/search", params={"q": "   "}, headers={"X-Principals": ""}
                      ).status_code == 400
    # a UTF-8 principal (the server hands header bytes over read as Latin-1)
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("update pgfunnel.document set valid_to = null, readers = '{café}' "
                     "where citekey = 'audit-zebra'")
    ok = client.get("/documents/audit-zebra",
                    headers={b"X-Principals": "café".encode()})
    assert ok.status_code == 200


def test_after_a_model_change_the_app_loads_the_new_model(
        sample_db: str, tmp_path: Path) -> None:
    from pgfunnel import versions
    from pgfunnel.tiny_models import build_tiny_bi_encoder

    tiny = str(build_tiny_bi_encoder(tmp_path / "tiny", dim=64))
    app = _load_app_module().create_app(sample_db)  # loads the active model at startup
    with TestClient(app) as c:
        assert app.state.embedder is not None
        params: dict[str, str | int] = {"q": "refund on an annual plan", "k": 3}
        assert c.get("/search", params=params, headers={"X-Principals": ""}).status_code == 200
        with connect(sample_db, autocommit=True) as conn:
            versions.reindex(conn, "default", model=tiny, activate_after=True)
        after = c.get("/search", params=params, headers={"X-Principals": ""})
        assert after.status_code == 200 and after.json()["results"]
        assert app.state.embedder.model_name == tiny
