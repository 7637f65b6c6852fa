"""What is being approved, shown: an order's fields in the open, escaped, with the whole payload a fold away.

Two orders wait on a SQLite file: one asks a question over its amount and
items, the other has no question at all. The console is served by
``wsgiref`` on 127.0.0.1 and read over a real connection; one browser test
looks at the page at both sizes and in both schemes (axe-clean).
"""

from __future__ import annotations

import pathlib
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

import ilmek
from ilmek import START, SqliteCheckpointer, channel, graph, run
from tests.support.conftest_postgres import unavailable
from tests.support.web_browser_support import (
    AXE_SCRIPT,
    axe_violations,
    full_page_screenshot,
    show_as_screen,
)
from tests.support.web_support import XSS_SCRIPT, fetch, serving

pytestmark = pytest.mark.timeout(180)

ORDER = {
    "amount": 1249.5,
    "currency": "EUR",
    "customer": {"name": XSS_SCRIPT, "tier": "gold", "since": 2019},
    "items": [{"sku": "LAPTOP-14", "qty": 1}, {"sku": "DOCK-2", "qty": 2}],
    "note": "Deliver to the side door.\nRing twice.",
}
ASKED = {"question": "Charge this order?", "options": ["yes", "no"], **ORDER}


def approval_graph() -> ilmek.CompiledGraph:
    """One node that pauses with the payload the run was given."""
    return (
        graph("approval", {"payload": channel.last_write(None)})
        .node("approve", lambda state, ctx: {"payload": ctx.interrupt(state["payload"])})
        .edge(START, "approve")
        .compile()
    )


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Two orders waiting (with and without a question), served read-only on 127.0.0.1; the base URL."""
    store = SqliteCheckpointer(tmp_path_factory.mktemp("approvals") / "orders.db")
    run(approval_graph(), {"payload": ASKED}, thread_id="order-asked", checkpointer=store)
    run(approval_graph(), {"payload": ORDER}, thread_id="order-bare", checkpointer=store)
    with serving(store, {"approval": approval_graph()}) as server:
        yield server.url.rstrip("/")
    store.close()


def pause_of(console: str, thread_id: str) -> str:
    """The waiting panel of a thread's page."""
    status, body = fetch(f"{console}/thread?{urllib.parse.urlencode({'id': thread_id})}")
    assert 200 == status
    found = re.search(r'<section class="panel waiting".*?</section>', body, re.S)
    assert found is not None
    return found.group(0)


@pytest.mark.parametrize("thread_id", ["order-asked", "order-bare"])
def test_an_orders_fields_are_shown_in_the_open_and_escaped(console: str, thread_id: str) -> None:
    """Amount, currency, items and the nested customer are table rows outside any fold; markup stays text."""
    panel = pause_of(console, thread_id)
    table = re.search(r'<div class="payload payload-fields">(.*?)</div><details', panel, re.S)
    assert table is not None, panel[:2000]
    shown = table.group(1)
    for field, value in (("amount", "1249.5"), ("currency", "EUR"), ("tier", "gold"), ("since", "2019")):
        assert re.search(rf"<th scope=\"row\">{field}</th><td>.*?{value}", shown, re.S), field
    assert "LAPTOP-14" in shown
    assert "DOCK-2" in shown
    assert "Deliver to the side door.\nRing twice." in shown
    assert XSS_SCRIPT not in panel
    assert "&lt;script&gt;" in shown
    assert '<th scope="row">question</th>' not in shown
    assert '<th scope="row">options</th>' not in shown
    assert "The whole payload" in panel


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [1440, 390])
def test_the_order_reads_at_a_glance_on_both_screens(
    driver: Any, console: str, width: int, scheme: str, tmp_path: pathlib.Path
) -> None:
    """At 1440 and 390 px, light and dark: the amount shows unfolded, no sideways scroll, axe is clean."""
    if not AXE_SCRIPT.exists():
        unavailable("no axe-core: run scripts/test (npm ci in tests/axe)")
    show_as_screen(driver, width, scheme)
    driver.get(f"{console}/thread?id=order-bare")
    amount = driver.find_element(
        "xpath", "//section[contains(@class, 'waiting')]//th[text()='amount']/following-sibling::td"
    )
    assert amount.is_displayed()
    assert "1249.5" == amount.text
    assert 0 == int(driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth"))
    full_page_screenshot(driver, tmp_path / f"order-{width}-{scheme}.png", width=width)
    assert [] == axe_violations(driver)
