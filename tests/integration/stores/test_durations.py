"""Durations a run waits on: a lease, a busy timeout, a retry policy's waits. Each is a finite number of
seconds no longer than ``threading.TIMEOUT_MAX`` (what a thread or a queue can wait for); anything else
(infinite, NaN, negative, absurdly long) is refused with ``InvalidArgumentError`` when it is given, never a
raw ``OverflowError`` in the middle of a run that leaves the thread held."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from ilmek import (
    START,
    InMemoryCheckpointer,
    InvalidArgumentError,
    RetryPolicy,
    SqliteCheckpointer,
    channel,
    graph,
    recover,
    run,
)
from tests.support.helpers import Calls
from tests.support.stores import Store, store_fixture  # noqa: F401

pytestmark = pytest.mark.timeout(60)

ABSURD = [math.inf, -math.inf, math.nan, -1.0, threading.TIMEOUT_MAX * 2, 1e300, True, "5"]


@pytest.mark.parametrize("lease", [*ABSURD, 0, 0.0], ids=repr)
def test_a_lease_that_is_not_a_finite_positive_time_is_refused(store: Store, lease: Any) -> None:
    """lease_seconds infinite, NaN, not positive or past threading.TIMEOUT_MAX: InvalidArgumentError naming
    it and the bound, when the checkpointer is made."""
    with pytest.raises(InvalidArgumentError, match="lease_seconds") as caught:
        store.open(lease_seconds=lease)
    assert "TIMEOUT_MAX" in str(caught.value)


def two_tasks(calls: Calls) -> Any:
    """START fans out to two nodes: a superstep of two tasks, run on worker threads."""

    def node(name: str) -> Any:
        def body(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
            ctx.step(name, calls.hit, name)
            return {"log": [name]}

        return body

    return (
        graph("two", {"log": channel.append()})
        .node("a", node("a"))
        .node("b", node("b"))
        .edge(START, "a")
        .edge(START, "b")
        .compile()
    )


def test_a_two_task_superstep_runs_under_the_longest_lease_accepted(store: Store) -> None:
    """A lease of threading.TIMEOUT_MAX (the bound) is accepted: a two-task superstep runs, each step once,
    and the run gives its thread back (another checkpointer runs it at once)."""
    calls = Calls()
    checkpointer = store.open(lease_seconds=threading.TIMEOUT_MAX)
    result = run(two_tasks(calls), {"log": []}, thread_id="long", checkpointer=checkpointer)
    assert ("done", ["a", "b"]) == (result.status, sorted(result.state["log"]))
    again = run(two_tasks(calls), None, thread_id="long", checkpointer=store.open())
    assert "done" == again.status
    assert {"a": 1, "b": 1} == dict(calls)


@pytest.mark.parametrize("busy_timeout", ABSURD, ids=repr)
def test_a_sqlite_busy_timeout_that_is_not_a_finite_time_is_refused(tmp_path: Any, busy_timeout: Any) -> None:
    """busy_timeout infinite, NaN, negative or past threading.TIMEOUT_MAX: InvalidArgumentError, no file."""
    with pytest.raises(InvalidArgumentError, match="busy_timeout"):
        SqliteCheckpointer(tmp_path / "t.db", busy_timeout=busy_timeout)
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (field, value)
        for field in ("backoff", "max_backoff", "factor")
        for value in ABSURD
        # The reference reads a negative backoff as no wait (test_retry.py), so it stays legal.
        if not (field == "backoff" and value == -1.0)
    ],
    ids=repr,
)
def test_a_retry_policy_wait_that_is_not_a_finite_time_is_refused(field: str, value: Any) -> None:
    """RetryPolicy's backoff, max_backoff and factor must be finite and at most threading.TIMEOUT_MAX
    (max_backoff and factor not negative): anything else is InvalidArgumentError naming the field."""
    with pytest.raises(InvalidArgumentError, match=rf"RetryPolicy\.{field}"):
        RetryPolicy(**{field: value})


def test_a_negative_backoff_is_no_wait_as_in_the_reference() -> None:
    """RetryPolicy(backoff=-1) is legal and waits nothing, as the TypeScript and .NET builders do."""
    assert 0.0 == RetryPolicy(backoff=-1.0, factor=2.0).delay(3)


@pytest.mark.parametrize("jitter", [-0.1, 1.5, math.nan, math.inf])
def test_a_retry_policy_jitter_outside_zero_to_one_is_refused(jitter: float) -> None:
    """jitter is a fraction of the wait: outside [0, 1] (or NaN) it is InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError, match=r"RetryPolicy\.jitter"):
        RetryPolicy(jitter=jitter)


def test_a_retry_policy_that_grows_past_any_float_waits_its_longest_wait() -> None:
    """A factor that would overflow a float after many attempts gives max_backoff, not OverflowError."""
    policy = RetryPolicy(max_attempts=2000, backoff=0.5, factor=10.0, max_backoff=7.0)
    assert [0.5, 5.0, 7.0, 7.0] == [policy.delay(n) for n in (1, 2, 3, 1000)]
    assert 0.0 == RetryPolicy(backoff=0.0, factor=10.0).delay(1000)


@pytest.mark.parametrize("older_than", ABSURD, ids=repr)
def test_recover_refuses_an_age_that_is_not_a_finite_time(older_than: Any) -> None:
    """recover(older_than=...) takes the same durations: anything else is InvalidArgumentError naming it."""
    with pytest.raises(InvalidArgumentError, match="older_than"):
        recover(two_tasks(Calls()), InMemoryCheckpointer(), older_than=older_than)
