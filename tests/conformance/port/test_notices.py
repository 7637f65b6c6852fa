"""The port suite, pause notices: ``on_pause`` is called once per pause a run opens, right after its commit,
from an outbox in the store that ``tick`` empties later when the hook failed (with backoff), on every backend.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from ilmek import START, Checkpointer, PauseNotice, answers, channel, graph, resume, run, tick
from ilmek.checkpoint.outbox import DELIVERY_GRACE

pytestmark = pytest.mark.timeout(60)

FAR = float(2**33)


def _asking(hook: Callable[[PauseNotice], Any]) -> Any:
    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        first = ctx.interrupt({"question": "Ship?"}, key="ship", answers=answers.choice("yes", "no"))
        second = ctx.interrupt({"question": "Bill?"}, key="bill", answers=answers.boolean())
        return {"log": [first, second]}

    builder = graph("asking", {"log": channel.append()}).node("ask", ask).edge(START, "ask")
    return builder.compile(on_pause=hook)


def _at(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def test_each_pause_is_noticed_once_after_its_commit(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """The hook sees each opened pause once, already committed; tick later delivers nothing again and
    the outbox is empty, also as another checkpointer on the same store reads it."""
    seen: list[tuple[PauseNotice, list[str]]] = []

    def hook(notice: PauseNotice) -> None:
        latest = checkpointer.get(notice.thread_id)
        assert latest is not None
        seen.append((notice, [p.id for p in latest.pending]))

    g = _asking(hook)
    paused = run(g, {}, thread_id="t", checkpointer=checkpointer)
    assert [(n.thread_id, n.checkpoint_id, n.graph, n.pending.id) for n, _ in seen] == [
        ("t", paused.checkpoint_id, "asking", "ask:ship#0")
    ]
    assert seen[0][1] == ["ask:ship#0"]  # committed before the hook ran
    assert seen[0][0].pending.payload == {"question": "Ship?"}
    assert seen[0][0].pending.answers is not None
    resume(g, "yes", thread_id="t", checkpointer=checkpointer)
    assert [n.pending.id for n, _ in seen] == ["ask:ship#0", "ask:bill#0"]
    assert len({n.id for n, _ in seen}) == 2
    assert tick(g, checkpointer, now=_at(FAR)) == []
    assert len(seen) == 2
    assert checkpointer.due_notices(FAR) == []
    assert reopen().due_notices(FAR) == []


def test_a_failing_hook_never_fails_the_run_and_is_retried_with_backoff(
    checkpointer: Checkpointer, caplog: pytest.LogCaptureFixture
) -> None:
    """A hook that raises leaves the run interrupted and logs a warning; tick retries it only once due,
    waits twice as long after a second failure, and stops once the hook took it, with the same id."""
    calls: list[str] = []

    def flaky(notice: PauseNotice) -> None:
        calls.append(notice.id)
        if len(calls) < 3:
            raise RuntimeError("mail server \x1b[31m<down> at smtp://bob:hunter2@mail.example.com")

    g = _asking(flaky)
    start = time.time()
    with caplog.at_level(logging.WARNING, logger="ilmek.notices"):
        assert run(g, {}, thread_id="t", checkpointer=checkpointer).status == "interrupted"
    assert len(calls) == 1
    assert "mail server" in caplog.text
    assert "\x1b" not in caplog.text
    assert "hunter2" not in caplog.text
    tick(g, checkpointer, now=_at(start + DELIVERY_GRACE - 5))
    assert len(calls) == 1
    tick(g, checkpointer, now=_at(start + DELIVERY_GRACE + 10))
    assert len(calls) == 2  # first retry after the grace; it fails again
    tick(g, checkpointer, now=_at(start + DELIVERY_GRACE + 50))
    assert len(calls) == 2  # the second wait is twice the first
    tick(g, checkpointer, now=_at(start + 3 * DELIVERY_GRACE + 20))
    assert len(calls) == 3
    tick(g, checkpointer, now=_at(FAR))
    assert len(calls) == 3
    assert len(set(calls)) == 1


def test_a_graph_without_a_hook_writes_no_notice(checkpointer: Checkpointer) -> None:
    """Without on_pause nothing goes to the outbox, and bind() adds the hook to a compiled graph."""
    seen: list[PauseNotice] = []
    plain = graph("plain", {}).node("ask", lambda s, ctx: ctx.interrupt("?")).edge(START, "ask").compile()
    run(plain, {}, thread_id="a", checkpointer=checkpointer)
    assert checkpointer.due_notices(FAR) == []
    run(plain.bind(on_pause=seen.append), {}, thread_id="b", checkpointer=checkpointer)
    assert [n.thread_id for n in seen] == ["b"]


@pytest.mark.parametrize("deleting", ["delete_thread", "delete_threads"])
def test_deleting_a_thread_takes_its_undelivered_notices_with_it(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer], deleting: str
) -> None:
    """A notice whose hook keeps failing stays in the outbox until it is delivered; deleting its thread
    (one, or in a batch) takes it out too, leaving another thread's notice where it was."""

    def down(notice: PauseNotice) -> None:
        raise RuntimeError("the mail server is down")

    g = _asking(down)
    run(g, {}, thread_id="gone", checkpointer=checkpointer)
    run(g, {}, thread_id="kept", checkpointer=checkpointer)
    assert {n.thread_id for n in checkpointer.due_notices(FAR)} == {"gone", "kept"}
    if deleting == "delete_thread":
        checkpointer.delete_thread("gone")
    else:
        # The oldest first (ties by id): "gone" was paused first.
        assert checkpointer.delete_threads(status="interrupted", limit=1) == 1
    remaining = {n.thread_id for n in checkpointer.due_notices(FAR)}
    assert remaining == {"kept"}
    assert {n.thread_id for n in reopen().due_notices(FAR)} == {"kept"}
