"""The checkpointer port: the one interface every storage backend implements.

The docstrings of :class:`Checkpointer` are the contract. Its seven abstract
methods are the port of ``ilmek/1``; the methods after them are what this
package adds beyond it (holds, fenced writes, append-only journals, the
host API). They have working defaults built on the port, so a minimal
third-party backend only implements the seven (its holds then work within
one process); ilmek's own backends override them to make them atomic, fast
and valid across processes.

Journals. A task's steps are recorded one entry at a time, under the
checkpoint its superstep ran from (its *base*). The tasks of a checkpoint
see the entries recorded from the checkpoints named in its
``journal_chain`` (what a pause, a continued crash or a fork inherits from
the same superstep), then the entries recorded from itself. A superstep
that commits drops the entries recorded from its base; entries that a
pause still inherits stay until the thread is pruned or deleted.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from .. import forks
from ..errors import CheckpointNotFoundError, ConcurrentUpdateError
from ..types import (
    ChannelChange,
    Checkpoint,
    JournalEntry,
    ThreadCancel,
    ThreadError,
    ThreadInfo,
    task_id_for,
)
from .child_threads import ChildThreads
from .holds import Hold, HoldLostError, LocalHolds, busy_error
from .outbox import NoticeOutbox, OutboxNotice
from .remembered import RemembersLatest
from .rotation import Rotating

__all__ = [
    "ANY_LATEST",
    "Checkpointer",
    "Hold",
    "HoldLostError",
    "busy_error",
    "checkpoints_to_keep",
    "concurrent_update_error",
    "journal_view",
    "missing_parent_error",
    "same_channels",
]


class _AnyLatest:
    def __repr__(self) -> str:
        return "ANY_LATEST"


ANY_LATEST: Final = _AnyLatest()
"""Passed as ``expect_latest``: commit whatever the thread's latest checkpoint is."""


def journal_view(
    carried: Iterable[JournalEntry], segments: Iterable[Iterable[JournalEntry]]
) -> tuple[JournalEntry, ...]:
    """One task's journal: entries carried in the checkpoint, then each segment's in order.

    A later entry under the same key replaces an earlier one (an answer
    replaces the open pause it answers); order is that of first appearance.
    """
    merged: dict[str, JournalEntry] = {entry.key: entry for entry in carried}
    for segment in segments:
        for entry in segment:
            merged[entry.key] = entry
    return tuple(merged.values())


class Checkpointer(Rotating, NoticeOutbox, ChildThreads, RemembersLatest, abc.ABC):
    """Where threads keep their checkpoints and their tasks' journals; safe to share between threads.

    Thread ids are opaque text: ``%``, ``_``, quotes, emoji and SQL fragments are ids like any other."""

    def __init__(self) -> None:
        self._local_holds = LocalHolds()
        self._commit_lock = forks.ForkSafeLock(threading.RLock)

    # --- the port -----------------------------------------------------------------

    @abc.abstractmethod
    def put(self, thread_id: str, checkpoint: Checkpoint) -> None:
        """Store a checkpoint of ``thread_id`` (``checkpoint.thread_id`` must match).

        Raises:
            SerializationError: a value cannot be stored; nothing was written.
        """

    @abc.abstractmethod
    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        """A checkpoint with its full channel values; the latest when no id is given.

        An unknown id, or the id of another thread's checkpoint, reads as ``None``.
        """

    @abc.abstractmethod
    def list(
        self, thread_id: str, *, limit: int | None = None, before: str | None = None
    ) -> builtins.list[Checkpoint]:
        """The thread's checkpoints, newest first.

        Args:
            thread_id: The thread.
            limit: At most this many.
            before: Only checkpoints whose id sorts before this one.

        The records' ``channels`` may load only when first read.
        """

    @abc.abstractmethod
    def put_journal(self, task_id: str, entries: Sequence[JournalEntry]) -> None:
        """Replace the journal of a task; durable when this returns."""

    @abc.abstractmethod
    def get_journal(self, task_id: str) -> tuple[JournalEntry, ...]:
        """The journal of a task, empty when there is none."""

    @abc.abstractmethod
    def drop_journal(self, task_id: str) -> None:
        """Delete the journal of a task, if there is one."""

    @abc.abstractmethod
    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread: its checkpoints, its journals, its metadata and its hold.

        Threads whose ids merely look alike (a prefix, ``%`` or ``_``) are
        untouched. A run holding the thread fails at its next write and
        writes nothing more.
        """

    # --- beyond the port: how runs may use it ---------------------------------------------

    @property
    def tasks_on_caller_thread(self) -> bool | None:
        """Where a run's tasks must run, asked on the thread that called ``run()`` or reads a stream.

        ``True``: every task on that thread, one after another, because this
        checkpointer writes inside the caller's transaction there (a Django
        connection inside ``atomic``): a step's writes through the same
        database then commit or vanish with the step's record. ``False``: no
        task on it, because the caller's thread has a transaction open that
        this checkpointer does not write in (a Django ``atomic`` block around
        another store): a step's ORM writes would vanish with its rollback
        while the step's record stays. ``None``: either.
        """
        from .callers import caller_in_atomic_block

        return False if caller_in_atomic_block() else None

    def worker_finished(self) -> None:
        """Called on a run's worker thread after each task it ran: let go of what that thread opened.

        The default does nothing; a Django connection's checkpointer closes
        the worker thread's Django connections (Django closes a thread's
        connection when a request ends, and a worker serves no request).
        """

    # --- beyond the port: several journals at once --------------------------------------

    def get_journals(self, task_ids: Sequence[str]) -> dict[str, tuple[JournalEntry, ...]]:
        """The journals of several tasks (tasks without one are left out)."""
        found = {}
        for task_id in task_ids:
            entries = self.get_journal(task_id)
            if entries:
                found[task_id] = entries
        return found

    def put_journals(self, journals: Mapping[str, Sequence[JournalEntry]]) -> None:
        """Replace several journals; nothing is written if any entry cannot be stored.

        Raises:
            SerializationError: naming the task and the step key.
        """
        from . import _records

        for task_id, entries in journals.items():
            _records.encode_journal(task_id, entries)
        for task_id, entries in journals.items():
            self.put_journal(task_id, entries)

    # --- beyond the port: holds ------------------------------------------------------

    @contextlib.contextmanager
    def hold(self, thread_id: str) -> Iterator[Hold]:
        """Hold a thread for one run: a second holder gets :class:`ThreadBusyError`.

        The :class:`Hold` is passed to every write the run makes. The default
        holds within this checkpointer object only; ilmek's own backends hold
        across processes and machines.
        """
        handle = self._local_holds.take(thread_id)
        try:
            yield handle
        finally:
            handle.release()

    @contextlib.contextmanager
    def deferred_hold(self, thread_id: str) -> Iterator[Hold]:
        """A hold for a run whose first write may take it, in that write's transaction.

        Until then the hold is not taken (``hold.taken`` is false): the run
        reads without it, and its first commit takes it, or fails with
        :class:`ThreadBusyError` writing nothing, or with
        :class:`ConcurrentUpdateError` if the thread moved since the read.
        That saves a durable commit per run. The default takes it at once.
        """
        with self.hold(thread_id) as handle:
            yield handle

    def delete_idle_thread(self, thread_id: str) -> None:
        """Delete the thread as :meth:`delete_thread` does, unless a live run holds it.

        Checking and deleting are one step: a run that starts meanwhile
        either keeps the thread (and nothing is deleted) or starts after the
        delete, on a new thread. A thread that does not exist is no error.

        Raises:
            ThreadBusyError: A live run holds the thread; nothing was deleted.
        """
        with self.hold(thread_id):
            self.delete_thread(thread_id)

    def request_cancel(self, thread_id: str, reason: str = "cancelled") -> bool:
        """Ask the run holding the thread now to stop at its next superstep boundary.

        Returns:
            Whether a run was holding the thread. The request dies with that
            run and never touches a later one.
        """
        current = self._local_holds.holder(thread_id)
        if current is None or current.released:
            return False
        current.saw_cancel(reason)
        return True

    # --- beyond the port: what a run reads and writes ---------------------------------

    def load(
        self, thread_id: str, checkpoint_id: str | None = None, *, hold: Hold | None = None
    ) -> Checkpoint | None:
        """:meth:`get`, on behalf of the run that holds ``hold`` (through its connection)."""
        return self.get(thread_id, checkpoint_id)

    def load_journals(
        self, base: Checkpoint, task_keys: Sequence[str], *, hold: Hold | None = None
    ) -> dict[str, tuple[JournalEntry, ...]]:
        """The journals the tasks of ``base.next`` see when they run from ``base``.

        Returns:
            Task key to entries, for the tasks that have any.
        """
        found: dict[str, tuple[JournalEntry, ...]] = {}
        for key in task_keys:
            segments = [
                self.get_journal(task_id_for(base.thread_id, source, key))
                for source in (*base.journal_chain, base.id)
            ]
            entries = journal_view(base.task_journals.get(key, ()), segments)
            if entries:
                found[key] = entries
        return found

    def append_journal(self, hold: Hold, base_id: str, task_key: str, entry: JournalEntry) -> None:
        """Record one entry of a task running from ``base_id``; durable when this returns.

        Fenced by ``hold``, and idempotent: recording the same key again keeps
        the first record.

        Raises:
            HoldLostError: the run no longer holds the thread; nothing was written.
            SerializationError: the entry cannot be stored; nothing was written.
        """
        self._local_holds.check(hold)
        task_id = task_id_for(hold.thread_id, base_id, task_key)
        entries = self.get_journal(task_id)
        if all(existing.key != entry.key for existing in entries):
            self.put_journal(task_id, (*entries, entry))

    def record_answers(
        self, hold: Hold, base_id: str, answers: Mapping[str, Sequence[JournalEntry]]
    ) -> dict[str, tuple[JournalEntry, ...]] | None:
        """Record the answers to a checkpoint's pauses (task key to entries), all or nothing.

        Returns:
            Everything then recorded from ``base_id`` (the answers, and what
            an earlier resume recorded), by task key in the order recorded
            and as a read would return it; or ``None`` when the backend does
            not tell, and the run reads the journals again.
        """
        self._local_holds.check(hold)
        for task_key, entries in answers.items():
            task_id = task_id_for(hold.thread_id, base_id, task_key)
            recorded = {entry.key: entry for entry in self.get_journal(task_id)}
            recorded.update((entry.key, entry) for entry in entries)
            self.put_journal(task_id, tuple(recorded.values()))
        return None

    def commit(
        self,
        thread_id: str,
        checkpoint: Checkpoint,
        *,
        changes: Mapping[str, ChannelChange] | None = None,
        expect_latest: str | _AnyLatest | None = ANY_LATEST,
        hold: Hold | None = None,
        drop_journals: Sequence[str] = (),
        journal: tuple[str, Mapping[str, Sequence[JournalEntry]]] | None = None,
        release_hold: bool = False,
        notices: Sequence[OutboxNotice] = (),
    ) -> None:
        """Store a checkpoint and drop the journals it makes useless, all or nothing.

        Args:
            thread_id: The thread.
            checkpoint: The new checkpoint; ``channels`` holds the full values.
            changes: What changed relative to the parent, so that only that is
                written; without it the backend works it out.
            expect_latest: The id the thread's latest checkpoint must still
                have (``None``: the thread must have none).
            hold: The run's hold: the commit lands only while it is the run's.
            drop_journals: Task ids whose own journal entries the new
                checkpoint makes useless (the tasks of a superstep that ended).
            journal: ``(base checkpoint id, {task key: entries})`` to record
                in the same transaction (the open pauses of a paused
                superstep); an entry already recorded is kept.
            release_hold: This is the run's last write: the hold is given back
                in the same transaction.
            notices: Pause notices for the outbox (:class:`~ilmek.checkpoint.outbox.NoticeOutbox`).

        Raises:
            ConcurrentUpdateError: the thread's latest checkpoint is not
                ``expect_latest``; nothing was written.
            HoldLostError: ``hold`` is no longer the run's; nothing was written.
        """
        with self._commit_lock:
            self._local_holds.check(hold)
            if expect_latest is not ANY_LATEST:
                latest = self.get(thread_id)
                found = latest.id if latest is not None else None
                if found != expect_latest:
                    raise concurrent_update_error(thread_id, expect_latest, found)
            self.put(thread_id, checkpoint)
            for task_id in drop_journals:
                self.drop_journal(task_id)
            if journal is not None and hold is not None:
                base_id, entries = journal
                for task_key, recorded in entries.items():
                    for entry in recorded:
                        self.append_journal(hold, base_id, task_key, entry)
        if release_hold and hold is not None:
            hold.release()

    def record_failure(self, hold: Hold, error: ThreadError) -> None:
        """Store why the run holding ``hold`` failed; the thread then reads ``error``.

        The next commit of the thread clears it. The default stores nothing.
        """
        self._local_holds.check(hold)

    def record_cancel(self, hold: Hold, cancel: ThreadCancel) -> None:
        """Store how the run holding ``hold`` was cancelled (``ThreadInfo.cancelled``).

        The thread's status stays what it was; its next commit clears the
        record. The default stores nothing.
        """
        self._local_holds.check(hold)

    # --- beyond the port: the host API ----------------------------------------------

    def list_threads(
        self,
        search: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        status: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        updated_before: Any = None,
        updated_after: Any = None,
        due_before: Any = None,
    ) -> builtins.list[ThreadInfo]:
        """Threads, most recently updated first (with ``due_before``: the earliest due first).

        Args:
            search: Only threads whose id contains this text (case-insensitive).
            metadata: Only threads whose metadata has every one of these key/value pairs.
            status: Only threads in this status (``done``, ``interrupted``,
                ``unfinished``, ``error``), or ``running`` for those a live
                run holds now.
            offset: Skip this many.
            limit: At most this many.
            updated_before: Only threads last updated before this moment (an
                aware ``datetime`` or epoch seconds).
            updated_after: Only threads last updated at or after this moment.
            due_before: Only threads with a deadline or timer due by then (``ThreadInfo.due_at``; indexed).
        """
        raise NotImplementedError(f"{type(self).__name__} does not list threads")

    def get_thread(self, thread_id: str) -> ThreadInfo | None:
        """One thread's summary, or ``None`` if it does not exist."""
        raise NotImplementedError(f"{type(self).__name__} does not track threads")

    def read_thread(self, thread_id: str, *, hold: Hold | None = None) -> ThreadInfo | None:
        """:meth:`get_thread`, on behalf of the run that holds ``hold`` (through its connection)."""
        return self.get_thread(thread_id)

    def put_thread_metadata(self, thread_id: str, metadata: Mapping[str, Any]) -> None:
        """Replace a thread's metadata (creating the thread's record if needed)."""
        raise NotImplementedError(f"{type(self).__name__} does not track threads")

    def read_channel(
        self,
        thread_id: str,
        channel: str,
        offset: int = 0,
        limit: int | None = None,
        *,
        checkpoint_id: str | None = None,
    ) -> builtins.list[Any]:
        """Items ``[offset, offset + limit)`` of a list channel, without loading the rest.

        Reads the latest checkpoint unless ``checkpoint_id`` is given; a
        channel never written reads as ``[]``.

        Raises:
            CheckpointNotFoundError: there is no such checkpoint.
            TypeError: the channel does not hold a list.
        """
        raise NotImplementedError(f"{type(self).__name__} does not page channels")

    def prune(self, thread_id: str, keep_last: int) -> int:
        """Drop old checkpoints of a thread; return how many were dropped.

        Keeps the ``keep_last`` newest checkpoints and every checkpoint still
        needed: the tip of every branch (so every open pause), every fork
        point, and every checkpoint whose values a kept one shares.
        """
        raise NotImplementedError(f"{type(self).__name__} does not prune")

    def delete_threads(
        self,
        *,
        updated_before: Any = None,
        status: str | None = None,
        limit: int | None = None,
    ) -> int:
        """Delete threads in bulk; never one a live run holds.

        Args:
            updated_before: Only threads last updated before this moment (an
                aware ``datetime`` or epoch seconds).
            status: Only threads in this status.
            limit: At most this many (the least recently updated first).

        Returns:
            How many threads were deleted.
        """
        raise NotImplementedError(f"{type(self).__name__} does not delete threads in bulk")

    # --- lifetime ----------------------------------------------------------------------

    def close(self) -> None:
        """Release what the checkpointer opened itself (never what it was given)."""

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def concurrent_update_error(thread_id: str, expected: object, found: str | None) -> ConcurrentUpdateError:
    """The error for a commit whose expected latest checkpoint moved on."""
    if found is None and expected is not None:
        return ConcurrentUpdateError(
            f"thread {thread_id!r} was deleted while this run worked (its checkpoint {expected!r} "
            "is gone with it); nothing more was written. Start the thread again if it is still wanted",
            thread_id=thread_id,
            checkpoint_id=None,
        )
    return ConcurrentUpdateError(
        f"thread {thread_id!r} moved on while this run worked: its latest checkpoint is "
        f"{found!r}, not {expected!r}; nothing was written. Reload the thread and try again",
        thread_id=thread_id,
        checkpoint_id=found,
    )


def same_channels(stored: Mapping[str, Any], channels: Mapping[str, Any]) -> bool:
    """Whether two sets of channel values would be stored alike (a retried write meeting itself)."""
    from .. import serde

    if set(stored) != set(channels):
        return False
    try:
        return all(serde.encode(stored[name]) == serde.encode(channels[name]) for name in stored)
    except Exception:
        return False


def missing_parent_error(thread_id: str, checkpoint: Checkpoint) -> CheckpointNotFoundError:
    """The error for a commit whose parent checkpoint is gone (its delta has nothing to build on)."""
    return CheckpointNotFoundError(
        f"the parent {checkpoint.parent_id!r} of checkpoint {checkpoint.id!r} is not a checkpoint of "
        f"thread {thread_id!r} (pruned or deleted meanwhile?); nothing was written",
        thread_id=thread_id,
        checkpoint_id=checkpoint.parent_id,
    )


def checkpoints_to_keep(ids: Sequence[str], parents: Mapping[str, str | None], keep_last: int) -> set[str]:
    """The checkpoints :meth:`Checkpointer.prune` must keep.

    The ``keep_last`` newest, every leaf (the tip of a branch, which is also
    where any open pause sits) and every fork point (a checkpoint with more
    than one child).
    """
    keep = set(sorted(ids)[-keep_last:])
    children: dict[str | None, int] = {}
    for checkpoint_id in ids:
        parent = parents[checkpoint_id]
        children[parent] = children.get(parent, 0) + 1
    for checkpoint_id in ids:
        count = children.get(checkpoint_id, 0)
        if count == 0 or count > 1:
            keep.add(checkpoint_id)
    return keep
