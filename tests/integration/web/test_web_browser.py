"""The console in a real browser (headless Chromium through Selenium), on SQLite and on Postgres.

The console is served by ``wsgiref`` on a free port of 127.0.0.1 in a
background thread; one Chromium serves the whole module. A person answers
a pause with the form and sees the thread finish, forks an old pause with
another answer and sees both branches, cancels a looping run that is
running in a background thread, reads a failed thread's error, and meets
hostile stored text that must stay text (no alert, no injected element).
Each page is saved as a screenshot under a temporary folder (or
``$ILMEK_SCREENSHOTS``) for a person to look at.

Without Chromium and chromedriver these tests skip; under ``CI`` they fail.
"""

from __future__ import annotations

import os
import pathlib
import re
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ilmek
from ilmek import Checkpointer, SqliteCheckpointer, run
from ilmek.web.access import Login
from tests.support.web_browser_support import full_page_screenshot
from tests.support.web_support import (
    HOSTILE_THREAD,
    THREADS,
    XSS_IMG,
    XSS_SCRIPT,
    graphs,
    hostile_failure,
    loop_graph,
    populate,
    serving,
)

pytestmark = pytest.mark.timeout(90)

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="module")
def screenshots() -> pathlib.Path:
    """Where the screenshots go: $ILMEK_SCREENSHOTS, or a fresh temporary folder."""
    folder = pathlib.Path(os.environ.get("ILMEK_SCREENSHOTS") or tempfile.mkdtemp(prefix="ilmek-console-"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Checkpointer]:
    """The sample threads on a SQLite file, or on Postgres through a psycopg2 pool."""
    checkpointer: Checkpointer
    if request.param == "sqlite":
        checkpointer = SqliteCheckpointer(tmp_path / "console.db", lease_seconds=2.0)
        closers: list[Callable[[], None]] = [checkpointer.close]
    else:
        import psycopg2.pool

        from ilmek.checkpoint.postgres import PostgresCheckpointer

        pool = psycopg2.pool.ThreadedConnectionPool(2, 16, request.getfixturevalue("postgres_dsn"))
        checkpointer = PostgresCheckpointer(pool, lease_seconds=2.0)
        closers = [checkpointer.close, pool.closeall]
    populate(checkpointer)
    yield checkpointer
    for close in closers:
        close()


@pytest.fixture
def console(store: Checkpointer) -> Iterator[str]:
    """The console on the store, served on 127.0.0.1; its base URL (no trailing slash)."""
    with serving(store, graphs(), allow_actions=True) as server:
        yield server.url.rstrip("/")


def open_thread(driver: Any, console: str, thread_id: str, checkpoint_id: str | None = None) -> None:
    """Go to a thread's page."""
    params = {"id": thread_id} | ({"checkpoint": checkpoint_id} if checkpoint_id else {})
    driver.get(f"{console}/thread?{urllib.parse.urlencode(params)}")


def wait_for(driver: Any, condition: Callable[[Any], Any], seconds: float = 15) -> Any:
    """Poll ``condition(driver)`` until it is true."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds, poll_frequency=0.05).until(condition)


def note(driver: Any) -> str:
    """The note at the top of the page (after an action)."""
    from selenium.webdriver.common.by import By

    return str(wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".note"))[0].text)


def shoot(driver: Any, folder: pathlib.Path, name: str) -> None:
    """Save the whole page as ``name.png``."""
    full_page_screenshot(driver, folder / f"{name}.png")


def test_answer_a_pause_from_the_inbox(
    driver: Any, console: str, screenshots: pathlib.Path, store: Any
) -> None:
    """Inbox → the paused order → press Approve: the page says the run finished, the thread is done."""
    from selenium.webdriver.common.by import By

    driver.get(console + "/")
    assert "Inbox" == driver.find_element(By.TAG_NAME, "h1").text
    rows = [link.text for link in driver.find_elements(By.CSS_SELECTOR, "a.tid")]
    # Ids longer than 80 characters are cut in the list.
    assert [HOSTILE_THREAD[:80] + "…", THREADS["waiting"], THREADS["second_waiting"]] == rows
    assert "Charge 74.97 EUR?" in driver.find_element(By.CSS_SELECTOR, "table.threads").text
    shoot(driver, screenshots, f"inbox-{store.__class__.__name__}")

    driver.find_element(By.LINK_TEXT, THREADS["waiting"]).click()
    wait_for(driver, lambda d: "Waiting for an answer" in d.page_source)
    assert "Charge 74.97 EUR?" == driver.find_element(By.CSS_SELECTOR, ".pause .question").text
    shoot(driver, screenshots, f"thread-waiting-{store.__class__.__name__}")

    driver.find_element(By.XPATH, "//button[@name='option.0' and normalize-space()='Approve']").click()
    assert "Answered. The run finished." == note(driver)
    assert "done" == driver.find_element(By.CSS_SELECTOR, ".title-row .badge").text
    assert "Waiting for an answer" not in driver.page_source
    shoot(driver, screenshots, f"thread-answered-{store.__class__.__name__}")
    info = store.get_thread(THREADS["waiting"])
    assert info is not None
    assert "done" == info.status


def test_answer_with_the_json_editor(driver: Any, console: str, store: Any) -> None:
    """Open "Answer something else", type "no" as JSON and send: the order is cancelled."""
    from selenium.webdriver.common.by import By

    open_thread(driver, console, THREADS["second_waiting"])
    editor = driver.find_element(By.NAME, "answer.0")
    assert "" == editor.get_attribute("value")
    driver.find_element(By.CSS_SELECTOR, "details.free > summary").click()
    editor.send_keys('"no"')
    driver.find_element(By.XPATH, "//button[normalize-space()='Send this answer']").click()
    assert "Answered. The run finished." == note(driver)
    state = ilmek.thread_state(graphs()["checkout"], store, THREADS["second_waiting"])
    assert "cancelled" == state["log"][-1]


def test_fork_an_old_pause_with_another_answer(
    driver: Any, console: str, screenshots: pathlib.Path, store: Any
) -> None:
    """Click the answered pause in the tree, open the fork form, press "no": two branches are drawn."""
    from selenium.webdriver.common.by import By

    open_thread(driver, console, THREADS["answered"])
    assert [] == driver.find_elements(By.CSS_SELECTOR, "svg.tree path.edge.fork")
    pause_row = next(
        row
        for row in driver.find_elements(By.CSS_SELECTOR, ".checkpoint-tree a.row")
        if "answered:" in row.text
    )
    pause_row.click()
    fork_form = wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "div.fork form"))[0]
    fork_form.find_element(By.XPATH, ".//button[@name='option.0' and normalize-space()='Reject']").click()
    assert "Forked with a new answer. The run finished." == note(driver)
    assert 1 == len(driver.find_elements(By.CSS_SELECTOR, "svg.tree path.edge.fork"))
    labels = driver.find_element(By.CSS_SELECTOR, ".checkpoint-tree").text
    assert 1 == labels.count('answered: approve:interrupt#0 = "yes"')
    assert 1 == labels.count('answered: approve:interrupt#0 = "no"')
    shoot(driver, screenshots, f"thread-forked-{store.__class__.__name__}")
    sources = [checkpoint.metadata.get("source") for checkpoint in store.list(THREADS["answered"])]
    assert 1 == sources.count("fork")


def test_cancel_a_running_thread(driver: Any, console: str, screenshots: pathlib.Path, store: Any) -> None:
    """A looping run in a background thread shows as running; Cancel ends it aborted with the reason."""
    from selenium.webdriver.common.by import By

    results: list[ilmek.Result] = []
    ticker = loop_graph(delay=0.05)
    runner = threading.Thread(
        target=lambda: results.append(
            run(ticker, {}, thread_id="ticker-1", checkpointer=store, recursion_limit=100_000)
        ),
        daemon=True,
    )
    runner.start()
    deadline = time.monotonic() + 15
    while (info := store.get_thread("ticker-1")) is None or not info.running:
        assert time.monotonic() < deadline, "the looping run never started"
        time.sleep(0.05)

    driver.get(console + "/?status=running")
    assert ["ticker-1"] == [link.text for link in driver.find_elements(By.CSS_SELECTOR, "a.tid")]
    driver.find_element(By.LINK_TEXT, "ticker-1").click()
    wait_for(driver, lambda d: d.find_elements(By.NAME, "reason"))
    assert "● running" in driver.find_element(By.CSS_SELECTOR, ".title-row").text
    shoot(driver, screenshots, f"thread-running-{store.__class__.__name__}")
    driver.find_element(By.NAME, "reason").send_keys("stopped from the browser")
    driver.find_element(By.XPATH, "//button[normalize-space()='Cancel the run']").click()
    assert note(driver).startswith("Asked the run to stop")
    runner.join(15)
    assert ["aborted"] == [result.status for result in results]
    assert "cancelled in the web console: stopped from the browser" == results[0].abort_reason
    info = store.get_thread("ticker-1")
    assert info is not None
    assert not info.running


def test_a_failed_thread_shows_its_error(
    driver: Any, console: str, screenshots: pathlib.Path, store: Any
) -> None:
    """The Failed tab lists it with its error; its page shows type, message and node."""
    from selenium.webdriver.common.by import By

    driver.get(console + "/")
    driver.find_element(By.PARTIAL_LINK_TEXT, "Failed").click()
    wait_for(driver, lambda d: "status=error" in d.current_url)
    assert [THREADS["failed"]] == [link.text for link in driver.find_elements(By.CSS_SELECTOR, "a.tid")]
    assert (
        "RuntimeError: upstream CRM answered 502 Bad Gateway"
        in driver.find_element(By.CSS_SELECTOR, "td.detail").text
    )
    driver.find_element(By.LINK_TEXT, THREADS["failed"]).click()
    panel = wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "section.panel.failed"))[0]
    assert "RuntimeError" == panel.find_element(By.CSS_SELECTOR, ".etype").text
    assert (
        "upstream CRM answered 502 Bad Gateway\nretry later"
        == panel.find_element(By.CSS_SELECTOR, "pre").text
    )
    assert "fetch" in panel.text
    shoot(driver, screenshots, f"thread-failed-{store.__class__.__name__}")


_INJECTED = r"""
return {
  // The console's own script file is the one script a page may have.
  elements: [...document.querySelectorAll('script, img, iframe, object, embed, svg image')].filter(
      e => !(e.tagName === 'SCRIPT' && /\/static\/console\.js$/.test(e.getAttribute('src') || ''))).length,
  handlers: [...document.querySelectorAll('*')].filter(
      e => [...e.attributes].some(a => a.name.toLowerCase().startsWith('on'))).length,
  scriptLinks: [...document.querySelectorAll('[href], [src], [action], [formaction]')].filter(
      e => ['href', 'src', 'action', 'formaction'].some(
          n => (e.getAttribute(n) || '').trim().toLowerCase().startsWith('javascript:'))).length,
  text: document.body.innerText,
};
"""


def test_hostile_values_stay_text_in_the_browser(
    driver: Any, console: str, store: Any, screenshots: pathlib.Path
) -> None:
    """On every page of the hostile threads: no alert, no injected element, handler or script link."""
    from selenium.common.exceptions import NoAlertPresentException

    failed = hostile_failure(store)
    urls = [console + "/", console + "/?status=all", console + "/?status=error"]
    for thread_id in (HOSTILE_THREAD, failed):
        for checkpoint in store.list(thread_id):
            urls.append(
                f"{console}/thread?" + urllib.parse.urlencode({"id": thread_id, "checkpoint": checkpoint.id})
            )
    seen = ""
    for url in urls:
        driver.get(url)
        with pytest.raises(NoAlertPresentException):
            driver.switch_to.alert  # noqa: B018 - reading it is the check
        found = driver.execute_script(_INJECTED)
        assert {"elements": 0, "handlers": 0, "scriptLinks": 0} == {
            k: v for k, v in found.items() if k != "text"
        }
        seen += found["text"]
    open_thread(driver, console, HOSTILE_THREAD)
    shoot(driver, screenshots, f"thread-hostile-{store.__class__.__name__}")
    # The stored text is shown, as text.
    assert XSS_SCRIPT in seen
    assert XSS_IMG in seen
    assert re.search(r"bell\\x07 esc\\x1b\[31m", seen)


@pytest.mark.parametrize("escape", ["%2F", "%2F%2F", "%5C", "%2F%5C"])
def test_the_login_redirect_leaves_the_browser_on_the_console(
    driver: Any, tmp_path: pathlib.Path, escape: str
) -> None:
    """Chromium opening /<escape>evil.example/?token=: it follows the 303 and stays on the console."""
    store = SqliteCheckpointer(tmp_path / "console.db")
    try:
        with serving(store, allow_actions=True, login=Login("browser-login-token")) as server:
            console = server.url.rstrip("/")
            driver.get(f"{console}/{escape}evil.example/?token=browser-login-token")
            wait_for(driver, lambda d: "token=" not in d.current_url)
            landed = urllib.parse.urlsplit(driver.current_url)
            assert urllib.parse.urlsplit(console).netloc == landed.netloc, driver.current_url
            assert "http" == landed.scheme
    finally:
        store.close()
