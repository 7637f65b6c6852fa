"""Ported from the reference's ``ts/packages/core/test/control.test.ts``: send, command, retry.

Its §12.9, §12.10 and §12.11 cases are conformance scenarios 9 to 11 and live
in ``test_conformance_scenarios.py``.
"""

from __future__ import annotations

from typing import Any

from ilmek import (
    END,
    START,
    Checkpointer,
    RetryPolicy,
    channel,
    command,
    graph,
    resume_keyed,
    run,
    send,
    stream,
)
from ilmek.events import NodeRetry
from tests.support.helpers import Calls
from tests.support.reference import (
    asks_under_retry,
    command_without_goto,
    compile_allowing_a_warning,
    fails_twice,
    goto_sends,
    send_pauses,
)

# --- send: dynamic fan-out --------------------------------------------------------------------


def test_the_fan_in_node_runs_once_after_every_worker_reduced() -> None:
    """control.test.ts · "fan-in node runs once, after every worker reduced"."""
    runs = Calls()

    def join(state: Any) -> dict[str, Any]:
        runs.hit("join")
        return {"results": -len(state["results"])}

    g = (
        graph("fanin")
        .channel("items", channel.last_write([]))
        .channel("results", channel.append())
        .node("map", lambda state: {})
        .node("worker", lambda state: {"results": state["n"]})
        .node("join", join)
        .edge(START, "map")
        .router("map", lambda state: [send("worker", {"n": n}) for n in state["items"]])
        .edge("worker", "join")
        .edge("join", END)
        .compile()
    )

    result = run(g, {"items": [1, 2, 3]})

    assert 1 == runs["join"]
    assert -3 in result.state["results"]


def test_two_sends_to_one_node_with_identical_payloads_both_run() -> None:
    """control.test.ts · "two sends to one node with identical payloads both run — not deduped"."""
    g = (
        graph("dup")
        .channel("out", channel.append())
        .node("map", lambda state: {})
        .node("worker", lambda state: {"out": state["tag"]})
        .edge(START, "map")
        .router("map", lambda state: [send("worker", {"tag": "x"}), send("worker", {"tag": "x"})])
        .edge("worker", END)
        .compile()
    )

    assert ["x", "x"] == run(g, {}).state["out"]


def test_an_interrupt_inside_one_fan_out_branch_does_not_collide_with_its_siblings(
    ref_checkpointer: Checkpointer,
) -> None:
    """control.test.ts · "an interrupt inside one fan-out branch does not collide with its siblings"."""
    opts: dict[str, Any] = {"thread_id": "t-fanout-hitl", "checkpointer": ref_checkpointer}
    g = send_pauses()

    paused = run(g, {}, **opts)
    assert "interrupted" == paused.status
    assert 2 == len(paused.pending)
    assert ["worker#0:interrupt#0", "worker#1:interrupt#0"] == sorted(p.id for p in paused.pending)

    done = resume_keyed(g, {p.id: "yes" for p in paused.pending}, **opts)
    assert "done" == done.status
    assert ["a:yes", "b:yes"] == sorted(done.state["out"])


# --- command: node-directed routing -------------------------------------------------------------


def test_a_command_with_no_goto_falls_back_to_static_edges() -> None:
    """control.test.ts · "command with no goto falls back to static edges"."""
    assert ["a", "b"] == run(command_without_goto()).state["log"]


def test_a_node_with_no_static_edges_is_legal_when_it_always_returns_a_goto() -> None:
    """control.test.ts · "a node with no static edges is legal when it always returns a goto".

    ``finish`` is reached only by the goto: it compiles (issue #8), a warning at most.
    """
    builder = (
        graph("all-goto")
        .channel("log", channel.append())
        .node("start", lambda state: command(goto="finish"))
        .node("finish", lambda state: {"log": ["done"]})
        .edge(START, "start")
        .edge("finish", END)
    )

    assert ["done"] == run(compile_allowing_a_warning(builder)).state["log"]


def test_a_command_goto_can_carry_sends_for_fan_out_discovered_inside_the_node() -> None:
    """control.test.ts · "command goto can carry sends for fan-out discovered inside the node".

    ``worker`` is reached only by the goto's sends: it compiles, a warning at most.
    """
    result = run(compile_allowing_a_warning(goto_sends()), {})
    assert [1, 2] == sorted(result.state["out"])


def test_goto_end_ends_that_branch() -> None:
    """control.test.ts · "goto END ends that branch"."""
    g = (
        graph("goto-end")
        .channel("log", channel.append())
        .node("a", lambda state: command(update={"log": ["a"]}, goto=END))
        .node("b", lambda state: {"log": ["b"]})
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
    )

    assert ["a"] == run(g).state["log"]


# --- retry ----------------------------------------------------------------------------------------


def test_node_retry_events_are_emitted_before_each_new_attempt() -> None:
    """control.test.ts · "node_retry events are emitted before each new attempt".

    ``attempt`` numbers the attempt about to run: 2, then 3 (issue #8).
    """
    assert [2, 3] == [e.attempt for e in stream(fails_twice()) if isinstance(e, NodeRetry)]


def test_exhausting_attempts_ends_the_run_in_error() -> None:
    """control.test.ts · "exhausting attempts ends the run in error"."""

    def nope(state: Any) -> None:
        raise RuntimeError("permanent")

    g = (
        graph("always-fails")
        .channel("log", channel.append())
        .node("nope", nope, retry=RetryPolicy(max_attempts=2, backoff=0))
        .edge(START, "nope")
        .edge("nope", END)
        .compile()
    )

    result = run(g)
    assert "error" == result.status
    assert "permanent" in str(result.errors[0][1])


def test_retry_on_can_decline_to_retry_an_error() -> None:
    """control.test.ts · "retryOn can decline to retry an error"."""
    attempts = [0]

    def picky(state: Any) -> None:
        attempts[0] += 1
        raise RuntimeError("fatal")

    policy = RetryPolicy(max_attempts=5, backoff=0, retry_on=lambda error: "fatal" not in str(error))
    g = (
        graph("selective")
        .channel("log", channel.append())
        .node("picky", picky, retry=policy)
        .edge(START, "picky")
        .edge("picky", END)
        .compile()
    )

    result = run(g)
    assert "error" == result.status
    assert 1 == attempts[0]


def test_an_interrupt_is_never_treated_as_a_retryable_error(ref_checkpointer: Checkpointer) -> None:
    """control.test.ts · "an interrupt is never treated as a retryable error"."""
    calls = Calls()

    paused = run(asks_under_retry(calls), {}, thread_id="t-int-retry", checkpointer=ref_checkpointer)
    assert "interrupted" == paused.status
    assert 1 == calls["asks"]
