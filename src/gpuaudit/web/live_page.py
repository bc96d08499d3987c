"""The live page: the GPUs as the monitor (or a replayed recording) sees them, streamed to the
browser as server-sent events from the app's `LiveFeed` (`app.state.feed`)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from gpuaudit.web.live import LiveFeed
from gpuaudit.web.pages import PLOTLY_URL, page

SSE_POLL_S = 0.2
SSE_KEEPALIVE_S = 15.0


def live_page(request: Request) -> Response:
    return page("live.html.j2", feed=request.app.state.feed, plotly_src=PLOTLY_URL)


async def live_events(request: Request) -> Response:
    feed: LiveFeed | None = request.app.state.feed
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
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _feed_info(feed: LiveFeed) -> dict[str, Any]:
    return {"description": feed.description, "hostname": feed.hostname,
            "interval_s": feed.interval_s, "ended": feed.ended, "error": feed.error}
