"""Subgraph namespaces: how a child run's thread, path and pause ids are named.

A child graph runs as a thread of its own inside its parent's thread: its
checkpoints and journals are stored under a *child thread id*, the parent's
thread id, the reserved separator (U+001F, the unit separator), the plan the
parent's superstep belongs to and the child's namespace part. Every
checkpointer already scopes rows by thread id, so a child's rows sit beside
its parent's and a prefix (the root's id and the separator) finds a whole
tree. The thread listings show root threads only (:func:`is_child_thread`).

A namespace part is ``"node:task_key"`` (MODEL §10): the node that runs the
child and the parent task's key, or, for ``ctx.call``, the call's journal key
and the task's key. A path is a tuple of parts, outermost first; a child's
pause is known to its root thread as the path, ``/``, and the child's own id.
"""

from __future__ import annotations

__all__ = [
    "SEPARATOR",
    "child_of_plans",
    "child_thread_id",
    "children_prefix",
    "is_child_thread",
    "join_path",
    "root_thread_id",
]

#: Between a thread id and its children's parts. Reserved: a thread id holding it is a child's.
SEPARATOR = "\x1f"


def child_thread_id(thread_id: str, plan_id: str, part: str) -> str:
    """The thread id of the child ``part`` that a task of plan ``plan_id`` of ``thread_id`` runs.

    The plan (not the checkpoint) names it, so a resume, a retry, crash
    recovery and a fork of that superstep all meet the same child, while a
    later superstep running the same node starts a fresh one.
    """
    return f"{thread_id}{SEPARATOR}{plan_id}{SEPARATOR}{part}"


def is_child_thread(thread_id: str) -> bool:
    """Whether ``thread_id`` names a child run's thread (never listed as a thread of its own)."""
    return SEPARATOR in thread_id


def root_thread_id(thread_id: str) -> str:
    """The root thread a child thread belongs to (a root thread is its own root)."""
    return thread_id.split(SEPARATOR, 1)[0]


def children_prefix(thread_id: str) -> str:
    """What every descendant of ``thread_id`` (and nothing else) starts with."""
    return f"{thread_id}{SEPARATOR}"


def child_of_plans(thread_id: str, descendant: str, plans: set[str]) -> bool:
    """Whether ``descendant`` (a thread under ``thread_id``) belongs to a child of one of ``plans``.

    Grandchildren count by their ancestor among ``thread_id``'s own children.
    """
    plan = descendant[len(children_prefix(thread_id)) :].split(SEPARATOR, 1)[0]
    return plan in plans


def join_path(ns: tuple[str, ...]) -> str:
    """A namespace path as one string (``"outer:outer/inner:inner"``)."""
    return "/".join(ns)
