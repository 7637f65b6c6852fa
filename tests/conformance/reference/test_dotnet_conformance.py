"""Ported from the .NET port's ``dotnet/test/Ilmek.Core.Tests/ConformanceTests.cs``.

The same MODEL §12 scenarios as the TypeScript suite, written the .NET way:
runs start with no input (``RunAsync(null, ...)``, here ``run(g, None, ...)``),
so scenario 5 continues its failed thread with ``run(g, None)``; retry
policies have no backoff; §12.9 fans back in through a ``join`` node.
"""

from __future__ import annotations

from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    GraphError,
    NondeterminismError,
    ResumeError,
    channel,
    from_spec,
    graph,
    resume,
    resume_keyed,
    run,
    stream,
    to_spec,
)
from ilmek.events import NodeRetry
from tests.support.helpers import Calls
from tests.support.reference import (
    approve_each_item,
    asks_under_retry,
    charge_then_flaky_api,
    checkout,
    command_without_goto,
    compile_allowing_a_warning,
    crashes_once_after_a_step,
    dotnet_opts,
    fails_twice,
    goto_over_a_static_edge,
    goto_sends,
    map_reduce,
    race,
    send_pauses,
    two_interrupts,
    two_pauses,
    wobbly,
)


def test_12_1_step_runs_once_across_resume(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "§12.1 a step executes exactly once across an interrupt/resume cycle"."""
    calls = Calls()
    g = checkout(calls)
    opts = dotnet_opts(ref_checkpointer, "t-checkout")

    paused = run(g, None, **opts)
    assert "interrupted" == paused.status
    assert "interrupt#0" == paused.pending[0].key
    assert "work" == paused.pending[0].node
    assert (1, 0) == (calls["create_order"], calls["charge"])

    done = resume(g, "yes", **opts)
    assert "done" == done.status
    assert ["order-1/yes/charged-order-1"] == done.state["log"]
    assert (1, 1) == (calls["create_order"], calls["charge"])


def test_12_2_two_interrupts_resolve_independently(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "§12.2 two interrupts in one node resolve independently, one resume each"."""
    g = two_interrupts()
    opts = dotnet_opts(ref_checkpointer, "t-double")

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
    calls = Calls()
    g = approve_each_item(calls)
    opts = dotnet_opts(ref_checkpointer, "t-loop")

    p1 = run(g, {"items": ["a", "b"]}, **opts)
    assert "approve:a#0" == p1.pending[0].key
    assert {"a": 1} == dict(calls)

    assert "approve:b#0" == resume(g, "yes-a", **opts).pending[0].key

    done = resume(g, "yes-b", **opts)
    assert "done" == done.status
    assert ["yes-a", "yes-b"] == done.state["log"]
    assert {"a": 1, "b": 1} == dict(calls)


def test_12_4_reduce_order_is_task_order() -> None:
    """ConformanceTests.cs · "§12.4 superstep reduce order is task order, not completion order"."""
    assert "declaredSecond" == run(race()).state["winner"]


def test_12_5_a_crash_replays_without_re_running_steps(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "§12.5 a crashed superstep replays with zero re-executed steps" (input None)."""
    calls = Calls()
    g = crashes_once_after_a_step(calls)
    opts = dotnet_opts(ref_checkpointer, "t-flaky")

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


def test_12_7_strict_mode_catches_divergence(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "§12.7 strict mode raises when a journaled step vanishes on replay"."""
    take_branch = [True]
    g = wobbly(take_branch)
    opts = dotnet_opts(ref_checkpointer, "t-wobbly")
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
    g = wobbly(take_branch)
    opts = dotnet_opts(ref_checkpointer, "t-lax", strict=False)
    assert "interrupted" == run(g, None, **opts).status

    take_branch[0] = False

    assert "done" == resume(g, "yes", **opts).status


def test_12_8_concurrent_pauses_get_their_own_answers(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "§12.8 concurrent pauses resolve to their own answers"."""
    g = two_pauses()
    opts = dotnet_opts(ref_checkpointer, "t-fanout")

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
    g = map_reduce(seen, fan_in="join")

    result = run(g, {"items": [1, 2, 3]})

    assert "done" == result.status
    assert [1, 2, 3] == sorted(seen)
    assert [10, 20, 30] == sorted(result.state["results"])


def test_fan_out_interrupts_are_distinct(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "an interrupt in one fan-out branch does not collide with its siblings"."""
    g = send_pauses()
    opts = dotnet_opts(ref_checkpointer, "t-fanout-hitl")

    paused = run(g, None, **opts)
    assert 2 == len(paused.pending)
    assert ["worker#0:interrupt#0", "worker#1:interrupt#0"] == sorted(p.id for p in paused.pending)

    done = resume_keyed(g, {p.id: "yes" for p in paused.pending}, **opts)
    assert ["a:yes", "b:yes"] == sorted(done.state["out"])


def test_12_10_command_goto_overrides_edges() -> None:
    """ConformanceTests.cs · "§12.10 command goto overrides static edges; update reduces first".

    ``buy`` is reached only by the goto: it compiles (issue #8), a warning at most.
    """
    result = run(compile_allowing_a_warning(goto_over_a_static_edge()))
    assert "done" == result.status
    assert ["classified", "bought"] == result.state["log"]
    assert "buy" == result.state["intent"]


def test_a_command_without_goto_falls_back() -> None:
    """ConformanceTests.cs · "command with no goto falls back to static edges"."""
    assert ["a", "b"] == run(command_without_goto()).state["log"]


def test_a_command_goto_carries_sends() -> None:
    """ConformanceTests.cs · "command goto can carry sends discovered inside the node".

    ``worker`` is reached only by the goto's sends: it compiles, a warning at most.
    """
    assert [1, 2] == sorted(run(compile_allowing_a_warning(goto_sends())).state["out"])


def test_12_11_retry_does_not_re_run_completed_steps(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "§12.11 a retried node re-runs its body but NOT its completed steps"."""
    calls = Calls()

    result = run(charge_then_flaky_api(calls), None, **dotnet_opts(ref_checkpointer, "t-retry"))

    assert "done" == result.status
    assert (1, 3) == (calls["charge"], calls["call_api"])


def test_retry_events_are_emitted() -> None:
    """ConformanceTests.cs · "node_retry events announce each new attempt" (2, then 3: issue #8)."""
    assert [2, 3] == [e.attempt for e in stream(fails_twice()) if isinstance(e, NodeRetry)]


def test_an_interrupt_is_not_retried(ref_checkpointer: Checkpointer) -> None:
    """ConformanceTests.cs · "an interrupt is never treated as a retryable error"."""
    calls = Calls()

    paused = run(asks_under_retry(calls), None, **dotnet_opts(ref_checkpointer, "t-int-retry"))
    assert "interrupted" == paused.status
    assert 1 == calls["asks"]
