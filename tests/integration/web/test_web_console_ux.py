"""The console for the person who answers pauses, in a real browser at 1440x900 and at 390x844 (a phone).

One test (or a few) per item of the issue: answers that only send what a
person chose or typed, pages that fit a phone, drafts read and edited as
text, answering from the inbox, cancels and failures told, arrows that
never cross a box, a checkpoint tree that reads right, whole values, an
accessibility check (axe-core, from npm, run inside the page) on every page
at both sizes and in both colour schemes, and the rest: counts, filters,
auto-refresh, dark mode, the process holding a run. The console is served
by ``wsgiref`` on 127.0.0.1 over a SQLite file; every action is done through
the browser and checked in the database.

Without Chromium, chromedriver or axe-core these tests skip; under ``CI`` they fail.
"""

from __future__ import annotations

import itertools
import pathlib
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

import ilmek
from ilmek import Checkpointer, SqliteCheckpointer, run
from tests.support.conftest_postgres import unavailable
from tests.support.web_browser_support import (
    AXE_SCRIPT,
    axe_violations,
    press,
    set_color_scheme,
    wait_for,
)
from tests.support.web_support import (
    DRAFT,
    LONG_TEXT,
    THREADS,
    UX_THREADS,
    checkout_graph,
    counter_graph,
    graphs,
    looping,
    populate_ux,
    serving,
    support_graph,
)

pytestmark = pytest.mark.timeout(180)

DESKTOP = (1440, 900)
PHONE = (390, 844)
SIZES = [pytest.param(DESKTOP, id="1440"), pytest.param(PHONE, id="390")]


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[Checkpointer]:
    """The sample threads and the support, research and long-value ones, on a SQLite file."""
    checkpointer = SqliteCheckpointer(tmp_path / "console.db", lease_seconds=2.0)
    populate_ux(checkpointer)
    yield checkpointer
    checkpointer.close()


@pytest.fixture
def console(store: Checkpointer) -> Iterator[str]:
    """The console on the store with actions on, served on 127.0.0.1; its base URL."""
    with serving(store, graphs(), allow_actions=True) as server:
        yield server.url.rstrip("/")


def viewport(driver: Any, size: tuple[int, int]) -> None:
    """Show pages as a screen of ``size`` CSS pixels (a phone's with its viewport rules)."""
    width, height = size
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )


def thread_url(console: str, thread_id: str, checkpoint_id: str | None = None, **more: str) -> str:
    """A thread page's URL."""
    params = {"id": thread_id} | ({"checkpoint": checkpoint_id} if checkpoint_id else {}) | more
    return f"{console}/thread?{urllib.parse.urlencode(params)}"


def css(driver: Any, selector: str) -> list[Any]:
    """The elements a CSS selector finds."""
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def button(driver: Any, text: str, within: Any = None) -> Any:
    """The (first) button reading ``text``."""
    from selenium.webdriver.common.by import By

    return (within or driver).find_element(By.XPATH, f".//button[normalize-space()='{text}']")


def note(driver: Any) -> str:
    """The note at the top of the page (after an action)."""
    return str(wait_for(driver, lambda d: css(d, ".note"))[0].text)


def every_page(console: str, store: Checkpointer, running: str | None = None) -> list[str]:
    """Every kind of page the console renders on the sample store."""
    answered = store.list(THREADS["answered"])
    pause = next(c for c in answered if c.pending)
    fork = next(c for c in store.list(THREADS["forked"]) if c.metadata.get("source") == "fork")
    pages = [
        f"{console}/?status={status}"
        for status in ("interrupted", "error", "running", "unfinished", "done", "all")
    ]
    pages += [
        thread_url(console, THREADS["waiting"]),
        thread_url(console, UX_THREADS["draft"]),
        thread_url(console, THREADS["answered"], pause.id),
        thread_url(console, THREADS["forked"], fork.id),
        thread_url(console, THREADS["failed"]),
        thread_url(console, UX_THREADS["research"]),
        thread_url(console, THREADS["stalled"]),
        thread_url(console, UX_THREADS["long"]),
        f"{console}/value?"
        + urllib.parse.urlencode(
            {"id": UX_THREADS["long"], "checkpoint": store.get(UX_THREADS["long"]).id, "channel": "text"}  # type: ignore[union-attr]
        ),
        thread_url(console, "no-such-thread"),
        thread_url(console, THREADS["waiting"], "no-such-checkpoint"),
        f"{console}/?status=nope&meta=broken",
    ]
    if running is not None:
        pages.append(thread_url(console, running))
    return pages


def status_of(store: Checkpointer, thread_id: str) -> str:
    """The thread's status in the database."""
    info = store.get_thread(thread_id)
    assert info is not None
    return info.status


# --- 1. one click never answers null ----------------------------------------------------------------


def test_an_untouched_editor_sends_nothing_and_approve_answers_yes(
    driver: Any, console: str, store: Checkpointer
) -> None:
    """Sending the untouched free answer answers nothing (the order stays waiting); Approve answers "yes"."""
    viewport(driver, DESKTOP)
    driver.get(thread_url(console, THREADS["waiting"]))
    editor = css(driver, "textarea[name='answer.0']")[0]
    assert "" == editor.get_attribute("value")
    css(driver, "details.free > summary")[0].click()
    press(driver, button(driver, "Send this answer"))
    assert note(driver).startswith("No answer was given to approve:interrupt#0; nothing was answered.")
    assert "interrupted" == status_of(store, THREADS["waiting"])
    press(driver, button(driver, "Approve"))
    assert "Answered. The run finished." == note(driver)
    state = ilmek.thread_state(checkout_graph(), store, THREADS["waiting"])
    assert state is not None
    assert state["approved"] is True
    assert "charged" == state["log"][-1]


# --- 2. every page fits a phone ----------------------------------------------------------------------

_LAYOUT = """
const cells = [...document.querySelectorAll('td.thread, td.detail, h1.tid, pre.message, .pause .question')];
return {
  width: document.documentElement.scrollWidth,
  narrow: cells.filter(e => e.offsetParent !== null && e.getBoundingClientRect().width < 80)
               .map(e => e.tagName + '.' + e.className + ': ' + e.textContent.slice(0, 40)),
  // A short key (interrupt#0, quote#0) is one line, never broken letter by letter.
  broken: [...document.querySelectorAll('table.journal td:first-child code')]
               .filter(e => e.textContent.length <= 24 && e.getClientRects().length > 1)
               .map(e => e.textContent),
};
"""


@pytest.mark.parametrize("size", SIZES)
def test_every_page_fits_the_screen_and_no_cell_is_one_letter_wide(
    driver: Any, console: str, store: Checkpointer, size: tuple[int, int]
) -> None:
    """No page is wider than the screen (390 px too); ids, errors, questions and step keys get room."""
    viewport(driver, size)
    for url in every_page(console, store):
        driver.get(url)
        found = driver.execute_script(_LAYOUT)
        assert found["width"] <= size[0], url
        assert [] == found["narrow"], url
        assert [] == found["broken"], url


# --- 3. a draft reads as text, is accepted or edited ----------------------------------------------------


def test_a_draft_is_text_to_accept_or_to_edit_and_send(
    driver: Any, console: str, store: Checkpointer
) -> None:
    """The draft shows with its lines (no \\n); Accept sends it as drafted; an edit sends the edited text."""
    viewport(driver, DESKTOP)
    driver.get(thread_url(console, UX_THREADS["draft_accept"]))
    editor = css(driver, "textarea.draft-editor")[0]
    assert DRAFT == editor.get_attribute("value")
    assert "\\n" not in driver.find_element("css selector", ".pause").text
    assert "Send this reply to the customer?" == css(driver, ".pause .question")[0].text
    press(driver, button(driver, "Accept the draft"))
    assert "Answered. The run finished." == note(driver)
    state = ilmek.thread_state(support_graph(), store, UX_THREADS["draft_accept"])
    assert state is not None
    assert DRAFT == state["sent"]

    driver.get(thread_url(console, UX_THREADS["draft"]))
    editor = css(driver, "textarea.draft-editor")[0]
    editor.clear()
    editor.send_keys("Merhaba Ayşe,\nYour parcel ships today. 📦")
    # Accept with an edit in the editor would drop the edit: refused, nothing sent.
    press(driver, button(driver, "Accept the draft"))
    assert "was edited, and Accept sends it unedited; nothing was answered" in note(driver)
    assert "interrupted" == status_of(store, UX_THREADS["draft"])
    editor = css(driver, "textarea.draft-editor")[0]
    editor.clear()
    editor.send_keys("Merhaba Ayşe,\nYour parcel ships today. 📦")
    press(driver, button(driver, "Send the edited text"))
    assert "Answered. The run finished." == note(driver)
    state = ilmek.thread_state(support_graph(), store, UX_THREADS["draft"])
    assert state is not None
    assert "Merhaba Ayşe,\nYour parcel ships today. 📦" == state["sent"]


# --- 4. answering from the inbox, and the next one ---------------------------------------------------------


def test_the_inbox_answers_a_pause_in_one_click_and_a_thread_leads_to_the_next(
    driver: Any, console: str, store: Checkpointer
) -> None:
    """Reject in the inbox row cancels that order and comes back; a thread page links to the next waiting."""
    viewport(driver, DESKTOP)
    driver.get(console + "/")
    row = next(r for r in css(driver, "table.threads tbody tr") if THREADS["second_waiting"] in r.text)
    press(driver, button(driver, "Reject", row))
    assert note(driver).startswith(f"{THREADS['second_waiting']}: Answered. The run finished.")
    assert "Inbox" == css(driver, "h1")[0].text
    assert THREADS["second_waiting"] not in [link.text for link in css(driver, "a.tid")]
    state = ilmek.thread_state(checkout_graph(), store, THREADS["second_waiting"])
    assert state is not None
    assert "cancelled" == state["log"][-1]

    driver.get(thread_url(console, THREADS["answered"]))
    css(driver, "a.next-waiting")[0].click()
    wait_for(driver, lambda d: "Waiting for an answer" in d.page_source)
    shown = css(driver, "h1.tid")[0].text
    assert shown != THREADS["answered"]
    assert "interrupted" == status_of(store, shown)


def test_a_note_is_shown_once_and_keys_move_open_and_answer(
    driver: Any, console: str, store: Checkpointer
) -> None:
    """After an answer the note shows, and a reload does not bring it back; j/k, o, a and ? work the inbox."""
    from selenium.webdriver.common.action_chains import ActionChains

    viewport(driver, DESKTOP)
    driver.get(console + "/")
    row = next(r for r in css(driver, "table.threads tbody tr") if THREADS["second_waiting"] in r.text)
    press(driver, button(driver, "Reject", row))
    assert note(driver).startswith(f"{THREADS['second_waiting']}: Answered.")
    assert "note=" not in driver.current_url
    driver.refresh()
    wait_for(driver, lambda d: css(d, "h1") and css(d, "h1")[0].text == "Inbox")
    assert not css(driver, ".note")

    def key(text: str) -> None:
        ActionChains(driver).send_keys(text).perform()

    key("j")
    key("j")
    links = css(driver, "table.threads a.tid")
    second = links[1]
    assert second == driver.switch_to.active_element
    assert "kbd-current" in (second.get_attribute("class") or "")
    key("k")
    assert links[0] == driver.switch_to.active_element
    answerable = next(
        index
        for index, line in enumerate(css(driver, "table.threads tbody tr"))
        if line.find_elements("css selector", ".row-answer button")
    )
    key("j" * answerable)
    key("a")
    focused = driver.switch_to.active_element
    assert "BUTTON" == focused.tag_name.upper()
    assert (
        focused.find_element("xpath", "ancestor::tr").find_element("css selector", "a.tid")
        == links[answerable]
    )
    driver.find_element("tag name", "h1").click()
    key("?")
    helper = wait_for(driver, lambda d: css(d, ".keys-help"))[0]
    assert "j / k" in helper.text
    key("\ue00c")  # Escape
    assert not css(driver, ".keys-help")
    key("j")
    target = driver.switch_to.active_element.text
    assert target in [link.text for link in links]
    key("o")
    wait_for(driver, lambda d: css(d, "h1.tid") and css(d, "h1.tid")[0].text == target)


# --- 5. a cancel leaves its trace ----------------------------------------------------------------------


def test_a_cancel_disables_its_button_and_the_thread_says_who_cancelled_it_and_when(
    driver: Any, store: Checkpointer
) -> None:
    """After Cancel the button reads "Cancel requested"; the page then says the run was cancelled, and why."""
    viewport(driver, DESKTOP)
    # Two seconds a superstep: the cancel is seen at the next boundary, after the page has shown it asked.
    with (
        serving(store, graphs(), allow_actions=True) as server,
        looping(store, "ticker-cancel", 2.0) as results,
    ):
        console = server.url.rstrip("/")
        driver.get(thread_url(console, "ticker-cancel"))
        css(driver, "input[name='reason']")[0].send_keys("wrong customer")
        press(driver, button(driver, "Cancel the run"))
        assert note(driver).startswith("Asked the run to stop")
        pressed = driver.execute_script(
            "const b = document.querySelector('section.operate button.warn');"
            " return b && [b.textContent, b.disabled]"
        )
        assert ["Cancel requested", True] == pressed
        panel = wait_for(driver, lambda d: css(d, "section.panel.cancelled"), seconds=30)[0]
        assert "cancelled in the web console: wrong customer" in panel.text
        assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", panel.text)
        assert "Stalled" not in driver.page_source
        assert "Continue the run" == button(driver, "Continue the run").text
    info = store.get_thread("ticker-cancel")
    assert info is not None
    assert info.cancelled is not None
    assert "cancelled in the web console: wrong customer" == info.cancelled.reason
    assert ["aborted"] == [result.status for result in results]


# --- 6. arrows never pass through boxes ----------------------------------------------------------------

_GEOMETRY = """
const boxes = [...document.querySelectorAll('svg.graph g.gnode')].map(g => {
  const r = g.querySelector('rect');
  return {name: g.getAttribute('data-node'), x: +r.getAttribute('x'), y: +r.getAttribute('y'),
          w: +r.getAttribute('width'), h: +r.getAttribute('height')};
});
const arrows = [...document.querySelectorAll('svg.graph path.arrow')].map(p => ({
  source: p.getAttribute('data-source'), target: p.getAttribute('data-target'), d: p.getAttribute('d')}));
return {boxes, arrows};
"""


def crossings(drawing: dict[str, Any]) -> list[str]:
    """The arrow segments that pass through a box other than their own two ends."""
    found = []
    for arrow in drawing["arrows"]:
        points = [tuple(map(float, pair.split(","))) for pair in re.findall(r"[-\d.]+,[-\d.]+", arrow["d"])]
        assert re.fullmatch(r"M[-\d.,]+( L[-\d.,]+)+", arrow["d"]), arrow["d"]
        for (x0, y0), (x1, y1) in itertools.pairwise(points):
            assert x0 == x1 or y0 == y1, f"not orthogonal: {arrow}"
            for box in drawing["boxes"]:
                if box["name"] in (arrow["source"], arrow["target"]):
                    continue
                left, right = min(x0, x1), max(x0, x1)
                top, bottom = min(y0, y1), max(y0, y1)
                if (
                    left < box["x"] + box["w"]
                    and right > box["x"]
                    and top < box["y"] + box["h"]
                    and bottom > box["y"]
                ):
                    found.append(f"{arrow['source']}→{arrow['target']} crosses {box['name']}")
    return found


def test_no_arrow_of_a_drawn_graph_passes_through_a_box(
    driver: Any, console: str, store: Checkpointer
) -> None:
    """Support loop (tools→agent beside review), fan-out, chain with a back edge, checkout: no crossing."""
    viewport(driver, DESKTOP)
    pages = {
        "support": thread_url(console, UX_THREADS["draft"]),
        "research": thread_url(console, UX_THREADS["research"]),
        "checkout": thread_url(console, THREADS["waiting"]),
    }
    run(graphs()["retry-chain"], {}, thread_id="chain-1", checkpointer=store)
    pages["retry-chain"] = thread_url(console, "chain-1")
    for name, url in pages.items():
        driver.get(url)
        drawing = driver.execute_script(_GEOMETRY)
        assert len(drawing["arrows"]) >= 4, name
        assert [] == crossings(drawing), name
    driver.get(pages["support"])
    drawing = driver.execute_script(_GEOMETRY)
    assert {("tools", "agent"), ("agent", "review"), ("agent", "tools")} <= {
        (a["source"], a["target"]) for a in drawing["arrows"]
    }


# --- 7. the checkpoint tree reads right ---------------------------------------------------------------


def test_the_tree_names_nodes_answers_and_dates_reads_newest_first_and_offers_the_fork_openly(
    driver: Any, console: str, store: Checkpointer
) -> None:
    """Rows name the nodes that ran, both fork branches their answers, dates; DOM order is top to bottom."""
    viewport(driver, DESKTOP)
    driver.get(thread_url(console, THREADS["forked"]))
    rows = css(driver, ".checkpoint-tree a.row")
    labels = [row.text for row in rows]
    assert not any(" loop " in f" {label} " for label in labels), labels
    assert any("charge" in label for label in labels)
    assert any('answered: approve:interrupt#0 = "yes"' in label for label in labels)
    assert any('answered: approve:interrupt#0 = "no"' in label for label in labels)
    assert all(re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", label) for label in labels)
    tops = [row.rect["y"] for row in rows]
    assert tops == sorted(tops), "tab order runs top to bottom"
    assert "group" == css(driver, "div.checkpoint-tree")[0].get_attribute("role")

    pause = next(c for c in store.list(THREADS["answered"]) if c.pending)
    driver.get(thread_url(console, THREADS["answered"], pause.id))
    fork = css(driver, "div.fork form")[0]
    assert fork.is_displayed()
    assert "answered" == css(driver, "table.grid .badge.p-answered")[0].text
    assert not css(driver, ".checkpoint-tree .t-waiting")


def test_checkpoints_past_the_newest_300_are_reached_through_older_pages(
    driver: Any, console: str, store: Checkpointer
) -> None:
    """A 400-step thread: "Older checkpoints" shows the 100 older ones, down to step 0."""
    run(counter_graph(400), {}, thread_id="long-history", checkpointer=store, recursion_limit=1000)
    viewport(driver, DESKTOP)
    driver.get(thread_url(console, "long-history"))
    assert 300 == len(css(driver, ".checkpoint-tree a.row"))
    driver.find_element("link text", "Older checkpoints →").click()
    wait_for(driver, lambda d: "an older page" in d.page_source)
    labels = [row.text for row in css(driver, ".checkpoint-tree a.row")]
    assert 100 == len(labels)
    assert labels[-1].startswith("step -1") or labels[-1].startswith("step 0")


# --- 8. failures give something to work with ---------------------------------------------------------


def test_a_failure_shows_its_traceback_marks_the_failed_tasks_and_a_failed_recover_says_so(
    driver: Any, console: str, store: Checkpointer
) -> None:
    """A fan-out's failure: traceback shown, the one send that raised marked; Recover says it failed again."""
    viewport(driver, DESKTOP)
    driver.get(thread_url(console, UX_THREADS["research"]))
    trace = css(driver, "section.panel.failed pre.trace")[0].get_attribute("textContent")
    assert trace.startswith("Traceback (most recent call last):")
    assert "ConnectionError: the pricing API timed out after 30 s" in trace
    # The exception first, visible without scrolling; then the user's own frames, no ilmek frame among them.
    last = css(driver, "section.panel.failed .trace-last")[0]
    assert "ConnectionError: the pricing API timed out after 30 s" == last.text
    assert last.is_displayed()
    assert driver.execute_script("return arguments[0].getBoundingClientRect().bottom", last) < 900
    user = css(driver, "section.panel.failed pre.trace-user")[0].text
    assert user.lstrip().startswith('File "')
    assert "in research" in user
    # No frame of ilmek's own package (the checkout's folder may well be named ilmek too).
    assert f"{pathlib.Path(ilmek.__file__).parent}/" not in user
    marked = css(driver, ".task.failed-task")
    assert 1 == len(marked)
    assert '"pricing"' in marked[0].text
    assert "raised the error above" in marked[0].text
    assert 2 == len([task for task in css(driver, ".task") if "research" in task.text and task not in marked])
    assert "its node failed" not in driver.page_source
    press(driver, button(driver, "Recover: continue the run"))
    text = note(driver)
    assert text.startswith("Recovery did not succeed. The run failed again, node 'research'")
    assert "Recovered." not in text
    assert "error" == status_of(store, UX_THREADS["research"])


# --- 9. reading values ----------------------------------------------------------------------------------


def test_keys_stay_on_one_line_long_values_can_be_read_whole_and_a_finished_thread_shows_its_steps(
    driver: Any, console: str, store: Checkpointer
) -> None:
    """interrupt#0 on one line at 1440; a 34,000-character value opens whole; a done thread lists steps."""
    viewport(driver, DESKTOP)
    driver.get(thread_url(console, UX_THREADS["draft"]))
    key = next(cell for cell in css(driver, "table.journal td.key code") if cell.text == "interrupt#0")
    assert 1 == driver.execute_script("return arguments[0].getClientRects().length", key)

    driver.get(thread_url(console, UX_THREADS["long"]))
    driver.find_element("link text", "Show the whole value").click()
    whole = wait_for(driver, lambda d: css(d, ".whole-value"))[0]
    assert LONG_TEXT.rstrip("\n") == whole.get_attribute("textContent").rstrip("\n")

    driver.get(thread_url(console, THREADS["answered"]))
    steps = css(driver, "table.steps tbody tr")
    assert len(steps) == len(store.list(THREADS["answered"]))
    ran = [row.find_elements("css selector", "td")[1].text for row in steps]
    assert ["charge", "charge", "approve", "plan", "input"] == ran or "charge" in ran[0]


# --- 10. accessibility: axe on every page, both sizes, both schemes ----------------------------------------


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("size", SIZES)
def test_axe_finds_no_violation_on_any_page(
    driver: Any, console: str, store: Checkpointer, size: tuple[int, int], scheme: str
) -> None:
    """axe-core (every rule, contrast included) reports nothing on every page the console renders."""
    if not AXE_SCRIPT.exists():
        unavailable("no axe-core: run scripts/test (npm ci in tests/axe)")
    viewport(driver, size)
    set_color_scheme(driver, scheme)
    found = []
    try:
        with looping(store, "ticker-axe"):
            for url in every_page(console, store, running="ticker-axe"):
                driver.get(url)
                path = url.split("/", 3)[-1]
                found += [
                    f"{path} :: {violation['id']} :: {node}"
                    for violation in axe_violations(driver)
                    for node in violation["nodes"] or [violation["help"]]
                ]
    finally:
        set_color_scheme(driver, "light")
    assert [] == found


def test_axe_runs_whole_on_a_page_that_reloads_itself_faster_than_axe_runs(
    driver: Any, store: Checkpointer
) -> None:
    """The inbox reloading itself every 0.3 s, less than axe takes (as a 3 s reload does on a loaded
    machine): the audit runs whole in one document, never "axe is not defined" or a run cut by a reload."""
    if not AXE_SCRIPT.exists():
        unavailable("no axe-core: run scripts/test (npm ci in tests/axe)")
    viewport(driver, DESKTOP)
    with serving(store, graphs(), allow_actions=True) as server:
        server.console.refresh_seconds = 0.3
        for _ in range(3):
            driver.get(server.url.rstrip("/") + "/")
            assert [] == axe_violations(driver)


# --- 11. counts, filters, refresh, dark mode, the holder, kept filters, titles ------------------------------


def test_tabs_count_filters_by_graph_and_time_and_a_bad_filter_keeps_its_text(
    driver: Any, console: str, store: Checkpointer
) -> None:
    """Counts per tab and a total; graph=support lists its tickets; old30d none; a bad pair stays typed."""
    viewport(driver, DESKTOP)
    driver.get(console + "/")
    tabs = [tab.text for tab in css(driver, "a.tab")]
    waiting = len(store.list_threads(status="interrupted"))
    assert re.fullmatch(rf"Inbox\s*{waiting}", tabs[0]), tabs
    assert re.fullmatch(r"Failed\s*2", tabs[1]), tabs
    assert (
        f"{len(store.list_threads())} threads in this store; {waiting} waiting."
        == css(driver, "p.total")[0].text
    )
    driver.get(console + "/?status=all&graph=support")
    assert sorted([UX_THREADS["draft"], UX_THREADS["draft_accept"]]) == sorted(
        link.text for link in css(driver, "a.tid")
    )
    driver.get(console + "/?status=all&updated=old30d")
    assert [] == css(driver, "a.tid")
    driver.get(console + "/?status=all&meta=tier")
    assert "tier" == css(driver, "input[name='meta']")[0].get_attribute("value")
    assert "a metadata filter is key=value" in css(driver, ".problem")[0].text


def test_the_inbox_and_a_running_thread_refresh_themselves_and_name_the_holder(
    driver: Any, store: Checkpointer
) -> None:
    """A new pause appears in the open inbox without a reload; a running thread names its process."""
    viewport(driver, DESKTOP)
    with serving(store, graphs(), allow_actions=True) as server:
        server.console.refresh_seconds = 1.0
        console = server.url.rstrip("/")
        driver.get(console + "/")
        assert "order-2001" not in driver.page_source
        run(checkout_graph(), {"cart": ["tea"]}, thread_id="order-2001", checkpointer=store)
        wait_for(driver, lambda d: "order-2001" in d.page_source, seconds=15)
        with looping(store, "ticker-held"):
            driver.get(thread_url(console, "ticker-held"))
            holder = css(driver, "dl.facts")[0].text
            assert re.search(r"Held by\npid \d+ on \S+", holder, re.IGNORECASE)

            def step(page: Any) -> int:
                facts = css(page, "dl.facts")
                if not facts:  # caught between two loads of the page: no facts yet
                    return -1
                found = re.search(r"Step\n(\d+)", facts[0].text, re.IGNORECASE)
                assert found is not None
                return int(found.group(1))

            before = step(driver)
            assert before >= 0
            # The page reloads itself while the run goes on.
            wait_for(driver, lambda d: step(d) > before)


def test_dark_mode_follows_the_system_and_missing_pages_are_titled_right(
    driver: Any, console: str, store: Checkpointer
) -> None:
    """prefers-color-scheme: dark gives a dark page; a missing checkpoint reads "No such checkpoint"."""
    viewport(driver, DESKTOP)
    set_color_scheme(driver, "dark")
    try:
        driver.get(console + "/")
        background = driver.execute_script(
            "return getComputedStyle(document.documentElement).backgroundColor"
        )
        assert "rgb(11, 17, 32)" == background
    finally:
        set_color_scheme(driver, "light")
    driver.get(thread_url(console, THREADS["waiting"], "no-such-checkpoint"))
    assert "No such checkpoint" == css(driver, "h1")[0].text
    driver.get(thread_url(console, "no-such-thread"))
    assert "No such thread" == css(driver, "h1")[0].text


# --- 12. an answer link's page ----------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_an_answer_link_page_fits_passes_axe_and_keeps_a_refused_answer(
    driver: Any, store: Checkpointer, size: tuple[int, int]
) -> None:
    """The /answer/<token> page fits the screen and axe finds nothing on it (light and dark); a refused
    answer (a text over its contract's max_length) comes back with the typed text still in the editor, and
    the right one answers the pause."""
    from ilmek import START, answers, channel, graph

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.interrupt({"question": "Ship?"}, answers=answers.text(max_length=5))]}

    asking = graph("linked", {"log": channel.append()}).node("ask", ask).edge(START, "ask").compile()
    if not AXE_SCRIPT.exists():
        unavailable("no axe-core: run scripts/test (npm ci in tests/axe)")
    secret = "browser-link-secret"
    ilmek.run(asking, {}, thread_id="link-1", checkpointer=store)
    token = ilmek.answer_token(store, "link-1", "ask:interrupt#0", secret=secret)
    viewport(driver, size)
    with serving(store, {"linked": asking}, answer_secret=secret) as server:
        driver.get(f"{server.url}answer/{token}")
        assert "Ship?" in driver.page_source
        for scheme in ("light", "dark"):
            set_color_scheme(driver, scheme)
            assert [] == [violation["id"] for violation in axe_violations(driver)]
        set_color_scheme(driver, "light")
        assert driver.execute_script("return document.documentElement.scrollWidth") <= size[0]
        editor = css(driver, "textarea[name='text.0']")[0]
        # Past the browser's maxlength, as a forged or old form would send it: the console refuses it.
        driver.execute_script("arguments[0].removeAttribute('maxlength')", editor)
        editor.send_keys("not yet")
        css(driver, "button[name='send']")[0].click()
        wait_for(driver, lambda d: "does not fit" in d.page_source)
        assert "not yet" == css(driver, "textarea[name='text.0']")[0].get_attribute("value")
        editor = css(driver, "textarea[name='text.0']")[0]
        editor.clear()
        editor.send_keys("yes")
        css(driver, "button[name='send']")[0].click()
        wait_for(driver, lambda d: "Thank you" in d.page_source)
    assert ["yes"] == ilmek.thread_state(asking, store, "link-1")["log"]
