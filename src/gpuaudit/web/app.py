"""The web UI: runs list with filters, a run's report, two runs compared, the live page.

Pages are the report's own templates; plotly.js is served once from /static/. Every request
passes the token check when a token is set; without one, only requests naming this machine
(Host: 127.0.0.1, localhost, [::1]) are answered, so a web page elsewhere cannot reach the UI
through DNS rebinding.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.datastructures import URL
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gpuaudit import parse
from gpuaudit.errors import BadInputError
from gpuaudit.model import Severity
from gpuaudit.web.live import LiveFeed

TEMPLATES = str(Path(__file__).parent / "templates")
COOKIE = "gpuaudit_token"
PLOTLY_URL = "/static/plotly.min.js"
NAV = (("Runs", "/"), ("Compare", "/compare"), ("Live", "/live"))
LOCAL_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]
SSE_POLL_S = 0.2
SSE_KEEPALIVE_S = 15.0
LIST_LIMIT = 500


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


def _env() -> Any:
    from gpuaudit.report.html import environment

    return environment((TEMPLATES,))


def _page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    from gpuaudit.report.html import css

    html = _env().get_template(name).render(css=css(), nav=NAV, plotly_inline=None,
                                            **context)
    return HTMLResponse(html, status_code=status)


def _error(message: str, status: int) -> HTMLResponse:
    return _page("message.html.j2", status=status, title="gpuaudit: error", message=message,
                 plotly_src=None)


def _bad(exc: BadInputError) -> HTMLResponse:
    from gpuaudit.store.store import RunNotFoundError

    return _error(str(exc), 404 if isinstance(exc, RunNotFoundError) else 422)


def create_app(db: str | None = None, *, token: str | None = None,
               feed: LiveFeed | None = None, allowed_hosts: list[str] | None = None,
               ) -> Starlette:
    """The ASGI app over the store at `db`, opened read-only: the UI changes nothing, and a
    mistyped path is a one-line error here (not an empty store, nor an error at the first
    request)."""
    from gpuaudit.store import Store

    store = Store(db, read_only=True)

    def runs_page(request: Request) -> Response:
        q = request.query_params
        kind = q.get("kind") or None
        try:
            summaries = store.list_runs(limit=LIST_LIMIT, kind=kind)
        except BadInputError as exc:
            return _bad(exc)
        kinds = sorted({s.kind for s in store.list_runs(limit=LIST_LIMIT)})
        host, gpu, verdict = q.get("host", "").strip(), q.get("gpu", "").strip(), q.get(
            "verdict", "")
        since_days = q.get("days", "")
        shown = []
        cutoff = None
        if since_days.isdigit():
            cutoff = datetime.now(timezone.utc) - timedelta(days=int(since_days))
        for s in summaries:
            if host and host.lower() not in (s.hostname or "").lower():
                continue
            if gpu and gpu.lower() not in (s.gpu_summary or "").lower():
                continue
            if verdict and s.verdict.value != verdict:
                continue
            started = s.started_at if s.started_at.tzinfo else s.started_at.replace(
                tzinfo=timezone.utc)
            if cutoff and started < cutoff:
                continue
            shown.append(s)
        return _page("runs.html.j2", runs=shown, kinds=kinds, q=dict(q.items()),
                     verdicts=[v.value for v in Severity], total=len(summaries),
                     plotly_src=None)

    def run_page(request: Request) -> Response:
        from gpuaudit.report.html import render_run_html

        run_id = request.path_params["run_id"]
        try:
            run = store.get(run_id)
            points = _telemetry(store, run)
        except BadInputError as exc:
            return _bad(exc)
        html = render_run_html(run, telemetry=points, plotly_src=PLOTLY_URL,
                               nav=(*NAV, ("JSON", f"/runs/{run.id}.json"),
                                    ("Download report", f"/runs/{run.id}/report.html")),
                               template_dirs=(TEMPLATES,))
        return HTMLResponse(html)

    def run_json(request: Request) -> Response:
        try:
            run = store.get(request.path_params["run_id"])
        except BadInputError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        return Response(run.model_dump_json(indent=2), media_type="application/json")

    def run_download(request: Request) -> Response:
        from gpuaudit.report.html import render_run_html

        try:
            run = store.get(request.path_params["run_id"])
            points = _telemetry(store, run)
        except BadInputError as exc:
            return _bad(exc)
        return HTMLResponse(render_run_html(run, telemetry=points), headers={
            "Content-Disposition": f'attachment; filename="gpuaudit-{run.id}.html"'})

    def compare_page(request: Request) -> Response:
        from gpuaudit.compare import compare_runs
        from gpuaudit.report.html import render_compare_html

        q = request.query_params
        a, b = q.get("a", "").strip(), q.get("b", "").strip()
        if not a or not b:
            runs = store.list_runs(limit=LIST_LIMIT)
            return _page("pick.html.j2", runs=runs, q=dict(q.items()), plotly_src=None)
        try:
            threshold = _threshold(q.get("threshold") or "5%")
            comparison = compare_runs(store.get(a), store.get(b), threshold)
        except BadInputError as exc:
            return _bad(exc)
        return HTMLResponse(render_compare_html(comparison, plotly_src=PLOTLY_URL, nav=NAV,
                                                template_dirs=(TEMPLATES,)))

    def live_page(request: Request) -> Response:
        return _page("live.html.j2", feed=feed, plotly_src=PLOTLY_URL)

    async def live_events(request: Request) -> Response:
        if feed is None:
            return JSONResponse({"error": "no live source"}, status_code=404)
        last = request.headers.get("last-event-id", "")
        start = int(last) if last.isdigit() else 0

        async def stream() -> Any:
            seq, quiet = start, 0.0
            yield f"event: hello\ndata: {json.dumps(_feed_info(feed))}\n\n"
            while True:
                if await request.is_disconnected():
                    return
                ticks = feed.since(seq)
                for s, doc in ticks:
                    seq = s
                    yield f"id: {s}\nevent: tick\ndata: {json.dumps(doc)}\n\n"
                if not ticks and feed.ended:
                    yield f"event: end\ndata: {json.dumps(_feed_info(feed))}\n\n"
                    return
                quiet = 0.0 if ticks else quiet + SSE_POLL_S
                if quiet >= SSE_KEEPALIVE_S:
                    quiet = 0.0
                    yield ": keep-alive\n\n"
                await asyncio.sleep(SSE_POLL_S)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache",
                                          "X-Accel-Buffering": "no"})

    def plotly_js(request: Request) -> Response:
        from gpuaudit.report.charts import plotly_js as bundle

        return Response(bundle(), media_type="text/javascript",
                        headers={"Cache-Control": "max-age=86400"})

    def health(request: Request) -> Response:
        return JSONResponse({"ok": True, "live": feed is not None})

    routes = [
        Route("/", runs_page),
        Route("/runs/{run_id:str}.json", run_json),
        Route("/runs/{run_id:str}/report.html", run_download),
        Route("/runs/{run_id:str}", run_page),
        Route("/compare", compare_page),
        Route("/live", live_page),
        Route("/live/events", live_events),
        Route(PLOTLY_URL, plotly_js),
        Route("/healthz", health),
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


def _feed_info(feed: LiveFeed) -> dict[str, Any]:
    return {"description": feed.description, "hostname": feed.hostname,
            "interval_s": feed.interval_s, "ended": feed.ended, "error": feed.error}


def _telemetry(store: Any, run: Any) -> list[Any]:
    from gpuaudit.report.html import run_telemetry

    return run_telemetry(store, run)


def _threshold(text: str) -> float:
    from gpuaudit.compare import MAX_THRESHOLD_PCT

    return parse.percent(text, "threshold", hi=MAX_THRESHOLD_PCT)
