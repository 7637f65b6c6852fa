"""Ported from the .NET port's ``dotnet/test/Ilmek.Core.Tests/JournalTests.cs``: replay memory (MODEL §5).

The reference tests its ``Journal`` and ``TaskJournal`` classes directly.
Python's unit is :class:`ilmek.context.TaskJournal` (one task's journal during
a superstep: ``claim`` is the reference's ``ResolveKey``, ``record`` its
``PutDone``/``PutPending``, ``unrequested`` what ``CheckDeterminism``
checks), and a stored journal is a sequence of :class:`~ilmek.JournalEntry`
(``Dump``/``Load`` are the port's ``put_journal``/``get_journal``). Answering
is the engine's work in Python (``resume``/``resume_keyed``, all or
nothing), and so is the strict check, which raises ``NondeterminismError``
from the run; those cases run through the engine, on memory, SQLite and
Postgres.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ilmek import (
    Checkpointer,
    CompiledGraph,
    InterruptSignal,
    JournalEntry,
    NondeterminismError,
    Result,
    ResumeError,
    resume,
    resume_keyed,
    run,
)
from ilmek.context import TaskJournal
from tests.support.reference_edge import done, keys_of, linear, pending


def _journal(entries: Sequence[JournalEntry] = ()) -> TaskJournal:
    """A task's journal over ``entries`` whose new records go nowhere."""
    return TaskJournal("t:c:work", entries, lambda entry: None)


# --- the journal --------------------------------------------------------------------------------


def test_a_fresh_journal_is_empty() -> None:
    """JournalTests.FreshIsEmpty: "a fresh journal is empty"."""
    journal = _journal()

    assert () == journal.entries()
    assert {} == dict(journal.snapshot())
    assert [] == journal.open_pauses()
    assert None is journal.get("anything")


def test_recording_a_key_again_replaces_its_value_in_place() -> None:
    """JournalTests.PutDoneRecordsAndOverwrites: "PutDone records a value, including null, and overwrites
    without reordering"."""
    journal = _journal()

    journal.record(done("a#0", None))
    journal.record(done("b#0", "B"))
    journal.record(done("a#0", "again"))

    assert ["a#0", "b#0"] == keys_of(journal.entries())
    assert done("a#0", "again") == journal.get("a#0")


def test_open_pauses_keep_their_journaled_order() -> None:
    """JournalTests.PendingInOrder: "Pending lists unanswered interrupts in journaled order"."""
    journal = _journal([pending("second#0", "p2"), done("step#0", 1), pending("first#0", "p1")])

    open_pauses = [(e.key, e.payload) for e in journal.entries() if e.kind == "interrupt" and not e.answered]

    assert [("second#0", "p2"), ("first#0", "p1")] == open_pauses


def test_an_answer_resolves_the_pause_in_place() -> None:
    """JournalTests.AnswerResolves: "Answer resolves a pending interrupt into a done entry, in place".

    The engine records an answer as the answered entry under the pause's
    key; it replaces the pause where it stood.
    """
    journal = _journal([pending("interrupt#0", "q?"), done("after#0", "x")])

    journal.record(
        JournalEntry(key="interrupt#0", kind="interrupt", payload="q?", value="yes", answered=True)
    )

    answered = journal.get("interrupt#0")
    assert answered is not None
    assert (True, "yes") == (answered.answered, answered.value)
    assert [] == [e for e in journal.entries() if e.kind == "interrupt" and not e.answered]
    assert ["interrupt#0", "after#0"] == keys_of(journal.entries())


def _approval(fail_once: list[bool]) -> CompiledGraph:
    """``work`` steps ``prep``, asks ``approve``, then fails once after the answer while ``fail_once[0]``."""

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.step("prep", lambda: "prepared")
        answer = ctx.interrupt({"amount": 10}, key="approve")
        if fail_once[0]:
            fail_once[0] = False
            raise RuntimeError("boom after the answer")
        return {"log": [answer]}

    return linear(work)


def test_an_unknown_key_or_a_second_answer_is_refused_and_the_first_stands(
    ref_checkpointer: Checkpointer,
) -> None:
    """JournalTests.AnswerRefusals: "Answer refuses an unknown key and a second answer, leaving the entry
    intact".

    Through the engine: an answer for an id that is not an open pause (the
    step's key included, since a step is never answerable) is refused; after
    a resume whose superstep failed, a different answer is refused as already
    answered, and the first answer is the one the node gets.
    """
    g = _approval([True])
    opts: dict[str, Any] = {"thread_id": "t-refusals", "checkpointer": ref_checkpointer}
    assert "interrupted" == run(g, None, **opts).status

    for wrong in ("work:nope#0", "work:prep#0"):
        with pytest.raises(ResumeError, match="work:approve#0"):
            resume_keyed(g, {wrong: 1}, **opts)
    assert "error" == resume(g, "first", **opts).status
    with pytest.raises(ResumeError, match="already answered"):
        resume(g, "second", **opts)

    assert ["first"] == resume(g, "first", **opts).state["log"]


def test_a_stored_journal_round_trips_and_a_loaded_one_is_independent(ref_checkpointer: Checkpointer) -> None:
    """JournalTests.DumpLoadRoundTrip: "Dump/Load round-trips entries, order and status; the loaded journal is
    independent"."""
    entries = (done("z#0", "Z"), pending("interrupt#0", "q"), done("a#0", "A"))
    ref_checkpointer.put_journal("t:c:work", entries)
    ref_checkpointer.put_journal("t:c:empty", ())

    loaded = ref_checkpointer.get_journal("t:c:work")
    _journal(loaded).record(done("new#0", 1))

    assert entries == loaded
    assert ["z#0", "interrupt#0", "a#0"] == keys_of(ref_checkpointer.get_journal("t:c:work"))
    assert () == ref_checkpointer.get_journal("t:c:empty")


def test_a_snapshot_does_not_see_later_records_and_cannot_be_written() -> None:
    """JournalTests.CloneIsIndependent: "Clone is a deep-enough copy: writes to either side do not leak".

    Python's copy of a journal is ``snapshot()`` (what ``ctx.journal``
    returns): a read-only mapping that later records do not reach.
    """
    journal = _journal([pending("interrupt#0", "q")])
    snapshot = journal.snapshot()

    journal.record(JournalEntry(key="interrupt#0", kind="interrupt", payload="q", value="yes", answered=True))
    journal.record(done("other#0", 1))

    assert (False, None) == (snapshot["interrupt#0"].answered, snapshot.get("other#0"))
    with pytest.raises(TypeError):
        snapshot["other#0"] = done("other#0", 2)  # type: ignore[index]


# --- keys -------------------------------------------------------------------------------------


def test_keys_are_suffixed_from_zero_and_counted_per_base_key() -> None:
    """JournalTests.ResolveKeyCounts: "ResolveKey suffixes uniformly from zero and counts per base key"."""
    journal = _journal()

    assert ["charge#0", "refund#0", "charge#1", "charge#2"] == [
        journal.claim(key) for key in ("charge", "refund", "charge", "charge")
    ]


def test_a_key_that_already_looks_suffixed_is_suffixed_again() -> None:
    """JournalTests.SuffixedLookingKey: "a base key that already looks suffixed is suffixed again, never
    confused with another occurrence"."""
    journal = _journal()

    assert "charge#0#0" == journal.claim("charge#0")
    assert "charge#0" == journal.claim("charge")


def test_counters_are_per_pass() -> None:
    """JournalTests.CountersPerPass: "counters are per pass: a fresh TaskJournal over the same journal
    restarts the sequence".

    Python's retry re-runs the body over the same ``TaskJournal`` after
    ``begin_attempt()``, which restarts the sequence too.
    """
    entries = (done("x#0", 1),)
    first = _journal(entries)
    first.claim("x")

    assert "x#0" == _journal(entries).claim("x")
    first.begin_attempt()
    assert "x#0" == first.claim("x")


def test_nothing_is_unrequested_on_an_empty_journal_or_when_a_pass_asks_for_more() -> None:
    """JournalTests.DeterminismPasses: "CheckDeterminism passes on an empty journal and when the replay
    requests more keys"."""
    assert [] == _journal().unrequested()

    journal = _journal([done("a#0", 1)])
    journal.claim("a")
    journal.claim("b")

    assert [] == journal.unrequested()


def _replays(first: Callable[[Any], None], replay: Callable[[Any], None]) -> CompiledGraph:
    """``work`` runs ``first(ctx)`` on its first pass and ``replay(ctx)`` on the next, then returns."""
    passes: list[int] = []

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        passes.append(1)
        (first if len(passes) == 1 else replay)(ctx)
        return {"log": ["done"]}

    return linear(work)


def _resume_after_a_pause(g: CompiledGraph, checkpointer: Checkpointer, thread_id: str) -> Result:
    opts: dict[str, Any] = {"thread_id": thread_id, "checkpointer": checkpointer, "strict": True}
    assert "interrupted" == run(g, None, **opts).status
    return resume(g, "yes", **opts)


def test_the_strict_check_names_the_node_and_every_key_the_replay_skipped(
    ref_checkpointer: Checkpointer,
) -> None:
    """JournalTests.DeterminismNamesMissing: "CheckDeterminism names the node and every key the replay
    skipped".

    The first pass records ``a#0``, ``b#0`` and the pause; the replay after
    the answer asks for ``a`` only.
    """

    def first(ctx: Any) -> None:
        ctx.step("a", lambda: 1)
        ctx.step("b", lambda: 2)
        ctx.interrupt(None)

    g = _replays(first, lambda ctx: ctx.step("a", lambda: 1))

    result = _resume_after_a_pause(g, ref_checkpointer, "t-missing")

    assert "error" == result.status
    ((node, error),) = result.errors
    assert "work" == node
    assert isinstance(error, NondeterminismError)
    assert "'work'" in str(error)
    assert "b#0" in str(error)
    assert "interrupt#0" in str(error)
    assert "a#0" not in str(error)
    assert ("b#0", "interrupt#0") == error.keys


def test_a_shifted_ordinal_counts_as_missing(ref_checkpointer: Checkpointer) -> None:
    """JournalTests.ShiftedOrdinal: "a shifted ordinal counts as missing: charge#1 journaled, only charge#0
    requested"."""

    def first(ctx: Any) -> None:
        ctx.step("charge", lambda: 1)
        ctx.step("charge", lambda: 2)
        ctx.interrupt(None)

    def replay(ctx: Any) -> None:
        ctx.step("charge", lambda: 1)
        ctx.interrupt(None)

    result = _resume_after_a_pause(_replays(first, replay), ref_checkpointer, "t-shifted")

    assert "error" == result.status
    error = result.errors[0][1]
    assert isinstance(error, NondeterminismError)
    assert "charge#1" in str(error)


def test_the_interrupt_signal_carries_key_and_payload() -> None:
    """JournalTests.InterruptSignalShape: "InterruptSignalException carries key and payload and is recognised
    by IsInterrupt".

    Python recognises it by its class, ``InterruptSignal``, which is a
    ``BaseException`` and not an ``Exception`` (SPEC §4), so a blanket
    ``except Exception:`` lets it through.
    """
    signal = InterruptSignal("interrupt#0", "q?")

    assert ("interrupt#0", "q?") == (signal.key, signal.payload)
    assert "interrupt#0" in str(signal)
    assert isinstance(signal, BaseException)
    assert not isinstance(signal, Exception)
    assert not isinstance(RuntimeError(), InterruptSignal)
