"""The console draws a pause from its contract (ilmek.answers), over a real socket: a choice is a button per
option, a review shows the whole draft with Accept / Edit / Reject, text, number, boolean and schema get their
own form fields; a payload's options and draft are data then, not buttons. An answer outside the contract is
refused before anything is written (a 422 page keeping what was typed), and the inbox never answers a review
in one click."""

from __future__ import annotations

import html
import pathlib
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from ilmek import START, channel, graph, run, thread_state
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from tests.support.contract_graphs import ASKING, DRAFT, SHAPES, ask, got
from tests.support.web_support import ConsoleServer, serving

pytestmark = pytest.mark.timeout(120)


def _asker(kind: str) -> Any:
    def node(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return ask({"kind": kind}, ctx)

    return node


BOTH = (
    graph("both", {"got": channel.append()})
    .node("reviewing", _asker("review"))
    .node("counting", _asker("number"))
    .edge(START, "reviewing")
    .edge(START, "counting")
    .compile()
)


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[SqliteCheckpointer]:
    """A real SQLite file with one paused thread per shape (thread id = the shape's kind)."""
    checkpointer = SqliteCheckpointer(tmp_path / "contracts.db")
    for kind in SHAPES:
        assert "interrupted" == run(ASKING, {"kind": kind}, thread_id=kind, checkpointer=checkpointer).status
    for extra in ("review-edit", "review-reject"):
        run(ASKING, {"kind": "review"}, thread_id=extra, checkpointer=checkpointer)
    run(BOTH, {}, thread_id="both", checkpointer=checkpointer)
    yield checkpointer
    checkpointer.close()


@pytest.fixture
def console(store: SqliteCheckpointer) -> Iterator[ConsoleServer]:
    """The console, actions on, served on a real socket."""
    with serving(store, {"asking": ASKING, "both": BOTH}, allow_actions=True) as server:
        yield server


def _request(url: str, fields: dict[str, str] | None = None) -> tuple[int, str]:
    data = urllib.parse.urlencode(fields).encode() if fields is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as response:
            return response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8")


def _page(console: ConsoleServer, thread_id: str) -> str:
    status, page = _request(f"{console.url}thread?id={urllib.parse.quote(thread_id)}")
    assert 200 == status
    return page


def _answer(console: ConsoleServer, thread_id: str, fields: dict[str, str]) -> tuple[int, str]:
    """Post the thread page's answer form with ``fields`` over its hidden ones (redirects followed)."""
    return _post_answer_form(console, _page(console, thread_id), fields)


def _post_answer_form(console: ConsoleServer, page: str, fields: dict[str, str]) -> tuple[int, str]:
    """Post the first answer form in ``page`` with ``fields`` over its hidden ones (redirects followed)."""
    found = re.search(
        r'<form method="post" action="([^"]*/action/answer\?[^"]*)"[^>]*>(.*?)</form>', page, re.S
    )
    assert found is not None, page
    hidden = {
        k: html.unescape(v)
        for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', found.group(2))
    }
    action = urllib.parse.urljoin(console.url, html.unescape(found.group(1)))
    return _request(action, {**hidden, **fields})


def test_each_contract_draws_its_own_controls(console: ConsoleServer) -> None:
    """Each shape's controls render from the contract, and the payload's options/draft give no buttons."""
    pages = {kind: _page(console, kind) for kind in SHAPES}
    assert all(f'name="option.0" value="{i}"' in pages["choice"] for i in range(3))
    assert ">ship</button>" in pages["choice"]
    review = pages["review"]
    assert "Dear Ada,<br>your refund" in review or "Dear Ada,\nyour refund" in review
    assert "&lt;b&gt;Thanks&lt;/b&gt;" in review
    assert "<b>Thanks" not in review
    for action in ("accept", "edit", "reject"):
        assert f'name="review.0" value="{action}"' in review
    assert 'name="reason.0"' in review
    assert '<textarea name="text.0"' in review
    assert 'maxlength="10"' in pages["text"]
    number = pages["number"]
    assert all(f in number for f in ('type="number"', 'min="1"', 'max="5"', 'step="1"'))
    assert 'name="boolean.0" value="true"' in pages["boolean"]
    assert ">Yes</button>" in pages["boolean"]
    assert 'name="answer.0"' in pages["schema"]
    assert "&quot;required&quot;" in pages["schema"]
    for kind, page in pages.items():
        assert "Accept the draft" not in page, kind  # the payload's draft is not a control
        assert ">Approve</button>" not in page, kind  # nor its options


def test_a_choice_button_answers_with_its_option(console: ConsoleServer, store: SqliteCheckpointer) -> None:
    """Pressing the second option's button sends that stored option; the node receives "hold"."""
    status, page = _answer(console, "choice", {"option.0": "1"})
    assert 200 == status
    assert "Answered" in page
    assert ["hold"] == got(store, "choice")


def test_review_accept_edit_and_reject_reach_the_node_as_a_review(
    console: ConsoleServer, store: SqliteCheckpointer
) -> None:
    """Accept gives Review("accept", draft) (refused if the draft was edited first), Edit the edited text
    (CRLF as LF), Reject its reason."""
    edited_then_accepted = _answer(console, "review", {"review.0": "accept", "text.0": "edited, then Accept"})
    assert 422 == edited_then_accepted[0]  # the edit would be lost without a word: nothing is sent
    assert "edited, then Accept</textarea>" in edited_then_accepted[1]
    assert 200 == _answer(console, "review", {"review.0": "accept", "text.0": DRAFT.replace("\n", "\r\n")})[0]
    assert [["accept", DRAFT, None]] == got(store, "review")
    assert 200 == _answer(console, "review-edit", {"review.0": "edit", "text.0": "Dear Ada,\r\nsorry."})[0]
    assert [["edit", "Dear Ada,\nsorry.", None]] == got(store, "review-edit")
    assert 200 == _answer(console, "review-reject", {"review.0": "reject", "reason.0": " too curt "})[0]
    assert [["reject", None, "too curt"]] == got(store, "review-reject")


def test_two_contracts_are_answered_with_one_form_or_not_at_all(
    console: ConsoleServer, store: SqliteCheckpointer
) -> None:
    """A review and a number paused together: radio buttons and one submit; a number out of range refuses
    both (422, the chosen action kept, nothing written); in range, both reach their nodes in one resume."""
    page = _page(console, "both")
    assert '<input type="radio" name="review.0" value="reject">' in page
    before = store.get("both")
    assert before is not None
    status, refused = _answer(console, "both", {"review.0": "edit", "text.0": "Hi", "number.1": "0"})
    assert 422 == status
    assert '<input type="radio" name="review.0" value="edit" checked>' in refused
    assert before.id == store.get("both").id  # type: ignore[union-attr]
    status, done = _answer(console, "both", {"review.0": "edit", "text.0": "Hi", "number.1": "4"})
    assert 200 == status
    assert "Answered" in done
    assert sorted([["edit", "Hi", None], 4], key=str) == sorted(
        thread_state(BOTH, store, "both")["got"], key=str
    )


@pytest.mark.parametrize(
    ("thread_id", "fields", "kept"),
    [
        ("text", {"text.0": "far more than ten"}, ">far more than ten</textarea>"),
        ("number", {"number.0": "9"}, 'value="9"'),
        ("review", {"review.0": "reject", "reason.0": "   "}, '<textarea name="text.0"'),
    ],
)
def test_a_refused_answer_keeps_its_input_and_writes_nothing(
    console: ConsoleServer, store: SqliteCheckpointer, thread_id: str, fields: dict[str, str], kept: str
) -> None:
    """Text over max_length, a number out of range, a reject without reason: a 422 page with the reason and
    what was typed, and the thread's latest checkpoint and open pause unchanged."""
    before = store.get(thread_id)
    assert before is not None
    status, page = _answer(console, thread_id, fields)
    assert 422 == status
    assert "does not fit" in page
    assert "Nothing was answered" in page
    assert kept in page
    after = store.get(thread_id)
    assert after is not None
    assert before.id == after.id
    assert after.pending
    journal = store.load_journals(after, [t.task_key for t in after.next]).get("ask", ())
    assert [False] == [entry.answered for entry in journal]


def test_the_inbox_never_answers_a_review_in_one_click(console: ConsoleServer) -> None:
    """The review's row links to its thread page; the choice's row has its one-click buttons."""
    status, inbox = _request(console.url)
    assert 200 == status
    rows = {
        m.group(1): m.group(0) for m in re.finditer(r"<tr[^>]*>.*?thread\?id=([\w-]+).*?</tr>", inbox, re.S)
    }
    assert "Open to answer" in rows["review"]
    assert 'name="option.0"' not in rows["review"]
    assert 'name="option.0"' in rows["choice"]


def test_the_inbox_answers_a_yes_no_contract_with_its_own_buttons(
    console: ConsoleServer, store: SqliteCheckpointer
) -> None:
    """A boolean contract's row has Yes and No buttons (not a link), sending what its thread page's form
    sends; pressing No records False for the node."""
    inbox = _request(console.url)[1]
    row = inbox[inbox.index('thread?id=boolean"') :].split("</tr>")[0]
    assert "Open to answer" not in row
    assert 'name="boolean.0" value="true"' in row
    assert 'name="boolean.0" value="false"' in row
    assert ">Yes</button>" in row
    assert ">No</button>" in row
    status, _ = _post_answer_form(console, row, {"boolean.0": "false"})
    assert 200 == status
    assert [False] == got(store, "boolean")


@pytest.mark.postgres
def test_on_postgres_the_inbox_reads_the_contract_and_a_refusal_writes_nothing(postgres_dsn: str) -> None:
    """On a real Postgres store the inbox's bounded preview keeps the contract (a review row links to its
    page, a choice row keeps its buttons), and a number out of range is a 422 that records nothing."""
    import psycopg2

    from ilmek.checkpoint.postgres import PostgresCheckpointer

    store = PostgresCheckpointer(psycopg2.connect(postgres_dsn))
    for kind in ("review", "choice", "number"):
        run(ASKING, {"kind": kind}, thread_id=kind, checkpointer=store)
    before = store.get("number")
    with serving(store, {"asking": ASKING}, allow_actions=True) as server:
        inbox = _request(server.url)[1]
        review_row = inbox[inbox.index('thread?id=review"') :].split("</tr>")[0]
        choice_row = inbox[inbox.index('thread?id=choice"') :].split("</tr>")[0]
        assert "Open to answer" in review_row
        assert 'name="option.0"' in choice_row
        assert 422 == _answer(server, "number", {"number.0": "6"})[0]
    after = store.get("number")
    store.close()
    assert before is not None
    assert after is not None
    assert before.id == after.id
