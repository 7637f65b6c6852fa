"""The port suite, the process's drain: ``ilmek.drain()`` stops a run at its next superstep boundary with
the reason "draining" and its thread recoverable, and refuses runs, ticks and recovers started after it,
on every backend."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import ilmek
from ilmek import START, Checkpointer, DrainingError, channel, graph, recover, run, tick

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def undrained() -> Iterator[None]:
    """The drain is process-wide: every test leaves the process undrained, however it ends."""
    yield
    ilmek.undrain()


def _two_steps(effects: list[str], *, drain_in_first: bool) -> Any:
    def first(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("first", effects.append, "first")
        if drain_in_first:
            ilmek.drain()  # as a SIGTERM handler would, mid-superstep
        return {"log": ["first"]}

    def second(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("second", effects.append, "second")
        return {"log": ["second"]}

    return (
        graph("two", {"log": channel.append()})
        .node("first", first)
        .node("second", second)
        .edge(START, "first")
        .edge("first", "second")
        .compile()
    )


@pytest.mark.usefixtures("undrained")
def test_a_drain_mid_superstep_commits_it_stops_and_recover_continues(checkpointer: Checkpointer) -> None:
    """The superstep in flight commits, the run ends aborted with "draining", the thread is not held and
    reads cancelled; after undrain, recover runs only the second step."""
    effects: list[str] = []
    result = run(_two_steps(effects, drain_in_first=True), {}, thread_id="d", checkpointer=checkpointer)
    assert ("aborted", "draining") == (result.status, result.abort_reason)
    info = checkpointer.get_thread("d")
    assert info is not None
    assert not info.running
    assert info.cancelled is not None
    assert "draining" == info.cancelled.reason
    ilmek.undrain()
    (done,) = recover(_two_steps(effects, drain_in_first=False), checkpointer)
    assert ("done", ["first", "second"]) == (done.status, done.state["log"])
    assert ["first", "second"] == effects


@pytest.mark.usefixtures("undrained")
def test_while_draining_nothing_starts_and_the_sweeps_take_nothing(checkpointer: Checkpointer) -> None:
    """After drain(), run raises DrainingError naming the thread and writes nothing; tick and recover
    return no result and leave the stalled thread for another process."""
    effects: list[str] = []
    flow = _two_steps(effects, drain_in_first=True)
    assert "aborted" == run(flow, {}, thread_id="stalled", checkpointer=checkpointer).status
    assert ilmek.draining()
    with pytest.raises(DrainingError, match="'fresh'") as refused:
        run(flow, {}, thread_id="fresh", checkpointer=checkpointer)
    assert "fresh" == refused.value.thread_id
    assert checkpointer.get_thread("fresh") is None
    assert [] == recover(flow, checkpointer)
    assert [] == tick(flow, checkpointer)
    stalled = checkpointer.get_thread("stalled")
    assert stalled is not None
    assert "unfinished" == stalled.status
    assert ["first"] == effects
