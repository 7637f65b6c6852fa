"""The port suite, holds and Python threads: one holder per thread, checkpointers shared or side by side."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from ilmek import Checkpointer, JournalEntry, ThreadBusyError
from ilmek.types import task_id_for
from tests.support.port import JOURNAL, assert_gone, channels_at, cid, ids_of, make_checkpoint, thread_info

pytestmark = pytest.mark.timeout(60)


# --- hold --------------------------------------------------------------------------------


def test_a_held_thread_cannot_be_held_again(checkpointer: Checkpointer) -> None:
    """A second ``hold`` of a held thread is ThreadBusyError naming the thread."""
    with checkpointer.hold("t") as hold:
        hold.renew()
        with pytest.raises(ThreadBusyError) as caught, checkpointer.hold("t"):
            pytest.fail("the thread was held twice")

    assert "t" == caught.value.thread_id
    assert "'t'" in str(caught.value)


def test_a_thread_held_by_another_checkpointer_cannot_be_held(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """A hold taken through one checkpointer blocks a hold through another on the same store, both ways."""
    other = reopen()
    with checkpointer.hold("t") as hold:
        hold.renew()
        with pytest.raises(ThreadBusyError, match="'t'"), other.hold("t"):
            pytest.fail("the thread was held twice")

    with other.hold("t") as hold:
        hold.renew()
        with pytest.raises(ThreadBusyError, match="'t'"), checkpointer.hold("t"):
            pytest.fail("the thread was held twice")


def test_a_released_thread_can_be_held_again(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """Leaving the ``with`` (normally or by an exception) releases the thread at once."""
    with checkpointer.hold("t"):
        pass
    with pytest.raises(KeyError), checkpointer.hold("t"):
        raise KeyError("the run failed")

    with reopen().hold("t"), pytest.raises(ThreadBusyError), checkpointer.hold("t"):
        pytest.fail("the thread was held twice")


def test_release_is_idempotent(checkpointer: Checkpointer) -> None:
    """Releasing a hold twice is harmless and frees the thread for the next holder."""
    with checkpointer.hold("t") as hold:
        hold.release()
        hold.release()
        with checkpointer.hold("t"):
            pass


def test_different_threads_can_be_held_at_once(checkpointer: Checkpointer) -> None:
    """Holds are per thread: look-alike ids are held side by side."""
    with (
        checkpointer.hold("t"),
        checkpointer.hold("t%"),
        checkpointer.hold("T"),
        checkpointer.hold("t2"),
        pytest.raises(ThreadBusyError, match="'t%'"),
        checkpointer.hold("t%"),
    ):
        pytest.fail("the thread was held twice")


def test_racing_holds_of_one_thread_let_exactly_one_win(checkpointer: Checkpointer) -> None:
    """Eight Python threads try to hold one thread at once: one gets it, seven get ThreadBusyError."""
    tried = threading.Barrier(8)

    def attempt(worker: int) -> bool:
        try:
            with checkpointer.hold("t"):
                # Keep the hold until everyone has tried.
                tried.wait()
                return True
        except ThreadBusyError:
            tried.wait()
            return False

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(attempt, range(8)))

    assert 1 == sum(outcomes)


# --- many Python threads -------------------------------------------------------------------


def test_many_python_threads_share_one_checkpointer(checkpointer: Checkpointer) -> None:
    """8 threads writing 30 checkpoints each through one checkpointer: everything reads back right."""
    start = threading.Barrier(8)

    def work(worker: int) -> None:
        thread_id = f"worker-{worker}"
        start.wait()
        for n in range(30):
            checkpointer.put(
                thread_id,
                make_checkpoint(
                    thread_id, cid(n), cid(n - 1) if n else None, log=list(range(n + 1)), who=worker
                ),
            )
            if n % 10 == 0:
                checkpointer.put_journal(
                    task_id_for(thread_id, cid(n), "agent"), [JournalEntry(key="k", value=n)]
                )
            assert list(range(n + 1)) == checkpointer.read_channel(thread_id, "log")

    with ThreadPoolExecutor(max_workers=8) as pool:
        for finished in [pool.submit(work, worker) for worker in range(8)]:
            finished.result()

    for worker in range(8):
        thread_id = f"worker-{worker}"
        assert {"log": list(range(30)), "who": worker} == channels_at(checkpointer, thread_id)
        assert [cid(n) for n in reversed(range(30))] == ids_of(checkpointer.list(thread_id))
        assert {"log": list(range(11)), "who": worker} == channels_at(checkpointer, thread_id, cid(10))
        journals = {
            task_id_for(thread_id, cid(n), "agent"): (JournalEntry(key="k", value=n),) for n in (0, 10, 20)
        }
        assert journals == checkpointer.get_journals(list(journals))
    assert {f"worker-{worker}" for worker in range(8)} == set(ids_of(checkpointer.list_threads()))


def test_two_checkpointers_on_one_store_see_each_others_writes(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """Writes through one checkpointer read back through another, as from another process, turn by turn."""
    other = reopen()
    checkpointer.put("t", make_checkpoint("t", "c0001", log=["a"], n=1))
    assert {"log": ["a"], "n": 1} == channels_at(other, "t")

    other.put("t", make_checkpoint("t", "c0002", "c0001", log=["a", "b"], n=2))
    checkpointer.put("t", make_checkpoint("t", "c0003", "c0002", log=["a", "b", "c"], n=3))
    other.put("t", make_checkpoint("t", "c0004", "c0001", log=["a", "fork"], n=4))
    other.put_journal(task_id_for("t", "c0004", "agent"), JOURNAL)
    other.put_thread_metadata("t", {"by": "other"})

    for reader in (checkpointer, other):
        assert {"log": ["a", "b", "c"], "n": 3} == channels_at(reader, "t", "c0003")
        assert {"log": ["a", "fork"], "n": 4} == channels_at(reader, "t")
        assert ["b", "c"] == reader.read_channel("t", "log", 1, checkpoint_id="c0003")
        assert JOURNAL == reader.get_journal(task_id_for("t", "c0004", "agent"))
        assert ("c0004", {"by": "other"}) == (
            thread_info(reader, "t").checkpoint_id,
            dict(thread_info(reader, "t").metadata),
        )
    checkpointer.delete_thread("t")
    assert_gone(other, "t")
