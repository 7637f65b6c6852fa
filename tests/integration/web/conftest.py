"""The console's browser tests share one way to get a Chromium: the ``driver`` fixture, one per module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.conftest_postgres import unavailable


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    """One headless Chromium for the module, 1440 by 900 px (fails under CI, skips elsewhere, without one).

    A test that needs axe checks ``AXE_SCRIPT`` itself, so that a module's other tests run without it.
    """
    pytest.importorskip("selenium")
    from tests.support.web_browser_support import browser, find_browser

    if find_browser() is None:
        unavailable("no chromium and chromedriver: apt-get install chromium chromium-driver")
    try:
        with browser(1440, 900) as chromium:
            yield chromium
    except Exception as error:  # a browser that is there but will not start
        unavailable(f"chromium did not start: {error}")
