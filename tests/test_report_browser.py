"""The reports and the web UI in a real browser (Debian's Chromium through Playwright): every
page loads without a console error, every chart draws its series, the live page moves with a
replayed real trace, links work, the token is enforced. Skipped with the reason when Chromium
or Playwright is missing, except under CI=true where that fails."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuaudit.report.html import render_compare_html, render_run_html
from gpuaudit.store import Store
from tests.conftest import cli_env
from tests.reportkit import (
    CHROMIUM_ARGS,
    FIXTURES,
    NATIVE,
    ONE_GPU,
    TWO_GPU,
    chromium_or_skip,
    contended,
    load,
    replayed_samples,
    with_figure,
)

pytestmark = pytest.mark.browser
ROOT = Path(__file__).parent.parent
TOKEN = "browser-test-token-0123456789abcdef"
TRACE = FIXTURES / "telemetry" / "real" / "ddp-2gpu-lm-bf16.json"
PHONE = {"width": 390, "height": 844}  # an iPhone 12-15's CSS pixels


@pytest.fixture(scope="module")
def browser() -> Iterator:
    executable = chromium_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Page:
    """A page with its console errors and uncaught exceptions collected."""

    def __init__(self, context) -> None:
        self.page = context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error"
                     else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))


@pytest.fixture
def page(browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield Page(context)
    context.close()


def drawn_charts(page) -> dict[str, dict]:
    """Every chart's promised series count, plotly's trace count and what the SVG holds."""
    page.wait_for_function(
        "Array.from(document.querySelectorAll('div.chart[data-figure]'))"
        ".every(d => d.dataset.drawn === '1')", timeout=30_000)
    return page.evaluate("""() => Object.fromEntries(
        Array.from(document.querySelectorAll('div.chart[data-figure]')).map(d => {
          const svg = d.querySelector('svg.main-svg');
          const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
          return [d.dataset.figure, {
            promised: Number(d.dataset.series), traces: (d.data || []).length,
            nodes: d.querySelectorAll('g.trace, g.hm').length,
            points: d.querySelectorAll('path.point, g.point, g.hm image, path.js-line').length,
            width: box.width, height: box.height}];
        }))""")


def assert_all_drawn(charts: dict[str, dict], expected: dict[str, int]) -> None:
    assert {k: v["promised"] for k, v in charts.items()} == expected
    for name, c in charts.items():
        assert c["traces"] == c["promised"] == c["nodes"], (name, c)
        assert c["width"] > 200 and c["height"] > 150 and c["points"] > 0, (name, c)


REPORT_CHARTS = {
    ONE_GPU: {"roofline": 9, "transfer": 1},  # 7 roofs, measured bandwidth, 1 GPU
    TWO_GPU: {"roofline": 10, "transfer": 1, "p2p-0": 1, "p2p-1": 1, "collectives": 5},
    NATIVE: {"collectives": 10},
}


@pytest.mark.parametrize("name", list(REPORT_CHARTS))
def test_report_file_draws_every_chart_offline(page, tmp_path, name):
    path = tmp_path / "report.html"
    path.write_text(render_run_html(load(name)))
    requests: list[str] = []
    page.page.on("request", lambda r: requests.append(r.url))
    page.page.goto(path.as_uri())
    assert_all_drawn(drawn_charts(page.page), REPORT_CHARTS[name])
    assert page.errors == []
    assert [u for u in requests if not u.startswith("file:")] == []  # nothing from the net


def test_report_with_telemetry_and_caveats(page, tmp_path):
    run = contended(load(ONE_GPU))
    from gpuaudit.model.history import HistoryPoint, Resolution

    points = [HistoryPoint(time=s.time, hostname=s.hostname, gpu=g.index,
                           resolution=Resolution.RAW, samples=1, error_samples=0,
                           power_w=g.power_w, sm_clock_mhz=g.sm_clock_mhz,
                           sm_activity_pct=g.sm_activity_pct,
                           tensor_activity_pct=g.tensor_activity_pct,
                           utilization_gpu_pct=g.utilization_gpu_pct,
                           temperature_gpu_c=g.temperature_gpu_c)
              for s in replayed_samples("h200-1gpu-matmul", run.started_at)
              for g in s.gpus]
    path = tmp_path / "report.html"
    path.write_text(render_run_html(run, telemetry=points))
    page.page.goto(path.as_uri())
    charts = drawn_charts(page.page)
    telemetry = {k: v for k, v in charts.items() if k.startswith("telemetry-")}
    assert set(telemetry) == {"telemetry-power_w", "telemetry-sm_clock_mhz",
                              "telemetry-sm_activity_pct", "telemetry-tensor_activity_pct",
                              "telemetry-utilization_gpu_pct", "telemetry-temperature_gpu_c"}
    assert_all_drawn(charts, {**REPORT_CHARTS[ONE_GPU], **{k: 1 for k in telemetry}})
    banner = page.page.locator("#caveats")
    assert banner.is_visible() and "contended" in banner.inner_text()
    assert page.errors == []


def test_report_reads_on_a_phone_and_in_print(browser, tmp_path):
    path = tmp_path / "report.html"
    path.write_text(render_run_html(load(TWO_GPU)))
    context = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True)
    try:
        p = Page(context)
        p.page.goto(path.as_uri())
        charts = drawn_charts(p.page)
        assert all(c["width"] <= PHONE["width"] for c in charts.values())
        # No sideways scrolling of the page: wide tables scroll inside their own box.
        assert p.page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        p.page.screenshot(path=str(tmp_path / "phone.png"))
        font = p.page.evaluate("parseFloat(getComputedStyle(document.body).fontSize)")
        assert font >= 14
        p.page.emulate_media(media="print")
        assert p.page.evaluate("getComputedStyle(document.querySelector('nav.toc')).display"
                               ) == "none"
        pdf = p.page.pdf(format="A4")
        assert pdf.startswith(b"%PDF") and len(pdf) > 50_000
        assert p.errors == []
    finally:
        context.close()


def test_compare_file_draws(page, tmp_path):
    from gpuaudit.compare import compare_runs

    a = load(TWO_GPU)
    path = tmp_path / "compare.html"
    path.write_text(render_compare_html(compare_runs(a, with_figure(a, "matmul", "bf16", 0.8))))
    page.page.goto(path.as_uri())
    assert_all_drawn(drawn_charts(page.page), {"changes": 1})
    assert "Regression beyond 5%" in page.page.locator("#verdict").inner_text()
    assert page.errors == []


# -- the web UI -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """`gpuaudit serve` as a user starts it: a store of real runs, the live page replaying a
    real 2-GPU trace, a token."""
    chromium_or_skip()
    tmp = tmp_path_factory.mktemp("serve")
    db = f"sqlite:///{tmp / 'runs.db'}"
    with Store(db) as store:
        for name in (ONE_GPU, TWO_GPU, NATIVE):
            store.save(load(name))
    err = (tmp / "stderr").open("w+")
    env = cli_env(GPUAUDIT_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "gpuaudit", "serve", "--port", "0",
                             "--db", db, "--replay", str(TRACE), "--speed", "4", "--loop"],
                            stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        url = _wait_for_url(proc, err)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        err.close()


def _wait_for_url(proc: subprocess.Popen, err) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        err.seek(0)
        found = re.search(r"(http://127\.0\.0\.1:\d+)/", err.read())
        if found:
            request = urllib.request.Request(found[1] + "/healthz",
                                             headers={"Authorization": f"Bearer {TOKEN}"})
            try:
                with urllib.request.urlopen(request, timeout=2) as r:
                    if r.status == 200:
                        return found[1]
            except OSError:
                pass
        if proc.poll() is not None:
            err.seek(0)
            raise AssertionError(f"gpuaudit serve exited {proc.returncode}: {err.read()}")
        time.sleep(0.2)
    raise AssertionError("gpuaudit serve did not come up in 60 s")


def test_token_is_enforced_in_the_browser(page, server):
    response = page.page.goto(server + "/")
    assert response.status == 401 and "Token required" in page.page.inner_text("body")
    response = page.page.goto(f"{server}/runs/{load(ONE_GPU).id}?token={TOKEN}")
    assert response.status == 200 and page.page.url == f"{server}/runs/{load(ONE_GPU).id}"
    assert TOKEN not in page.page.content()


def test_runs_report_compare_and_links(page, server):
    page.page.goto(f"{server}/?token={TOKEN}")
    rows = page.page.locator("#runs-table tbody tr")
    assert rows.count() == 3
    page.page.click(f"a[href='/runs/{load(TWO_GPU).id}']")
    page.page.wait_for_url(f"**/runs/{load(TWO_GPU).id}")
    assert_all_drawn(drawn_charts(page.page), REPORT_CHARTS[TWO_GPU])
    page.page.click("nav.app >> text=Runs")
    page.page.wait_for_url(f"{server}/")
    page.page.check(f"input[name=a][value='{load(ONE_GPU).id}']")
    page.page.check(f"input[name=b][value='{load(TWO_GPU).id}']")
    page.page.click("#compare-button")
    page.page.wait_for_url("**/compare?*")
    assert_all_drawn(drawn_charts(page.page), {"changes": 1})
    assert "Different machine or software" in page.page.inner_text("#differences")
    for href in page.page.eval_on_selector_all("nav.app a", "as => as.map(a => a.href)"):
        assert page.page.request.get(href).status == 200, href
    assert page.errors == []


def test_live_page_moves_with_the_replayed_trace(page, server):
    page.page.goto(f"{server}/live?token={TOKEN}")
    page.page.wait_for_function("Number(document.body.dataset.ticks || 0) >= 3",
                                timeout=30_000)
    cards = page.page.locator(".gpu-card")
    assert cards.count() == 2  # the DDP trace's two H200s
    first = page.page.evaluate("Number(document.body.dataset.ticks)")
    page.page.wait_for_function(f"Number(document.body.dataset.ticks) >= {first + 4}",
                                timeout=30_000)
    traces = page.page.evaluate("""() => Array.from(document.querySelectorAll('.gpu-card'))
        .map(c => Array.from(c.querySelectorAll('div.chart')).map(d => [d.data.length,
             d.data[0].x.length, d.querySelectorAll('g.trace').length]))""")
    for gpu in traces:
        (act, act_points, act_nodes), (power, power_points, power_nodes) = gpu
        assert (act, act_nodes, power, power_nodes) == (4, 4, 2, 2)
        assert act_points > first and power_points > first
    power = page.page.inner_text("#gpu-0 .kpi-power")
    assert re.fullmatch(r"\d+ / 700 W", power)  # the H200's 700 W limit, as recorded
    assert page.errors == []
