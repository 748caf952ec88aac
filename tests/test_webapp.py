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
    text="The quarterly zebra audit checklist lists every vault key holder, the zebra "
         "badge rotation and the escrow reconciliation steps for the finance team.",
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
    q = {"q": "zebra audit checklist", "k": 5}
    allowed = client.get("/search", params=q, headers={"X-Principals": "alice, team-a"})
    assert allowed.status_code == 200
    assert allowed.json()["results"][0]["citekey"] == "audit-zebra"

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
