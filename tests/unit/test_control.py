"""send and command on every backend: fan-out, fan-in, pauses in a branch, node-directed routing.

The ilmek/1 conformance scenarios 9 (send) and 10 (command) are here; each
test counts the calls its nodes journal, so "ran once" is checked.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    GraphError,
    ScheduledTask,
    SerializationError,
    channel,
    command,
    graph,
    resume_keyed,
    run,
    send,
    thread_state,
)
from tests.support.helpers import Calls

pytestmark = pytest.mark.timeout(60)


def tasks_of(result: Any) -> list[tuple[str, ...]]:
    """The task keys of each superstep the run started."""
    return [event.tasks for event in result.events if event.type == "step_start"]


def test_send_fan_out_reduces_in_schedule_order_whatever_finishes_first(
    checkpointer: Checkpointer,
) -> None:
    """Scenario 9: one task per send, each seeing its input; results fold in schedule order."""
    items = ["a", "b", "c", "d"]
    finished = [threading.Event() for _ in items]
    finish_order: list[int] = []
    seen: dict[str, Any] = {}
    lock = threading.Lock()

    def worker(state: Any, ctx: Any) -> dict[str, Any]:
        index = state["index"]
        assert state is ctx.state
        with lock:
            seen[ctx.task_id.rsplit(":", 1)[1]] = state
        # Each worker waits for the next one, so they finish last item first.
        if index + 1 < len(items):
            assert finished[index + 1].wait(10), "the workers did not run in parallel"
        with lock:
            finish_order.append(index)
        finished[index].set()
        return {"results": [f"done {state['item']}"]}

    def collect(state: dict[str, Any]) -> dict[str, Any]:
        return {"summary": len(state["results"])}

    g = (
        graph(
            "map",
            {"items": channel.last_write([]), "results": channel.append(), "summary": channel.last_write()},
        )
        .node("split", lambda state: None)
        .node("worker", worker)
        .node("collect", collect)
        .edge(START, "split")
        .router(
            "split",
            lambda state: [
                send("worker", {"item": item, "index": i}) for i, item in enumerate(state["items"])
            ],
            destinations=["worker"],
        )
        .edge("worker", "collect")
        .compile()
    )
    result = run(g, {"items": items}, thread_id="map", checkpointer=checkpointer, max_workers=len(items))
    assert "done" == result.status
    assert [3, 2, 1, 0] == finish_order
    assert ["done a", "done b", "done c", "done d"] == result.state["results"]
    assert 4 == result.state["summary"]
    assert {f"worker#{i}": {"item": item, "index": i} for i, item in enumerate(items)} == seen
    assert [("split",), ("worker#0", "worker#1", "worker#2", "worker#3"), ("collect",)] == tasks_of(result)


def test_a_node_planned_and_sent_to_in_one_superstep_runs_as_both(checkpointer: Checkpointer) -> None:
    """A static edge and sends to the same node give one state task and one task per send."""
    states: dict[str, Any] = {}
    lock = threading.Lock()

    def worker(state: Any, ctx: Any) -> dict[str, Any]:
        key = ctx.task_id.rsplit(":", 1)[1]
        with lock:
            states[key] = state
        return {"log": [key]}

    g = (
        graph("both", {"topic": channel.last_write(), "log": channel.append()})
        .node("plan", lambda state: command(goto=["worker", send("worker", 1), send("worker", 2)]))
        .node("worker", worker)
        .edge(START, "plan")
        .edge("plan", "worker")
        .compile()
    )
    result = run(g, {"topic": "tea"}, thread_id="both", checkpointer=checkpointer)
    assert [("plan",), ("worker", "worker#0", "worker#1")] == tasks_of(result)
    assert {"worker": {"topic": "tea", "log": []}, "worker#0": 1, "worker#1": 2} == states
    assert ["worker", "worker#0", "worker#1"] == result.state["log"]


def fan_out_with_approval(calls: Calls, fail: dict[str, bool] | None = None) -> Any:
    """Three sent workers each do paid work; the one for "b" also asks a person."""

    def worker(state: Any, ctx: Any) -> dict[str, Any]:
        item = state["item"]
        price = ctx.step("quote", lambda: calls.hit(f"quote {item}") or len(item) * 10)
        if item == "b" and ctx.interrupt({"approve": item}) != "yes":
            return {"results": [f"{item} skipped"]}
        if fail is not None and fail.get(item):
            raise ConnectionError(f"shipping {item} failed")
        ctx.step("ship", calls.hit, f"ship {item}")
        return {"results": [f"{item} {price}"]}

    def route(state: dict[str, Any]) -> list[Any]:
        calls.hit("route")
        return [send("worker", {"item": item}) for item in state["items"]]

    return (
        graph("approvals", {"items": channel.last_write([]), "results": channel.append()})
        .node("start", lambda state: None)
        .node("worker", worker)
        .edge(START, "start")
        .router("start", route, destinations=["worker"])
        .compile()
    )


def test_a_pause_in_one_send_branch_is_answered_by_its_own_id(checkpointer: Checkpointer) -> None:
    """Only worker#1 pauses; on resume its siblings replay their recorded steps without re-running them."""
    calls = Calls()
    g = fan_out_with_approval(calls)
    paused = run(g, {"items": ["a", "b", "ccc"]}, thread_id="fan", checkpointer=checkpointer)
    assert "interrupted" == paused.status
    (pause,) = paused.pending
    assert ("worker#1:interrupt#0", "worker", {"approve": "b"}) == (pause.id, pause.node, pause.payload)
    assert pause.task_id.endswith(":worker#1")
    done = resume_keyed(g, {"worker#1:interrupt#0": "yes"}, thread_id="fan", checkpointer=checkpointer)
    assert "done" == done.status
    assert ["a 10", "b 10", "ccc 30"] == done.state["results"]
    assert {
        "route": 1,
        "quote a": 1,
        "quote b": 1,
        "quote ccc": 1,
        "ship a": 1,
        "ship b": 1,
        "ship ccc": 1,
    } == dict(calls)


def test_sends_are_recorded_in_next_and_a_failed_fan_out_continues_with_them(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """The fan-out lives in the checkpoint; run(None) re-dispatches it without re-routing or re-paying."""
    calls = Calls()
    fail = {"ccc": True}
    g = fan_out_with_approval(calls, fail)
    failed = run(g, {"items": ["a", "ccc"]}, thread_id="sends", checkpointer=checkpointer)
    assert "error" == failed.status
    assert [("worker", "shipping ccc failed")] == [(node, str(error)) for node, error in failed.errors]
    latest = checkpointer.get("sends")
    assert latest is not None
    assert "unfinished" == latest.status
    assert (
        ScheduledTask(node="worker", task_key="worker#0", is_send=True, input={"item": "a"}),
        ScheduledTask(node="worker", task_key="worker#1", is_send=True, input={"item": "ccc"}),
    ) == latest.next
    fail["ccc"] = False
    finished = run(g, None, thread_id="sends", checkpointer=reopen())
    assert "done" == finished.status
    assert ["a 10", "ccc 30"] == finished.state["results"]
    assert {"route": 1, "quote a": 1, "quote ccc": 1, "ship a": 1, "ship ccc": 1} == dict(calls)


def test_a_send_input_comes_back_from_storage_as_it_was_sent(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """A tuple holding a date, sent and stored in next, reaches the re-dispatched task unchanged."""
    sent = ("2024-05-01", datetime.date(2024, 5, 1), 3)
    received: list[Any] = []
    fail = {"on": True}

    def worker(state: Any) -> dict[str, Any]:
        received.append(state)
        if fail["on"]:
            raise RuntimeError("not yet")
        return {"done": True}

    g = (
        graph("typed", {"done": channel.last_write(False)})
        .node("start", lambda state: command(goto=send("worker", sent)), destinations=["worker"])
        .node("worker", worker)
        .edge(START, "start")
        .compile()
    )
    assert "error" == run(g, {}, thread_id="typed", checkpointer=checkpointer).status
    fail["on"] = False
    assert "done" == run(g, None, thread_id="typed", checkpointer=reopen()).status
    assert [sent, sent] == received
    assert tuple is type(received[1])


def test_a_send_input_that_cannot_be_stored_is_refused_before_it_is_written(
    checkpointer: Checkpointer,
) -> None:
    """SPEC §8: the send is a SerializationError naming the task and the type; no checkpoint holds it."""
    g = (
        graph("opaque", {"x": channel.last_write()})
        .node("start", lambda state: command(goto=send("worker", object())), destinations=["worker"])
        .node("worker", lambda state: None)
        .edge(START, "start")
        .compile()
    )
    with pytest.raises(SerializationError) as caught:
        run(g, {}, thread_id="opaque", checkpointer=checkpointer)
    assert "send 'worker#0'" in str(caught.value)
    assert "object" in str(caught.value)
    assert ["input"] == [c.metadata["source"] for c in checkpointer.list("opaque")]


def test_command_goto_overrides_static_edges_and_sees_its_update(checkpointer: Checkpointer) -> None:
    """Scenario 10: goto replaces the static edge; the update is folded before the next node runs."""
    ran = Calls()

    def agent(state: dict[str, Any]) -> Any:
        ran.hit("agent")
        return command(update={"log": ["agent chose tools"], "choice": "tools"}, goto="tools")

    def tools(state: dict[str, Any]) -> dict[str, Any]:
        ran.hit("tools")
        return {"log": [f"tools saw {state['choice']!r} after {state['log'][-1]!r}"]}

    g = (
        graph("goto", {"log": channel.append(), "choice": channel.last_write("none")})
        .node("agent", agent, destinations=["tools"])
        .node("static", lambda state: ran.hit("static"))
        .node("tools", tools)
        .edge(START, "agent")
        .edge("agent", "static")
        .compile()
    )
    result = run(g, {}, thread_id="goto", checkpointer=checkpointer)
    assert "done" == result.status
    assert {"agent": 1, "tools": 1} == dict(ran)
    assert ["agent chose tools", "tools saw 'tools' after 'agent chose tools'"] == result.state["log"]
    assert [("agent",), ("tools",)] == tasks_of(result)


def test_a_command_without_goto_follows_the_static_edges_planned_on_its_update(
    checkpointer: Checkpointer,
) -> None:
    """No goto: the static edges apply, and their guards already see the command's update."""
    g = (
        graph("fallback", {"intent": channel.last_write("chat"), "log": channel.append()})
        .node("agent", lambda state: command(update={"intent": "buy"}))
        .node("checkout", lambda state: {"log": ["checkout"]})
        .node("chat", lambda state: {"log": ["chat"]})
        .edge(START, "agent")
        .edge("agent", "checkout", when={"channel": "intent", "eq": "buy"})
        .edge("agent", "chat", when=lambda state: state["intent"] == "chat")
        .compile()
    )
    result = run(g, {}, thread_id="fallback", checkpointer=checkpointer)
    assert {"intent": "buy", "log": ["checkout"]} == result.state
    assert [("agent",), ("checkout",)] == tasks_of(result)


def test_goto_end_stops_the_branch(checkpointer: Checkpointer) -> None:
    """goto=END ends the run there although a static edge leads on."""
    g = (
        graph("stop", {"log": channel.append()})
        .node("agent", lambda state: command(update={"log": ["agent"]}, goto=END))
        .node("next", lambda state: {"log": ["next"]})
        .edge(START, "agent")
        .edge("agent", "next")
        .compile()
    )
    result = run(g, {}, thread_id="stop", checkpointer=checkpointer)
    assert "done" == result.status
    assert {"log": ["agent"]} == result.state
    assert [("agent",)] == tasks_of(result)


def test_goto_a_list_runs_every_target_in_one_superstep(checkpointer: Checkpointer) -> None:
    """A goto list plans each node once, in declaration order, alongside nothing else."""
    g = (
        graph("many", {"log": channel.append()})
        .node("agent", lambda state: command(goto=["right", "left", "right"]), destinations=["left", "right"])
        .node("left", lambda state: {"log": ["left"]})
        .node("right", lambda state: {"log": ["right"]})
        .node("static", lambda state: {"log": ["static"]})
        .edge(START, "agent")
        .edge("agent", "static")
        .compile()
    )
    result = run(g, {}, thread_id="many", checkpointer=checkpointer)
    assert [("agent",), ("left", "right")] == tasks_of(result)
    assert {"log": ["left", "right"]} == result.state


def test_goto_with_sends_fans_out_after_the_nodes_work(checkpointer: Checkpointer) -> None:
    """A goto mixing a node and sends schedules the node, then one task per send."""

    def discover(state: dict[str, Any], ctx: Any) -> Any:
        pages = ctx.step("list pages", lambda: ["p1", "p2"])
        return command(update={"log": ["found 2"]}, goto=["audit", *[send("fetch", page) for page in pages]])

    g = (
        graph("crawl", {"log": channel.append()})
        .node("discover", discover, destinations=["audit", "fetch"])
        .node("audit", lambda state: {"log": [f"audit after {state['log']}"]})
        .node("fetch", lambda page: {"log": [f"fetched {page}"]})
        .edge(START, "discover")
        .compile()
    )
    result = run(g, {}, thread_id="crawl", checkpointer=checkpointer)
    assert [("discover",), ("audit", "fetch#0", "fetch#1")] == tasks_of(result)
    assert ["found 2", "audit after ['found 2']", "fetched p1", "fetched p2"] == result.state["log"]


def test_goto_to_an_unknown_node_raises_a_graph_error(checkpointer: Checkpointer) -> None:
    """An unknown goto target rejects the run with a GraphError naming it; nothing of the superstep lands."""
    g = (
        graph("lost", {"log": channel.append()})
        .node("agent", lambda state: command(update={"log": ["agent"]}, goto="nowhere"))
        .edge(START, "agent")
        .compile()
    )
    with pytest.raises(GraphError, match="'nowhere'") as raised:
        run(g, {}, thread_id="lost", checkpointer=checkpointer)
    assert "nowhere" == raised.value.node
    assert {"log": []} == thread_state(g, checkpointer, "lost")
    # The thread says why it stopped.
    info = checkpointer.get_thread("lost")
    assert info is not None
    assert ("error", "agent") == (info.status, info.error.node if info.error else None)
