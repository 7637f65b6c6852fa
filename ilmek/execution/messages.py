"""What a superstep's workers and its driving thread hand each other.

A :class:`TaskRun` is one task of the superstep being run; the messages
carry it (never an index), so a message from a task that is no longer live
is dropped rather than misattributed. They are plain slotted classes, as
they are made per message and never compared: an attrs class costs
``import ilmek`` half a millisecond to generate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import attrs

from ..context import TaskJournal
from ..control import Command
from ..errors import IlmekError, InterruptSignal
from ..graph import NodeSpec
from ..types import ScheduledTask

__all__ = [
    "ChildEvent",
    "Done",
    "Emit",
    "Message",
    "Request",
    "Retry",
    "RunClosed",
    "StepLeft",
    "StorageFailed",
    "TaskRun",
]


class RunClosed(IlmekError):
    """The run was closed (its stream abandoned); nothing more is written."""


class StorageFailed(BaseException):
    """Internal: the run's own storage failed under a node (recording a step, checking the hold).

    A :class:`BaseException`, so a node's ``except Exception`` cannot take the
    run's failure for its own: it ends the task, then the run raises ``error``.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@attrs.define(eq=False)
class TaskRun:
    """One task of the superstep being run."""

    task: ScheduledTask
    spec: NodeSpec
    task_id: str
    journal: TaskJournal
    #: True from dispatch until its ``Done`` is served: a message from a
    #: task that is no longer live is dropped, never misattributed.
    live: bool = True
    outcome: str = "running"  # ok | interrupt | error | storage
    update: dict[str, Any] = attrs.Factory(dict)
    command: Command | None = None
    error: BaseException | None = None
    signal: InterruptSignal | None = None
    #: How many times the node's body was called.
    attempts: int = 0
    #: The superstep's span, parent of the task's (see ilmek.tracing).
    parent_span: Any = None


class Emit:
    """A task emitted a custom event."""

    __slots__ = ("payload", "task")

    def __init__(self, task: TaskRun, payload: Any) -> None:
        self.task = task
        self.payload = payload


class ChildEvent:
    """An event of a task's subgraph, and the path to put in front of its ``ns``."""

    __slots__ = ("event", "ns")

    def __init__(self, event: Any, ns: tuple[str, ...]) -> None:
        self.event = event
        self.ns = ns


class Retry:
    """A task's attempt failed and it runs again."""

    __slots__ = ("attempt", "error", "task")

    def __init__(self, task: TaskRun, attempt: int, error: BaseException) -> None:
        self.task = task
        self.attempt = attempt
        self.error = error


class Done:
    """A task finished: its outcome is on the task."""

    __slots__ = ("task",)

    def __init__(self, task: TaskRun) -> None:
        self.task = task


class StepLeft:
    """A step's function returned (its record written) or raised: the driver looks again."""

    __slots__ = ()


class Request:
    """Storage work a worker hands to the driving thread, and waits for."""

    __slots__ = ("done", "error", "work")

    def __init__(self, work: Callable[[], None]) -> None:
        self.work = work
        self.done = threading.Event()
        self.error: BaseException | None = None


Message = Emit | Retry | Done | Request | StepLeft
