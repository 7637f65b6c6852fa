"""The port suite, how a thread's last run ended: its failure (with a traceback, whatever its text), its
cancel (who asked, why, where), and the process holding a running thread, on every backend.

A failure record goes through the serializer like every other stored string, so a message holding a lone
surrogate or (on Postgres) a NUL is stored, and the thread reads ``error`` and lists under that status.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ilmek import (
    START,
    Checkpointer,
    ThreadCancel,
    ThreadError,
    channel,
    graph,
    request_cancel,
    run,
    send,
    stream,
)

pytestmark = pytest.mark.timeout(60)


def failing(message: str) -> Any:
    def explode(state: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError(message)

    return (
        graph("fails", {"n": channel.last_write(0)}).node("explode", explode).edge(START, "explode").compile()
    )


@pytest.mark.parametrize(
    "message",
    ["plain", "a lone surrogate \ud800 here", "a NUL \x00 here", "both \udfff and \x00", "é ☃ 🙂 \u202e"],
    ids=["plain", "surrogate", "nul", "both", "unicode"],
)
def test_a_failure_with_any_message_is_recorded_and_listed(checkpointer: Checkpointer, message: str) -> None:
    """Whatever the node's error message holds, the failure is recorded: the thread reads ``error``, lists
    under ``status="error"``, and its record gives the message back exactly."""
    result = run(failing(message), {}, thread_id="failed", checkpointer=checkpointer)
    assert "error" == result.status
    info = checkpointer.get_thread("failed")
    assert info is not None
    assert "error" == info.status
    assert isinstance(info.error, ThreadError)
    assert (message, "explode", "RuntimeError") == (info.error.message, info.error.node, info.error.type)
    assert ["failed"] == [t.id for t in checkpointer.list_threads(status="error")]


def test_a_failure_keeps_where_it_was_raised(checkpointer: Checkpointer) -> None:
    """The stored failure carries the traceback: the node's own function and line are in it."""
    run(failing("deep down"), {}, thread_id="traced", checkpointer=checkpointer)
    info = checkpointer.get_thread("traced")
    assert info is not None
    assert info.error is not None
    assert info.error.traceback is not None
    assert "in explode" in info.error.traceback
    assert "raise RuntimeError(message)" in info.error.traceback
    assert info.error.traceback.rstrip().endswith("RuntimeError: deep down")


def test_a_run_cancelled_by_request_says_why_and_where_until_the_thread_moves_on(
    checkpointer: Checkpointer,
) -> None:
    """request_cancel() while a run is inside its node: the run ends aborted, and the thread says it was
    cancelled, with the reason given, the checkpoint it stopped at and when; its status stays
    ``unfinished`` (its plan stands). The next run of the thread clears the record."""
    inside, release = threading.Event(), threading.Event()

    def wait(state: dict[str, Any]) -> dict[str, Any]:
        inside.set()
        assert release.wait(30)
        return {"n": state["n"] + 1}

    g = (
        graph("cancelled", {"n": channel.last_write(0)})
        .node("wait", wait)
        .node("after", lambda state: {"n": state["n"] + 10})
        .edge(START, "wait")
        .edge("wait", "after")
        .compile()
    )
    outcome: list[Any] = []
    runner = threading.Thread(
        target=lambda: outcome.append(run(g, {}, thread_id="c", checkpointer=checkpointer))
    )
    runner.start()
    assert inside.wait(30)
    assert request_cancel(checkpointer, "c", reason="stopped from the console by ada")
    release.set()
    runner.join(30)
    [result] = outcome
    assert ("aborted", "stopped from the console by ada") == (result.status, result.abort_reason)
    info = checkpointer.get_thread("c")
    assert info is not None
    assert ("unfinished", None) == (info.status, info.error)
    assert isinstance(info.cancelled, ThreadCancel)
    assert "stopped from the console by ada" == info.cancelled.reason
    assert result.checkpoint_id == info.cancelled.checkpoint_id
    assert info.cancelled.at <= info.updated_at
    again = run(g, None, thread_id="c", checkpointer=checkpointer)
    assert "done" == again.status
    after = checkpointer.get_thread("c")
    assert after is not None
    assert after.cancelled is None


def test_a_run_cancelled_by_its_own_event_is_recorded_too(checkpointer: Checkpointer) -> None:
    """A run whose caller set its ``cancel`` event ends aborted; the thread records that it was cancelled."""
    cancel = threading.Event()
    cancel.set()
    g = graph("own", {"n": channel.last_write(0)}).node("a", lambda s: {"n": 1}).edge(START, "a").compile()
    result = run(g, {}, thread_id="own", checkpointer=checkpointer, cancel=cancel)
    assert "aborted" == result.status
    info = checkpointer.get_thread("own")
    assert info is not None
    assert info.cancelled is not None
    assert "aborted" == info.cancelled.reason


def test_a_running_thread_says_which_process_holds_it(checkpointer: Checkpointer) -> None:
    """While a run holds a thread, its summary names the holder's process (``pid N on HOST``)."""
    import os

    seen: list[Any] = []

    def look(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("renew", lambda: None)  # a step renews (or confirms) the hold from this process
        seen.append(checkpointer.get_thread("held"))
        return {"n": 1}

    g = graph("held", {"n": channel.last_write(0)}).node("look", look).edge(START, "look").compile()
    for _ in stream(g, {}, thread_id="held", checkpointer=checkpointer):
        pass
    [info] = seen
    assert info is not None
    assert info.running
    assert info.held_by is not None
    assert f"pid {os.getpid()} on " in info.held_by
    done = checkpointer.get_thread("held")
    assert done is not None
    assert (False, None) == (done.running, done.held_by)


def fan_out(failing_topics: set[str]) -> Any:
    """One send of ``research`` per topic; those in ``failing_topics`` raise."""

    def research(state: dict[str, Any]) -> dict[str, Any]:
        if state["topic"] in failing_topics:
            raise ConnectionError(f"{state['topic']} timed out")
        return {"notes": [state["topic"]]}

    return (
        graph("fan", {"notes": channel.append()})
        .node("plan", lambda state: {})
        .node("research", research)
        .edge(START, "plan")
        .router(
            "plan",
            lambda state: [send("research", {"topic": t}) for t in ("market", "pricing", "rivals")],
            destinations=["research"],
        )
        .compile()
    )


def _topic_of(checkpointer: Checkpointer, thread_id: str, task_key: str) -> str:
    latest = checkpointer.get(thread_id)
    assert latest is not None
    return str(next(task.input["topic"] for task in latest.next if task.task_key == task_key))


def test_a_failed_fan_out_records_which_of_its_sends_raised(checkpointer: Checkpointer) -> None:
    """Of three sends of one node, only the one that raised is recorded as failed, by its task key."""
    run(fan_out({"pricing"}), {}, thread_id="fan", checkpointer=checkpointer)
    info = checkpointer.get_thread("fan")
    assert info is not None
    assert info.error is not None
    assert "research" == info.error.node
    assert 1 == len(info.error.tasks)
    assert "pricing" == _topic_of(checkpointer, "fan", info.error.tasks[0])


def test_every_send_that_raised_is_recorded_the_error_shown_first(checkpointer: Checkpointer) -> None:
    """Two sends raise: both task keys are kept, the one whose error the record holds first."""
    run(fan_out({"pricing", "rivals"}), {}, thread_id="fan2", checkpointer=checkpointer)
    info = checkpointer.get_thread("fan2")
    assert info is not None
    assert info.error is not None
    topics = [_topic_of(checkpointer, "fan2", key) for key in info.error.tasks]
    assert {"pricing", "rivals"} == set(topics)
    assert info.error.message == f"{topics[0]} timed out"
