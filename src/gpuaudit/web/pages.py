"""The pages over the store: the runs list with its filters, a run's report (page, JSON,
download), two runs compared. Each handler finds the store on the app (`app.state.store`)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from gpuaudit import parse
from gpuaudit.errors import BadInputError
from gpuaudit.model import Severity

TEMPLATES = str(Path(__file__).parent / "templates")
PLOTLY_URL = "/static/plotly.min.js"
NAV = (("Runs", "/"), ("Compare", "/compare"), ("Live", "/live"))
LIST_LIMIT = 500


def _env() -> Any:
    from gpuaudit.report.html import environment

    return environment((TEMPLATES,))


def page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    from gpuaudit.report.html import css

    html = _env().get_template(name).render(css=css(), nav=NAV, plotly_inline=None,
                                            **context)
    return HTMLResponse(html, status_code=status)


def _error(message: str, status: int) -> HTMLResponse:
    return page("message.html.j2", status=status, title="gpuaudit: error", message=message,
                plotly_src=None)


def _bad(exc: BadInputError) -> HTMLResponse:
    from gpuaudit.store.store import RunNotFoundError

    return _error(str(exc), 404 if isinstance(exc, RunNotFoundError) else 422)


def runs_page(request: Request) -> Response:
    """The newest runs that match the filters (kind, a part of the host or GPU name, verdict,
    the last N days), filtered by the store's query: an old run that matches is shown."""
    store = request.app.state.store
    q = request.query_params
    verdict_text = q.get("verdict", "")
    try:
        verdict = Severity(verdict_text) if verdict_text else None
    except ValueError:
        return _error(f"unknown verdict {verdict_text!r} (choose from "
                      f"{', '.join(v.value for v in Severity)})", 422)
    days = q.get("days", "")
    since = (datetime.now(timezone.utc) - timedelta(days=int(days)) if days.isdigit()
             else None)
    try:
        shown = store.list_runs(limit=LIST_LIMIT, kind=q.get("kind") or None,
                                host=q.get("host", "").strip() or None,
                                gpu=q.get("gpu", "").strip() or None,
                                verdict=verdict, since=since)
        kinds = store.run_kinds()
    except BadInputError as exc:
        return _bad(exc)
    return page("runs.html.j2", runs=shown, kinds=sorted(kinds), q=dict(q.items()),
                 verdicts=[v.value for v in Severity], total=sum(kinds.values()),
                 limit=LIST_LIMIT, plotly_src=None)


def _run_with_telemetry(request: Request) -> tuple[Any, list[Any]]:
    """The run the path names and the telemetry recorded while it ran (BadInputError when
    there is no such run)."""
    store = request.app.state.store
    run = store.get(request.path_params["run_id"])
    return run, _telemetry(store, run)


def run_page(request: Request) -> Response:
    from gpuaudit.report.html import render_run_html

    try:
        run, points = _run_with_telemetry(request)
    except BadInputError as exc:
        return _bad(exc)
    html = render_run_html(run, telemetry=points, plotly_src=PLOTLY_URL,
                           nav=(*NAV, ("JSON", f"/runs/{run.id}.json"),
                                ("Download report", f"/runs/{run.id}/report.html")),
                           template_dirs=(TEMPLATES,))
    return HTMLResponse(html)


def run_json(request: Request) -> Response:
    try:
        run = request.app.state.store.get(request.path_params["run_id"])
    except BadInputError as exc:
        return JSONResponse({"error": str(exc)}, status_code=404)
    return Response(run.model_dump_json(indent=2), media_type="application/json")


def run_download(request: Request) -> Response:
    from gpuaudit.report.html import render_run_html

    try:
        run, points = _run_with_telemetry(request)
    except BadInputError as exc:
        return _bad(exc)
    return HTMLResponse(render_run_html(run, telemetry=points), headers={
        "Content-Disposition": f'attachment; filename="gpuaudit-{run.id}.html"'})


def compare_page(request: Request) -> Response:
    from gpuaudit.compare import compare_runs
    from gpuaudit.report.html import render_compare_html

    store = request.app.state.store
    q = request.query_params
    a, b = q.get("a", "").strip(), q.get("b", "").strip()
    if not a or not b:
        runs = store.list_runs(limit=LIST_LIMIT)
        return page("pick.html.j2", runs=runs, q=dict(q.items()), plotly_src=None)
    try:
        threshold = _threshold(q.get("threshold") or "5%")
        comparison = compare_runs(store.get(a), store.get(b), threshold)
    except BadInputError as exc:
        return _bad(exc)
    return HTMLResponse(render_compare_html(comparison, plotly_src=PLOTLY_URL, nav=NAV,
                                            template_dirs=(TEMPLATES,)))


def plotly_js(request: Request) -> Response:
    from gpuaudit.report.charts import plotly_js as bundle

    return Response(bundle(), media_type="text/javascript",
                    headers={"Cache-Control": "max-age=86400"})


def health(request: Request) -> Response:
    return JSONResponse({"ok": True, "live": request.app.state.feed is not None})


def _telemetry(store: Any, run: Any) -> list[Any]:
    from gpuaudit.report.html import run_telemetry

    return run_telemetry(store, run)


def _threshold(text: str) -> float:
    from gpuaudit.compare import MAX_THRESHOLD_PCT

    return parse.percent(text, "threshold", hi=MAX_THRESHOLD_PCT)
