"""ilmek: a synchronous runtime for stateful graphs, checkpointed every superstep.

Build a graph with :func:`graph`, run it with :func:`run`, pause it for a
person with ``ctx.interrupt`` and answer with :func:`resume`. Every superstep
is committed to a checkpointer, so a thread survives crashes, deploys and
moves between processes and machines.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import answers, channel, serde
from .answers import Review
from .channel import (
    UNSET,
    append,
    append_field,
    last_write,
    merge,
    merge_field,
    messages,
    reduce,
    reduce_field,
    remove,
)
from .checkpoint.base import Checkpointer
from .checkpoint.holds import Hold, HoldLostError
from .connecting import connect
from .context import NodeContext
from .control import Command, RetryPolicy, Send, command, send
from .engine import resume, resume_keyed, resume_keyed_stream, resume_stream, run, stream
from .errors import (
    AnswerRejectedError,
    CheckpointNotFoundError,
    ConcurrentUpdateError,
    CorruptCheckpointError,
    DecryptionError,
    DrainingError,
    GraphError,
    IlmekError,
    InterruptSignal,
    InvalidArgumentError,
    NondeterminismError,
    RecursionLimitError,
    ReducerError,
    ResumeError,
    SchemaVersionError,
    SerializationError,
    StepResultNotStoredError,
    StorageError,
    SubgraphError,
    ThreadBusyError,
    TransientStorageError,
)
from .events import (
    CheckpointEvent,
    CustomEvent,
    Event,
    EventBase,
    InterruptEvent,
    NodeEnd,
    NodeError,
    NodeRetry,
    NodeStart,
    RunEnd,
    RunStart,
    StateEvent,
    StepStart,
    StreamPart,
    stream_modes,
)
from .graph import END, START, CompiledGraph, GraphBuilder, graph
from .host import forget_unstored_steps, history, pending_interrupts, thread_state, update_state
from .links import answer_token, resume_with_token
from .notices import PauseNotice
from .operations import recover, request_cancel
from .process_drain import drain, draining, undrain
from .spec import from_spec, to_spec
from .sweep import tick
from .types import (
    Checkpoint,
    JournalEntry,
    Pending,
    Result,
    ScheduledTask,
    ThreadCancel,
    ThreadError,
    ThreadInfo,
)

if TYPE_CHECKING:
    from .checkpoint.memory import InMemoryCheckpointer
    from .checkpoint.postgres import PostgresCheckpointer
    from .checkpoint.sqlite import SqliteCheckpointer

__version__ = "0.1.0"

# The backends are imported on first use, not by `import ilmek`: a program on
# Postgres never loads sqlite3, one on SQLite never loads the Postgres code,
# and a script that only builds graphs loads neither.
_LAZY: dict[str, str] = {
    "InMemoryCheckpointer": "ilmek.checkpoint.memory",
    "PostgresCheckpointer": "ilmek.checkpoint.postgres",
    "SqliteCheckpointer": "ilmek.checkpoint.sqlite",
}

__all__ = [
    "END",
    "START",
    "UNSET",
    "AnswerRejectedError",
    "Checkpoint",
    "CheckpointEvent",
    "CheckpointNotFoundError",
    "Checkpointer",
    "Command",
    "CompiledGraph",
    "ConcurrentUpdateError",
    "CorruptCheckpointError",
    "CustomEvent",
    "DecryptionError",
    "DrainingError",
    "Event",
    "EventBase",
    "GraphBuilder",
    "GraphError",
    "Hold",
    "HoldLostError",
    "IlmekError",
    "InMemoryCheckpointer",
    "InterruptEvent",
    "InterruptSignal",
    "InvalidArgumentError",
    "JournalEntry",
    "NodeContext",
    "NodeEnd",
    "NodeError",
    "NodeRetry",
    "NodeStart",
    "NondeterminismError",
    "PauseNotice",
    "Pending",
    "PostgresCheckpointer",
    "RecursionLimitError",
    "ReducerError",
    "Result",
    "ResumeError",
    "RetryPolicy",
    "Review",
    "RunEnd",
    "RunStart",
    "ScheduledTask",
    "SchemaVersionError",
    "Send",
    "SerializationError",
    "SqliteCheckpointer",
    "StateEvent",
    "StepResultNotStoredError",
    "StepStart",
    "StorageError",
    "StreamPart",
    "SubgraphError",
    "ThreadBusyError",
    "ThreadCancel",
    "ThreadError",
    "ThreadInfo",
    "TransientStorageError",
    "answer_token",
    "answers",
    "append",
    "append_field",
    "channel",
    "command",
    "connect",
    "drain",
    "draining",
    "forget_unstored_steps",
    "from_spec",
    "graph",
    "history",
    "last_write",
    "merge",
    "merge_field",
    "messages",
    "pending_interrupts",
    "recover",
    "reduce",
    "reduce_field",
    "remove",
    "request_cancel",
    "resume",
    "resume_keyed",
    "resume_keyed_stream",
    "resume_stream",
    "resume_with_token",
    "run",
    "send",
    "serde",
    "stream",
    "stream_modes",
    "thread_state",
    "tick",
    "to_spec",
    "undrain",
    "update_state",
]


def __getattr__(name: str) -> Any:
    """Import a backend the first time it is asked for (PEP 562)."""
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
