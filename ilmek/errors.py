"""Every exception ilmek raises on its own account, in one tree.

Each class's docstring is its default message. Errors that carry data take
keyword arguments and keep them as attributes, so callers can branch on
``err.thread_id`` rather than parse text. Exceptions raised by user code
(a node, a step, a reducer) are never wrapped: they reach the caller as they
were raised, except where a class below says otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .types import PauseTerms

__all__ = [
    "AnswerRejectedError",
    "CheckpointNotFoundError",
    "ConcurrentUpdateError",
    "CorruptCheckpointError",
    "DecryptionError",
    "DrainingError",
    "GraphError",
    "IlmekError",
    "InterruptSignal",
    "InvalidArgumentError",
    "NondeterminismError",
    "RecursionLimitError",
    "ReducerError",
    "ResumeError",
    "SchemaVersionError",
    "SerializationError",
    "StepResultNotStoredError",
    "StorageError",
    "SubgraphError",
    "ThreadBusyError",
    "TransientStorageError",
]


class IlmekError(Exception):
    """An ilmek operation failed."""

    def __init__(
        self,
        message: str | None = None,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
    ) -> None:
        if message is None:
            message = (type(self).__doc__ or "").strip().splitlines()[0]
        super().__init__(message)
        self.message = message
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id
        #: The run this error ended, when it was raised out of one: a retry
        #: can tell whether that run committed anything (its checkpoints'
        #: metadata carry the same ``run_id``).
        self.run_id: str | None = None

    def __str__(self) -> str:
        return self.message


class InvalidArgumentError(IlmekError, ValueError, TypeError):
    """An argument has the wrong type or value; nothing was read or written.

    It is also a ``ValueError`` and a ``TypeError``, so code written to catch
    either keeps working.
    """


class GraphError(IlmekError):
    """The graph is malformed; fix its definition and compile it again."""

    def __init__(self, message: str | None = None, *, node: str | None = None) -> None:
        super().__init__(message)
        self.node = node


class ReducerError(IlmekError):
    """A write could not be folded into a channel."""

    def __init__(
        self,
        message: str | None = None,
        *,
        channel: str | None = None,
        node: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        super().__init__(message, thread_id=thread_id)
        self.channel = channel
        self.node = node


class ResumeError(IlmekError):
    """The thread cannot be resumed or run the way it was asked to."""


class AnswerRejectedError(ResumeError):
    """An answer does not fit its pause's contract; nothing was recorded and the pause is still open.

    Attributes:
        pause_id: The pause whose contract refused the answer.
        reason: Why, in the contract's words.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        pause_id: str | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message, thread_id=thread_id, checkpoint_id=checkpoint_id)
        self.pause_id = pause_id
        self.reason = reason


class CheckpointNotFoundError(ResumeError, LookupError):
    """The thread has no checkpoint with that id; list them with history()."""


class RecursionLimitError(IlmekError):
    """The run reached its recursion limit before the graph finished."""

    def __init__(
        self,
        message: str | None = None,
        *,
        limit: int,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
    ) -> None:
        super().__init__(message, thread_id=thread_id, checkpoint_id=checkpoint_id)
        self.limit = limit


class NondeterminismError(IlmekError):
    """A replayed task did not request the journal keys it recorded before.

    Attributes:
        key: The first offending journal key.
        keys: Every offending key (strict mode names them all).
        node: The node.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        key: str,
        keys: tuple[str, ...] = (),
        node: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        super().__init__(message, thread_id=thread_id)
        self.key = key
        self.keys = keys or (key,)
        self.node = node


class SerializationError(IlmekError, TypeError):
    """A value cannot be stored: ilmek's codec does not support its type."""

    def __init__(
        self,
        message: str | None = None,
        *,
        where: str | None = None,
        type_name: str | None = None,
    ) -> None:
        super().__init__(message)
        self.where = where
        self.type_name = type_name


class StepResultNotStoredError(SerializationError):
    """A step's function ran, but its result could not be stored; it does not run again on its own.

    The journal records that the effect happened, so no retry and no later
    run calls the function again: each meets this error at the step's key
    instead, until :func:`ilmek.forget_unstored_steps` lets it run once more.

    Attributes:
        key: The step's journal key (``charge#0``).
        node: The node whose step it is.
        type_name: The type the codec could not store.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        key: str,
        node: str | None = None,
        thread_id: str | None = None,
        type_name: str | None = None,
    ) -> None:
        super().__init__(message, where=f"step {key!r}", type_name=type_name)
        self.key = key
        self.node = node
        self.thread_id = thread_id


class CorruptCheckpointError(SerializationError):
    """Stored data is malformed: it was not written by ilmek, or was damaged since.

    Attributes:
        table: The table (or store) the bad row is in.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        table: str | None = None,
    ) -> None:
        super().__init__(message, where="stored data")
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id
        self.table = table


class DecryptionError(IlmekError):
    """A stored value could not be opened with the keyring; nothing was read from it.

    Raised when a store read with a keyring holds a plaintext value (and the
    keyring does not allow plaintext), a value sealed under a key id the
    keyring does not have, or a value whose seal fails: it was tampered with
    or moved from another thread, checkpoint, channel, list position, step,
    pause or store. The message names the thread and the row; it never holds
    key material.

    Attributes:
        table: The table (or store) the value is in.
        key_id: The key id the value names, when it names one.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        table: str | None = None,
        key_id: str | None = None,
    ) -> None:
        super().__init__(message, thread_id=thread_id, checkpoint_id=checkpoint_id)
        self.table = table
        self.key_id = key_id


def stored_at(thread_id: str | None, checkpoint_id: str | None = None, table: str | None = None) -> str:
    """Where stored data is, in the words every message about a stored row uses."""
    where = f"thread {thread_id!r}"
    if checkpoint_id is not None:
        where += f", checkpoint {checkpoint_id!r}"
    if table is not None:
        where += f" ({table})"
    return where


class SubgraphError(IlmekError):
    """A subgraph run inside a node failed; the node fails with it (see the chained error)."""

    def __init__(
        self,
        message: str | None = None,
        *,
        ns: tuple[str, ...] = (),
        node: str | None = None,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
    ) -> None:
        super().__init__(message, thread_id=thread_id, checkpoint_id=checkpoint_id)
        #: The namespace path of the child that failed, outermost first.
        self.ns = ns
        #: The node of that child that failed (``None``: the child was stopped).
        self.node = node


class ThreadBusyError(IlmekError):
    """Another run holds this thread; wait for it to return and try again."""


class DrainingError(IlmekError):
    """This process is draining (``ilmek.drain()``): it starts no new run; run it in another process."""


class ConcurrentUpdateError(IlmekError):
    """Another writer moved the thread on first; nothing was written. Reload and retry."""


class SchemaVersionError(IlmekError):
    """The database was written by another version of ilmek's schema."""

    def __init__(
        self,
        message: str | None = None,
        *,
        found: int | None = None,
        expected: int | None = None,
    ) -> None:
        super().__init__(message)
        self.found = found
        self.expected = expected


class StorageError(IlmekError):
    """The database refused an operation; see the chained driver error."""


class TransientStorageError(StorageError):
    """The database kept failing with a transient error after every retry."""


class InterruptSignal(BaseException):
    """A node paused for a person (not an error).

    ``ctx.interrupt`` raises it to halt the task; the engine catches it and ends
    the run ``interrupted``. It derives from :class:`BaseException` so that a
    blanket ``except Exception:`` inside a node cannot swallow a pause. Re-raise
    it if you catch ``BaseException``.
    """

    def __init__(self, key: str, payload: Any = None, terms: PauseTerms | None = None) -> None:
        super().__init__(key)
        self.key = key
        self.payload = payload
        #: The pause's contract, deadline and kind (``None``: a plain pause).
        self.terms = terms
        #: The pauses of a subgraph this task runs, as its own thread sees them
        #: (:class:`~ilmek.types.Pending` values whose ids are relative to this
        #: task); empty for a pause of the node itself.
        self.children: tuple[Any, ...] = ()
