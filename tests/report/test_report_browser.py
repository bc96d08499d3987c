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
from tests.support.reportkit import (
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
ROOT = Path(__file__).parents[2]
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
        (act, act_points, act_nodes), (power, power_points, power_nodes), \
            (temp, temp_points, temp_nodes) = gpu
        # activity: NVML util, SM, tensor, DRAM; power, its limit, the SM clock; GPU and
        # memory temperature (docs/report.md's live page)
        assert (act, act_nodes, power, power_nodes, temp, temp_nodes) == (4, 4, 3, 3, 2, 2)
        assert act_points > first and power_points > first and temp_points > first
    power = page.page.inner_text("#gpu-0 .kpi-power")
    assert re.fullmatch(r"\d+ / 700 W", power)  # the H200's 700 W limit, as recorded
    limit = page.page.evaluate("document.querySelector('#gpu-0 .power').data[1].y")
    assert limit and set(limit) == {700}  # the limit drawn as a line at 700 W
    temps = page.page.evaluate("document.querySelector('#gpu-0 .temperature').data[0].y")
    assert all(20 <= t <= 95 for t in temps)
    # Times people read: no ISO 'T', offset or microseconds on the page or the axis.
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC",
                        page.page.inner_text("#last-time"))
    ticks = page.page.evaluate("document.querySelector('#gpu-0 .power')._fullLayout"
                               ".xaxis._vals.map(v => v.text)")
    assert ticks and all(re.fullmatch(r"\d\d:\d\d:\d\d", t) for t in ticks), ticks
    assert page.errors == []


# -- layout: nothing overflows its column, no chart over a table, readable axes ----------------

LAYOUT = """() => {
  const main = document.querySelector('main');
  const box = main.getBoundingClientRect(), cs = getComputedStyle(main);
  const right = box.right - parseFloat(cs.paddingRight);
  const rect = e => e.getBoundingClientRect();
  const over = [];
  main.querySelectorAll('table, figure, .scroll, div.chart, svg.main-svg, dl, p, section, h2')
    .forEach(e => { const r = rect(e);
      if (r.width && r.right > right + 0.5) over.push(`${e.tagName}#${e.id} ${r.width}`); });
  const scrolls = Array.from(main.querySelectorAll('.scroll'))
    .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.scrollWidth - e.clientWidth);
  const charts = Array.from(main.querySelectorAll('div.chart[data-figure]')), tables = Array
    .from(main.querySelectorAll('table')).filter(t => rect(t).height > 0);
  const spill = [], onTable = [], logs = [];
  charts.forEach(d => {
    const svg = d.querySelector('svg.main-svg'), r = rect(svg || d), c = rect(d);
    if (r.bottom > c.bottom + 1 || r.right > c.right + 1) spill.push(d.dataset.figure);
    tables.forEach(t => { const q = rect(t);
      if (Math.min(r.bottom, q.bottom) - Math.max(r.top, q.top) > 0 &&
          Math.min(r.right, q.right) - Math.max(r.left, q.left) > 0)
        onTable.push(d.dataset.figure); });
    ['xaxis', 'yaxis'].forEach(a => { const ax = d._fullLayout && d._fullLayout[a];
      if (ax && ax.type === 'log') (ax._vals || []).forEach(v => logs.push(
        [d.dataset.figure, a, Math.pow(10, v.x), String(v.text)])); });
  });
  const bars = Array.from(document.querySelectorAll('.modebar-container'))
    .filter(m => rect(m).height > 0).length;
  return {over, scrolls, spill, onTable, logs, bars,
          page: document.documentElement.scrollWidth, width: window.innerWidth};
}"""


def layout_of(page) -> dict:
    page.wait_for_function(
        "Array.from(document.querySelectorAll('div.chart[data-figure]'))"
        ".every(d => d.dataset.drawn === '1')", timeout=30_000)
    first = page.locator("div.chart[data-figure]").first
    if first.count():
        first.hover()  # plotly shows its toolbar on hover: there must be none to show
    return page.evaluate(LAYOUT)


def assert_laid_out(found: dict) -> None:
    assert found["over"] == [] and found["scrolls"] == [], found
    assert found["page"] <= found["width"], found
    assert found["spill"] == [] and found["onTable"] == [], found
    assert found["bars"] == 0, found
    for chart, axis, value, text in found["logs"]:
        # '5' for 500 ms is a label nobody reads right: every label states its value (an SI
        # prefix, 10k, is read as written).
        number = re.fullmatch(r"([\d.,]+)\s*([kMGTmµ]?|[KMGT]iB|B)", text)
        assert number, (chart, axis, value, text)
        scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3, "µ": 1e-6,
                 "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
        shown = float(number[1].replace(",", "")) * scale[number[2]]
        assert shown == pytest.approx(value, rel=0.01), (chart, axis, value, text)


WIDE = ("h200-1gpu-run-quick", ONE_GPU, TWO_GPU, NATIVE)


@pytest.mark.parametrize("width", [1280, 1440, 1920])
def test_reports_fit_their_column_at_desktop_widths(browser, tmp_path, width):
    from gpuaudit.compare import compare_runs

    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        p = Page(context)
        pages = {name: render_run_html(load(name)) for name in WIDE}
        a = load(TWO_GPU)
        pages["compare"] = render_compare_html(compare_runs(a, with_figure(a, "matmul", "bf16",
                                                                            0.8)))
        logs = 0
        for name, html in pages.items():
            path = tmp_path / f"{name}.html"
            path.write_text(html)
            p.page.goto(path.as_uri())
            found = layout_of(p.page)
            assert_laid_out(found)
            logs += len(found["logs"])
        assert logs > 10  # the roofline's and the inference chart's log axes were read
        assert p.errors == []
    finally:
        context.close()


def test_served_compare_and_live_pages_fit(page, server):
    page.page.set_viewport_size({"width": 1280, "height": 900})
    page.page.goto(f"{server}/compare?a={load(ONE_GPU).id}&b={load(TWO_GPU).id}"
                   f"&token={TOKEN}")
    assert_laid_out(layout_of(page.page))
    page.page.goto(f"{server}/live?token={TOKEN}")
    page.page.wait_for_function("Number(document.body.dataset.ticks || 0) >= 2",
                                timeout=30_000)
    assert_laid_out(page.page.evaluate(LAYOUT))
    assert page.errors == []
