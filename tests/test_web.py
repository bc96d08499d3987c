"""The web UI's server side: pages, errors, the token on every request, the Host check, the
live feed from a replayed real trace, and `gpuaudit serve` refusing an open address."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from gpuaudit.errors import BadInputError
from gpuaudit.store import Store
from tests.reportkit import FIXTURES, NATIVE, ONE_GPU, TWO_GPU, load
from tests.support.cli import assert_one_line_error, gpuaudit

TestClient = pytest.importorskip("starlette.testclient").TestClient
TOKEN = "t0ken-for-the-tests-0123456789"
TRACE = FIXTURES / "telemetry" / "real" / "ddp-2gpu-lm-bf16.json"


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with Store(url) as store:
        for name in (ONE_GPU, TWO_GPU, NATIVE):
            store.save(load(name))
    return url


def client(db: str, **kw) -> TestClient:
    from gpuaudit.web.app import create_app

    return TestClient(create_app(db, **kw), base_url="http://127.0.0.1:8765")


def test_pages_and_links(db):
    with client(db) as c:
        runs = c.get("/")
        assert runs.status_code == 200
        for name in (ONE_GPU, TWO_GPU, NATIVE):
            assert f'href="/runs/{load(name).id}"' in runs.text
        page = c.get(f"/runs/{load(TWO_GPU).id[:6]}")
        assert page.status_code == 200 and 'src="/static/plotly.min.js"' in page.text
        assert 'id="chart-roofline"' in page.text
        js = c.get("/static/plotly.min.js")
        assert js.status_code == 200 and "plotly" in js.text[:2000].lower()
        download = c.get(f"/runs/{load(ONE_GPU).id}/report.html")
        assert "attachment" in download.headers["content-disposition"]
        assert len(download.text) > 3_000_000  # self-contained: plotly.js inside
        assert c.get(f"/runs/{load(ONE_GPU).id}.json").json()["id"] == load(ONE_GPU).id
        cmp = c.get("/compare", params={"a": load(ONE_GPU).id, "b": load(TWO_GPU).id})
        assert cmp.status_code == 200 and "Different machine or software" in cmp.text


def test_filters(db):
    with client(db) as c:
        only_2gpu = c.get("/", params={"gpu": "2× NVIDIA"}).text
        assert load(TWO_GPU).id in only_2gpu and load(ONE_GPU).id not in only_2gpu
        warn = c.get("/", params={"verdict": "WARN"}).text
        assert load(TWO_GPU).id in warn and load(NATIVE).id not in warn
        assert "No run matches" in c.get("/", params={"host": "nohost"}).text
        bad = c.get("/", params={"verdict": "GREAT"})
        assert bad.status_code == 422 and "unknown verdict" in bad.text


def test_an_old_matching_run_is_listed_past_the_newest(db, monkeypatch):
    """The page lists what the store's query finds: with room for one run, the one-GPU run
    (the oldest of the three) is still found, not only looked for among the newest."""
    from gpuaudit.web import pages

    monkeypatch.setattr(pages, "LIST_LIMIT", 1)
    oldest, middle, newest = sorted((load(n) for n in (ONE_GPU, TWO_GPU, NATIVE)),
                                    key=lambda r: r.started_at)
    assert [len(r.machine.gpus) for r in (oldest, middle, newest)] == [1, 2, 2]
    with client(db) as c:
        plain = c.get("/").text
        assert newest.id in plain and oldest.id not in plain and "of 3 stored" in plain
        matched = c.get("/", params={"gpu": "1×"}).text
        assert oldest.id in matched and newest.id not in matched and middle.id not in matched


def test_errors_are_pages_not_tracebacks(db):
    with client(db) as c:
        missing = c.get("/runs/feedbeef0000")
        assert missing.status_code == 404 and "no run &#39;feedbeef0000&#39;" in missing.text
        bad = c.get("/compare", params={"a": load(ONE_GPU).id, "b": load(TWO_GPU).id,
                                        "threshold": "much"})
        assert bad.status_code == 422 and "threshold" in bad.text


def test_token_is_checked_on_every_request(db):
    paths = ["/", f"/runs/{load(ONE_GPU).id}", "/compare", "/live", "/live/events",
             "/static/plotly.min.js", "/healthz", f"/runs/{load(ONE_GPU).id}.json"]
    with client(db, token=TOKEN) as c:
        for path in paths:
            r = c.get(path)
            assert r.status_code == 401, path
            assert c.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/healthz", headers={"Authorization": f"Bearer {TOKEN}"}).json()["ok"]
        # ?token= once: a cookie and a redirect to the same URL without the token.
        r = c.get("/", params={"token": TOKEN, "kind": "bench"}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/?kind=bench"
        assert "httponly" in r.headers["set-cookie"].lower()
        assert c.get("/").status_code == 200  # the cookie now


def test_without_a_token_only_this_machines_names_are_answered(db):
    with client(db) as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/healthz", headers={"Host": "localhost:8765"}).status_code == 200
        assert c.get("/healthz", headers={"Host": "attacker.example"}).status_code == 400


def test_the_ui_opens_the_store_read_only(db, tmp_path):
    from gpuaudit.web.app import create_app

    with client(db) as c:
        assert c.app.state.store.read_only
    wrong = tmp_path / "typo.db"
    with pytest.raises(BadInputError, match=r"typo\.db"):
        create_app(str(wrong))
    assert not wrong.exists()  # a mistyped path is an error, not a new empty store


def test_serve_options_through_the_grammar(db):
    assert_one_line_error(gpuaudit("serve", "--port", "70000", "--db", db), "--port")
    assert_one_line_error(gpuaudit("serve", "--interval", "5", "--db", db), "--interval")
    assert_one_line_error(gpuaudit("serve", "--speed", "2", "--db", db),
                          "goes with --replay")


def test_serve_refuses_an_open_address_without_a_token(db):
    assert_one_line_error(gpuaudit("serve", "--host", "0.0.0.0", "--db", db),
                          "needs --token")
    assert_one_line_error(gpuaudit("serve", "--host", "127.0.0.1", "--token", "short",
                                   "--db", db), "at least 16 characters")


def test_live_feed_replays_a_real_trace_and_loops():
    from gpuaudit.web.live import replay_feed

    feed = replay_feed(TRACE, speed=None, loop=True).start()
    try:
        deadline = time.monotonic() + 30
        while len(feed.since(0)) < 45 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        feed.stop()
    ticks = feed.since(0)
    assert len(ticks) >= 45 and feed.gpu_count == 2
    times = [doc["time"] for _, doc in ticks]
    assert times == sorted(times) and len(set(times)) == len(times)  # laps keep going forward
    first = ticks[1][1]["gpus"][0]  # GPM rates need a previous sample: the 2nd tick has them
    assert first["power_w"] > 500 and first["sm_activity_pct"] > 50  # DDP training on H200
    assert [s for s, _ in feed.since(ticks[-3][0])] == [ticks[-2][0], ticks[-1][0]]


def test_live_events_stream_ends_with_the_trace(db):
    from gpuaudit.web.live import replay_feed

    feed = replay_feed(TRACE, speed=None, loop=False)
    with client(db, feed=feed) as c:
        feed.start()
        done = threading.Event()
        body: list[str] = []

        def read() -> None:
            with c.stream("GET", "/live/events") as r:
                for line in r.iter_lines():
                    body.append(line)
            done.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert done.wait(60)
    events = [ln.removeprefix("event: ") for ln in body if ln.startswith("event: ")]
    assert events[0] == "hello" and events[-1] == "end"
    assert events.count("tick") == 20  # the trace's 20 frames, once


def test_the_live_page_replays_a_streamed_recording(tmp_path):
    """`monitor --record` streams JSON lines; `serve --replay` reads them as it reads a
    single-document trace."""
    import json as _json

    from gpuaudit.web.live import LoopingReplay

    doc = _json.loads((Path(__file__).parent / "fixtures" / "telemetry" / "real"
                       / "h200-1gpu-idle.json").read_text())
    lines = tmp_path / "idle.jsonl"
    header = {k: v for k, v in doc.items() if k != "frames"}
    lines.write_text("\n".join(_json.dumps(x) for x in [header, *doc["frames"]]) + "\n")
    streamed, whole = LoopingReplay.from_file(lines, False), LoopingReplay(doc, False)
    assert len(streamed) == len(whole) == len(doc["frames"]) > 0
    assert [streamed.advance() for _ in range(3)] == [whole.advance() for _ in range(3)]
