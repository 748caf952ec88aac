"""Example web app: a search endpoint served through SQLAlchemy and the ORM models.

Run it (after ``pgfunnel init`` and ``pgfunnel ingest``)::

    export PGFUNNEL_DSN=postgresql://user:pass@localhost/db
    uvicorn app:app --app-dir examples/webapp

    curl -H 'X-Principals: alice,team-a' 'http://127.0.0.1:8000/search?q=refund+annual&k=5'

The reader identity comes from the ``X-Principals`` header (comma-separated user and
group names; an empty value means "public documents only"). This trusts the caller:
in production the header must be set by an authenticating proxy that strips any
value sent by the client. A request without the header is refused (401) rather than
treated as "everyone".
"""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from pgfunnel.embedder import Embedder
from pgfunnel.errors import (
    ConfigError,
    InvalidInputError,
    InvalidVectorError,
    NotFoundError,
    PgfunnelError,
    translate,
)
from pgfunnel.models import Chunk, Collection, Document, IndexVersion
from pgfunnel.sqla import engine_from_dsn, funnel_search_tvf, identity_statement

SNIPPET_CHARS = 300


def _header_text(value: str) -> str:
    """A header as the UTF-8 it was sent in: HTTP servers hand header values over as
    Latin-1, so "café" would arrive as "cafÃ©" and never match a principal."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def parse_principals(header: str | None) -> list[str]:
    """``"alice, team-a"`` -> ``["alice", "team-a"]``; a missing header is refused."""
    if header is None:
        raise HTTPException(status_code=401, detail="X-Principals header is required "
                            "(an empty value means public documents only)")
    return [p.strip() for p in _header_text(header).split(",") if p.strip()]


def parse_tenant(header: str | None) -> str | None:
    tenant = _header_text(header).strip() if header is not None else ""
    return tenant or None


def session(request: Request) -> Iterator[Session]:
    """One ORM session per request, on the app's engine."""
    engine: Engine = request.app.state.engine
    with Session(engine) as s:
        yield s


# module level: with postponed annotations FastAPI resolves these names in module globals
SessionDep = Annotated[Session, Depends(session)]
PrincipalsHeader = Annotated[str | None, Header(alias="X-Principals")]
TenantHeader = Annotated[str | None, Header(alias="X-Tenant")]


def create_app(dsn: str | None = None, *, embedder: Embedder | None = None,
               collection: str | None = None) -> FastAPI:
    """Build the app. Nothing connects until startup; ``dsn`` None means PGFUNNEL_DSN."""
    coll_name = collection or os.environ.get("PGFUNNEL_COLLECTION", "default")

    loading = threading.Lock()

    def active_model(s: Session) -> str:
        model = s.execute(
            select(IndexVersion.embedding_model)
            .join(Collection, Collection.id == IndexVersion.collection_id)
            .where(Collection.name == coll_name, IndexVersion.state == "active")
        ).scalar_one_or_none()
        if model is None:
            raise HTTPException(404, f"collection {coll_name!r} has no active index")
        return str(model)

    def load_embedder(app: FastAPI, s: Session, stale: Embedder | None = None) -> Embedder:
        """The active index version's model, loaded once: requests that arrive while it
        loads wait for that load rather than each loading a copy."""
        with loading:
            emb: Embedder | None = app.state.embedder
            if emb is None or emb is stale:
                emb = Embedder(active_model(s))
                app.state.embedder = emb
            return emb

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = engine_from_dsn(dsn)
        app.state.engine = engine
        app.state.embedder = embedder
        if embedder is None:
            # load the model at startup, not on the first requests
            with suppress(HTTPException, PgfunnelError), Session(engine) as s:
                load_embedder(app, s)
        try:
            yield
        finally:
            engine.dispose()

    app = FastAPI(title="pgfunnel example", lifespan=lifespan)

    def query_embedder(request: Request, s: Session) -> Embedder:
        emb: Embedder | None = request.app.state.embedder
        return emb if emb is not None else load_embedder(request.app, s)

    @app.exception_handler(PgfunnelError)
    async def pgfunnel_error(request: Request, exc: PgfunnelError) -> Any:
        from fastapi.responses import JSONResponse

        # a vector the index cannot use is the server's model out of step, not the client
        status = 503 if isinstance(exc, InvalidVectorError) else (
            400 if isinstance(exc, (ConfigError, InvalidInputError)) else (
                404 if isinstance(exc, NotFoundError) else 503))
        return JSONResponse({"detail": str(exc)}, status_code=status)

    @app.get("/search")
    def search(request: Request, s: SessionDep,
               q: Annotated[str, Query(min_length=1, max_length=10_000)],
               k: Annotated[int, Query(ge=1, le=100)] = 10,
               x_principals: PrincipalsHeader = None,
               x_tenant: TenantHeader = None) -> dict[str, Any]:
        principals = parse_principals(x_principals)
        tenant = parse_tenant(x_tenant)
        if not q.strip():
            raise HTTPException(400, "q: empty query")
        emb = query_embedder(request, s)

        def run(vector: Any) -> list[Any]:
            fs = funnel_search_tvf(q, vector, k=k, collection=coll_name,
                                   principals=principals, tenant=tenant)
            # the application's own tables join like any other: here chunk and document
            stmt = (select(fs.c.final_rank, fs.c.chunk_id, fs.c.citekey, fs.c.title,
                           fs.c.section_path, fs.c.heading, fs.c.text, fs.c.fused_score,
                           fs.c.lexical_rank,
                           fs.c.dense_rank, Document.language, Document.updated_at)
                    .join(Chunk, Chunk.id == fs.c.chunk_id)
                    .join(Document, Document.id == Chunk.document_id)
                    .order_by(fs.c.final_rank))
            try:
                # same transaction: row-level security (if enabled) reads these settings
                s.execute(identity_statement(principals, tenant))
                found = list(s.execute(stmt).all())
                s.commit()
                return found
            except Exception as exc:
                s.rollback()
                # bind: a role granted nothing is told the advice for this database's mode
                raise translate(exc, bind=s) from exc

        try:
            rows = run(emb.embed_query(q))
        except InvalidVectorError:
            # another index version, built with another model, went live: load it once
            if emb.model_name == active_model(s):
                raise
            rows = run(load_embedder(request.app, s, stale=emb).embed_query(q))
        return {
            "query": q,
            "k": k,
            "results": [
                {"rank": r.final_rank, "chunk_id": r.chunk_id, "citekey": r.citekey,
                 "title": r.title, "section_path": r.section_path, "heading": r.heading,
                 "snippet": r.text[:SNIPPET_CHARS],
                 "fused_score": r.fused_score, "lexical_rank": r.lexical_rank,
                 "dense_rank": r.dense_rank, "language": r.language,
                 "updated_at": r.updated_at.isoformat() if r.updated_at else None}
                for r in rows
            ],
        }

    @app.get("/documents/{citekey}")
    def document(citekey: str, s: SessionDep, x_principals: PrincipalsHeader = None,
                 x_tenant: TenantHeader = None) -> dict[str, Any]:
        principals = parse_principals(x_principals)
        tenant = parse_tenant(x_tenant)
        if "\x00" in citekey:
            raise HTTPException(400, "citekey: contains a NUL byte")
        s.execute(identity_statement(principals, tenant))
        doc = s.execute(
            select(Document).join(Collection, Collection.id == Document.collection_id)
            .where(Collection.name == coll_name, Document.citekey == citekey)
        ).scalar_one_or_none()
        if doc is None:
            # under row-level security a document hidden from the reader is not found
            raise HTTPException(404, f"no document {citekey!r}")
        # the rule every search applies (access, tenant, validity now), not a copy of it
        visible = bool(s.execute(text(
            "select pgfunnel._document_visible(d, :principals, :tenant, null, now(), null) "
            "from pgfunnel.document d where d.id = :id"),
            {"principals": principals, "tenant": tenant, "id": doc.id}).scalar())
        if not visible:
            # saying "forbidden" reveals that the citekey exists; fine for this example,
            # return 404 instead where even existence is confidential
            raise HTTPException(403, "this reader may not see this document")
        chunks = sorted(doc.chunks, key=lambda c: c.ordinal)
        return {"citekey": doc.citekey, "title": doc.title, "language": doc.language,
                "metadata": doc.metadata_,
                "chunks": [{"ordinal": c.ordinal, "heading": c.heading, "text": c.text}
                           for c in chunks]}

    return app


app = create_app()
