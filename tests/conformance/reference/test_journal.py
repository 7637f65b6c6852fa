"""Ported from the reference's ``ts/packages/core/test/journal.test.ts``: replay memory.

The reference tests its ``Journal`` and ``TaskJournal`` classes directly.
Python has no standalone journal: a task's journal is what ``ctx.step`` and
``ctx.interrupt`` record (read back as ``ctx.journal``), the engine writes
answers, and the port stores ``JournalEntry`` tuples. Each case is checked
where Python has that behaviour; the two with no engine-visible form use
``ilmek.context.TaskJournal``. Not ported: "answering does not reorder the
entry" — a pause halts its task, so the pause is always the last entry when
it is answered and no order can change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    CompiledGraph,
    JournalEntry,
    NondeterminismError,
    ResumeError,
    channel,
    graph,
    pending_interrupts,
    resume,
    resume_keyed,
    run,
)
from ilmek.context import TaskJournal
from tests.support.helpers import Calls
from tests.support.reference import linear


def _pay(fn: Callable[..., Any]) -> CompiledGraph:
    """START -> pay -> END with an append channel ``log``."""
    builder = graph("pay").channel("log", channel.append()).node("pay", fn)
    return builder.edge(START, "pay").edge("pay", END).compile()


def _keys_after(body: Callable[[Any], None]) -> list[str]:
    """The journal keys a node's first pass holds after ``body(ctx)``."""
    seen: list[list[str]] = []

    def work(state: Any, ctx: Any) -> None:
        body(ctx)
        seen.append(list(ctx.journal))

    assert "done" == run(linear("keys", work)).status
    return seen[0]


# --- the journal --------------------------------------------------------------------------


def test_a_fresh_task_has_an_empty_journal() -> None:
    """journal.test.ts · "a fresh journal is empty"."""
    assert [] == _keys_after(lambda ctx: None)


def test_a_step_returning_none_is_journaled_and_not_re_run(ref_checkpointer: Checkpointer) -> None:
    """journal.test.ts · "putDone records a value, including undefined"."""
    calls = Calls()
    journals: list[dict[str, JournalEntry]] = []

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.step("log", calls.hit, "log")
        journals.append(dict(ctx.journal))
        ctx.interrupt({"q": "?"})
        return {"log": ["done"]}

    opts: dict[str, Any] = {"thread_id": "t-none", "checkpointer": ref_checkpointer}
    g = linear("none-step", work)
    assert "interrupted" == run(g, {}, **opts).status
    assert "done" == resume(g, "yes", **opts).status

    assert 1 == calls["log"]
    replayed = journals[-1]["log#0"]
    assert ("step", None) == (replayed.kind, replayed.value)


def test_recording_a_key_again_replaces_its_entry() -> None:
    """journal.test.ts · "putDone overwrites an earlier entry for the same key" (on TaskJournal)."""
    stored: list[JournalEntry] = []
    journal = TaskJournal("t:c:work", (), stored.append)

    journal.record(JournalEntry(key="k#0", value=1))
    journal.record(JournalEntry(key="k#0", value=2))

    assert (JournalEntry(key="k#0", value=2),) == journal.entries()
    # Python persists one entry at a time, each before it is remembered.
    assert [JournalEntry(key="k#0", value=1), JournalEntry(key="k#0", value=2)] == stored


def test_open_pauses_keep_their_journaled_order(ref_checkpointer: Checkpointer) -> None:
    """journal.test.ts · "pending() lists unanswered interrupts in journaled order" (through the port)."""
    entries = (
        JournalEntry(key="approve#0", kind="interrupt", payload={"amount": 10}),
        JournalEntry(key="charge#0", value="ok"),
        JournalEntry(key="approve#1", kind="interrupt", payload={"amount": 20}),
    )
    ref_checkpointer.put_journal("task-1", entries)

    open_pauses = [
        (e.key, e.payload)
        for e in ref_checkpointer.get_journal("task-1")
        if e.kind == "interrupt" and not e.answered
    ]
    assert [("approve#0", {"amount": 10}), ("approve#1", {"amount": 20})] == open_pauses


def test_journal_keys_keep_their_insertion_order(ref_checkpointer: Checkpointer) -> None:
    """journal.test.ts · "keys() preserves insertion order"."""
    journals: list[list[str]] = []

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.step("b", lambda: 1)
        ctx.step("a", lambda: 2)
        journals.append(list(ctx.journal))
        ctx.interrupt({"q": 3}, key="c")
        return {"log": ["done"]}

    opts: dict[str, Any] = {"thread_id": "t-order", "checkpointer": ref_checkpointer}
    g = linear("order", work)
    assert "interrupted" == run(g, {}, **opts).status
    assert "done" == resume(g, "yes", **opts).status

    assert ["b#0", "a#0", "c#0"] == journals[-1]


# --- answering ----------------------------------------------------------------------------------


def _approval(
    calls: Calls, journals: list[dict[str, JournalEntry]] | None = None, fail_once: list[bool] | None = None
) -> CompiledGraph:
    """A node that prepares (a counted step), asks for approval, and logs the answer.

    Each pass appends its journal as it stood before the pause to ``journals``.
    """

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.step("prep", calls.hit, "prep")
        if journals is not None:
            journals.append(dict(ctx.journal))
        answer = ctx.interrupt({"amount": 10}, key="approve")
        if fail_once and fail_once[0]:
            fail_once[0] = False
            raise RuntimeError("boom after the answer")
        return {"log": [answer]}

    return linear("approval", work)


def test_an_answer_resolves_the_pause_into_a_done_entry(ref_checkpointer: Checkpointer) -> None:
    """journal.test.ts · "resolves a pending interrupt into a done entry"."""
    journals: list[dict[str, JournalEntry]] = []
    g = _approval(Calls(), journals)
    opts: dict[str, Any] = {"thread_id": "t-answer", "checkpointer": ref_checkpointer}
    assert "interrupted" == run(g, {}, **opts).status

    assert "done" == resume(g, "yes", **opts).status

    answered = journals[-1]["approve#0"]
    assert ("interrupt", True, "yes") == (answered.kind, answered.answered, answered.value)
    assert () == pending_interrupts(ref_checkpointer, "t-answer")


def test_an_answer_to_an_unknown_pause_is_refused(ref_checkpointer: Checkpointer) -> None:
    """journal.test.ts · "refuses an unknown key".

    Python answers by pause id; an answer for an id that is not open leaves
    the open pause unanswered, which is refused, naming it, and records nothing.
    """
    g = _approval(Calls())
    opts: dict[str, Any] = {"thread_id": "t-unknown", "checkpointer": ref_checkpointer}
    assert "interrupted" == run(g, {}, **opts).status

    with pytest.raises(ResumeError, match="work:approve#0"):
        resume_keyed(g, {"nope:interrupt#0": "yes"}, **opts)

    assert ["work:approve#0"] == [p.id for p in pending_interrupts(ref_checkpointer, "t-unknown")]
    assert ["yes"] == resume(g, "yes", **opts).state["log"]


def test_a_pause_is_not_answered_twice_and_the_first_answer_stands(ref_checkpointer: Checkpointer) -> None:
    """journal.test.ts · "refuses to answer twice".

    At the engine level (issue #8): a resume whose superstep fails leaves the
    pause open; a different answer is refused as already answered, the same
    answer completes with no step re-run.
    """
    calls = Calls()
    g = _approval(calls, fail_once=[True])
    opts: dict[str, Any] = {"thread_id": "t-twice", "checkpointer": ref_checkpointer}
    assert "interrupted" == run(g, {}, **opts).status

    assert "error" == resume(g, "yes", **opts).status
    with pytest.raises(ResumeError, match="already answered"):
        resume(g, "no", **opts)

    done = resume(g, "yes", **opts)
    assert "done" == done.status
    assert ["yes"] == done.state["log"]
    assert 1 == calls["prep"]


# --- storing and loading ----------------------------------------------------------------------------


def test_a_stored_journal_round_trips_entries_order_and_status(ref_checkpointer: Checkpointer) -> None:
    """journal.test.ts · "round-trips entries, order and status" (dump/load is the port's put/get)."""
    entries = (
        JournalEntry(key="charge#0", value={"id": "ch_1"}),
        JournalEntry(key="approve#0", kind="interrupt", payload={"amount": 10}, value="yes", answered=True),
        JournalEntry(key="approve#1", kind="interrupt", payload={"amount": 20}),
    )
    ref_checkpointer.put_journal("task-1", entries)

    assert entries == ref_checkpointer.get_journal("task-1")


def test_a_loaded_journal_is_independent_of_the_stored_one(ref_checkpointer: Checkpointer) -> None:
    """journal.test.ts · "a loaded journal is independent of the original" (on TaskJournal)."""
    ref_checkpointer.put_journal("task-1", [JournalEntry(key="a#0", value=1)])
    loaded = TaskJournal("task-1", ref_checkpointer.get_journal("task-1"), lambda entry: None)

    loaded.record(JournalEntry(key="b#0", value=2))

    assert ["a#0"] == [e.key for e in ref_checkpointer.get_journal("task-1")]
    assert ["a#0", "b#0"] == [e.key for e in loaded.entries()]


def test_an_empty_journal_loads_empty(ref_checkpointer: Checkpointer) -> None:
    """journal.test.ts · "an empty dump loads to an empty journal"."""
    ref_checkpointer.put_journal("task-1", ())

    assert () == ref_checkpointer.get_journal("task-1")


# --- key counting --------------------------------------------------------------------------------------


def test_keys_are_suffixed_uniformly_from_zero_even_when_used_once() -> None:
    """journal.test.ts · "suffixes uniformly from zero, even for a key used once"."""
    assert ["charge#0"] == _keys_after(lambda ctx: ctx.step("charge", lambda: "ok"))


def test_keys_are_counted_per_base_key() -> None:
    """journal.test.ts · "counts occurrences per base key"."""

    def body(ctx: Any) -> None:
        for key in ("charge", "email", "charge", "charge", "email"):
            ctx.step(key, lambda: "ok")

    assert ["charge#0", "email#0", "charge#1", "charge#2", "email#1"] == _keys_after(body)


def test_counters_are_per_pass_so_a_replay_restarts_the_sequence(ref_checkpointer: Checkpointer) -> None:
    """journal.test.ts · "counters are per task, so a fresh pass restarts the sequence"."""
    calls = Calls()
    returned: list[list[str]] = []

    def charge() -> str:
        calls.hit("charge")
        return f"c{calls['charge']}"

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        returned.append([ctx.step("charge", charge), ctx.step("charge", charge)])
        ctx.interrupt({"q": "?"})
        return {"log": ["done"]}

    opts: dict[str, Any] = {"thread_id": "t-counters", "checkpointer": ref_checkpointer}
    g = linear("counters", work)
    assert "interrupted" == run(g, {}, **opts).status
    assert "done" == resume(g, "yes", **opts).status

    assert [["c1", "c2"], ["c1", "c2"]] == returned
    assert 2 == calls["charge"]


# --- strict mode ------------------------------------------------------------------------------------------


def _diverging(first: tuple[str, ...], replay: tuple[str, ...]) -> CompiledGraph:
    """Node ``pay`` steps the ``first`` keys, pauses, and steps the ``replay`` keys after the answer."""
    passes = [0]

    def pay(state: Any, ctx: Any) -> dict[str, Any]:
        passes[0] += 1
        for key in first if passes[0] == 1 else replay:
            ctx.step(key, lambda: "ok")
        ctx.interrupt({"q": "?"})
        return {"log": ["done"]}

    return _pay(pay)


def _replay(g: CompiledGraph, checkpointer: Checkpointer) -> Any:
    """Run to the pause, then resume strictly; the resume's result."""
    opts: dict[str, Any] = {"thread_id": "t-strict", "checkpointer": checkpointer, "strict": True}
    assert "interrupted" == run(g, {}, **opts).status
    return resume(g, "yes", **opts)


def test_strict_mode_passes_when_the_replay_asks_for_every_key(ref_checkpointer: Checkpointer) -> None:
    """journal.test.ts · "passes when the replay requested every journaled key"."""
    g = _diverging(("charge", "email"), ("charge", "email"))

    assert "done" == _replay(g, ref_checkpointer).status


def test_strict_mode_passes_on_an_empty_journal() -> None:
    """journal.test.ts · "passes on an empty journal"."""
    assert "done" == run(_pay(lambda state: {"log": ["done"]}), strict=True).status


def test_strict_mode_passes_when_the_replay_asks_for_more_keys(ref_checkpointer: Checkpointer) -> None:
    """journal.test.ts · "passes when the replay requests MORE keys than are journaled"."""
    calls = Calls()

    def pay(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.step("charge", lambda: "ok")
        ctx.interrupt({"q": "?"})
        ctx.step("ship", calls.hit, "ship")
        return {"log": ["done"]}

    assert "done" == _replay(_pay(pay), ref_checkpointer).status
    assert 1 == calls["ship"]


def test_strict_mode_names_the_node_and_every_missing_key(ref_checkpointer: Checkpointer) -> None:
    """journal.test.ts · "throws naming the node and every missing key" (issue #8: every key)."""
    result = _replay(_diverging(("charge", "email", "sms"), ("charge",)), ref_checkpointer)

    assert "error" == result.status
    node, error = result.errors[0]
    assert "pay" == node
    assert isinstance(error, NondeterminismError)
    message = str(error)
    assert "'pay'" in message
    assert "email#0" in message
    assert "sms#0" in message
    assert "charge#0" not in message


def test_strict_mode_counts_a_shifted_ordinal_as_missing(ref_checkpointer: Checkpointer) -> None:
    """journal.test.ts · "a shifted ordinal counts as missing"."""
    result = _replay(_diverging(("charge", "charge"), ("charge",)), ref_checkpointer)

    assert "error" == result.status
    _, error = result.errors[0]
    assert isinstance(error, NondeterminismError)
    assert "charge#1" in str(error)
