"""A real browser and a real `runner dashboard` for end-to-end checks: Debian's chromium,
headless, driven by selenium through Debian's chromedriver, and the CLI in a subprocess; and
what the tests do with a page: wait for it, hover a chart, pick an option, read a chart's
option. Used by the test_browser*.py modules and docs/screenshots.py."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL = "apt-get install -y chromium chromium-driver (and pip install '.[test]' for selenium)"
# Root needs --no-sandbox; the rest keeps a browser on a closed network from reaching out.
FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-first-run", "--no-default-browser-check", "--hide-scrollbars",
)  # fmt: skip


def missing() -> str | None:
    """Why the browser cannot run here, or None."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        return f"needs Debian's chromium and its driver: {INSTALL}"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return f"needs selenium: {INSTALL}"
    return None


@contextmanager
def chromium(profile: Path, width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A headless chromium with a fresh profile in `profile`; quits on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[str]:
    """The page's console errors so far (a Content-Security-Policy refusal is one)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


@contextmanager
def dashboard_process(results: Path, port: int = 0) -> Iterator[str]:
    """`runner dashboard --port PORT` over `results` (0: a free one); yields its URL, stops it
    on exit."""
    code = "from runner.cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--results-dir", str(results), "dashboard", "--port",
         str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "COLUMNS": "300"},
    )  # fmt: skip
    said: list[str] = []
    # Read to the end: a pipe nobody reads fills (64 KiB) and then blocks the dashboard's next
    # write to it, its event loop with it. What it said is printed at the end, for a failure.
    reader = threading.Thread(target=lambda: said.extend(proc.stdout), daemon=True)  # type: ignore[arg-type]
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if " at " not in line:
            raise RuntimeError(f"runner dashboard did not start: {line}{proc.stdout.read()}")  # type: ignore[union-attr]
        reader.start()
        yield line.split(" at ")[1].split(";")[0].strip()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if reader.ident is not None:  # started
            reader.join(timeout=10)
        print(f"runner dashboard said after its first line ({len(said)} lines):", *said[-50:])


def chart_points(driver: Any, chart: str, series: int = 0) -> int:
    """How many points the page's chart `chart` (data-chart) draws in one series; -1 when
    the chart or the series is not there."""
    return driver.execute_script(
        "const el = document.querySelector(`[data-chart='${arguments[0]}']`);"
        "const chart = el && window.echarts.getInstanceByDom(el);"
        "const series = chart ? chart.getOption().series : [];"
        "return series.length > arguments[1] ? series[arguments[1]].data.length : -1;",
        chart, series,
    )  # fmt: skip


def text_overlaps(driver: Any, chart: str) -> list[tuple[str, str]]:
    """The pairs of texts (zrender's tspans) that chart `chart` draws over each other: their
    bounding boxes, in the canvas's pixels, overlap by more than a pixel each way. Labels
    ECharts left out (ignored, invisible) are not drawn and do not count."""
    boxes = driver.execute_script(
        "const el = document.querySelector(`[data-chart='${arguments[0]}']`);"
        "const zr = window.echarts.getInstanceByDom(el).getZr();"
        "return zr.storage.getDisplayList(true)"
        "  .filter((d) => (d.type === 'tspan' || d.type === 'text') && !d.ignore"
        "    && !d.invisible && d.style && String(d.style.text || '').trim())"
        "  .map((d) => { const r = d.getBoundingRect().clone();"
        "    if (d.transform) r.applyTransform(d.transform);"
        "    return [r.x, r.y, r.width, r.height, String(d.style.text)]; });",
        chart,
    )  # fmt: skip
    pairs = []
    for i, (x1, y1, w1, h1, a) in enumerate(boxes):
        for x2, y2, w2, h2, b in boxes[i + 1 :]:
            if min(x1 + w1, x2 + w2) - max(x1, x2) > 1 and min(y1 + h1, y2 + h2) - max(y1, y2) > 1:
                pairs.append((a, b))
    return pairs


def wait_for(condition, timeout_s: float, what: str):
    """As selenium's WebDriverWait: an element not there yet (the runs table comes a page at
    a time, after the page) or replaced while read (the table re-rendered) is asked again."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = condition()
        except (NoSuchElementException, StaleElementReferenceException):
            value = None
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def hover(driver, chart: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    element = driver.find_element("css selector", f"[data-chart='{chart}']")
    ActionChains(driver).move_to_element(element).perform()
    time.sleep(0.5)


def choose(driver, select: str, text: str) -> None:
    """Picks the option shown as `text` of the <select> at CSS `select` (Preact sets an
    option's value as a property, which Selenium's by-value lookup does not see)."""
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("css selector", select)).select_by_visible_text(text)


def chart_option(driver, chart: str, script: str):
    """`script` run on chart `chart`'s option (`o`)."""
    return driver.execute_script(
        "const el = document.querySelector(`[data-chart='${arguments[0]}']`);"
        f"const o = window.echarts.getInstanceByDom(el).getOption(); return {script};",
        chart,
    )
