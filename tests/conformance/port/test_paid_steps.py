"""The port suite, a step once paid for is not paid again: after an operator's ``update_state`` on a
paused thread, after a result that could not be stored, on a fork from a pause; and what a fork from
another checkpoint runs again, as docs/promises.rst says. Every backend, each step counted.

The journals a new checkpoint inherits are decided by one rule (``ilmek.journals``) whichever path
makes the checkpoint: a pause, a run's input, a fork, a human edit.
"""

from __future__ import annotations

from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpoint,
    Checkpointer,
    CompiledGraph,
    NodeRetry,
    ResumeError,
    RetryPolicy,
    SerializationError,
    StepResultNotStoredError,
    channel,
    forget_unstored_steps,
    graph,
    resume,
    run,
    update_state,
)
from ilmek.types import JournalEntry, Pending, ScheduledTask, new_checkpoint_id, task_id_for
from tests.support.helpers import Calls

pytestmark = pytest.mark.timeout(60)

on_three_stores = pytest.mark.parametrize(
    "backend", ["memory", "sqlite-file", "postgres-pool"], indirect=True
)
"""For what does not depend on the client kind: memory, a SQLite file and a Postgres pool."""


def charge_after_approval(calls: Calls) -> CompiledGraph:
    """Asks to approve, charges (a journaled step), then fails unless an operator fixed the address."""

    def pay(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt({"question": "charge 10?"})
        receipt = ctx.step("charge", calls.hit, "charge")
        if not state["address_ok"]:
            raise RuntimeError("the shipping address is invalid")
        return {"log": [f"{answer}: {receipt}"]}

    return (
        graph("pay", {"address_ok": channel.last_write(False), "log": channel.append()})
        .node("pay", pay)
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
    )


# --- item 3: update_state on a paused thread ------------------------------------------------------------


def test_an_operator_repair_between_two_resumes_charges_once(checkpointer: Checkpointer) -> None:
    """A resume fails after ``charge``; the operator fixes the state; the same answer ends with no charge."""
    calls = Calls()
    g = charge_after_approval(calls)
    opts: dict[str, Any] = {"thread_id": "repair", "checkpointer": checkpointer}
    assert "interrupted" == run(g, {}, **opts).status
    assert "error" == resume(g, "yes", **opts).status

    update_state(g, checkpointer, "repair", {"address_ok": True})
    done = resume(g, "yes", **opts)

    assert "done" == done.status
    assert ["yes: None"] == done.state["log"]
    assert 1 == calls["charge"]


def test_a_different_answer_is_still_refused_after_an_operator_repair(checkpointer: Checkpointer) -> None:
    """An edit does not reopen a pause a failed resume answered: another answer is refused, nothing runs."""
    calls = Calls()
    g = charge_after_approval(calls)
    opts: dict[str, Any] = {"thread_id": "refused", "checkpointer": checkpointer}
    run(g, {}, **opts)
    resume(g, "yes", **opts)
    update_state(g, checkpointer, "refused", {"address_ok": True})

    with pytest.raises(ResumeError, match="already answered with 'yes'"):
        resume(g, "no", **opts)

    assert 1 == calls["charge"]
    assert "done" == resume(g, "yes", **opts).status
    assert 1 == calls["charge"]


@on_three_stores
def test_to_answer_differently_after_a_repair_fork_from_the_pause_not_from_the_edit(
    checkpointer: Checkpointer,
) -> None:
    """The edit comes after the failed resume's answer, so a fork from it keeps that answer; a fork from
    the pause itself answers afresh and runs what follows the pause again, ``charge`` included."""
    calls = Calls()
    g = charge_after_approval(calls)
    opts: dict[str, Any] = {"thread_id": "forks", "checkpointer": checkpointer}
    paused = run(g, {}, **opts)
    assert "error" == resume(g, "yes", **opts).status
    edited = update_state(g, checkpointer, "forks", {"address_ok": True})

    with pytest.raises(ResumeError, match="already answered with 'yes'"):
        resume(g, "no", checkpoint_id=edited.id, **opts)
    assert 1 == calls["charge"]
    forked = resume(g, "no", checkpoint_id=paused.checkpoint_id, **opts)

    assert "error" == forked.status  # that branch's address was never fixed
    assert 2 == calls["charge"]


@on_three_stores
def test_an_edit_of_a_pause_nobody_answered_leaves_it_open_to_any_answer(checkpointer: Checkpointer) -> None:
    """With no resume before the edit, the pause takes whatever answer comes, and the charge runs once."""
    calls = Calls()
    g = charge_after_approval(calls)
    opts: dict[str, Any] = {"thread_id": "fresh", "checkpointer": checkpointer}
    run(g, {}, **opts)

    update_state(g, checkpointer, "fresh", {"address_ok": True})
    done = resume(g, "no", **opts)

    assert ["no: None"] == done.state["log"]
    assert 1 == calls["charge"]


@on_three_stores
def test_a_pause_written_by_ilmek_0_1_keeps_its_steps_when_its_task_pauses_again(
    checkpointer: Checkpointer,
) -> None:
    """A 0.1 pause carries its journal inside itself; the pause after it inherits that too: no re-order."""
    calls = Calls()

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        order = ctx.step("order", calls.hit, "order")
        size = ctx.interrupt({"q": "size?"}, key="size")
        colour = ctx.interrupt({"q": "colour?"}, key="colour")
        return {"log": [f"{order} {size} {colour}"]}

    g = graph("old", {"log": channel.append()}).node("ask", ask).edge(START, "ask").edge("ask", END).compile()
    pause_id = new_checkpoint_id()
    checkpointer.put(
        "old",
        Checkpoint(
            id=pause_id,
            thread_id="old",
            next=(ScheduledTask(node="ask", task_key="ask"),),
            pending=(
                Pending(
                    id="ask:size#0",
                    task_id=task_id_for("old", pause_id, "ask"),
                    node="ask",
                    key="size#0",
                    payload={"q": "size?"},
                ),
            ),
            task_journals={
                "ask": (
                    JournalEntry(key="order#0", value="order 1042"),
                    JournalEntry(key="size#0", kind="interrupt", payload={"q": "size?"}),
                )
            },
        ),
    )
    opts: dict[str, Any] = {"thread_id": "old", "checkpointer": checkpointer}

    assert "interrupted" == resume(g, "large", **opts).status
    done = resume(g, "red", **opts)

    assert ["order 1042 large red"] == done.state["log"]
    assert 0 == calls["order"]


# --- item 4: a step whose result cannot be stored ----------------------------------------------------------


class SdkResponse:
    """What an SDK returns: a class nobody registered with ``ilmek.serde``, so it cannot be stored."""

    def __init__(self, charge_id: str) -> None:
        self.charge_id = charge_id


def charge_returning_an_sdk_object(
    calls: Calls, retry: RetryPolicy | None = None, *, fixed: list[bool] | None = None
) -> CompiledGraph:
    """One node whose ``charge`` step returns an SDK object (plain data once ``fixed[0]`` is set)."""

    def pay(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        def charge() -> Any:
            calls.hit("charge")
            return {"charge_id": "ch_1"} if fixed and fixed[0] else SdkResponse("ch_1")

        receipt = ctx.step("charge", charge)
        return {"log": [receipt["charge_id"]]}

    return (
        graph("sdk", {"log": channel.append()})
        .node("pay", pay, retry=retry)
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
    )


def test_a_result_that_cannot_be_stored_charges_once_across_retries_and_runs(
    checkpointer: Checkpointer,
) -> None:
    """The retry policy's attempts and a later ``run(g, None)`` meet the record that ``charge`` ran."""
    calls = Calls()
    g = charge_returning_an_sdk_object(calls, RetryPolicy(max_attempts=3, backoff=0.0))
    opts: dict[str, Any] = {"thread_id": "sdk", "checkpointer": checkpointer}

    first = run(g, {}, **opts)
    later = run(g, None, **opts)

    assert 1 == calls["charge"]
    for result in (first, later):
        assert "error" == result.status
        [(node, error)] = result.errors
        assert "pay" == node
        assert isinstance(error, StepResultNotStoredError)
        assert isinstance(error, SerializationError)
        assert ("charge#0", "pay", "sdk") == (error.key, error.node, error.thread_id)
        assert "SdkResponse" in str(error)
        assert "ilmek.serde.register" in str(error)
        assert "forget_unstored_steps" in str(error)
    assert "error" == checkpointer.get_thread("sdk").status
    assert [] == [event for event in first.events if isinstance(event, NodeRetry)]


def test_a_retry_of_a_node_that_hides_the_error_meets_the_record_and_charges_once(
    checkpointer: Checkpointer,
) -> None:
    """A node that turns the error into one its policy retries: each attempt finds ``charge`` ran."""
    calls = Calls()

    def pay(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        try:
            ctx.step("charge", lambda: calls.hit("charge") or SdkResponse("ch_1"))
        except StepResultNotStoredError as error:
            raise ConnectionError("the gateway said something odd") from error
        return {}

    g = (
        graph("hides", {"log": channel.append()})
        .node("pay", pay, retry=RetryPolicy(max_attempts=3, backoff=0.0))
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
    )
    failed = run(g, {}, thread_id="hides", checkpointer=checkpointer)

    assert "error" == failed.status
    assert 2 == len([event for event in failed.events if isinstance(event, NodeRetry)])
    assert 1 == calls["charge"]


def test_forgetting_an_unstored_step_runs_it_again_once_the_code_is_fixed(checkpointer: Checkpointer) -> None:
    """``forget_unstored_steps`` is the user's say-so: the next run calls the (fixed) step once more."""
    calls, fixed = Calls(), [False]
    g = charge_returning_an_sdk_object(calls, fixed=fixed)
    opts: dict[str, Any] = {"thread_id": "fixed", "checkpointer": checkpointer}
    assert "error" == run(g, {}, **opts).status

    fixed[0] = True
    assert "error" == run(g, None, **opts).status
    forgotten = forget_unstored_steps(g, checkpointer, thread_id="fixed")
    done = run(g, {}, **opts)

    assert ("pay:charge#0",) == forgotten
    assert "done" == done.status
    assert ["ch_1"] == done.state["log"]
    assert 2 == calls["charge"]
    assert () == forget_unstored_steps(g, checkpointer, thread_id="fixed")


def test_an_unstored_result_after_an_answer_is_not_charged_again_by_the_next_resume(
    checkpointer: Checkpointer,
) -> None:
    """After a pause: resuming again with the same answer meets the record; forgetting it lets it run."""
    calls, fixed = Calls(), [False]

    def pay(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        def charge() -> Any:
            calls.hit("charge")
            return {"charge_id": "ch_1"} if fixed[0] else SdkResponse("ch_1")

        answer = ctx.interrupt({"question": "charge?"})
        return {"log": [answer, ctx.step("charge", charge)["charge_id"]]}

    g = (
        graph("asks", {"log": channel.append()})
        .node("pay", pay)
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
    )
    opts: dict[str, Any] = {"thread_id": "asks", "checkpointer": checkpointer}
    run(g, {}, **opts)
    assert "error" == resume(g, "yes", **opts).status
    assert "error" == resume(g, "yes", **opts).status
    assert 1 == calls["charge"]

    fixed[0] = True
    assert ("pay:charge#0",) == forget_unstored_steps(g, checkpointer, thread_id="asks")
    done = resume(g, "yes", **opts)

    assert ["yes", "ch_1"] == done.state["log"]
    assert 2 == calls["charge"]


# --- item 6: forks ---------------------------------------------------------------------------------------


def order_then_charge(calls: Calls, fail: list[bool]) -> CompiledGraph:
    """``order`` records a step, then ``charge`` records one and fails while ``fail[0]`` is set."""

    def order(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("create", calls.hit, "create")
        return {"log": ["ordered"]}

    def charge(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("charge", calls.hit, "charge")
        if fail[0]:
            raise RuntimeError("the receipt printer is jammed")
        return {"log": ["charged"]}

    return (
        graph("shop", {"note": channel.last_write(""), "log": channel.append()})
        .node("order", order)
        .node("charge", charge)
        .edge(START, "order")
        .edge("order", "charge")
        .edge("charge", END)
        .compile()
    )


def planning(checkpointer: Checkpointer, thread_id: str, node: str) -> str:
    """The id of the thread's oldest checkpoint that plans ``node``."""
    return next(c.id for c in reversed(checkpointer.list(thread_id)) if [t.node for t in c.next] == [node])


@on_three_stores
def test_a_fork_from_a_pause_replays_the_steps_before_it(checkpointer: Checkpointer) -> None:
    """Answering an old pause differently: ``charge`` before the pause ran once for both branches."""
    calls = Calls()

    def pay(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("charge", calls.hit, "charge")
        answer = ctx.interrupt({"question": "ship it?"})
        ctx.step("ship", calls.hit, f"ship {answer}")
        return {"log": [answer]}

    g = (
        graph("ship", {"log": channel.append()})
        .node("pay", pay)
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
    )
    opts: dict[str, Any] = {"thread_id": "pause-fork", "checkpointer": checkpointer}
    paused = run(g, {}, **opts)
    assert ["yes"] == resume(g, "yes", **opts).state["log"]

    forked = resume(g, "no", checkpoint_id=paused.checkpoint_id, **opts)

    assert ["no"] == forked.state["log"]
    assert {"charge": 1, "ship yes": 1, "ship no": 1} == dict(calls)


@on_three_stores
def test_a_fork_from_a_checkpoint_whose_superstep_committed_runs_its_tasks_again(
    checkpointer: Checkpointer,
) -> None:
    """A committed superstep spent its journals (as in ilmek/1): a fork from its checkpoint charges again."""
    calls = Calls()
    g = order_then_charge(calls, [False])
    opts: dict[str, Any] = {"thread_id": "committed-fork", "checkpointer": checkpointer}
    assert "done" == run(g, {}, **opts).status

    forked = run(
        g, {"note": "again"}, checkpoint_id=planning(checkpointer, "committed-fork", "charge"), **opts
    )

    assert ["ordered", "charged"] == forked.state["log"]
    assert {"create": 1, "charge": 2} == dict(calls)


@on_three_stores
def test_a_fork_from_a_checkpoint_whose_superstep_failed_replays_what_it_recorded(
    checkpointer: Checkpointer,
) -> None:
    """The superstep that failed there never committed: a fork from its checkpoint replays ``charge``."""
    calls, fail = Calls(), [True]
    g = order_then_charge(calls, fail)
    opts: dict[str, Any] = {"thread_id": "failed-fork", "checkpointer": checkpointer}
    assert "error" == run(g, {}, **opts).status
    failed_at = planning(checkpointer, "failed-fork", "charge")
    update_state(g, checkpointer, "failed-fork", {"note": "the thread moved on"})
    fail[0] = False

    forked = run(g, {"note": "fixed"}, checkpoint_id=failed_at, **opts)

    assert "done" == forked.status
    assert ["ordered", "charged"] == forked.state["log"]
    assert {"create": 1, "charge": 1} == dict(calls)
