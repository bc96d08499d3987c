"""The web UI: runs list with filters, a run's report, two runs compared, the live page
(`pages`, `live_page`); here the app that routes to them and guards them.

Pages are the report's own templates; plotly.js is served once from /static/. Every request
passes the token check when a token is set; without one, only requests naming this machine
(Host: 127.0.0.1, localhost, [::1]) are answered, so a web page elsewhere cannot reach the UI
through DNS rebinding.
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncIterator
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.datastructures import URL
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gpuaudit.web import live_page, pages
from gpuaudit.web.live import LiveFeed

COOKIE = "gpuaudit_token"
LOCAL_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]


class TokenGate:
    """Every request must carry the token: `Authorization: Bearer T`, the cookie this sets,
    or `?token=T` once (answered with the cookie and a redirect to the same URL without it,
    so the token stays out of links and history)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app, self.token = app, token.encode()

    def _ok(self, supplied: str | None) -> bool:
        return supplied is not None and hmac.compare_digest(supplied.encode(), self.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        auth = request.headers.get("authorization", "")
        bearer = auth[7:] if auth.lower().startswith("bearer ") else None
        if self._ok(bearer) or self._ok(request.cookies.get(COOKIE)):
            await self.app(scope, receive, send)
            return
        if self._ok(request.query_params.get("token")) and scope["type"] == "http":
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = URL(scope=scope).replace(query=urlencode(rest))
            response: Response = RedirectResponse(
                target.path + (f"?{target.query}" if target.query else ""), status_code=303)
            response.set_cookie(COOKIE, self.token.decode(), httponly=True, samesite="strict")
            await response(scope, receive, send)
            return
        response = HTMLResponse(
            "<!DOCTYPE html><title>gpuaudit: token required</title><h1>Token required</h1>"
            "<p>This gpuaudit server needs its token: open the address it printed (with "
            "<code>?token=…</code>) or send <code>Authorization: Bearer …</code>.</p>",
            status_code=401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


def create_app(db: str | None = None, *, token: str | None = None,
               feed: LiveFeed | None = None, allowed_hosts: list[str] | None = None,
               ) -> Starlette:
    """The ASGI app over the store at `db`, opened read-only: the UI changes nothing, and a
    mistyped path is a one-line error here (not an empty store, nor an error at the first
    request)."""
    from gpuaudit.store import Store

    store = Store(db, read_only=True)
    routes = [
        Route("/", pages.runs_page),
        Route("/runs/{run_id:str}.json", pages.run_json),
        Route("/runs/{run_id:str}/report.html", pages.run_download),
        Route("/runs/{run_id:str}", pages.run_page),
        Route("/compare", pages.compare_page),
        Route("/live", live_page.live_page),
        Route("/live/events", live_page.live_events),
        Route(pages.PLOTLY_URL, pages.plotly_js),
        Route("/healthz", pages.health),
    ]
    middleware = []
    if token:
        middleware.append(Middleware(TokenGate, token=token))
    else:
        middleware.append(Middleware(TrustedHostMiddleware,
                                     allowed_hosts=allowed_hosts or LOCAL_HOSTS))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if feed is not None:
                feed.stop()
            store.close()

    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.store = store
    app.state.feed = feed
    return app
