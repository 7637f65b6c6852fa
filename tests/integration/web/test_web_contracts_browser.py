"""The pages of a pause with a contract, in Chromium: at 1440 and 390 px, light and dark, axe-clean.

One SQLite file holds a thread paused under each shape of :mod:`ilmek.answers`
(the thread's id is the shape's kind), three reviews to accept, edit and
reject, a choice to answer from the inbox, an answered choice to fork, and
threads behind answer links. Each screen (every width with every scheme)
loads every page once: the thread page of each shape, the inbox, the answer
link page (valid, tampered, expired, used), an answered pause with its fork
form and a refused answer's page; each must fit the screen (no sideways
scroll, no control cut off) and pass axe-core. Then the flows, each done
with the browser and checked in the database: a review accepted, edited and
rejected reaching the node as ``ilmek.Review``, a choice answered from its
inbox row, a link answering its pause once, and a fork form sent twice
making one branch.

Set ``$ILMEK_SCREENSHOTS`` to a folder to get every page as a PNG there.
Without Chromium, chromedriver or axe-core these tests skip; under ``CI``
they fail.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

from ilmek import SqliteCheckpointer, answer_token, history, resume_keyed, resume_with_token, run
from tests.support.conftest_postgres import unavailable
from tests.support.contract_graphs import ASKING, DRAFT, PAUSE, SHAPES, got
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

SECRET = "contract-pages-link-secret"
REVIEWS = {"accept": "review-accept", "edit": "review-edit", "reject": "review-reject"}
"""The review thread each action is tried on."""


@attrs.frozen(kw_only=True)
class Links:
    """The answer links of the sample store, by what they are."""

    valid: str
    tampered: str
    expired: str
    used: str
    to_answer: str


@attrs.frozen(kw_only=True)
class Console:
    """The console served on the sample store: its base URL (ending in ``/``), the store, the links."""

    url: str
    store: SqliteCheckpointer
    links: Links


def _tampered(token: str) -> str:
    """``token`` made to name another thread, its signature kept (as someone editing a link would)."""
    body, _, signature = token.partition(".")
    fields = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    fields["t"] = "link-other"
    forged = base64.urlsafe_b64encode(json.dumps(fields, separators=(",", ":")).encode()).decode()
    return f"{forged.rstrip('=')}.{signature}"


def _links(store: SqliteCheckpointer) -> Links:
    def token(thread_id: str, **options: Any) -> str:
        run(ASKING, {"kind": "choice"}, thread_id=thread_id, checkpointer=store)
        return answer_token(store, thread_id, PAUSE, secret=SECRET, **options)

    valid = token("link-valid")
    token("link-other")
    used = token("link-used")
    resume_with_token(ASKING, used, "ship", secret=SECRET, checkpointer=store)
    expired = token("link-expired", expires_in=0.01)
    time.sleep(0.02)
    return Links(
        valid=valid, tampered=_tampered(valid), expired=expired, used=used, to_answer=token("link-answer")
    )


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """A thread paused under each shape, the reviews, a choice for the inbox, a choice answered "ship" (to
    fork) and the links' threads on a SQLite file; the console on it with actions and answer links on."""
    store = SqliteCheckpointer(tmp_path_factory.mktemp("contract-pages") / "contracts.db")
    for kind in SHAPES:
        run(ASKING, {"kind": kind}, thread_id=kind, checkpointer=store)
    for thread_id in REVIEWS.values():
        run(ASKING, {"kind": "review"}, thread_id=thread_id, checkpointer=store)
    run(ASKING, {"kind": "choice"}, thread_id="forked", checkpointer=store)
    run(ASKING, {"kind": "choice"}, thread_id="from-the-inbox", checkpointer=store)
    resume_keyed(ASKING, {PAUSE: "ship"}, thread_id="forked", checkpointer=store)
    links = _links(store)
    with serving(store, {"asking": ASKING}, allow_actions=True, answer_secret=SECRET) as server:
        server.console.refresh_seconds = 0  # the inbox must not reload itself under axe
        yield Console(url=server.url, store=store, links=links)
    store.close()


@pytest.fixture(scope="module")
def screenshots() -> pathlib.Path | None:
    """Where a person wants the screenshots: $ILMEK_SCREENSHOTS, or ``None`` (none taken: faster)."""
    folder = os.environ.get("ILMEK_SCREENSHOTS")
    if not folder:
        return None
    pathlib.Path(folder).mkdir(parents=True, exist_ok=True)
    return pathlib.Path(folder)


def _css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def _texts(driver: Any, selector: str) -> list[str]:
    return [element.text for element in _css(driver, selector)]


def _wait_for(driver: Any, condition: Callable[[Any], Any], seconds: float = 20) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds, poll_frequency=0.05).until(condition)


def _thread(console: Console, thread_id: str) -> str:
    return f"{console.url}thread?{urllib.parse.urlencode({'id': thread_id})}"


_FIELD_LOOK = """
const field = getComputedStyle(arguments[0]);
const textarea = arguments[0].parentNode.appendChild(document.createElement('textarea'));
const look = {width: arguments[0].getBoundingClientRect().width, screen: document.documentElement.clientWidth,
              padding: field.paddingLeft, background: field.backgroundColor,
              textarea: getComputedStyle(textarea).backgroundColor};
textarea.remove();
return look;
"""


def _looks_like_a_field(driver: Any, field: Any) -> bool:
    """A one-line field is drawn as the page's text areas are, and wide enough to type in (200 px, or the
    whole width a phone gives it)."""
    look = driver.execute_script(_FIELD_LOOK, field)
    wide = look["width"] >= min(200, look["screen"] - 80)
    return bool(
        field.is_displayed() and wide and look["background"] == look["textarea"] and look["padding"] != "0px"
    )


def _controls_of_each_shape(driver: Any, kind: str) -> None:
    """The controls the thread page of ``kind`` must show, each on screen; never the payload's options."""
    if kind == "choice":
        assert ["ship", "hold", "cancel"] == _texts(driver, "form.answer-form button[name='option.0']")
    elif kind == "boolean":
        assert ["Yes", "No"] == _texts(driver, "form.answer-form button[name='boolean.0']")
    elif kind == "review":
        assert DRAFT == _css(driver, ".pause .draft-text")[0].text
        assert ["Accept", "Edit", "Reject"] == _texts(driver, "button[name='review.0']")
        editor = _css(driver, "textarea[name='text.0']")[0]
        assert DRAFT == editor.get_attribute("value")
        # The draft is edited in the letters it is read in.
        assert _css(driver, ".pause .draft-text")[0].value_of_css_property("font-family") == (
            editor.value_of_css_property("font-family")
        )
        assert _looks_like_a_field(driver, _css(driver, "input[name='reason.0']")[0])
    elif kind == "text":
        assert "10" == _css(driver, "textarea[name='text.0']")[0].get_attribute("maxlength")
    elif kind == "number":
        box = _css(driver, "input[name='number.0']")[0]
        assert ("number", "1", "5") == tuple(box.get_attribute(a) for a in ("type", "min", "max"))
        assert _looks_like_a_field(driver, box)
    else:
        assert _css(driver, "textarea[name='answer.0']")[0].is_displayed()
        assert "The answer's JSON Schema" == _css(driver, "details.schema summary")[0].text
    labels = _texts(driver, "main button")
    assert "Approve" not in labels
    assert "Accept the draft" not in labels


def _inbox_rows(driver: Any) -> dict[str, str]:
    """Each inbox row by its thread: the one-click buttons it offers, or the link to open it."""
    rows = {}
    for row in _css(driver, "table.threads tbody tr"):
        ids = row.find_elements("css selector", "a.tid")
        if ids:
            answers = row.find_elements("css selector", ".row-answer button, a.open")
            rows[ids[0].text] = " | ".join(element.text for element in answers)
    return rows


def _a_link_page_offers_nothing_but_its_pause(driver: Any) -> None:
    """The page of a link leads nowhere else in the console (its token opens nothing else) and does not call
    itself read-only (it answers)."""
    assert [] == [link.get_attribute("href") for link in _css(driver, "header a[href]")]
    assert "read-only" not in _css(driver, "header")[0].text


def _refuse_a_text_too_long(driver: Any, console: Console) -> None:
    """Type eleven characters where at most ten fit (the browser's limit taken off, as an old form would)."""
    driver.get(_thread(console, "text"))
    editor = _css(driver, "textarea[name='text.0']")[0]
    driver.execute_script("arguments[0].removeAttribute('maxlength')", editor)
    editor.send_keys("eleven char")
    _css(driver, "form.answer-form button.send")[0].click()
    _wait_for(driver, lambda d: "does not fit" in d.page_source)


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [1440, 390])
def test_every_contract_page_fits_the_screen_and_is_axe_clean(
    driver: Any, console: Console, screenshots: pathlib.Path | None, width: int, scheme: str
) -> None:
    """Each shape's thread page, the inbox, the link page (valid, tampered, expired, used), an answered
    pause's page with its fork form, and a refused answer's page: the right controls, on screen, no
    sideways scroll, and nothing axe-core objects to."""
    if not AXE_SCRIPT.exists():
        unavailable("no axe-core: run scripts/test (npm ci in tests/axe)")
    show_as_screen(driver, width, scheme, height=844 if width < 600 else 900)
    problems: list[str] = []

    def look(name: str) -> None:
        found = misfits(driver)
        if found["sideways"]:
            problems.append(f"{name} :: scrolls sideways by {found['sideways']} px")
        problems.extend(f"{name} :: cut :: {html}" for html in found["cut"])
        problems.extend(
            f"{name} :: {v['id']} :: {node}" for v in axe_violations(driver) for node in v["nodes"]
        )
        if screenshots is not None:
            full_page_screenshot(driver, screenshots / f"{name}-{width}-{scheme}.png", width=width)

    try:
        for kind in SHAPES:
            driver.get(_thread(console, kind))
            _controls_of_each_shape(driver, kind)
            look(kind)
        driver.get(console.url)
        rows = _inbox_rows(driver)
        assert "ship | hold | cancel" == rows["choice"]
        assert "Yes | No" == rows["boolean"]
        for kind in ("review", "text", "number", "schema"):
            assert "Open to answer" == rows[kind], kind
        look("inbox")
        driver.get(f"{console.url}answer/{console.links.valid}")
        assert ["ship", "hold", "cancel"] == _texts(driver, "form.answer-link button[name='option.0']")
        _a_link_page_offers_nothing_but_its_pause(driver)
        look("link-valid")
        for name, title in (
            ("tampered", "This link is not valid"),
            ("expired", "This link has expired"),
            ("used", "Already answered"),
        ):
            driver.get(f"{console.url}answer/{getattr(console.links, name)}")
            assert [title] == _texts(driver, "h1")
            assert [] == _css(driver, "form")
            _a_link_page_offers_nothing_but_its_pause(driver)
            look(f"link-{name}")
        pause = next(checkpoint for checkpoint in console.store.list("forked") if checkpoint.pending)
        driver.get(f"{console.url}thread?{urllib.parse.urlencode({'id': 'forked', 'checkpoint': pause.id})}")
        assert ["ship", "hold", "cancel"] == _texts(driver, "div.fork form button[name='option.0']")
        assert '"ship"' in _css(driver, "table.pauses")[0].text  # the answer given, on screen
        look("fork")
        _refuse_a_text_too_long(driver, console)
        assert "eleven char" == _css(driver, "textarea[name='text.0']")[0].get_attribute("value")
        assert "more than the 10 allowed" in driver.find_element("css selector", ".note.error").text
        look("refused")
    finally:
        set_color_scheme(driver, "light")
    assert [] == problems


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("accept", ["accept", DRAFT, None]),
        ("edit", ["edit", "Dear Ada,\nsorry for the wait.", None]),
        ("reject", ["reject", None, "too curt"]),
    ],
)
def test_a_review_accepted_edited_or_rejected_in_the_browser_reaches_the_node_as_a_review(
    driver: Any, console: Console, action: str, expected: list[Any]
) -> None:
    """Accept sends the draft untouched, Edit the text in the editor (line breaks as LF), Reject its reason:
    the node's stored result is the Review's (action, value, reason)."""
    thread_id = REVIEWS[action]
    driver.get(_thread(console, thread_id))
    if action == "edit":
        editor = _css(driver, "textarea[name='text.0']")[0]
        editor.clear()
        editor.send_keys("Dear Ada,\nsorry for the wait.")
    elif action == "reject":
        _css(driver, "input[name='reason.0']")[0].send_keys("too curt")
    _css(driver, f"button[name='review.0'][value='{action}']")[0].click()
    _wait_for(driver, lambda d: "Answered" in d.page_source)
    assert [expected] == got(console.store, thread_id)


def test_a_choice_is_answered_from_its_inbox_row(driver: Any, console: Console) -> None:
    """The inbox row of a choice offers its options; pressing "cancel" there is what the node receives."""
    driver.get(console.url)
    row = next(r for r in _css(driver, "table.threads tbody tr") if "from-the-inbox" in r.text)
    row.find_element("xpath", ".//button[normalize-space()='cancel']").click()
    _wait_for(driver, lambda d: "Answered" in d.page_source)
    assert ["cancel"] == got(console.store, "from-the-inbox")


def test_an_answer_link_answers_its_pause_once_in_the_browser(driver: Any, console: Console) -> None:
    """The link's page answers with a button press (recorded by="token"); then the page again (the back
    button) and the same POST sent again both say it was answered already (a 410), and nothing more is
    recorded."""
    page = f"{console.url}answer/{console.links.to_answer}"
    driver.get(page)
    hold = _css(driver, "form.answer-link button[name='option.0'][value='1']")[0]
    sent = driver.execute_script(_FORM_BODY, hold)
    hold.click()
    _wait_for(driver, lambda d: "Thank you" in d.page_source)
    driver.back()
    _wait_for(driver, lambda d: "Already answered" in d.page_source)
    assert [] == _css(driver, "form")
    driver.set_script_timeout(30)
    assert 410 == driver.execute_async_script(_POST, page, sent)
    assert ["hold"] == got(console.store, "link-answer")
    answered = [
        c.metadata["answered_by"]
        for c in history(console.store, "link-answer")
        if "answered_by" in c.metadata
    ]
    assert [{PAUSE: "token"}] == answered


_FORM_BODY = "return new URLSearchParams(new FormData(arguments[0].form, arguments[0])).toString();"
"""The body the browser sends when the button given is pressed."""

_POST = """
const done = arguments[arguments.length - 1];
fetch(arguments[0], {method: 'POST', body: new URLSearchParams(arguments[1]), redirect: 'manual'})
  .then(r => done(r.status), error => done(String(error)));
"""
"""POST a form body from the page, as the browser would resend it; the status."""


_SEND_TWICE = """
const done = arguments[arguments.length - 1];
const button = arguments[0];
const body = new URLSearchParams(new FormData(button.form, button));
const post = () => fetch(button.form.action, {method: 'POST', body, redirect: 'manual'}).then(r => r.type);
Promise.all([post(), post()]).then(done, error => done(String(error)));
"""
"""Press the button given twice at once, as a double click on a slow connection sends its form."""


def test_a_fork_form_sent_twice_makes_one_branch_in_the_browser(driver: Any, console: Console) -> None:
    """The fork form of an answered pause, its POST sent twice at once and then its button pressed again
    (the back button's resubmit): one fork is made, the node ran once on it, and the page says the fork was
    made already."""
    store = console.store
    pause = next(checkpoint for checkpoint in store.list("forked") if checkpoint.pending)
    driver.get(f"{console.url}thread?{urllib.parse.urlencode({'id': 'forked', 'checkpoint': pause.id})}")
    hold = _css(driver, "div.fork form button[name='option.0'][value='1']")[0]
    driver.set_script_timeout(30)
    assert ["opaqueredirect", "opaqueredirect"] == driver.execute_async_script(_SEND_TWICE, hold)
    hold.click()  # the same form, a third time
    _wait_for(driver, lambda d: d.find_elements("css selector", ".note"))
    assert "this fork was made already" in _css(driver, ".note")[0].text
    sources = [checkpoint.metadata.get("source") for checkpoint in store.list("forked")]
    assert 1 == sources.count("fork")
    assert ["hold"] == got(store, "forked")
