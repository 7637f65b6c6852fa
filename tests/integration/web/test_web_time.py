"""Time in the console: a pause's deadline reads "due in 3 h" or "overdue by ..." (with its on_timeout
answer) in the inbox and on the thread page, a timer reads "wakes ...", and a recorded answer says who
gave it ("by the deadline"); the pages stay axe-clean at 1440 and 390 px, light and dark."""

from __future__ import annotations

import datetime as dt
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

import ilmek
import ilmek.web
from ilmek import START, answers, channel, graph, run, tick
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from tests.support.web_support import Client, serving

pytestmark = pytest.mark.timeout(120)

PAST = dt.datetime(2001, 1, 1, tzinfo=dt.UTC)
LATER_PAST = dt.datetime(2010, 1, 1, tzinfo=dt.UTC)
"""Overdue by now, but not yet when the test's tick (at 2005) applies PAST's deadline."""


def _approval(deadline: dt.timedelta | dt.datetime) -> Any:
    def approve(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        said = ctx.interrupt(
            {"question": "Ship it?"}, answers=answers.choice("yes", "no"), deadline=deadline, on_timeout="no"
        )
        return {"log": [said]}

    return (
        graph("approval", {"log": channel.append()}).node("approve", approve).edge(START, "approve").compile()
    )


def _nap() -> Any:
    def nap(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.sleep("nap", until=dt.datetime(2031, 2, 3, 4, 5, 6, tzinfo=dt.UTC))
        return {"log": ["woke"]}

    return graph("napping", {"log": channel.append()}).node("nap", nap).edge(START, "nap").compile()


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[SqliteCheckpointer]:
    """Four threads: due in 3 h, overdue, answered by the deadline, asleep until 2031."""
    checkpointer = SqliteCheckpointer(tmp_path / "time.db")
    run(_approval(dt.timedelta(hours=3)), {}, thread_id="due-soon", checkpointer=checkpointer)
    run(_approval(LATER_PAST), {}, thread_id="overdue", checkpointer=checkpointer)
    run(_approval(PAST), {}, thread_id="timed-out", checkpointer=checkpointer)
    run(_nap(), {}, thread_id="asleep", checkpointer=checkpointer)
    yield checkpointer
    checkpointer.close()


def _graphs() -> dict[str, Any]:
    return {"approval": _approval(dt.timedelta(hours=3)), "napping": _nap()}


def test_deadlines_timers_and_who_answered_read_in_words(store: SqliteCheckpointer) -> None:
    """The inbox says "due in 3 h" and "overdue by", with the on_timeout answer; the thread page lists a
    pause's deadline and a timer's wake time; once tick applies a deadline, the journal says "by the
    deadline"."""
    applied = {
        r.thread_id: r for r in tick(_approval(PAST), store, now=dt.datetime(2005, 1, 1, tzinfo=dt.UTC))
    }.get("timed-out")
    client = Client(ilmek.web.app(store, _graphs(), allow_actions=True))
    inbox = client.get("/").text
    assert "due in 3 h" in inbox
    assert "overdue by" in inbox
    assert "then answered no (on_timeout)" in inbox
    page = client.get("/thread?id=due-soon").text
    assert "due in 3 h" in page
    assert "sleeping (ctx.sleep): wakes" in client.get("/thread?id=asleep").text
    assert "2031-02-03 04:05:06" in client.get("/thread?id=asleep").text
    assert applied is not None
    assert "done" == applied.status
    (paused,) = [c for c in ilmek.history(store, "timed-out") if c.pending]
    answered = client.get(f"/thread?id=timed-out&checkpoint={paused.id}").text
    assert "by the deadline (its on_timeout answer)" in answered


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [1440, 390])
def test_the_time_pages_are_axe_clean(
    driver: Any, store: SqliteCheckpointer, width: int, scheme: str
) -> None:
    """axe-core finds nothing on the inbox and a thread page with a deadline, at 1440 and 390 px, light
    and dark, and the deadline is on screen."""
    from tests.support.web_browser_support import axe_violations, set_color_scheme, show_as_screen

    show_as_screen(driver, width, scheme, height=844)
    found = []
    try:
        with serving(store, _graphs(), allow_actions=True) as server:
            for path in ("", "thread?id=due-soon", "thread?id=overdue"):
                driver.get(server.url + path)
                assert "due in" in driver.page_source or "overdue by" in driver.page_source
                found += [f"{path} :: {v['id']} :: {n}" for v in axe_violations(driver) for n in v["nodes"]]
    finally:
        set_color_scheme(driver, "light")
    assert [] == found
