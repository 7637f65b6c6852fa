"""A thread page's history at 1440 and 390 px: no checkpoint id or time is cut off, or hidden to the side.

"Steps to here" lists each checkpoint's time and id, and the checkpoint tree
each row's time; on a phone they must be on screen, not clipped by the page
nor by a box that scrolls sideways. The console is served by ``wsgiref`` on
127.0.0.1 over a SQLite file of the sample threads (a fork included) and a
thread of 40 steps; each width and scheme loads each page once, checks it
with axe and saves a screenshot (under pytest's temporary folder).

Without Chromium, chromedriver or axe-core these tests skip; under ``CI`` they fail.
"""

from __future__ import annotations

import pathlib
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from ilmek import Checkpointer, SqliteCheckpointer, run
from tests.support.conftest_postgres import unavailable
from tests.support.web_browser_support import (
    AXE_SCRIPT,
    axe_violations,
    full_page_screenshot,
    show_as_screen,
    wait_for,
)
from tests.support.web_support import THREADS, counter_graph, graphs, populate, serving

pytestmark = pytest.mark.timeout(120)

_CLIPPED = """
const shown = [...document.querySelectorAll(
  'table.steps td.when, table.steps td.key a, svg.tree .t-time, .facts dd, h2 code')];
const clipped = [];
for (const element of shown) {
  const box = element.getBoundingClientRect();
  if (box.width === 0) continue;
  let cut = box.left < -0.5 || box.right > window.innerWidth + 0.5;
  for (let up = element.parentElement; up && !cut; up = up.parentElement) {
    if (!/(hidden|auto|scroll|clip)/.test(getComputedStyle(up).overflowX)) continue;
    const frame = up.getBoundingClientRect();
    cut = box.left < frame.left - 0.5 || box.right > frame.right + 0.5;
  }
  if (cut) clipped.push(element.textContent.trim().slice(0, 40));
}
return {clipped, ids: document.querySelectorAll('table.steps td.key a').length,
        times: document.querySelectorAll('svg.tree .t-time').length};
"""


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[Checkpointer]:
    """The sample threads, and a thread of 40 steps, in a SQLite file."""
    checkpointer = SqliteCheckpointer(tmp_path / "console.db")
    populate(checkpointer, hostile=False)
    run(counter_graph(40), {}, thread_id="counted", checkpointer=checkpointer, recursion_limit=100)
    yield checkpointer
    checkpointer.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [1440, 390])
def test_checkpoint_ids_and_times_are_on_screen_at_both_widths(
    driver: Any, store: Checkpointer, width: int, scheme: str, tmp_path: pathlib.Path
) -> None:
    """A forked thread and a 40-step one: every id and time of the steps and the tree is on screen, the page
    does not scroll sideways, and axe finds nothing."""
    if not AXE_SCRIPT.exists():
        unavailable("no axe-core: run scripts/test (npm ci in tests/axe)")
    show_as_screen(driver, width, scheme)
    found = []
    with serving(store, graphs(), allow_actions=True) as server:
        server.console.refresh_seconds = 0
        for name in (THREADS["forked"], "counted"):
            driver.get(f"{server.url}thread?{urllib.parse.urlencode({'id': name})}")
            layout = driver.execute_script(_CLIPPED)
            assert [] == layout["clipped"], name
            assert layout["ids"] >= 4, name
            assert layout["times"] >= 4, name
            assert 0 == int(
                driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
            )
            full_page_screenshot(
                driver, tmp_path / f"{name}-{width}-{scheme}.png", width=width, max_height=3000
            )
            found += [f"{name}: {violation['id']}" for violation in axe_violations(driver)]
    assert [] == found


def test_keys_walk_the_checkpoint_tree_open_a_checkpoint_and_reach_the_answer(
    driver: Any, store: Checkpointer
) -> None:
    """On a paused thread's page: j / k move between the tree's rows, o opens the one chosen, a puts the
    focus on the pause's answer form."""
    from selenium.webdriver.common.action_chains import ActionChains

    show_as_screen(driver, 1440)
    with serving(store, graphs(), allow_actions=True) as server:
        server.console.refresh_seconds = 0
        driver.get(f"{server.url}thread?{urllib.parse.urlencode({'id': THREADS['waiting']})}")
        rows = driver.find_elements("css selector", "svg.tree a.row")
        assert len(rows) >= 3

        def key(text: str) -> None:
            ActionChains(driver).send_keys(text).perform()

        key("jj")
        assert rows[1] == driver.switch_to.active_element
        assert "kbd-current" in (rows[1].get_attribute("class") or "")
        key("k")
        assert rows[0] == driver.switch_to.active_element
        key("a")
        answering = driver.switch_to.active_element
        assert answering.find_elements("xpath", "ancestor::*[@id='pauses']")
        driver.find_element("css selector", "h1").click()
        key("jj")
        chosen = driver.switch_to.active_element
        assert "kbd-current" in (chosen.get_attribute("class") or "")
        href = driver.execute_script("return arguments[0].getAttribute('href')", chosen)
        wanted = urllib.parse.parse_qs(urllib.parse.urlsplit(href).query)["checkpoint"]
        key("o")

        def opened(page: Any) -> bool:
            return wanted == urllib.parse.parse_qs(urllib.parse.urlsplit(page.current_url).query).get(
                "checkpoint"
            )

        wait_for(driver, opened)
