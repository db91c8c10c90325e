"""The dashboard in a real browser: headless Chromium from Debian's packages, driven by Playwright.

Needs ``apt-get install chromium`` (``.ci/run`` installs it); Playwright's own
browser download is not used. Without it the tests skip with that reason, unless
``SIGMA_REQUIRE_BROWSER=1`` (set by ``.ci/run``): then they fail. ``SIGMA_CHROMIUM`` names another binary;
``SIGMA_WEB_SCREENSHOTS`` a directory to keep the screenshots in.
"""

from __future__ import annotations

import functools
import json
import http.server
import os
import shutil
import threading
import time
from pathlib import Path

import numpy
import pytest
from playwright.sync_api import expect, sync_playwright

from sigma_core.cli import main
from sigmann_web.board import board_from_files
from sigmann_web.server import Server

CHROMIUM = os.environ.get("SIGMA_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RUN = "section.run.active"


@pytest.fixture(scope="module")
def browser():
    # Without a browser these tests skip, so that the README's test command passes on a machine with only Python
    # and pip; CI (.ci/run, which installs Chromium) sets SIGMA_REQUIRE_BROWSER=1, and there a missing one fails.
    if not os.path.isfile(CHROMIUM) or not os.access(CHROMIUM, os.X_OK):
        reason = f"no Chromium at {CHROMIUM}: install chromium (apt-get install chromium) to run the browser tests"
        if os.environ.get("SIGMA_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{reason} (SIGMA_REQUIRE_BROWSER=1)", pytrace=False)
        pytest.skip(reason)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    """A fresh page, 1440×1000; fails the test on any script error or console error (a CSP violation, say)."""
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda message: message.type == "error" and problems.append(message.text))
    yield page
    context.close()
    expected = ("status of 400", "status of 403")  # the refusals the tests provoke on purpose
    assert not [p for p in problems if not any(e in p for e in expected)], problems


@pytest.fixture
def screenshots(tmp_path):
    directory = Path(os.environ.get("SIGMA_WEB_SCREENSHOTS") or tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def shot(page, path: Path) -> Path:
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=path, full_page=True)
    assert path.stat().st_size > 30_000  # charts, text and tiles, not a blank page
    return path


def counter(page, name: str) -> int:
    return int(page.text_content(f'{RUN} [data-bind="{name}"]').replace(",", ""))


def draw(page, strokes):
    canvas = page.locator(f'{RUN} [data-canvas="draw"]')
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    for stroke in strokes:
        page.mouse.move(box["x"] + stroke[0][0], box["y"] + stroke[0][1])
        page.mouse.down()
        for x, y in stroke[1:]:
            page.mouse.move(box["x"] + x, box["y"] + y, steps=12)
        page.mouse.up()


def test_the_dashboard_watches_and_steers_a_live_run(page, live, screenshots):
    run = live()
    page.goto(run.server.url())
    expect(page.locator(f'{RUN} [data-bind="state"]')).to_have_text("running")
    points = "runs.get('blobs').charts.cost.plot?.data[1].filter(v => v != null).length ?? 0"
    page.wait_for_function(f"{points} > 3")
    seen = page.evaluate(points)
    page.wait_for_function(f"{points} > {seen}")  # the cost chart keeps receiving points

    page.click(f'{RUN} [data-action="toggle"]')
    expect(page.locator(f'{RUN} [data-bind="state"]')).to_have_text("paused")
    step = counter(page, "step")
    assert step == run.trainer.total_iterations
    time.sleep(0.6)
    assert counter(page, "step") == step == run.trainer.total_iterations  # paused: the counter stands still
    expect(page.locator(f'{RUN} [data-action="toggle"]')).to_have_text("Resume")

    page.click(f'{RUN} [data-action="step"]')
    expect(page.locator(f'{RUN} [data-bind="step"]')).to_have_text(f"{step + 1:,}")
    assert run.trainer.total_iterations == step + 1  # exactly one iteration

    rate = page.locator(f'{RUN} .setting[data-key="optimiser.learning_rate"]')
    rate.locator("input").fill("0.0123")
    rate.locator("button").click()
    expect(page.locator("#toast")).to_have_text("optimiser.learning_rate = 0.0123")
    assert run.trainer.optimiser.learning_rate == 0.0123
    expect(page.locator(f'{RUN} [data-fact="Optimiser"]')).to_contain_text("learning_rate 0.0123")  # the Run card too
    rate.locator("input").fill("-1")
    rate.locator("input").press("Enter")
    expect(rate.locator(".error")).to_have_text("optimiser.learning_rate: expected a finite number >= 0, got -1")
    assert run.trainer.optimiser.learning_rate == 0.0123

    draw(page, [[(120, 40), (120, 200)], [(80, 60), (120, 40)]])  # a 1
    bars = page.locator(f"{RUN} .bars .barrow")
    expect(bars).to_have_count(10)
    shares = [float(text.rstrip("%")) for text in page.locator(f"{RUN} .bars .pct").all_text_contents()]
    assert sum(shares) == pytest.approx(100, abs=1)
    expect(page.locator(f"{RUN} .bars .barrow.top")).to_have_count(1)
    # the preview shows the image the server made of the strokes: 8×8, the 1 edge to edge, the rest blank
    preview = page.evaluate(f"""(() => {{ const c = document.querySelector('{RUN} [data-canvas="preview"]');
        return [c.width, c.height, Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data)]; }})()""")
    ink = 1 - numpy.asarray(preview[2], dtype=float).reshape(8, 8, 4)[..., 0] / 255
    assert preview[:2] == [8, 8] and ink[0].max() > 0.3 and ink[-1].max() > 0.3 and 0 < ink.mean() < 0.5

    refused = page.evaluate("fetch('/api/control', {method: 'POST', headers: {'Content-Type': 'application/json'}, "
                            "body: JSON.stringify({action: 'resume'})}).then(r => r.status)")
    assert refused == 403 and run.loop.state.value == "paused"  # no token, no effect
    page.click(f'{RUN} [data-action="extend"]')
    expect(page.locator("#toast")).to_have_text("extended to 100005 epochs")
    assert run.loop.epochs == 100_005

    page.fill(f'{RUN} [data-field="watch"]', "network.layers.*.weights")
    page.press(f'{RUN} [data-field="watch"]', "Enter")
    page.click(f'{RUN} [data-action="toggle"]')
    expect(page.locator(f'{RUN} [data-bind="state"]')).to_have_text("running")
    expect(page.locator(f'{RUN} [data-chart="values"] .u-legend')).to_contain_text("network.layers.2-dense.weights")
    page.wait_for_function("runs.get('blobs').charts.accuracy.plot?.data[0].length > 1")
    shot(page, screenshots / "web-live.png")


def test_another_sites_page_cannot_steer_the_run_even_with_the_token(page, live, tmp_path):
    """A page on another port of this machine (what a browser lets reach 127.0.0.1) sends what any page may
    send unasked: a "simple" POST with the token in the query string. The server refuses it (403)."""
    run = live()
    (tmp_path / "index.html").write_text("<html><body>another site</body></html>")
    (tmp_path / "favicon.ico").write_bytes(b"")
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=tmp_path))
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        page.goto(f"http://127.0.0.1:{other.server_address[1]}/")
        sent = page.evaluate("""([url, token]) => fetch(`${url}api/control?token=${token}`, {method: "POST",
            mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: JSON.stringify({action: "pause"})})
            .then(answer => answer.type)""", [run.server.url(with_token=False), run.server.token])
        assert sent == "opaque"  # it went out (the answer, a 403, is hidden from that page)
        time.sleep(0.5)
        assert run.loop.state.value == "running"
    finally:
        other.shutdown()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *arguments):  # no access log in the test's output
        pass


def test_a_page_without_the_token_watches_but_cannot_steer(page, live):
    run = live()
    page.goto(run.server.url(with_token=False))
    expect(page.locator("#banner")).to_contain_text("Read-only")
    expect(page.locator(f'{RUN} [data-bind="state"]')).to_have_text("running")
    for action in ("toggle", "reset", "stop-save", "extend"):
        expect(page.locator(f'{RUN} [data-action="{action}"]')).to_be_disabled()
    expect(page.locator(f"{RUN} .setting button").first).to_be_disabled()


def test_a_finished_run_opens_read_only_from_its_files(page, run_file, tmp_path, screenshots):
    assert main(["train", str(run_file(epochs=4)), "--quiet", "--monitor",
                 f"metrics:directory='{tmp_path / 'blobs'}',every=2"]) == 0
    server = Server()
    server.add(board_from_files(tmp_path / "blobs"))
    server.start()
    try:
        page.goto(server.url(with_token=False))
        expect(page.locator(f'{RUN} [data-bind="state"]')).to_have_text("finished")
        expect(page.locator(f'{RUN} [data-action="toggle"]')).to_be_hidden()  # no controls: nothing to steer
        expect(page.locator("#banner")).to_be_hidden()
        page.wait_for_function("runs.get('blobs').charts.accuracy.plot?.data[0].length === 4")
        assert page.evaluate("runs.get('blobs').charts.cost.plot.data[0].length") > 8
        shot(page, screenshots / "web-from-files.png")
    finally:
        server.stop()


def test_an_image_the_run_publishes_shows_beside_the_drawing_pad_and_follows_its_updates(page, live, tmp_path,
                                                                                         publisher, screenshots):
    """A hook's published PNG (here a stand-in for sigmann-debug's ``dream`` grid) appears next to the pad, and a
    new epoch's picture replaces it."""
    run = live(hooks=[publisher(width=40)], directory=tmp_path / "run")
    page.goto(run.server.url())
    image = page.locator(f'{RUN} [data-panel="images"] img')
    expect(image).to_be_visible()
    natural = f"document.querySelector('{RUN} [data-panel=\"images\"] img').naturalWidth"
    page.wait_for_function(f"() => {natural} >= 40")  # loaded (a function: the page's CSP forbids eval)
    first = page.evaluate(natural)
    expect(page.locator(f'{RUN} [data-panel="images"] figcaption')).to_contain_text("picture: epoch_")
    pad, box = page.locator(f'{RUN} [data-canvas="draw"]').bounding_box(), image.bounding_box()
    assert box["x"] >= pad["x"] + pad["width"] and box["y"] < pad["y"] + pad["height"]  # to its right, level with it
    page.wait_for_function(f"() => {natural} >= 40 && {natural} !== {first}")  # a later epoch's picture, loaded
    shot(page, screenshots / "web-images.png")
    page.goto("about:blank")  # the run publishes on: no image request may meet the server as the run is torn down


def test_stop_and_save_keeps_the_resume_command_on_the_page_until_clicked_away(page, live, tmp_path):
    run = live(checkpoints=str(tmp_path))
    page.goto(run.server.url())
    expect(page.locator(f'{RUN} [data-bind="state"]')).to_have_text("running")
    assert run.post("/api/set", run="blobs", key="optimiser.learning_rate", value=0.0321).status_code == 200
    optimiser = page.locator(f'{RUN} [data-fact="Optimiser"]')
    expect(optimiser).to_contain_text("learning_rate 0.0321")  # an edit from elsewhere reaches the Run card
    page.click(f'{RUN} [data-action="stop-save"]')
    expect(page.locator(f'{RUN} [data-bind="state"]')).to_have_text("stopped")
    expect(optimiser).to_contain_text("learning_rate 0.0321")  # and stays once the run has stopped
    toast = page.locator("#toast")
    expect(toast).to_contain_text(f"stopped; saved {tmp_path}/blobs-e")
    expect(toast).to_contain_text("; resume with: Run.resume(")  # a run started in Python: no run file to name
    assert "sticky" in toast.get_attribute("class")  # no timer hides it
    pad = page.locator(f'{RUN} [data-canvas="draw"]')
    for width, end in ((1440, "end"), (1440, "start"), (1000, "end"), (1000, "start")):  # charts beside the Run card, below it
        page.set_viewport_size({"width": width, "height": 600})
        pad.evaluate(f"canvas => canvas.scrollIntoView({{block: '{end}'}})")  # the pad at the bottom, at the top
        a, b = pad.bounding_box(), toast.bounding_box()
        assert (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"] or a["y"] + a["height"] <= b["y"]
                or b["y"] + b["height"] <= a["y"]), f"the toast {b} covers the draw pad {a} at width {width}"
    toast.click()
    expect(toast).to_be_hidden()


def test_a_zoomed_cost_chart_asks_the_server_for_the_detail_of_its_range(page, long_run, tmp_path):
    """A long run's page holds about 1,000 points of the cost; a range dragged on the chart gets every record in it
    from ``GET /api/history?start=&end=``, and a double click goes back to the whole run."""
    last = long_run(tmp_path / "long", 3_000_000)["last"]  # some 21,000 iteration records
    server = Server()
    server.add(board_from_files(tmp_path / "long"))
    server.start()
    try:
        page.goto(server.url(with_token=False))
        page.wait_for_function("() => runs.get('long')?.charts.cost.plot?.data[0].length > 0")  # a function: no eval
        steps = "runs.get('long').charts.cost.plot.data[0]"
        overview = page.evaluate(steps)
        assert len(overview) < 3000 and overview[-1] == last  # the union of a few series of about 1,000 points
        box = page.locator(f'{RUN} [data-chart="cost"] .u-over').bounding_box()
        y = box["y"] + box["height"] / 2
        page.mouse.move(box["x"] + box["width"] * 0.50, y)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.51, y, steps=5)
        with page.expect_request(lambda request: "/api/history?" in request.url and "start=" in request.url):
            page.mouse.up()
        page.wait_for_function(f"() => {steps}.length > 2 && {steps}[1] - {steps}[0] === 10")  # every record: 10 apart
        detail = page.evaluate(steps)
        assert detail == list(range(detail[0], detail[-1] + 1, 10)) and last * 0.49 < detail[0] < last * 0.52
        page.mouse.dblclick(box["x"] + box["width"] * 0.5, y)
        page.wait_for_function(f"() => {steps}[{steps}.length - 1] === {last}")  # the whole run again
        assert page.evaluate(steps) == overview
    finally:
        server.stop()


def test_the_learning_rate_chart_draws_a_change_as_a_step(page, tmp_path):
    """A rate of 0.01 at steps 100 and 200, then 0.001 at 300 and 400: between 200 and 300 the line stays at 0.01
    (it was 0.01 until the change), with no slope through values the rate never had."""
    (tmp_path / "steps").mkdir()
    lines = [{"time": step / 100, "event": "iteration", "step": step, "epoch": 1, "iteration": step, "cost": 1.0,
              "learning_rate": rate} for step, rate in ((100, 0.01), (200, 0.01), (300, 0.001), (400, 0.001))]
    (tmp_path / "steps" / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    server = Server()
    server.add(board_from_files(tmp_path / "steps"))
    server.start()
    try:
        page.goto(server.url(with_token=False))
        page.wait_for_function("() => runs.get('steps')?.charts.rate.plot?.data[0].length === 4")
        # is the pixel at step 250 and this rate the line's colour (#16a34a)? Read on the next frame, once drawn.
        inked = """rate => new Promise(done => requestAnimationFrame(() => {
            const plot = runs.get('steps').charts.rate.plot;
            const x = Math.round(plot.valToPos(250, 'x', true)), y = Math.round(plot.valToPos(rate, 'y', true));
            const pixels = plot.ctx.getImageData(x, y - 2, 1, 5).data;
            done([0, 1, 2, 3, 4].some(i => pixels[4 * i + 1] - pixels[4 * i] > 60 && pixels[4 * i + 3] > 100));
        }))"""
        assert page.evaluate(inked, 0.01)
        assert not page.evaluate(inked, 0.0055)  # a slope would pass here, half way down
    finally:
        server.stop()


def test_a_studys_trials_as_tabs_wrap_within_the_header(page, tmp_path):
    """A study's 40 trials as tabs wrap onto rows of the header, none cut off at its edge, and past three rows
    scroll within it: the header stays out of the page's way."""
    server = Server()
    for trial in range(40):
        directory = tmp_path / f"study-trial-{trial:03d}"
        directory.mkdir()
        (directory / "metrics.jsonl").write_text(json.dumps({"time": 1.0, "event": "iteration", "step": 1, "epoch": 1,
                                                             "iteration": 1, "cost": 1.0, "learning_rate": 0.01}) + "\n")
        server.add(board_from_files(directory))
    server.start()
    try:
        page.goto(server.url(with_token=False))
        tabs = page.locator("#tabs button")
        expect(tabs).to_have_count(40)
        fits = """() => { const shown = document.getElementById('tabs').getBoundingClientRect();
            return [...document.querySelectorAll('#tabs button')].slice(0, 12).every(tab => {
                const box = tab.getBoundingClientRect();
                return box.left >= shown.left && box.right <= shown.right && box.bottom <= shown.bottom; }); }"""
        assert page.evaluate(fits)  # the first rows in sight, none cut off at the edge
        sizes = page.evaluate("(() => { const t = document.getElementById('tabs');"
                              " return [t.scrollWidth, t.clientWidth, document.querySelector('header').offsetHeight]; })()")
        assert sizes[0] <= sizes[1] and sizes[2] < 130, sizes  # wrapped, not wider than the header; at most 3 rows
        tabs.last.click()  # reached by scrolling within the header
        expect(page.locator(RUN)).to_have_attribute("data-run", "study-trial-039")
    finally:
        server.stop()
