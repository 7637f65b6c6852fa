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

from collections.abc import Iterable

__all__ = [
    "SEPARATOR",
    "child_of_plans",
    "child_thread_id",
    "children_prefix",
    "is_child_thread",
    "join_path",
    "own_children",
    "plan_and_part",
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


def own_children(thread_id: str, thread_ids: Iterable[str], plan_id: str | None = None) -> list[str]:
    """Those of ``thread_ids`` that are children of ``thread_id`` itself (not theirs), newest plan first.

    ``plan_id``: only the children of that plan's superstep. A child's id
    is the prefix, its plan, the separator and its part; a grandchild's
    goes on with two more separators.
    """
    prefix = children_prefix(thread_id) + ("" if plan_id is None else f"{plan_id}{SEPARATOR}")
    own = len(children_prefix(thread_id))
    return sorted(
        (tid for tid in thread_ids if tid.startswith(prefix) and tid.count(SEPARATOR, own) == 1),
        reverse=True,
    )


def plan_and_part(thread_id: str, child: str) -> tuple[str, str]:
    """The plan and the namespace part of ``child``, a child thread of ``thread_id`` itself."""
    plan, _, part = child[len(children_prefix(thread_id)) :].partition(SEPARATOR)
    return plan, part


def join_path(ns: tuple[str, ...]) -> str:
    """A namespace path as one string (``"outer:outer/inner:inner"``)."""
    return "/".join(ns)
