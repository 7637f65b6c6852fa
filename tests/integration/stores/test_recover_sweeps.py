"""A recover() sweep never stops on one thread it cannot run: a thread planned at a node a deploy removed,
or whose router raises, is recorded as failed (it lists under ``status="error"``) and reported, and the
healthy threads after it are recovered in the same sweep.

On real stores: a SQLite file and a fresh Postgres database.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from ilmek import START, ResumeError, channel, graph, recover, run
from tests.support.helpers import Calls
from tests.support.stores import Store, store_fixture  # noqa: F401 - the store fixture

pytestmark = pytest.mark.timeout(60)


def test_a_sweep_records_the_threads_it_cannot_run_and_recovers_the_rest(store: Store) -> None:
    """Two bad threads (the oldest, so a sweep meets them first) and a healthy one: one sweep reports all
    three, records the failures of the bad ones, and recovers the healthy one."""
    calls = Calls()
    failing_once = {"healthy": True}

    def first(state: dict[str, Any]) -> dict[str, Any]:
        return {"log": ["first"]}

    def second(state: dict[str, Any]) -> dict[str, Any]:
        calls.hit("second")
        if failing_once.pop(state["log"][0], False):
            raise RuntimeError("a passing outage")
        return {"log": ["second"]}

    def crash(state: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("the old node's bug")

    checkpointer = store.open()
    # Written by the graph of the last deploy, whose node "retired" is gone now.
    old = graph("flow", {"log": channel.append()}).node("retired", crash).edge(START, "retired").compile()
    assert "error" == run(old, {"log": ["removed"]}, thread_id="a-removed", checkpointer=checkpointer).status
    time.sleep(0.02)
    routed = (
        graph("routed", {"log": channel.append()})
        .node("first", first)
        .node("second", second)
        .edge(START, "first")
        .router("first", lambda state: "second" if state["log"][0] != "router" else 1 / 0)
        .compile()
    )
    with pytest.raises(ZeroDivisionError):
        run(routed, {"log": ["router"]}, thread_id="b-router", checkpointer=checkpointer)
    time.sleep(0.02)
    assert (
        "error" == run(routed, {"log": ["healthy"]}, thread_id="c-healthy", checkpointer=checkpointer).status
    )

    current = graph("flow", {"log": channel.append()}).node("first", first).edge(START, "first").compile()
    results = {
        result.thread_id: result for result in recover({"flow": current, "routed": routed}, checkpointer)
    }

    assert ["a-removed", "b-router", "c-healthy"] == sorted(results)
    removed, router, healthy = results["a-removed"], results["b-router"], results["c-healthy"]
    assert "error" == removed.status
    assert isinstance(removed.errors[0][1], ResumeError)
    assert "'retired'" in str(removed.errors[0][1])
    assert ("error", ZeroDivisionError) == (router.status, type(router.errors[0][1]))
    assert ("done", ["healthy", "first", "second"]) == (healthy.status, healthy.state["log"])
    failed = {info.id: info for info in checkpointer.list_threads(status="error")}
    assert {"a-removed", "b-router"} == set(failed)
    assert failed["a-removed"].error is not None
    assert "retired" in failed["a-removed"].error.message
