"""The thread page of a thread paused two subgraphs down, in Chromium: 1440 and 390 px, light and dark.

The children's checkpoints and journals sit under the task that ran them
and the graph drawing holds each child inside its node; the page must fit
the screen (no sideways scroll, nothing cut) and pass axe-core. Set
``$ILMEK_SCREENSHOTS`` to a folder to get the page as PNGs there. Without
Chromium or axe-core this skips; under ``CI`` it fails.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from ilmek import SqliteCheckpointer, run
from tests.integration.web.test_web_subgraph_runs import INNER, OUTER, nested
from tests.support.conftest_postgres import unavailable
from tests.support.web_browser_support import (
    AXE_SCRIPT,
    axe_violations,
    full_page_screenshot,
    misfits,
    set_color_scheme,
    show_as_screen,
)
from tests.support.web_support import serving

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def page_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The thread page of ``order-7``, paused in a grandchild, served from a SQLite file."""
    store = SqliteCheckpointer(tmp_path_factory.mktemp("subgraph-page") / "console.db")
    run(nested(), {}, thread_id="order-7", checkpointer=store)
    with serving(store, {"root": nested()}, allow_actions=True) as server:
        yield f"{server.url.rstrip('/')}/thread?id=order-7"
    store.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [1440, 390])
def test_the_page_of_a_nested_pause_fits_the_screen_and_is_axe_clean(
    driver: Any, page_url: str, width: int, scheme: str
) -> None:
    """Both children's sections and the nested drawing show; no sideways scroll, nothing cut, axe-clean."""
    if not AXE_SCRIPT.exists():
        unavailable("no axe-core: run scripts/test (npm ci in tests/axe)")
    from selenium.webdriver.common.by import By

    show_as_screen(driver, width, scheme, height=844 if width < 600 else 900)
    try:
        driver.get(page_url)
        sections = driver.find_elements(By.CSS_SELECTOR, "main .subgraph-run")
        assert [OUTER, f"{OUTER}/{INNER}"] == [s.get_attribute("data-ns") for s in sections]
        assert all(section.is_displayed() for section in sections)
        assert driver.find_elements(By.CSS_SELECTOR, "svg.graph g.inside[data-inside='outer'] g.inside")
        found = misfits(driver, ", main .subgraph-run h4, main .child-checkpoints, main .journal")
        violations = [f"{v['id']} :: {node}" for v in axe_violations(driver) for node in v["nodes"]]
        folder = os.environ.get("ILMEK_SCREENSHOTS")
        if folder:
            full_page_screenshot(
                driver, pathlib.Path(folder) / f"subgraphs-{width}-{scheme}.png", width=width
            )
    finally:
        set_color_scheme(driver, "light")
    assert 0 >= found["sideways"]
    assert [] == found["cut"]
    assert [] == violations
