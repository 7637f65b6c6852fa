"""Crashes and races, for real: workers killed with SIGKILL, processes racing for one thread.

The workers are ``tests/support/crashworker.py`` in subprocesses; their step
functions count every real execution in an effects file outside the
database, so "ran once" is checked against what happened, not against what
the database says.

``ILMEK_CRASH_ROUNDS`` sets how many kill rounds the kill -9 test runs (8 by
default) and ``ILMEK_CRASH_SEED`` its first seed, to replay a failure.
"""

from __future__ import annotations

import os
import pathlib
import random
import signal
import time
from collections import Counter
from typing import Any

import pytest

from ilmek import (
    Checkpointer,
    ResumeError,
    ThreadBusyError,
    history,
    pending_interrupts,
    resume,
    run,
    thread_state,
)
from ilmek.operations import why_stalled
from tests.support.crash import (
    BUSY_RETRY_SECONDS,
    FINISH_SECONDS,
    Workers,
    assert_consistent_tree,
    assert_database_intact,
    direct_sql,
    holds_by_lease,
    latest_id,
    leftovers,
    retry_while_busy,
    status_of,
)
from tests.support.crashworker import (
    INPUTS,
    LEASE_SECONDS,
    LOOP_ROUNDS,
    Effects,
    checkout_graph,
    loop_graph,
    nested_graph,
    open_target,
    slow_graph,
)

pytestmark = pytest.mark.timeout(90)

KILL_ROUNDS = int(os.environ.get("ILMEK_CRASH_ROUNDS", "8"))
FIRST_SEED = int(os.environ.get("ILMEK_CRASH_SEED", "7001"))
MAX_KILLS_PER_ROUND = 3
# After the chosen effect line appears, the kill waits up to this long more,
# so that kills also land inside journal writes and checkpoint commits.
KILL_JITTER_SECONDS = 0.015
RACE_ROUNDS = 5


# --- kill -9 at random points -----------------------------------------------------------


def uninterrupted_loop(folder: pathlib.Path) -> tuple[Any, list[str]]:
    """The state and the effects of the loop graph run once, start to end, without a crash."""
    effects = Effects(folder / "uninterrupted.effects")
    result = run(loop_graph(effects), INPUTS["loop"])
    assert "done" == result.status
    return result.state, effects.lines()


def kill_at_random_points(
    workers: Workers, target: str, thread_id: str, effects: Effects, seed: int
) -> list[str]:
    """Run the loop on ``thread_id``, SIGKILLing workers at random points until one finishes.

    The first worker is always killed, later ones at random (at most
    ``MAX_KILLS_PER_ROUND`` kills). A kill waits for a random number of new
    effect lines and then a random jitter, so it lands wherever the run has
    got to, whatever the machine's speed.

    Returns:
        The last effect line (or ``""``) at each kill: the one step that may
        have been in flight, taken effect but not yet recorded.
    """
    rng = random.Random(seed)
    kills: list[str] = []
    for launch in range(MAX_KILLS_PER_ROUND + 1):
        done_before = effects.lines()
        worker = workers.spawn(
            "loop",
            "start" if launch == 0 else "continue",
            db=target,
            thread=thread_id,
            effects=effects.path,
            wait_busy=BUSY_RETRY_SECONDS,
        )
        kill = len(kills) < MAX_KILLS_PER_ROUND and (launch == 0 or rng.random() < 0.5)
        new_lines = rng.randint(0, 2 * LOOP_ROUNDS - len(set(done_before)))
        jitter = rng.uniform(0, KILL_JITTER_SECONDS)
        worker.expect("started")
        if kill:
            deadline = time.monotonic() + FINISH_SECONDS
            while worker.alive() and len(effects.lines()) < len(done_before) + new_lines:
                assert time.monotonic() < deadline, f"seed {seed}: the worker made no progress"
                time.sleep(0.002)
            time.sleep(jitter)
            if worker.kill():
                lines = effects.lines()
                kills.append(lines[-1] if lines else "")
                continue
        outcome = worker.finish()
        assert "done" == outcome["outcome"], f"seed {seed}: {outcome}"
        return kills
    raise AssertionError(f"seed {seed}: the last worker was not to be killed, yet the loop went on")


@pytest.mark.slow
@pytest.mark.timeout(60 + 20 * KILL_ROUNDS)
def test_kill_9_at_random_points_loses_nothing_and_repeats_only_the_step_in_flight(
    crash_db: str, crash_checkpointer: Checkpointer, workers: Workers, tmp_path: pathlib.Path
) -> None:
    """Runs killed at random points, then continued, end exactly as an uninterrupted run did.

    Each effect happens once, except that a kill may repeat the one step in
    flight (its effect happened, its record was not yet durable); the
    history is one consistent chain and the database stays intact.
    """
    expected_state, expected_effects = uninterrupted_loop(tmp_path)
    assert 2 * LOOP_ROUNDS == len(expected_effects)
    reader = loop_graph(Effects(os.devnull))
    all_kills = 0
    for seed in range(FIRST_SEED, FIRST_SEED + KILL_ROUNDS):
        thread_id = f"loop-{seed}"
        effects = Effects(tmp_path / f"{thread_id}.effects")
        kills = kill_at_random_points(workers, crash_db, thread_id, effects, seed)
        all_kills += len(kills)
        context = f"seed {seed}, effects at kills {kills}"

        assert "done" == status_of(crash_checkpointer, thread_id), context
        assert expected_state == thread_state(reader, crash_checkpointer, thread_id), context
        lines = effects.lines()
        assert expected_effects == list(dict.fromkeys(lines)), context
        counts = Counter(lines)
        in_flight = Counter(kills)
        assert {} == {key: n for key, n in counts.items() if n > 1 + in_flight[key]}, context
        assert len(lines) - len(counts) <= len(kills), context

        checkpoints = history(crash_checkpointer, thread_id)
        assert_consistent_tree(checkpoints)
        chain = list(reversed(checkpoints))
        assert list(range(LOOP_ROUNDS + 1)) == [c.step for c in chain], context
        assert ["input"] + ["loop"] * LOOP_ROUNDS == [c.metadata["source"] for c in chain], context
        assert [] == leftovers(crash_db, thread_id), context
    # Not a timing bound: the seeds decide where kills go, and only a run that
    # outpaces its whole kill window escapes one.
    assert all_kills >= KILL_ROUNDS // 2
    assert_database_intact(crash_db)


# --- two processes resume one pause -------------------------------------------------------


@pytest.mark.slow
def test_two_processes_answering_one_pause_at_once_charge_exactly_once(
    crash_db: str, crash_checkpointer: Checkpointer, workers: Workers, tmp_path: pathlib.Path
) -> None:
    """Two workers resume one paused checkout at the same moment: one finishes, the other is busy.

    The winner stays inside the charge until the loser has reported, so the
    two runs always overlap and the hold alone decides the race (a loser
    arriving after the winner finished would get a ResumeError instead: the
    third, late answer checks that).
    """
    for round_ in range(RACE_ROUNDS):
        thread_id = f"race-{round_}"
        effects = Effects(tmp_path / f"{thread_id}.effects")
        paused = run(
            checkout_graph(effects), INPUTS["checkout"], thread_id=thread_id, checkpointer=crash_checkpointer
        )
        assert "interrupted" == paused.status
        go = tmp_path / f"{thread_id}.go"
        reports = [tmp_path / f"{thread_id}-{side}.json" for side in ("a", "b")]
        rivals = [
            workers.spawn(
                "checkout",
                "resume",
                db=crash_db,
                thread=thread_id,
                effects=effects.path,
                answer="yes",
                go_file=go,
                outcome_file=reports[side],
                wait_at="charging",
                wait_for=reports[1 - side],
            )
            for side in (0, 1)
        ]
        for rival in rivals:
            rival.expect("ready")
        go.touch()
        outcomes = sorted((rival.finish() for rival in rivals), key=lambda outcome: outcome["outcome"])

        assert ["busy", "done"] == [outcome["outcome"] for outcome in outcomes], f"round {round_}"
        assert repr(thread_id) in outcomes[0]["message"]
        assert {"cart": ["coffee", "mug"], "log": ["charged"]} == outcomes[1]["state"]
        assert Counter({"create_order": 1, "charge:yes": 1}) == Counter(effects.lines()), f"round {round_}"
        # A third answer arriving after the winner finished finds nothing to answer.
        with pytest.raises(ResumeError, match="not interrupted"):
            resume(checkout_graph(effects), "yes", thread_id=thread_id, checkpointer=crash_checkpointer)
        assert 1 == effects.lines().count("charge:yes")
        assert_consistent_tree(history(crash_checkpointer, thread_id))
        assert [] == leftovers(crash_db, thread_id)
    assert_database_intact(crash_db)


@pytest.mark.slow
def test_processes_opening_a_new_database_at_once_all_create_it_and_run(
    crash_db: str, workers: Workers, tmp_path: pathlib.Path
) -> None:
    """Workers opening one brand-new database at the same moment all get its schema and finish their runs."""
    go = tmp_path / "go"
    effects = Effects(tmp_path / "boot.effects")
    booting = [
        workers.spawn("slow", "start", db=crash_db, thread=f"boot-{n}", effects=effects.path, go_file=go)
        for n in range(3)
    ]
    for worker in booting:
        worker.expect("ready")
    go.touch()

    assert ["done"] * 3 == [worker.finish()["outcome"] for worker in booting]
    assert Counter({"prepare": 3, "finish": 3}) == Counter(effects.lines())
    with open_target(crash_db) as checkpointer:
        expected_version = checkpointer.schema_version  # type: ignore[attr-defined]
        assert ["done"] * 3 == [status_of(checkpointer, f"boot-{n}") for n in range(3)]
    assert [(str(expected_version),)] == direct_sql(
        crash_db, "SELECT value FROM ilmek_meta WHERE key = 'schema_version'"
    )
    assert_database_intact(crash_db)


# --- a killed holder ----------------------------------------------------------------------


@pytest.mark.slow
def test_a_killed_holder_blocks_the_thread_only_until_its_lease_lapses(
    crash_db: str, crash_checkpointer: Checkpointer, workers: Workers, tmp_path: pathlib.Path
) -> None:
    """A live holder keeps its thread past its lease; killed, it blocks only until the lease lapses.

    The continuation then replays the step the killed holder recorded.
    """
    thread_id = "held by the dead"
    effects = Effects(tmp_path / "slow.effects")
    holder = workers.spawn(
        "slow", "start", db=crash_db, thread=thread_id, effects=effects.path, linger_at="prepared"
    )
    holder.expect("lingering")
    continuation = slow_graph(effects)
    # Alive, the holder renews its hold however long its node takes.
    time.sleep(2.5 * LEASE_SECONDS)
    with pytest.raises(ThreadBusyError):
        run(continuation, None, thread_id=thread_id, checkpointer=crash_checkpointer)
    assert holder.kill()

    if holds_by_lease(crash_db):
        with pytest.raises(ThreadBusyError) as busy:
            run(continuation, None, thread_id=thread_id, checkpointer=crash_checkpointer)
        assert thread_id == busy.value.thread_id
        assert repr(thread_id) in str(busy.value)
    lapsed_by = time.monotonic() + 10 * LEASE_SECONDS
    while (info := crash_checkpointer.get_thread(thread_id)) is not None and info.running:
        assert time.monotonic() < lapsed_by, "the dead holder's lease never lapsed"
        time.sleep(0.05)
    assert info is not None
    # Nothing recorded how the killed run ended: the thread says its process died.
    assert "its process died or was killed mid-superstep" in (why_stalled(info) or "")
    finished = retry_while_busy(
        lambda: run(continuation, None, thread_id=thread_id, checkpointer=crash_checkpointer)
    )

    assert "done" == finished.status
    assert {"log": ["begun", "prepared", "finished"]} == finished.state
    assert ["prepare", "finish"] == effects.lines()
    assert [] == leftovers(crash_db, thread_id)


@pytest.mark.slow
def test_a_holder_frozen_past_its_lease_writes_nothing_when_it_wakes(
    lease_db: str, workers: Workers, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    """A holder stopped (SIGSTOP) while another run took and finished the thread is fenced off on waking.

    Only leases can lapse under a live process: a Postgres session lock stays with its frozen holder.
    """
    crash_db = lease_db
    crash_checkpointer = open_target(crash_db)
    request.addfinalizer(crash_checkpointer.close)
    thread_id = "frozen holder"
    effects = Effects(tmp_path / "slow.effects")
    wake = tmp_path / "wake"
    sleeper = workers.spawn(
        "slow",
        "start",
        db=crash_db,
        thread=thread_id,
        effects=effects.path,
        wait_at="prepared",
        wait_for=wake,
    )
    sleeper.expect("waiting")
    sleeper.process.send_signal(signal.SIGSTOP)
    try:
        continuation = slow_graph(effects)
        finished = retry_while_busy(
            lambda: run(continuation, None, thread_id=thread_id, checkpointer=crash_checkpointer)
        )
        assert "done" == finished.status
        written = [c.id for c in history(crash_checkpointer, thread_id)]
        wake.touch()
    finally:
        sleeper.process.send_signal(signal.SIGCONT)
    outcome = sleeper.finish()

    assert outcome["outcome"] in ("busy", "error"), outcome
    assert "busy" == outcome["outcome"] or "ThreadBusyError" in str(outcome["errors"]), outcome
    assert written == [c.id for c in history(crash_checkpointer, thread_id)]
    assert {"log": ["begun", "prepared", "finished"]} == thread_state(
        continuation, crash_checkpointer, thread_id
    )
    assert 1 == effects.lines().count("prepare")
    assert [] == leftovers(crash_db, thread_id)


# --- kill -9 during a resume -----------------------------------------------------------------


@pytest.mark.slow
def test_a_resume_killed_after_charging_finishes_with_the_same_answer_without_charging_again(
    crash_db: str, crash_checkpointer: Checkpointer, workers: Workers, tmp_path: pathlib.Path
) -> None:
    """A resume killed after its charge: another answer is refused, the same answer finishes, one charge."""
    thread_id = "killed mid-resume"
    effects = Effects(tmp_path / "checkout.effects")
    checkout = checkout_graph(effects)
    paused = run(checkout, INPUTS["checkout"], thread_id=thread_id, checkpointer=crash_checkpointer)
    assert "interrupted" == paused.status
    resumer = workers.spawn(
        "checkout",
        "resume",
        db=crash_db,
        thread=thread_id,
        effects=effects.path,
        answer="yes",
        linger_at="charged",
    )
    resumer.expect("lingering")
    assert resumer.kill()
    assert ["create_order", "charge:yes"] == effects.lines()

    with pytest.raises(ResumeError) as refused:
        retry_while_busy(lambda: resume(checkout, "no", thread_id=thread_id, checkpointer=crash_checkpointer))
    assert "already answered" in str(refused.value)
    assert repr(thread_id) in str(refused.value)
    assert ["create_order", "charge:yes"] == effects.lines()
    assert paused.checkpoint_id == latest_id(crash_checkpointer, thread_id)
    assert [p.id for p in paused.pending] == [p.id for p in pending_interrupts(crash_checkpointer, thread_id)]

    finished = retry_while_busy(
        lambda: resume(checkout, "yes", thread_id=thread_id, checkpointer=crash_checkpointer)
    )
    assert "done" == finished.status
    assert {"cart": ["coffee", "mug"], "log": ["charged"]} == finished.state
    assert ["create_order", "charge:yes"] == effects.lines()
    assert_consistent_tree(history(crash_checkpointer, thread_id))
    assert [] == leftovers(crash_db, thread_id)


def test_a_kill_inside_a_grandchild_step_then_recovery_runs_each_step_once(
    crash_db: str, crash_checkpointer: Checkpointer, workers: Workers, tmp_path: pathlib.Path
) -> None:
    """kill -9 between two steps of a subgraph two levels down: continuing the root runs every step once."""
    thread_id = "killed in a grandchild"
    effects = Effects(tmp_path / "nested.effects")
    holder = workers.spawn(
        "nested", "start", db=crash_db, thread=thread_id, effects=effects.path, linger_at="prepared"
    )
    holder.expect("lingering")
    assert holder.kill()
    assert ["before", "first", "prepare"] == effects.lines()

    finished = retry_while_busy(
        lambda: run(nested_graph(effects), None, thread_id=thread_id, checkpointer=crash_checkpointer)
    )

    assert "done" == finished.status
    assert ["begun", "before", "first", "prepared", "finished", "after"] == finished.state["log"]
    assert ["before", "first", "prepare", "finish", "after"] == effects.lines()
    assert [thread_id] == [t.id for t in crash_checkpointer.list_threads()]
    assert [] == leftovers(crash_db, thread_id)
