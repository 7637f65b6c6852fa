"""Ported from the .NET port's ``dotnet/test/Ilmek.Core.Tests/ConformanceTests.cs``.

The same MODEL §12 scenarios as the TypeScript suite, written the .NET way:
runs start with no input (``RunAsync(null, ...)``, here ``run(g, None, ...)``),
so scenario 5 continues its failed thread with ``run(g, None)``; retry
policies have no backoff; §12.9 fans back in through a ``join`` node.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    GraphError,
    NondeterminismError,
    ResumeError,
    RetryPolicy,
    channel,
    command,
    from_spec,
    graph,
    resume,
    resume_keyed,
    run,
    send,
    stream,
    to_spec,
)
from ilmek.events import NodeRetry
from tests.helpers import Calls
from tests.reference.helpers import compile_allowing_a_warning, counted, linear


def _opts(checkpointer: Checkpointer, thread_id: str, **more: Any) -> dict[str, Any]:
    """The .NET suite's ``Opts(cp, threadId)``."""
    return {"thread_id": thread_id, "checkpointer": checkpointer, **more}


def test_12_1_step_runs_once_across_resume(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "§12.1 a step executes exactly once across an interrupt/resume cycle"."""
    calls = Calls()

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        order = ctx.step("create_order", counted(calls, "create", "order-1"))
        answer = ctx.interrupt({"question": "Charge order?"})
        charged = ctx.step("charge", counted(calls, "charge", f"charged-{order}"))
        return {"log": f"{order}/{answer}/{charged}"}

    g = linear("checkout", work)
    opts = _opts(ref_checkpointer, "t-checkout")

    paused = run(g, None, **opts)
    assert "interrupted" == paused.status
    assert "interrupt#0" == paused.pending[0].key
    assert "work" == paused.pending[0].node
    assert (1, 0) == (calls["create"], calls["charge"])

    done = resume(g, "yes", **opts)
    assert "done" == done.status
    assert ["order-1/yes/charged-order-1"] == done.state["log"]
    assert (1, 1) == (calls["create"], calls["charge"])


def test_12_2_two_interrupts_resolve_independently(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "§12.2 two interrupts in one node resolve independently, one resume each"."""

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        first = ctx.interrupt({"q": "first"})
        second = ctx.interrupt({"q": "second"})
        return {"log": f"{first}+{second}"}

    g = linear("double", work)
    opts = _opts(ref_checkpointer, "t-double")

    assert "interrupt#0" == run(g, None, **opts).pending[0].key

    p2 = resume(g, "A", **opts)
    assert "interrupted" == p2.status
    assert "interrupt#1" == p2.pending[0].key

    done = resume(g, "B", **opts)
    assert "done" == done.status
    assert ["A+B"] == done.state["log"]


def test_12_3_an_interrupt_in_a_loop_resumes_correctly(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "§12.3 an interrupt in a loop with stable keys resumes at the right
    iteration"."""
    prepared: list[str] = []

    def prepare(item: str) -> str:
        prepared.append(item)
        return f"prep-{item}"

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        approvals = []
        for item in state["items"]:
            ctx.step(f"prepare:{item}", prepare, item)
            approvals.append(ctx.interrupt({"q": f"approve {item}"}, f"approve:{item}"))
        return {"log": approvals}

    g = linear("loop", work)
    opts = _opts(ref_checkpointer, "t-loop")

    p1 = run(g, {"items": ["a", "b"]}, **opts)
    assert "approve:a#0" == p1.pending[0].key
    assert ["a"] == prepared

    assert "approve:b#0" == resume(g, "yes-a", **opts).pending[0].key

    done = resume(g, "yes-b", **opts)
    assert "done" == done.status
    assert ["yes-a", "yes-b"] == done.state["log"]
    assert ["a", "b"] == prepared


def test_12_4_reduce_order_is_task_order() -> None:
    """ConformanceTests.cs · "§12.4 superstep reduce order is task order, not completion order"."""

    def declared_first(state: Any) -> dict[str, Any]:
        time.sleep(0.06)
        return {"winner": "declaredFirst"}

    g = (
        graph("race")
        .channel("winner", channel.last_write())
        .node("declaredFirst", declared_first)
        .node("declaredSecond", lambda state: {"winner": "declaredSecond"})
        .edge(START, "declaredFirst")
        .edge(START, "declaredSecond")
        .edge("declaredFirst", END)
        .edge("declaredSecond", END)
        .compile()
    )

    assert "declaredSecond" == run(g).state["winner"]


def test_12_5_a_crash_replays_without_re_running_steps(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "§12.5 a crashed superstep replays with zero re-executed steps" (input None)."""
    calls = Calls()
    should_fail = [True]

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.step("expensive", counted(calls, "expensive", "computed"))
        if should_fail[0]:
            should_fail[0] = False
            raise RuntimeError("transient boom")
        return {"log": "survived"}

    g = linear("flaky", work)
    opts = _opts(ref_checkpointer, "t-flaky")

    crashed = run(g, None, **opts)
    assert "error" == crashed.status
    assert "transient boom" in str(crashed.errors[0][1])
    assert 1 == calls["expensive"]

    retried = run(g, None, **opts)
    assert "done" == retried.status
    assert 1 == calls["expensive"]


REGISTRY: dict[str, Any] = {
    "set_intent": lambda config: lambda state: {"intent": config["intent"]},
    "say": lambda config: lambda state: {"messages": config["text"]},
}


def test_12_6_a_spec_round_trips() -> None:
    """ConformanceTests.cs · "§12.6 compile(spec) -> ToSpec() round-trips"."""
    spec: dict[str, Any] = {
        "name": "support",
        "channels": {"messages": {"reducer": "append"}, "intent": {"reducer": "last_write"}},
        "nodes": [
            {"id": "classify", "type": "set_intent", "config": {"intent": "buy"}},
            {"id": "buy", "type": "say", "config": {"text": "bought"}},
        ],
        "edges": [
            {"from": "__start__", "to": "classify"},
            {"from": "classify", "to": "buy", "when": {"channel": "intent", "eq": "buy"}},
            {"from": "buy", "to": "__end__"},
        ],
    }

    back = to_spec(from_spec(spec, REGISTRY))

    assert spec["name"] == back["name"]
    assert sorted(spec["channels"]) == sorted(back["channels"])
    assert "append" == back["channels"]["messages"]["reducer"]
    assert [(n["id"], n["type"]) for n in spec["nodes"]] == [(n["id"], n["type"]) for n in back["nodes"]]
    assert [(e["from"], e["to"]) for e in spec["edges"]] == [(e["from"], e["to"]) for e in back["edges"]]
    assert "buy" == back["edges"][1]["when"]["eq"]


def test_a_spec_built_graph_runs_and_its_declarative_predicate_routes() -> None:
    """ConformanceTests.cs · "a spec-built graph runs, and its declarative predicate routes" (`neq`)."""
    spec: dict[str, Any] = {
        "name": "support",
        "channels": {"messages": {"reducer": "append"}, "intent": {"reducer": "last_write"}},
        "nodes": [
            {"id": "classify", "type": "set_intent", "config": {"intent": "buy"}},
            {"id": "buy", "type": "say", "config": {"text": "bought"}},
            {"id": "browse", "type": "say", "config": {"text": "browsed"}},
        ],
        "edges": [
            {"from": "__start__", "to": "classify"},
            {"from": "classify", "to": "buy", "when": {"channel": "intent", "eq": "buy"}},
            {"from": "classify", "to": "browse", "when": {"channel": "intent", "neq": "buy"}},
            {"from": "buy", "to": "__end__"},
            {"from": "browse", "to": "__end__"},
        ],
    }

    result = run(from_spec(spec, REGISTRY))

    assert "done" == result.status
    assert ["bought"] == result.state["messages"]


def test_a_code_router_will_not_serialize() -> None:
    """ConformanceTests.cs · "a code router refuses to serialize"."""
    g = (
        graph("coded")
        .channel("x", channel.last_write())
        .node("a", lambda state: None, type="noop")
        .edge(START, "a")
        .router("a", lambda state: [END])
        .compile()
    )

    with pytest.raises(GraphError, match="router on 'a'"):
        to_spec(g)


def _wobbly(take_branch: list[bool]) -> Any:
    def work(state: Any, ctx: Any) -> dict[str, Any]:
        if take_branch[0]:
            ctx.step("sometimes", lambda: "did_it")
        ctx.interrupt({"q": "ok?"})
        return {"log": "end"}

    return linear("wobbly", work)


def test_12_7_strict_mode_catches_divergence(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "§12.7 strict mode raises when a journaled step vanishes on replay"."""
    take_branch = [True]
    g = _wobbly(take_branch)
    opts = _opts(ref_checkpointer, "t-wobbly")
    assert "interrupted" == run(g, None, **opts).status

    take_branch[0] = False

    result = resume(g, "yes", **opts)
    assert "error" == result.status
    _, error = result.errors[0]
    assert isinstance(error, NondeterminismError)
    assert "sometimes#0" in str(error)


def test_strict_mode_is_optional(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "strict mode can be turned off for a run"."""
    take_branch = [True]
    g = _wobbly(take_branch)
    opts = _opts(ref_checkpointer, "t-lax", strict=False)
    assert "interrupted" == run(g, None, **opts).status

    take_branch[0] = False

    assert "done" == resume(g, "yes", **opts).status


def test_12_8_concurrent_pauses_get_their_own_answers(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "§12.8 concurrent pauses resolve to their own answers"."""
    g = (
        graph("fanout")
        .channel("log", channel.append())
        .node("a", lambda state, ctx: {"log": ctx.interrupt({"q": "a?"})})
        .node("b", lambda state, ctx: {"log": ctx.interrupt({"q": "b?"})})
        .edge(START, "a")
        .edge(START, "b")
        .edge("a", END)
        .edge("b", END)
        .compile()
    )
    opts = _opts(ref_checkpointer, "t-fanout")

    paused = run(g, None, **opts)
    assert "interrupted" == paused.status
    assert 2 == len(paused.pending)
    assert all("interrupt#0" == p.key for p in paused.pending)
    assert ["a:interrupt#0", "b:interrupt#0"] == sorted(p.id for p in paused.pending)

    with pytest.raises(ResumeError, match=r"\b2\b.*resume_keyed"):
        resume(g, "yes", **opts)

    done = resume_keyed(g, {p.id: f"ans-{p.node}" for p in paused.pending}, **opts)
    assert "done" == done.status
    assert ["ans-a", "ans-b"] == sorted(done.state["log"])


def test_12_9_send_fans_out_once_per_payload() -> None:
    """ConformanceTests.cs · "§12.9 send fans out once per payload, each with its own input state"."""
    seen: list[int] = []

    def worker(state: Any) -> dict[str, Any]:
        seen.append(state["n"])
        return {"results": state["n"] * 10}

    g = (
        graph("mapreduce")
        .channel("items", channel.last_write([]))
        .channel("results", channel.append())
        .node("map", lambda state: None)
        .node("worker", worker)
        .node("join", lambda state: None)
        .edge(START, "map")
        .router("map", lambda state: [send("worker", {"n": i}) for i in state["items"]])
        .edge("worker", "join")
        .edge("join", END)
        .compile()
    )

    result = run(g, {"items": [1, 2, 3]})

    assert "done" == result.status
    assert [1, 2, 3] == sorted(seen)
    assert [10, 20, 30] == sorted(result.state["results"])


def test_fan_out_interrupts_are_distinct(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "an interrupt in one fan-out branch does not collide with its siblings"."""

    def worker(state: Any, ctx: Any) -> dict[str, Any]:
        ok = ctx.interrupt({"q": f"approve {state['id']}?"})
        return {"out": f"{state['id']}:{ok}"}

    g = (
        graph("fanout-hitl")
        .channel("out", channel.append())
        .node("map", lambda state: None)
        .node("worker", worker)
        .edge(START, "map")
        .router("map", lambda state: [send("worker", {"id": "a"}), send("worker", {"id": "b"})])
        .edge("worker", END)
        .compile()
    )
    opts = _opts(ref_checkpointer, "t-fanout-hitl")

    paused = run(g, None, **opts)
    assert 2 == len(paused.pending)
    assert ["worker#0:interrupt#0", "worker#1:interrupt#0"] == sorted(p.id for p in paused.pending)

    done = resume_keyed(g, {p.id: "yes" for p in paused.pending}, **opts)
    assert ["a:yes", "b:yes"] == sorted(done.state["out"])


def test_12_10_command_goto_overrides_edges() -> None:
    """ConformanceTests.cs · "§12.10 command goto overrides static edges; update reduces first".

    ``buy`` is reached only by the goto: it compiles (issue #8), a warning at most.
    """
    builder = (
        graph("router-node")
        .channel("log", channel.append())
        .channel("intent", channel.last_write(""))
        .node("classify", lambda state: command(update={"intent": "buy", "log": "classified"}, goto="buy"))
        .node("buy", lambda state: {"log": "bought"})
        .node("browse", lambda state: {"log": "browsed"})
        .edge(START, "classify")
        .edge("classify", "browse")
        .edge("buy", END)
        .edge("browse", END)
    )

    result = run(compile_allowing_a_warning(builder))
    assert "done" == result.status
    assert ["classified", "bought"] == result.state["log"]
    assert "buy" == result.state["intent"]


def test_a_command_without_goto_falls_back() -> None:
    """ConformanceTests.cs · "command with no goto falls back to static edges"."""
    g = (
        graph("cmd-fallback")
        .channel("log", channel.append())
        .node("a", lambda state: command(update={"log": "a"}))
        .node("b", lambda state: {"log": "b"})
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
    )

    assert ["a", "b"] == run(g).state["log"]


def test_a_command_goto_carries_sends() -> None:
    """ConformanceTests.cs · "command goto can carry sends discovered inside the node".

    ``worker`` is reached only by the goto's sends: it compiles, a warning at most.
    """
    builder = (
        graph("cmd-send")
        .channel("out", channel.append())
        .node("plan", lambda state: command(goto=[send("worker", {"n": 1}), send("worker", {"n": 2})]))
        .node("worker", lambda state: {"out": state["n"]})
        .edge(START, "plan")
        .edge("worker", END)
    )

    assert [1, 2] == sorted(run(compile_allowing_a_warning(builder)).state["out"])


def test_12_11_retry_does_not_re_run_completed_steps(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "§12.11 a retried node re-runs its body but NOT its completed steps"."""
    calls = Calls()

    def call_api() -> str:
        calls.hit("api")
        if calls["api"] < 3:
            raise RuntimeError(f"transient {calls['api']}")
        return "ok"

    def charge_then_call(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.step("charge", counted(calls, "charge", "charged"))
        ctx.step("call_api", call_api)
        return {"log": "done"}

    g = (
        graph("resilient")
        .channel("log", channel.append())
        .node("charge_then_call", charge_then_call, retry=RetryPolicy(max_attempts=3, backoff=0))
        .edge(START, "charge_then_call")
        .edge("charge_then_call", END)
        .compile()
    )

    result = run(g, None, **_opts(ref_checkpointer, "t-retry"))

    assert "done" == result.status
    assert (1, 3) == (calls["charge"], calls["api"])


def test_retry_events_are_emitted() -> None:
    """ConformanceTests.cs · "node_retry events announce each new attempt" (2, then 3: issue #8)."""
    failures = [0]

    def flaky(state: Any) -> dict[str, Any]:
        failures[0] += 1
        if failures[0] < 3:
            raise RuntimeError(f"boom {failures[0]}")
        return {"log": "ok"}

    g = (
        graph("retry-events")
        .channel("log", channel.append())
        .node("flaky", flaky, retry=RetryPolicy(max_attempts=5, backoff=0))
        .edge(START, "flaky")
        .edge("flaky", END)
        .compile()
    )

    assert [2, 3] == [e.attempt for e in stream(g) if isinstance(e, NodeRetry)]


def test_an_interrupt_is_not_retried(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "an interrupt is never treated as a retryable error"."""
    attempts = [0]

    def asks(state: Any, ctx: Any) -> dict[str, Any]:
        attempts[0] += 1
        ctx.interrupt({"q": "?"})
        return {"log": "resumed"}

    g = (
        graph("interrupt-not-error")
        .channel("log", channel.append())
        .node("asks", asks, retry=RetryPolicy(max_attempts=3, backoff=0))
        .edge(START, "asks")
        .edge("asks", END)
        .compile()
    )

    paused = run(g, None, **_opts(ref_checkpointer, "t-int-retry"))
    assert "interrupted" == paused.status
    assert 1 == attempts[0]
