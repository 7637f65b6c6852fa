"""What a checkpoint changed: its channels against its parent's.

A channel is ``added`` (written for the first time), ``removed`` (no longer
there, e.g. the graph stopped declaring it), ``changed`` (a new value), or
``appended`` (a list that kept its items and gained more: only the new
items are worth reading, as an ``append`` channel grows every superstep).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

__all__ = ["ChannelDiff", "difference"]

Kind = Literal["added", "removed", "changed", "appended"]


@attrs.frozen(kw_only=True)
class ChannelDiff:
    """One channel's difference.

    Attributes:
        name: The channel.
        kind: ``added``, ``removed``, ``changed`` or ``appended``.
        before: The parent's value (absent for ``added``).
        after: The checkpoint's value (absent for ``removed``).
        appended: The items added to the end, for ``appended``.
    """

    name: str
    kind: Kind
    before: Any = None
    after: Any = None
    appended: tuple[Any, ...] = ()


def _same(left: Any, right: Any) -> bool:
    try:
        return bool(left == right) and type(left) is type(right)
    except Exception:
        # A stored value's own __eq__ failing must not break the page.
        return False


def difference(parent: Mapping[str, Any] | None, current: Mapping[str, Any]) -> list[ChannelDiff]:
    """The channels that differ between ``parent`` (``None``: no parent) and ``current``, in channel order."""
    before = dict(parent or {})
    changes: list[ChannelDiff] = []
    for name, value in current.items():
        if name not in before:
            changes.append(ChannelDiff(name=name, kind="added", after=value))
            continue
        old = before[name]
        if _same(old, value):
            continue
        grown = isinstance(old, list) and isinstance(value, list) and len(value) > len(old)
        if grown and _same(value[: len(old)], old):
            appended = tuple(value[len(old) :])
            changes.append(
                ChannelDiff(name=name, kind="appended", before=old, after=value, appended=appended)
            )
            continue
        changes.append(ChannelDiff(name=name, kind="changed", before=old, after=value))
    changes.extend(
        ChannelDiff(name=name, kind="removed", before=before[name]) for name in before if name not in current
    )
    return changes
