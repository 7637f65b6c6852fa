"""The console's actions, POSTed as its forms post them: answer, fork, cancel, recover, delete.

Each test reads the page first and sends back what its form holds (the
action's URL and token), as a browser would; the refusals check that a
request without a valid token, from another site, by GET, or to a
read-only console writes nothing.
"""

from __future__ import annotations

import base64
import html
import pathlib
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

import ilmek
import ilmek.web
from ilmek import END, START, Checkpointer, SqliteCheckpointer, channel, graph, run
from ilmek.web.access import Login
from tests.support.helpers import Calls
from tests.support.web_support import THREADS, Client, graphs, loop_graph, looping, populate

pytestmark = pytest.mark.timeout(60)

PAUSE = "approve:interrupt#0"


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[Checkpointer]:
    """The sample threads in a SQLite file."""
    checkpointer = SqliteCheckpointer(tmp_path / "console.db", lease_seconds=2.0)
    populate(checkpointer)
    yield checkpointer
    checkpointer.close()


@pytest.fixture
def client(store: Checkpointer) -> Client:
    """The console with every sample graph and actions on."""
    return Client(ilmek.web.app(store, graphs(), allow_actions=True))


def thread_url(thread_id: str, checkpoint_id: str | None = None) -> str:
    """A thread page's path and query."""
    params = {"id": thread_id} | ({"checkpoint": checkpoint_id} if checkpoint_id else {})
    return "/thread?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote)


def form(client: Client, page_url: str, action: str) -> tuple[str, dict[str, str]]:
    """The URL a page's form for ``action`` posts to, and its hidden fields."""
    page = client.get(page_url).text
    found = re.search(
        rf'<form method="post" action="([^"]*/action/{action}\?[^"]*)"[^>]*>(.*?)</form>', page, re.S
    )
    assert found is not None, f"no {action} form on {page_url}"
    hidden = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', found.group(2)))
    return html.unescape(found.group(1)), {k: html.unescape(v) for k, v in hidden.items()}


def follow(client: Client, reply: Any) -> str:
    """The page a 303 sends the browser to."""
    assert 303 == reply.status
    return client.get(reply.location).text


def submit(client: Client, page_url: str, action: str, values: Mapping[str, str] | None = None) -> str:
    """Post the page's form for ``action``, ``values`` over its hidden fields; the page it leads to."""
    url, fields = form(client, page_url, action)
    return follow(client, client.post(url, {**fields, **(values or {})}))


def latest_id(store: Checkpointer, thread_id: str) -> str | None:
    """The thread's latest checkpoint id (``None`` once it is deleted)."""
    latest = store.get(thread_id)
    return latest.id if latest is not None else None


# --- answer -----------------------------------------------------------------------------------


def test_an_option_button_answers_the_pause_and_the_run_finishes(client: Client, store: Checkpointer) -> None:
    """choice.0="yes": resume_keyed runs on to the end; the page says so and the state has the receipt."""
    url, fields = form(client, thread_url(THREADS["waiting"]), "answer")
    reply = client.post(url, {**fields, "answer.0": "null", "choice.0": '"yes"'})
    assert reply.location.startswith("/thread?id=order-1042&tone=ok&note=")
    page = follow(client, reply)
    assert "Answered. The run finished." in page
    assert "done" == store.get_thread(THREADS["waiting"]).status  # type: ignore[union-attr]
    state = ilmek.thread_state(graphs()["checkout"], store, THREADS["waiting"])
    assert {"receipt": "rcpt-ord-order-1042"} == state["receipt"]


def test_the_json_answer_is_used_when_no_button_was_pressed(client: Client, store: Checkpointer) -> None:
    """answer.0 = "no" (as JSON text): the order is cancelled."""
    submit(client, thread_url(THREADS["waiting"]), "answer", {"answer.0": ' "no" '})
    state = ilmek.thread_state(graphs()["checkout"], store, THREADS["waiting"])
    assert ["order for 3 items", "answered 'no'", "cancelled"] == state["log"]


def test_an_answer_that_is_not_json_answers_nothing(client: Client, store: Checkpointer) -> None:
    """answer.0 = yes (no quotes): an error note, the thread still waits on the same checkpoint."""
    before = latest_id(store, THREADS["waiting"])
    page = submit(client, thread_url(THREADS["waiting"]), "answer", {"answer.0": "yes"})
    assert "is not JSON" in page
    assert 'class="note error"' in page
    assert before == latest_id(store, THREADS["waiting"])


def test_a_second_post_of_the_same_form_answers_nothing_more(store: Checkpointer) -> None:
    """A double-clicked answer: the second finds the thread moved on; the charge step ran once."""
    calls = Calls()

    def approve(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        if ctx.interrupt({"question": "Charge?", "options": ["yes", "no"]}) == "yes":
            ctx.step("charge", lambda: calls.hit("charge"))
        return {"done": True}

    charging = (
        graph("charging", {"done": channel.last_write(False)})
        .node("approve", approve)
        .edge(START, "approve")
        .edge("approve", END)
        .compile()
    )
    run(charging, {}, thread_id="double", checkpointer=store)
    client = Client(ilmek.web.app(store, charging, allow_actions=True))
    url, fields = form(client, thread_url("double"), "answer")
    first = follow(client, client.post(url, {**fields, "choice.0": '"yes"'}))
    second = follow(client, client.post(url, {**fields, "choice.0": '"yes"'}))
    assert "Answered. The run finished." in first
    assert "The thread moved on since the page was drawn" in second
    assert 1 == calls["charge"]


def test_an_answer_never_goes_to_a_later_pause_that_opened_while_it_was_posted(
    store: Checkpointer, tmp_path: pathlib.Path
) -> None:
    """Two operators answer the same approval. The other's answer lands between this action's
    look at the thread and its run, and the graph asks the next approval under the same pause id:
    this answer, meant for the first question, must answer nothing, not the second question."""
    answers: list[Any] = []

    def approve(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        answers.append(ctx.interrupt({"question": f"Approve item {state['item']}?"}))
        return {"item": state["item"] + 1}

    approvals = (
        graph("approvals", {"item": channel.last_write(1)})
        .node("approve", approve)
        .edge(START, "approve")
        .router(
            "approve", lambda state: "approve" if state["item"] <= 2 else END, destinations=["approve", END]
        )
        .compile()
    )
    first = run(approvals, {}, thread_id="two", checkpointer=store)
    assert "interrupted" == first.status
    other_operator = SqliteCheckpointer(tmp_path / "console.db", lease_seconds=2.0)
    plain_load = store.load
    runs_reads = 0

    def load_after_the_other_answer_landed(*args: Any, **kwargs: Any) -> Any:
        nonlocal runs_reads
        if kwargs.get("hold") is not None:  # the run's own read, after the action looked
            runs_reads += 1
            if runs_reads == 1:
                assert (
                    "interrupted"
                    == ilmek.resume(
                        approvals, "no to item 1", thread_id="two", checkpointer=other_operator
                    ).status
                )
        return plain_load(*args, **kwargs)

    store.load = load_after_the_other_answer_landed  # type: ignore[method-assign]
    try:
        outcome = ilmek.web.actions.answer(
            store, {"approvals": approvals}, "two", first.checkpoint_id, {"choice.0": '"yes to item 1"'}
        )
    finally:
        del store.load
        other_operator.close()

    assert "error" == outcome.tone
    assert "moved on" in outcome.text
    assert ["no to item 1"] == answers
    latest = store.get("two")
    assert latest is not None
    assert [PAUSE] == [pause.id for pause in latest.pending]
    assert {"item": 2} == dict(latest.channels)


def test_several_pauses_are_answered_together(store: Checkpointer) -> None:
    """Two nodes pause in one superstep: one form, one answer each, one resume_keyed."""

    def asker(name: str) -> Any:
        def node(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
            return {"answers": [f"{name}={ctx.interrupt({'question': f'{name}?'})}"]}

        return node

    both = (
        graph("both", {"answers": channel.append()})
        .node("left", asker("left"))
        .node("right", asker("right"))
        .edge(START, "left")
        .edge(START, "right")
        .edge("left", END)
        .edge("right", END)
        .compile()
    )
    run(both, {}, thread_id="two", checkpointer=store)
    client = Client(ilmek.web.app(store, both, allow_actions=True))
    assert "Waiting for 2 answers" in client.get(thread_url("two")).text
    page = submit(client, thread_url("two"), "answer", {"answer.0": "1", "answer.1": '{"ok": true}'})
    assert "Answered. The run finished." in page
    assert ["left=1", "right={'ok': True}"] == ilmek.thread_state(both, store, "two")["answers"]


def test_an_answer_that_makes_the_run_fail_says_how(store: Checkpointer) -> None:
    """The resumed node raises: the note names the node and the error; the thread reads error."""

    def picky(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        if ctx.interrupt({"question": "Number?"}) != 42:
            raise ValueError("only 42 will do")
        return {}

    failing = graph("picky", {"x": channel.last_write(0)}).node("pick", picky).edge(START, "pick").compile()
    run(failing, {}, thread_id="picky", checkpointer=store)
    client = Client(ilmek.web.app(store, failing, allow_actions=True))
    page = submit(client, thread_url("picky"), "answer", {"answer.0": "7"})
    assert "The run failed, node &#x27;pick&#x27;: ValueError: only 42 will do." in page
    assert "The last run failed" in page


def test_after_a_failed_answer_the_same_answer_is_offered_again(store: Checkpointer) -> None:
    """The run an answer started failed: the form holds that answer; once fixed, sending it finishes."""
    fixed = threading.Event()

    def flaky(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        answer = ctx.interrupt({"question": "Number?"})
        if not fixed.is_set():
            raise ConnectionError("the ledger is down")
        return {"x": answer}

    ledger = graph("ledger", {"x": channel.last_write(0)}).node("book", flaky).edge(START, "book").compile()
    run(ledger, {}, thread_id="ledger", checkpointer=store)
    client = Client(ilmek.web.app(store, ledger, allow_actions=True))
    failed = submit(client, thread_url("ledger"), "answer", {"answer.0": "7"})
    assert "Waiting for an answer: the last answer&#x27;s run failed" in failed
    assert "An answer was recorded, but the run that gave it failed" in failed
    assert re.search(r'<textarea name="answer\.0"[^>]*>7</textarea>', failed)
    fixed.set()
    assert "Answered. The run finished." in submit(client, thread_url("ledger"), "answer", {"answer.0": "7"})
    assert {"x": 7} == ilmek.thread_state(ledger, store, "ledger")


# --- fork ----------------------------------------------------------------------------------------


def test_answering_an_old_pause_differently_forks_a_branch(client: Client, store: Checkpointer) -> None:
    """The answered pause of a finished thread, answered "no": a fork, both branches in the tree."""
    thread_id = THREADS["answered"]
    pause = next(c for c in store.list(thread_id) if c.pending)
    page = submit(client, thread_url(thread_id, pause.id), "fork", {"choice.0": '"no"'})
    assert "Forked with a new answer. The run finished." in page
    assert 'class="edge fork"' in page
    sources = [c.metadata.get("source") for c in store.list(thread_id)]
    assert 1 == sources.count("fork")
    state = ilmek.thread_state(graphs()["checkout"], store, thread_id)
    assert ["order for 1 items", "answered 'no'", "cancelled"] == state["log"]
    assert 2 == page.count('t-answered">answered: approve:interrupt#0')  # a row each (and its title)


# --- cancel ---------------------------------------------------------------------------------------


def test_cancel_stops_a_running_thread_at_its_next_superstep(store: Checkpointer) -> None:
    """A looping run in a background thread: the page shows it running; Cancel ends it aborted."""
    ticker = loop_graph(delay=0.02)
    results: list[ilmek.Result] = []
    runner = threading.Thread(
        target=lambda: results.append(
            run(ticker, {}, thread_id="ticking", checkpointer=store, recursion_limit=100_000)
        ),
        daemon=True,
    )
    runner.start()
    client = Client(ilmek.web.app(store, ticker, allow_actions=True))
    deadline = time.monotonic() + 10
    while not (info := store.get_thread("ticking")) or not info.running:
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.02)
    assert "ticking" in client.get("/?status=running").text
    page = submit(client, thread_url("ticking"), "cancel", {"reason": "enough ticks"})
    assert "Asked the run to stop" in page
    runner.join(10)
    assert ["aborted"] == [result.status for result in results]
    assert "cancelled in the web console: enough ticks" == results[0].abort_reason


@pytest.mark.parametrize("who", ["remote-user", "login"])
def test_a_cancel_records_who_asked_from_the_host_app_or_the_login(store: Checkpointer, who: str) -> None:
    """REMOTE_USER (a host app's login) or the console login's user name goes into the recorded reason."""
    ticker = loop_graph(delay=0.02)
    if who == "remote-user":
        console = ilmek.web.app(store, ticker, allow_actions=True)
        # What a host application's authentication middleware sets.
        added = {"REMOTE_USER": "alice"}
    else:
        console = ilmek.web.Console(store, ticker, allow_actions=True, login=Login("the-token"))
        added = {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(b"alice:the-token").decode("ascii")}

    def signed_in(environ: dict[str, Any], start_response: Any) -> Any:
        return console({**environ, **added}, start_response)

    with looping(store, "ticking", 0.02, stop=False) as results:
        page = submit(Client(signed_in), thread_url("ticking"), "cancel", {"reason": "wrong customer"})
    assert "Asked the run to stop (cancelled in the web console by alice: wrong customer)" in page
    assert "cancelled in the web console by alice: wrong customer" == results[0].abort_reason
    info = store.get_thread("ticking")
    assert info is not None
    assert info.cancelled is not None
    assert "cancelled in the web console by alice: wrong customer" == info.cancelled.reason


def test_a_form_without_any_answer_answers_nothing(client: Client, store: Checkpointer) -> None:
    """A POST with the token but no answer field (no button, an empty editor) is refused, not null."""
    for values in ({}, {"answer.0": ""}, {"answer.0": "   "}):
        url, fields = form(client, thread_url(THREADS["waiting"]), "answer")
        page = follow(client, client.post(url, {**fields, **values}))
        assert "No answer was given to approve:interrupt#0; nothing was answered." in page
    assert "interrupted" == store.get_thread(THREADS["waiting"]).status  # type: ignore[union-attr]


def test_a_cancel_form_drawn_for_one_run_never_cancels_the_next(store: Checkpointer) -> None:
    """The page showed run A; A ended and run B took the thread before the operator clicked
    Cancel: B must run on, and the note must say the run the page showed has ended."""
    ticker = loop_graph(delay=0.02)
    client = Client(ilmek.web.app(store, ticker, allow_actions=True))

    def start_run(cancel: threading.Event, results: list[ilmek.Result]) -> threading.Thread:
        runner = threading.Thread(
            target=lambda: results.append(
                run(
                    ticker,
                    {},
                    thread_id="ticking",
                    checkpointer=store,
                    recursion_limit=100_000,
                    cancel=cancel,
                )
            ),
            daemon=True,
        )
        runner.start()
        deadline = time.monotonic() + 10
        while not (info := store.get_thread("ticking")) or not info.running:
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.02)
        return runner

    first_stop, first_results = threading.Event(), []
    first = start_run(first_stop, first_results)
    url, fields = form(client, thread_url("ticking"), "cancel")
    first_stop.set()
    first.join(10)
    assert ["aborted"] == [result.status for result in first_results]
    second_stop, second_results = threading.Event(), []
    second = start_run(second_stop, second_results)
    try:
        page = follow(client, client.post(url, {**fields, "reason": "meant for the first run"}))
        assert "has ended" in page
        time.sleep(0.2)  # several supersteps: a cancel request would have been seen by now
        assert second.is_alive()
        info = store.get_thread("ticking")
        assert info is not None
        assert info.running
    finally:
        second_stop.set()
        second.join(10)
    # Stopped by its own event, as the first run was, not by the stale request.
    assert [first_results[0].abort_reason] == [result.abort_reason for result in second_results]
    assert "meant for the first run" != first_results[0].abort_reason


def test_cancel_with_no_run_says_there_is_nothing_to_cancel(client: Client, store: Checkpointer) -> None:
    """A token for cancel on an idle thread: an error note, nothing else."""
    app = client.app
    token = app.guard.token("cancel", THREADS["stalled"])
    reply = client.post(f"/action/cancel?id={THREADS['stalled']}", {"token": token})
    assert "No run was holding the thread" in follow(client, reply)


# --- recover ---------------------------------------------------------------------------------------


def test_recover_continues_a_stalled_thread_to_its_end(client: Client, store: Checkpointer) -> None:
    """The batch stopped after one superstep: Recover runs transform and load."""
    page = submit(client, thread_url(THREADS["stalled"]), "recover")
    assert "Recovered. The run finished." in page
    assert {"rows": [{"sku": "A-1", "qty": 6}, {"sku": "B-7", "qty": 2}], "loaded": 2} == ilmek.thread_state(
        graphs()["nightly-batch"], store, THREADS["stalled"]
    )


def test_recover_of_a_thread_that_fails_again_shows_the_failure(client: Client) -> None:
    """The CRM is still down: the note says the run failed, and why."""
    page = submit(client, thread_url(THREADS["failed"]), "recover")
    assert (
        "Recovery did not succeed. The run failed again, node &#x27;fetch&#x27;: RuntimeError: "
        "upstream CRM answered 502" in page
    )


def test_recover_without_the_graph_says_so(store: Checkpointer) -> None:
    """A console without the batch graph refuses to recover it, naming the graph."""
    client = Client(ilmek.web.app(store, allow_actions=True))
    token = client.app.guard.token("recover", THREADS["stalled"])
    page = follow(client, client.post(f"/action/recover?id={THREADS['stalled']}", {"token": token}))
    assert "The console was not given graph &#x27;nightly-batch&#x27;" in page


# --- delete --------------------------------------------------------------------------------------


def test_delete_needs_the_box_ticked_then_deletes_and_goes_to_the_threads(
    client: Client, store: Checkpointer
) -> None:
    """Without confirm nothing goes; with it the thread and its checkpoints are gone."""
    thread_id = THREADS["answered"]
    url, fields = form(client, thread_url(thread_id), "delete")
    kept = follow(client, client.post(url, fields))
    assert "Tick the box to confirm; nothing was deleted." in kept
    assert store.get(thread_id) is not None
    reply = client.post(url, {**fields, "confirm": "yes"})
    assert reply.location.startswith("/?tone=ok&note=")
    assert "Deleted thread &#x27;order-1041&#x27;." in follow(client, reply)
    assert store.get(thread_id) is None
    assert [] == store.list(thread_id)


def test_a_running_thread_is_not_deleted(store: Checkpointer) -> None:
    """While a run holds the thread, delete is refused and the run goes on."""
    client = Client(ilmek.web.app(store, allow_actions=True))
    thread_id = THREADS["answered"]
    with store.hold(thread_id):
        page = submit(client, thread_url(thread_id), "delete", {"confirm": "yes"})
    assert "A run holds the thread: cancel it first" in page
    assert store.get(thread_id) is not None


# --- refusals: nothing is written ---------------------------------------------------------------


def test_a_get_to_an_action_is_405_and_writes_nothing(client: Client, store: Checkpointer) -> None:
    """GET /action/delete with a valid token: 405, the thread is still there."""
    url, fields = form(client, thread_url(THREADS["answered"]), "delete")
    query = urllib.parse.urlencode({**fields, "confirm": "yes"})
    reply = client.get(f"{url}&{query}")
    assert 405 == reply.status
    assert "POST" == reply.headers["Allow"]
    assert store.get(THREADS["answered"]) is not None


@pytest.mark.parametrize(
    "token",
    [None, "", "0" * 64, "not-hex-é"],
    ids=["missing", "empty", "wrong", "non-ascii"],
)
def test_a_missing_or_wrong_token_is_403_and_writes_nothing(
    client: Client, store: Checkpointer, token: str | None
) -> None:
    """No valid token: 403 for answer and delete; the pause still waits, the thread still exists."""
    before = latest_id(store, THREADS["waiting"])
    url, _ = form(client, thread_url(THREADS["waiting"]), "answer")
    fields = {"choice.0": '"yes"', "confirm": "yes"} | ({"token": token} if token is not None else {})
    assert 403 == client.post(url, fields).status
    assert 403 == client.post(f"/action/delete?id={THREADS['waiting']}", fields).status
    assert before == latest_id(store, THREADS["waiting"])


def test_a_token_for_another_thread_or_action_is_refused(client: Client, store: Checkpointer) -> None:
    """The answer token of one thread cannot delete it, nor answer another thread."""
    url, fields = form(client, thread_url(THREADS["waiting"]), "answer")
    other = url.replace(THREADS["waiting"], THREADS["second_waiting"])
    assert 403 == client.post(other, {**fields, "choice.0": '"yes"'}).status
    assert 403 == client.post(f"/action/delete?id={THREADS['waiting']}", {**fields, "confirm": "yes"}).status
    assert "interrupted" == store.get_thread(THREADS["second_waiting"]).status  # type: ignore[union-attr]
    assert store.get(THREADS["waiting"]) is not None


def test_a_form_posted_from_another_site_is_refused(client: Client, store: Checkpointer) -> None:
    """A valid token but Origin (or Referer) of another site: 403, nothing answered."""
    before = latest_id(store, THREADS["waiting"])
    url, fields = form(client, thread_url(THREADS["waiting"]), "answer")
    body = {**fields, "choice.0": '"yes"'}
    assert 403 == client.post(url, body, headers={"Origin": "http://evil.example"}).status
    assert 403 == client.post(url, body, headers={"Referer": "http://evil.example/page"}).status
    assert before == latest_id(store, THREADS["waiting"])
    assert 303 == client.post(url, body, headers={"Origin": "http://127.0.0.1:8765"}).status


def test_a_read_only_console_refuses_every_action(store: Checkpointer) -> None:
    """allow_actions=False: a POST with a token its own guard made is still 403."""
    app = ilmek.web.app(store, graphs())
    client = Client(app)
    for action in ("answer", "fork", "cancel", "recover", "delete"):
        token = app.guard.token(action, THREADS["waiting"])
        reply = client.post(f"/action/{action}?id={THREADS['waiting']}", {"token": token, "confirm": "yes"})
        assert 403 == reply.status
        assert "read-only" in reply.text
    assert store.get(THREADS["waiting"]) is not None
    assert "interrupted" == store.get_thread(THREADS["waiting"]).status  # type: ignore[union-attr]


def test_unknown_actions_and_malformed_posts_are_refused(client: Client) -> None:
    """An unknown action is 404; a POST without a thread is 400; an oversized body is 413."""
    assert 404 == client.post("/action/explode?id=x", {}).status
    assert 400 == client.post("/action/delete", {}).status
    big = client.request(
        "POST",
        f"/action/delete?id={THREADS['waiting']}",
        form={"token": "x" * (300 * 1024)},
    )
    assert 413 == big.status


def test_notes_are_shown_only_when_the_console_signed_them(client: Client) -> None:
    """A link carrying a note without a valid signature shows no note."""
    crafted = thread_url(THREADS["waiting"]) + "&tone=error&note=Log%20in%20at%20evil.example&sig=00"
    assert "evil.example" not in client.get(crafted).text
    assert "evil.example" not in client.get("/?tone=ok&note=evil.example").text


def test_a_fork_form_sent_twice_makes_one_branch(client: Client, store: Checkpointer) -> None:
    """The same "answer differently" form POSTed twice (the back button): one fork, one run after it; the
    second is refused, saying the fork was made already and naming where its branch ends."""
    thread_id = THREADS["answered"]
    pause = next(c for c in store.list(thread_id) if c.pending)
    url, fields = form(client, thread_url(thread_id, pause.id), "fork")
    assert fields["expect"] == latest_id(store, thread_id)
    first = follow(client, client.post(url, {**fields, "choice.0": '"no"'}))
    assert "Forked with a new answer. The run finished." in first
    branch_end = latest_id(store, thread_id)
    again = follow(client, client.post(url, {**fields, "choice.0": '"no"'}))
    assert "this fork was made already" in html.unescape(again)
    assert str(branch_end) in again
    assert branch_end == latest_id(store, thread_id)
    assert 1 == [c.metadata.get("source") for c in store.list(thread_id)].count("fork")
    state = ilmek.thread_state(graphs()["checkout"], store, thread_id)
    assert ["order for 1 items", "answered 'no'", "cancelled"] == state["log"]
