"""A node that is a subgraph: the parent's shared channels in, what the child wrote out.

``.node(name, compiled)`` gives the node the body :func:`subgraph_body`
makes. The child itself is run by the task's ``ctx`` (see
:mod:`ilmek.execution.children`); this module only maps state: the child
receives the parent's channels it also declares, and the node's update is
what the child changed in them, in the form the parent's reducers fold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .channel import UNSET, remove
from .errors import InvalidArgumentError, SubgraphError
from .schema import StateSchema

if TYPE_CHECKING:
    from .context import NodeContext
    from .graph import CompiledGraph

__all__ = ["SUBGRAPH_TYPE", "subgraph_body", "subgraph_update"]

SUBGRAPH_TYPE = "subgraph"
"""A subgraph node's ``type`` in a spec; its ``config`` is ``{"graph": NAME}``."""


def subgraph_body(child: CompiledGraph[Any]) -> Callable[[Any, NodeContext], dict[str, Any]]:
    """The body of ``.node(name, child)``: the shared channels in, what the child wrote out."""

    def body(state: Any, ctx: NodeContext) -> dict[str, Any]:
        parent = ctx.graph.schema
        # The parent's state, or a send's input (whatever it holds: it is meant for the child).
        if state is None or isinstance(state, Mapping):
            values = dict(state or {})
        else:
            values = parent.writes_from_input(state, thread_id=ctx.thread_id)
        given = {name: value for name, value in values.items() if name in child.schema.channels}
        host = ctx._children
        if host is None:
            raise InvalidArgumentError(f"node {ctx.node!r} cannot run subgraph {child.name!r} here")
        final = host.call(ctx, child, given, f"{ctx.node}:{host.task_key}")
        written = child.schema.writes_from_input(final, thread_id=ctx.thread_id)
        return subgraph_update(parent, given, written, node=ctx.node, thread_id=ctx.thread_id)

    body.__name__ = body.__qualname__ = f"subgraph_{child.name}"
    return body


def subgraph_update(
    schema: StateSchema,
    given: Mapping[str, Any],
    final: Mapping[str, Any],
    *,
    node: str,
    thread_id: str,
) -> dict[str, Any]:
    """What the child wrote to the parent's channels, as one update for the parent's reducers.

    An ``append`` channel gains only the items after what the child was
    given; a ``messages`` channel the new or changed items and the removal
    of those gone; a ``merge`` channel the keys that changed; a
    ``last_write`` channel the child's value when it differs. A ``reduce``
    channel's writes cannot be told from its value: a child that changed
    one is refused (call it with ``ctx.call`` and return the writes).

    Raises:
        SubgraphError: a shared channel changed in a way the parent cannot fold.
    """
    update: dict[str, Any] = {}
    for name, after in final.items():
        channel = schema.channels.get(name)
        before = given.get(name, UNSET)
        if channel is None or (before is not UNSET and before == after):
            continue
        kind = channel.kind
        if kind == "last_write":
            update[name] = after
        elif kind == "append" and isinstance(after, list):
            old = before if isinstance(before, list) else []
            if after[: len(old)] != old:
                raise _unfoldable(name, "its list no longer starts with what it was given", node, thread_id)
            if after[len(old) :]:
                update[name] = after[len(old) :]
        elif kind == "merge" and isinstance(after, Mapping):
            old_map = before if isinstance(before, Mapping) else {}
            changed = {k: v for k, v in after.items() if k not in old_map or old_map[k] != v}
            if changed:
                update[name] = changed
        elif kind == "messages" and isinstance(after, list):
            update[name] = _message_changes(before if isinstance(before, list) else [], after)
        else:
            why = f"a {kind} channel's writes cannot be told from its value"
            raise _unfoldable(name, why, node, thread_id)
    return update


def _message_changes(before: list[Any], after: list[Any]) -> list[Any]:
    from .channel import _message_id

    old = {_message_id(item): item for item in before}
    kept = {_message_id(item) for item in after}
    changes: list[Any] = [item for item in after if old.get(_message_id(item), UNSET) != item]
    changes.extend(remove(item_id) for item_id in old if item_id not in kept)
    return changes


def _unfoldable(channel: str, why: str, node: str, thread_id: str) -> SubgraphError:
    return SubgraphError(
        f"node {node!r} ran a subgraph that changed channel {channel!r}, but {why} (thread "
        f"{thread_id!r}); run the subgraph with ctx.call() and return the writes you mean",
        thread_id=thread_id,
    )
