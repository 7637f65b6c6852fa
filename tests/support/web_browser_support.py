"""A headless Chromium for the console's browser tests and ``scripts/screenshots``.

Debian's ``chromium`` and ``chromium-driver`` (``scripts/test`` installs them
as root). The flags keep Chromium from reaching for the network on its own
(sync, component updates, QUIC), which a closed network answers slowly or
not at all, and from needing a sandbox or a GPU.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)


def find_browser() -> tuple[str, str] | None:
    """The Chromium binary and its driver, or ``None`` if either is missing."""
    chromium = next(
        (found for name in ("chromium", "chromium-browser") if (found := shutil.which(name)) is not None),
        None,
    )
    driver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None
    )
    if chromium is None or driver is None:
        return None
    return chromium, driver


@contextlib.contextmanager
def browser(width: int = 1360, height: int = 900) -> Iterator[Any]:
    """A Selenium Chrome driver on a fresh profile, quit afterwards.

    Raises:
        RuntimeError: no Chromium or no chromedriver.
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    found = find_browser()
    if found is None:
        raise RuntimeError("no chromium and chromedriver (apt-get install chromium chromium-driver)")
    chromium, driver_path = found
    with tempfile.TemporaryDirectory(prefix="ilmek-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={profile}")
        options.add_argument(f"--window-size={width},{height}")
        driver = webdriver.Chrome(service=Service(driver_path), options=options)
        driver.set_page_load_timeout(30)
        try:
            yield driver
        finally:
            driver.quit()


def wait_for(driver: Any, condition: Callable[[Any], Any], seconds: float = 20) -> Any:
    """Poll ``condition(driver)`` until it is true."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # A page that reloads itself (a running thread) may replace an element between two looks.
    wait = WebDriverWait(
        driver, seconds, poll_frequency=0.1, ignored_exceptions=[StaleElementReferenceException]
    )
    return wait.until(condition)


def replaced(page: Any) -> Callable[[Any], bool]:
    """A wait condition: ``page`` (an element of the old document) no longer belongs to the one shown.

    Chromium says so with a stale-element error, or, when the look lands while
    the new document is being attached, with "does not belong to the document"
    (an inspector error, seen on a loaded machine): both mean replaced.
    """
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    def gone(driver: Any) -> bool:
        try:
            page.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as error:
            if "does not belong to the document" in str(error.msg):
                return True
            raise
        return False

    return gone


def press(driver: Any, element: Any) -> None:
    """Click a button that sends a form, and wait until the page it leads to has replaced this one."""
    page = driver.find_element("tag name", "html")
    element.click()
    wait_for(driver, replaced(page))


AXE_SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "axe" / "node_modules" / "axe-core" / "axe.min.js"
"""axe-core, from npm (``tests/axe``; ``scripts/test`` installs it)."""

_RUN_AXE = """
const done = arguments[arguments.length - 1];
// A page that reloads itself (data-refresh) waits while someone types: say so, so that no reload
// replaces the document between axe's injection and its run, however slow a loaded machine makes it.
document.dispatchEvent(new Event('input'));
if (typeof window.axe === 'undefined') { (0, eval)(arguments[0]); }
window.axe.run(document, {resultTypes: ['violations']}).then(
  results => done(results.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map(n => n.target.join(' ') + ' :: ' + n.failureSummary)}))),
  error => done([{id: 'axe-failed', impact: 'critical', help: String(error), nodes: []}]));
"""


def axe_violations(driver: Any) -> list[dict[str, Any]]:
    """What axe-core, run inside the page the browser shows, finds wrong with it (every rule on).

    axe is injected and run by one script, in one document, which then keeps the page from reloading
    itself: a reload can come only before the script starts, and the script is then run again.
    """
    from selenium.common.exceptions import WebDriverException

    driver.set_script_timeout(60)
    source = AXE_SCRIPT.read_text(encoding="utf-8")
    for attempt in range(3):
        try:
            found: list[dict[str, Any]] = driver.execute_async_script(_RUN_AXE, source)
            return found
        except WebDriverException:  # the page reloaded as the script began
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


_MISFITS = r"""
const width = document.documentElement.clientWidth;
const controls = [...document.querySelectorAll(
    'main button, main input:not([type=hidden]), main textarea, main .draft-text, main .note, main h1,'
    + ' main .question, main summary, main a.open, main table.pauses' + arguments[0])]
  .filter(e => e.getClientRects().length);
return {
  sideways: document.documentElement.scrollWidth - width,
  cut: controls.filter(e => {
    const box = e.getBoundingClientRect();
    return box.left < -0.5 || box.right > width + 0.5 || e.scrollWidth > e.clientWidth + 1
        && getComputedStyle(e).overflowX === 'hidden';
  }).map(e => e.outerHTML.slice(0, 120)),
};
"""


def misfits(driver: Any, also: str = "") -> dict[str, Any]:
    """How far the page scrolls sideways, and which of its controls stick out of the screen or are cut.

    ``also``: more CSS selectors to check, each after a comma (``", main .subgraph-run"``).
    """
    found: dict[str, Any] = driver.execute_script(_MISFITS, also)
    return found


def show_as_screen(driver: Any, width: int, scheme: str = "light", height: int = 900) -> None:
    """Show pages as a screen ``width`` CSS pixels wide (a phone's, with its viewport rules, under 600)
    in the ``light`` or ``dark`` color scheme."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )
    set_color_scheme(driver, scheme)


def set_color_scheme(driver: Any, scheme: str) -> None:
    """Make the page see ``prefers-color-scheme: scheme`` (``light`` or ``dark``)."""
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]}
    )


def full_page_screenshot(driver: Any, path: pathlib.Path, width: int = 1360, max_height: int = 4000) -> None:
    """The whole page as a PNG at ``path`` (the window grows to the page's height)."""
    import base64

    # The window's own size cuts a long page; Chrome's DevTools capture the whole.
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    clip = {"x": 0, "y": 0, "width": width, "height": min(max(height, 400), max_height), "scale": 1}
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))


def take_screenshots(out: pathlib.Path) -> list[pathlib.Path]:
    """Screenshots of the console's pages on the sample store, written under ``out``."""
    import urllib.parse

    from ilmek import SqliteCheckpointer
    from tests.support import web_support

    written = []
    with tempfile.TemporaryDirectory(prefix="ilmek-screens-") as folder:
        checkpointer = SqliteCheckpointer(pathlib.Path(folder) / "shop.db")
        try:
            threads = web_support.populate_ux(checkpointer)
            with (
                web_support.serving(checkpointer, web_support.graphs(), allow_actions=True) as server,
                browser() as driver,
            ):
                server.console.refresh_seconds = 0
                base = server.url.rstrip("/")

                def shoot(name: str, path: str, width: int = 1360, scheme: str = "light") -> None:
                    show_as_screen(driver, width, scheme)
                    driver.get(base + path)
                    target = out / f"console-{name}.png"
                    full_page_screenshot(driver, target, width=width)
                    written.append(target)

                def thread(role: str, **params: str) -> str:
                    return "/thread?" + urllib.parse.urlencode({"id": threads[role], **params})

                shoot("inbox", "/")
                shoot("thread", thread("waiting"))
                shoot("draft", thread("draft"))
                shoot("fork", thread("forked"))
                shoot("failed", thread("research"))
                shoot("phone", "/", width=390, scheme="dark")
        finally:
            checkpointer.close()
    return written


def main() -> int:
    """``scripts/screenshots [FOLDER]``: write the README's screenshots (default: docs/)."""
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "docs")
    for path in take_screenshots(out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
