"""Bulk actions in Chromium: tick rows, confirm the count, and the threads are gone; at 1440 and 390 px.

The console is served by ``wsgiref`` on 127.0.0.1 over a SQLite file of the
sample threads; each combination of width and colour scheme loads the
threads list, the confirmation page and the list after the action once,
checks that none scrolls sideways and that axe finds nothing, and writes a
screenshot of each (under pytest's temporary folder).

Without Chromium, chromedriver or axe-core these tests skip; under ``CI`` they fail.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from ilmek import Checkpointer, SqliteCheckpointer
from tests.support.conftest_postgres import unavailable
from tests.support.web_browser_support import (
    AXE_SCRIPT,
    axe_violations,
    full_page_screenshot,
    press,
    show_as_screen,
)
from tests.support.web_support import THREADS, graphs, populate, serving

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[Checkpointer]:
    """The sample threads in a SQLite file."""
    checkpointer = SqliteCheckpointer(tmp_path / "console.db")
    populate(checkpointer, hostile=False)
    yield checkpointer
    checkpointer.close()


def checked(driver: Any, name: str, width: int, folder: pathlib.Path) -> list[str]:
    """The page fits ``width``, is saved as ``name``.png, and what axe finds wrong with it."""
    assert 0 == int(driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth"))
    full_page_screenshot(driver, folder / f"{name}.png", width=width, max_height=2400)
    return [f"{name}: {violation['id']}" for violation in axe_violations(driver)]


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [1440, 390])
def test_ticked_threads_are_deleted_after_a_page_that_counts_them(
    driver: Any, store: Checkpointer, width: int, scheme: str, tmp_path: pathlib.Path
) -> None:
    """Two rows ticked, Delete: the page asks "Delete 2 threads?"; confirmed, the list says so and the
    store no longer has them; every page fits the screen and passes axe."""
    if not AXE_SCRIPT.exists():
        unavailable("no axe-core: run scripts/test (npm ci in tests/axe)")
    chosen = [THREADS["answered"], THREADS["failed"]]
    show_as_screen(driver, width, scheme)
    found = []
    with serving(store, graphs(), allow_actions=True) as server:
        server.console.refresh_seconds = 0
        driver.get(server.url + "?status=all")
        for thread_id in chosen:
            box = driver.find_element("css selector", f"input[type='checkbox'][value='{thread_id}']")
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)
            box.click()
        found += checked(driver, f"list-{width}-{scheme}", width, tmp_path)
        press(driver, driver.find_element("css selector", "form#bulk button[value='delete']"))
        heading = driver.find_element("css selector", "h1")
        assert "Delete 2 threads?" == heading.text
        named = [link.text for link in driver.find_elements("css selector", "ul.bulk-threads a.tid")]
        assert sorted(chosen) == sorted(named)
        found += checked(driver, f"confirm-{width}-{scheme}", width, tmp_path)
        press(driver, driver.find_element("css selector", "form.bulk-confirm button[type='submit']"))
        note = driver.find_element("css selector", ".note")
        assert "Deleted 2 threads." == note.text
        found += checked(driver, f"done-{width}-{scheme}", width, tmp_path)
    assert [] == found
    assert all(store.get(thread_id) is None for thread_id in chosen)
    assert THREADS["waiting"] in {info.id for info in store.list_threads()}
