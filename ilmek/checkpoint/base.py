"""The checkpointer port: the one interface every storage backend implements.

The docstrings of :class:`Checkpointer` are the contract. Its seven abstract
methods are the port of ``ilmek/1``; the methods after them are what this
package adds beyond it (atomic commits, thread holds, the host API). They
have working defaults built on the port, so a minimal third-party backend
only implements the seven; ilmek's own backends override them to make them
atomic and fast.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from ..errors import ConcurrentUpdateError, ThreadBusyError
from ..types import ChannelChange, Checkpoint, JournalEntry, ThreadInfo, ThreadStatus

__all__ = ["ANY_LATEST", "Checkpointer", "ThreadHold", "busy_error", "checkpoints_to_keep"]


class _AnyLatest:
    def __repr__(self) -> str:
        return "ANY_LATEST"


ANY_LATEST: Final = _AnyLatest()
"""Passed as ``expect_latest``: commit whatever the thread's latest checkpoint is."""


class ThreadHold:
    """The right to run a thread, held from a run's start to its end.

    Attributes:
        thread_id: The thread held.
        keep_alive_interval: How often, in seconds, :meth:`keep_alive` should
            be called while the hold is in use (``None``: never needed).
        verifies: Whether :meth:`verify` can tell a lost hold (holds that can
            only be lost with the connection that writes need not check).
    """

    keep_alive_interval: float | None = None
    #: Whether :meth:`verify` does anything (the engine skips it otherwise).
    verifies: bool = False

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id

    def verify(self) -> None:
        """Confirm the hold is still this run's, just before a step's side effect.

        Raises:
            ThreadBusyError: the hold was lost; the step must not run.
        """

    def keep_alive(self) -> None:
        """Renew the hold.

        Raises:
            ThreadBusyError: the hold was lost (its lease lapsed and another
                run took the thread).
        """

    def release(self) -> None:
        """Give the thread back; safe to call twice."""


class _LocalHold(ThreadHold):
    def __init__(self, thread_id: str, registry: set[str], lock: threading.Lock) -> None:
        super().__init__(thread_id)
        self._registry = registry
        self._lock = lock
        self._held = True

    def release(self) -> None:
        with self._lock:
            if self._held:
                self._registry.discard(self.thread_id)
                self._held = False


class Checkpointer(abc.ABC):
    """Where threads keep their checkpoints and their tasks' journals.

    Implementations are safe to share between threads. Thread ids are opaque
    text: ``%``, ``_``, quotes, emoji and SQL fragments are ids like any other.
    """

    def __init__(self) -> None:
        self._local_holds: set[str] = set()
        self._local_holds_lock = threading.Lock()
        self._commit_lock = threading.RLock()

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
        """Delete the thread: its checkpoints, its journals and its metadata.

        Threads whose ids merely look alike (a prefix, ``%`` or ``_``) are untouched.
        """

    # --- beyond the port: what the engine needs ------------------------------------

    def commit(
        self,
        thread_id: str,
        checkpoint: Checkpoint,
        *,
        changes: Mapping[str, ChannelChange] | None = None,
        expect_latest: str | _AnyLatest | None = ANY_LATEST,
        drop_journals: Sequence[str] = (),
        release_hold: bool = False,
    ) -> None:
        """Store a checkpoint and drop the journals it supersedes, all or nothing.

        Args:
            thread_id: The thread.
            checkpoint: The new checkpoint; ``channels`` holds the full values.
            changes: What changed relative to the parent, so that only that is
                written; without it the backend works it out.
            expect_latest: The id the thread's latest checkpoint must still
                have (``None``: the thread must have none).
            drop_journals: Task ids whose journals the checkpoint supersedes.
            release_hold: This is the run's last write: a backend may give the
                thread's hold back in the same transaction.

        Raises:
            ConcurrentUpdateError: the thread's latest checkpoint is not
                ``expect_latest``; nothing was written.
        """
        with self._commit_lock:
            if expect_latest is not ANY_LATEST:
                latest = self.get(thread_id)
                found = latest.id if latest is not None else None
                if found != expect_latest:
                    raise concurrent_update_error(thread_id, expect_latest, found)
            self.put(thread_id, checkpoint)
            for task_id in drop_journals:
                self.drop_journal(task_id)

    def get_journals(self, task_ids: Sequence[str]) -> dict[str, tuple[JournalEntry, ...]]:
        """The journals of several tasks (absent ones are left out)."""
        found = {}
        for task_id in task_ids:
            entries = self.get_journal(task_id)
            if entries:
                found[task_id] = entries
        return found

    def put_journals(self, journals: Mapping[str, Sequence[JournalEntry]]) -> None:
        """Replace several journals; ilmek's backends do it in one transaction."""
        for task_id, entries in journals.items():
            self.put_journal(task_id, entries)

    @contextlib.contextmanager
    def hold(self, thread_id: str) -> Iterator[ThreadHold]:
        """Hold a thread for one run: a second holder gets :class:`ThreadBusyError`.

        The default holds within this process only; ilmek's SQL backends hold
        across processes and machines.
        """
        with self.local_hold(thread_id) as handle:
            yield handle

    @contextlib.contextmanager
    def local_hold(self, thread_id: str) -> Iterator[ThreadHold]:
        """Hold a thread against other runs through this checkpointer object."""
        with self._local_holds_lock:
            if thread_id in self._local_holds:
                raise busy_error(thread_id)
            self._local_holds.add(thread_id)
        handle = _LocalHold(thread_id, self._local_holds, self._local_holds_lock)
        try:
            yield handle
        finally:
            handle.release()

    # --- beyond the port: the host API ----------------------------------------------

    def list_threads(
        self,
        search: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        status: ThreadStatus | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> builtins.list[ThreadInfo]:
        """Threads, most recently updated first.

        Args:
            search: Only threads whose id contains this text (case-insensitive).
            metadata: Only threads whose metadata has every one of these
                key/value pairs.
            status: Only threads in this status.
            offset: Skip this many.
            limit: At most this many.
        """
        raise NotImplementedError(f"{type(self).__name__} does not list threads")

    def get_thread(self, thread_id: str) -> ThreadInfo | None:
        """One thread's summary, or ``None`` if it does not exist."""
        raise NotImplementedError(f"{type(self).__name__} does not track threads")

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

    # --- lifetime ----------------------------------------------------------------------

    def close(self) -> None:
        """Release what the checkpointer opened itself (never what it was given)."""

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def busy_error(thread_id: str) -> ThreadBusyError:
    """The error for a thread another run holds."""
    return ThreadBusyError(
        f"thread {thread_id!r} is held by another run; wait for it to return "
        "(or, if its process died, for its hold to lapse) and try again",
        thread_id=thread_id,
    )


def concurrent_update_error(thread_id: str, expected: object, found: str | None) -> ConcurrentUpdateError:
    return ConcurrentUpdateError(
        f"thread {thread_id!r} moved on while this run worked: its latest checkpoint is "
        f"{found!r}, not {expected!r}; nothing was written. Reload the thread and try again",
        thread_id=thread_id,
        checkpoint_id=found,
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
