"""The eleven conformance scenarios of the reference (``conformance/README.md``).

Each runs exactly as the TypeScript reference writes it (``ilmek.test.ts``,
``control.test.ts``, ``spec.test.ts``): same graph, same inputs, same calls,
same assertions. A port is "done enough to trust" when all eleven pass. The
other cases of those files are in ``test_ilmek.py`` and ``test_control.py``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ilmek import (
    Checkpointer,
    NondeterminismError,
    ResumeError,
    from_spec,
    resume,
    resume_keyed,
    run,
    to_spec,
)
from tests.support.helpers import Calls
from tests.support.reference import (
    SUPPORT_REGISTRY,
    SUPPORT_SPEC,
    approve_each_item,
    charge_then_flaky_api,
    checkout,
    compile_allowing_a_warning,
    crashes_once_after_a_step,
    goto_over_a_static_edge,
    map_reduce,
    race,
    two_interrupts,
    two_pauses,
    wobbly,
)


def test_1_a_step_executes_once_across_an_interrupt_resume_cycle(ref_checkpointer: Checkpointer) -> None:
    """Scenario 1 · ilmek.test.ts "§12.1 a step executes exactly once across an interrupt/resume cycle"."""
    calls = Calls()
    g = checkout(calls)
    opts: dict[str, Any] = {"thread_id": "t-checkout", "checkpointer": ref_checkpointer}

    paused = run(g, {}, **opts)
    assert "interrupted" == paused.status
    assert "interrupt#0" == paused.pending[0].key
    assert "work" == paused.pending[0].node
    assert {"question": "Charge order?"} == paused.pending[0].payload
    assert 1 == calls["create_order"]
    assert 0 == calls["charge"]

    done = resume(g, "yes", **opts)
    assert "done" == done.status
    assert ["order-1/yes/charged-order-1"] == done.state["log"]
    assert 1 == calls["create_order"]
    assert 1 == calls["charge"]


def test_2_two_interrupts_in_one_node_resolve_independently(ref_checkpointer: Checkpointer) -> None:
    """Scenario 2 · ilmek.test.ts "§12.2 two interrupts in one node resolve independently,
    one resume each"."""

    g = two_interrupts()
    opts: dict[str, Any] = {"thread_id": "t-double", "checkpointer": ref_checkpointer}

    p1 = run(g, {}, **opts)
    assert "interrupt#0" == p1.pending[0].key
    assert {"q": "first"} == p1.pending[0].payload

    p2 = resume(g, "A", **opts)
    assert "interrupted" == p2.status
    assert "interrupt#1" == p2.pending[0].key
    assert {"q": "second"} == p2.pending[0].payload

    done = resume(g, "B", **opts)
    assert "done" == done.status
    assert ["A+B"] == done.state["log"]


def test_3_an_interrupt_in_a_loop_with_stable_keys_resumes_at_the_right_iteration(
    ref_checkpointer: Checkpointer,
) -> None:
    """Scenario 3 · ilmek.test.ts "§12.3 an interrupt inside a loop with stable keys resumes at
    the right iteration"."""
    calls = Calls()
    g = approve_each_item(calls)
    opts: dict[str, Any] = {"thread_id": "t-loop", "checkpointer": ref_checkpointer}

    p1 = run(g, {"items": ["a", "b"]}, **opts)
    assert "approve:a#0" == p1.pending[0].key
    assert 1 == calls["a"]
    assert 0 == calls["b"]

    p2 = resume(g, "yes-a", **opts)
    assert "approve:b#0" == p2.pending[0].key

    done = resume(g, "yes-b", **opts)
    assert "done" == done.status
    assert ["yes-a", "yes-b"] == done.state["log"]
    assert 1 == calls["a"]
    assert 1 == calls["b"]


def test_4_superstep_reduce_order_is_task_order_not_completion_order() -> None:
    """Scenario 4 · ilmek.test.ts "§12.4 superstep reduce order is task order, not completion order"."""
    assert "declaredSecond" == run(race()).state["winner"]


def test_5_a_crashed_superstep_replays_with_zero_re_executed_steps(ref_checkpointer: Checkpointer) -> None:
    """Scenario 5 · ilmek.test.ts "§12.5 a crashed superstep replays with zero re-executed steps".

    As the reference writes it: the crash is a node error after a completed
    step, and the thread is continued with ``run(g, {}, ...)`` — input on an
    unfinished thread continues its plan, replaying the journal.
    """
    calls = Calls()
    g = crashes_once_after_a_step(calls)
    opts: dict[str, Any] = {"thread_id": "t-flaky", "checkpointer": ref_checkpointer}

    crashed = run(g, {}, **opts)
    assert "error" == crashed.status
    assert "transient boom" in str(crashed.errors[0][1])
    assert 1 == calls["expensive"]

    retried = run(g, {}, **opts)
    assert "done" == retried.status
    assert 1 == calls["expensive"]


def test_6_compile_spec_then_to_spec_round_trips() -> None:
    """Scenario 6 · spec.test.ts "§12.6 compile(spec) |> toSpec() round-trips" (`neq` included)."""
    assert SUPPORT_SPEC == to_spec(from_spec(copy.deepcopy(SUPPORT_SPEC), SUPPORT_REGISTRY))


def test_7_strict_mode_raises_when_a_journaled_step_vanishes(ref_checkpointer: Checkpointer) -> None:
    """Scenario 7 · ilmek.test.ts "§12.7 strict mode raises when a journaled step vanishes on replay"."""
    take_branch = [True]
    g = wobbly(take_branch)
    opts: dict[str, Any] = {"thread_id": "t-wobbly", "checkpointer": ref_checkpointer}
    assert "interrupted" == run(g, {}, **opts).status

    take_branch[0] = False

    result = resume(g, "yes", **opts)
    assert "error" == result.status
    node, error = result.errors[0]
    assert "work" == node
    assert isinstance(error, NondeterminismError)
    assert "sometimes#0" in str(error)


def test_8_concurrent_pauses_resolve_to_their_own_answers(ref_checkpointer: Checkpointer) -> None:
    """Scenario 8 · ilmek.test.ts "a bare answer to concurrent pauses is refused, and names the
    alternative"."""
    g = two_pauses()
    opts: dict[str, Any] = {"thread_id": "t-fanout", "checkpointer": ref_checkpointer}

    paused = run(g, {}, **opts)
    assert "interrupted" == paused.status
    assert 2 == len(paused.pending)
    assert ["interrupt#0", "interrupt#0"] == [p.key for p in paused.pending]
    assert ["a:interrupt#0", "b:interrupt#0"] == sorted(p.id for p in paused.pending)

    with pytest.raises(ResumeError, match=r"\b2\b.*resume_keyed"):
        resume(g, "yes", **opts)

    done = resume_keyed(g, {p.id: f"ans-{p.node}" for p in paused.pending}, **opts)
    assert "done" == done.status
    assert ["ans-a", "ans-b"] == sorted(done.state["log"])


def test_9_a_send_fan_out_runs_the_target_once_per_payload() -> None:
    """Scenario 9 · control.test.ts "§12.9 one target run per payload, each with its own input,
    reduced independent of scheduling"."""
    seen_inputs: list[int] = []
    g = map_reduce(seen_inputs, fan_in="reduce")

    result = run(g, {"items": [1, 2, 3]})

    assert "done" == result.status
    assert [1, 2, 3] == sorted(seen_inputs)
    assert [10, 20, 30] == sorted(result.state["results"])


def test_10_command_goto_overrides_static_edges_and_update_reduces_first() -> None:
    """Scenario 10 · control.test.ts "§12.10 goto overrides static edges; update reduces before
    goto is planned".

    ``buy`` is reached only by the goto: it compiles (MODEL §15), a warning at most.
    """
    g = compile_allowing_a_warning(goto_over_a_static_edge())

    result = run(g, {})
    assert "done" == result.status
    assert ["classified", "bought"] == result.state["log"]
    assert "buy" == result.state["intent"]


def test_11_a_retried_node_re_runs_its_body_not_its_completed_steps(ref_checkpointer: Checkpointer) -> None:
    """Scenario 11 · control.test.ts "§12.11 a retried node re-runs its body but NOT its completed steps"."""
    calls = Calls()

    result = run(charge_then_flaky_api(calls), {}, thread_id="t-retry", checkpointer=ref_checkpointer)

    assert "done" == result.status
    assert 1 == calls["charge"]
    assert 3 == calls["call_api"]
