"""A graph's state schema: its channels, and the typed view nodes receive.

A schema is either a plain map of channel name to :class:`~ilmek.channel.Channel`
or an ``attrs`` class whose fields are channels. The engine always works on
the channel map; for a class schema, :meth:`StateSchema.view` builds the
instance nodes and hosts see.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from . import serde
from .channel import METADATA_KEY, UNSET, Channel, last_write
from .errors import GraphError, ReducerError
from .types import ChannelChange, Extend, Replace

__all__ = ["StateSchema"]


def _field_default(field: attrs.Attribute[Any]) -> Any:
    default: Any = field.default
    if default is attrs.NOTHING:
        return UNSET
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        if default.takes_self:
            return UNSET
        return default.factory()
    return default


def _channels_of_class(cls: type) -> dict[str, Channel]:
    channels: dict[str, Channel] = {}
    for field in attrs.fields(cls):
        declared = field.metadata.get(METADATA_KEY)
        default = _field_default(field)
        if declared is None:
            channels[field.name] = last_write(default)
        elif declared.kind in ("last_write", "reduce"):
            channels[field.name] = attrs.evolve(declared, default=default)
        else:
            channels[field.name] = declared
    return channels


def _check_channel_name(name: Any, declared: Mapping[str, Channel]) -> None:
    if not isinstance(name, str) or not name:
        raise GraphError(f"channel names are non-empty strings, got {name!r}")
    if "\0" in name:
        # Postgres text cannot hold NUL; refusing it here keeps every backend alike.
        raise GraphError(f"channel name {name!r} contains a NUL character, which no database can store")
    if name in declared:
        raise GraphError(f"channel {name!r} is declared twice")


def _read_only(channels: Mapping[str, Channel]) -> Mapping[str, Channel]:
    return MappingProxyType(dict(channels))


@attrs.frozen
class StateSchema:
    """The channels of a graph and, optionally, the ``attrs`` class that views them.

    Immutable: :meth:`with_channel` returns a new schema, so a compiled graph
    never sees channels declared on its builder afterwards.
    """

    channels: Mapping[str, Channel] = attrs.field(factory=dict, converter=_read_only)
    state_class: type | None = None

    @classmethod
    def build(cls, definition: Mapping[str, Channel] | type | None) -> StateSchema:
        """A schema from a channel map, an ``attrs`` class or nothing.

        Raises:
            GraphError: the definition is neither, or a map value is not a channel.
        """
        if definition is None:
            return cls()
        if isinstance(definition, type):
            if not attrs.has(definition):
                raise GraphError(
                    f"a state class must be an attrs class; {definition.__qualname__} is not "
                    "(decorate it with @attrs.define or @attrs.frozen)"
                )
            if not serde.is_registered(definition):
                serde.register(definition)
            return cls(_channels_of_class(definition), definition)
        if isinstance(definition, Mapping):
            channels: dict[str, Channel] = {}
            for name, channel in definition.items():
                _check_channel_name(name, channels)
                if not isinstance(channel, Channel):
                    raise GraphError(
                        f"channel {name!r} must be declared with ilmek.channel "
                        f"(last_write(), append(), merge() or reduce(fn)), got {channel!r}"
                    )
                channels[name] = channel
            return cls(channels)
        raise GraphError(f"a schema is a dict of channels or an attrs class, got {type(definition).__name__}")

    def with_channel(self, name: str, channel: Channel) -> StateSchema:
        """This schema plus one more channel (only for map schemas).

        Raises:
            GraphError: the schema is a class, the name is not a non-empty
                string, holds NUL or is already declared, or ``channel`` is
                not a channel.
        """
        if self.state_class is not None:
            raise GraphError(
                f"this graph's state is the class {self.state_class.__qualname__}; "
                "declare channels as its fields instead of with .channel()"
            )
        _check_channel_name(name, self.channels)
        if not isinstance(channel, Channel):
            raise GraphError(f"channel {name!r} must be an ilmek.channel, got {channel!r}")
        return StateSchema({**self.channels, name: channel})

    def full_values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Written values over the defaults, for the declared channels only.

        A channel with neither a written value nor a default is absent. A
        value of a channel the graph no longer declares (a checkpoint written
        by an older version of the graph) is dropped, as the reference does:
        nodes and hosts see the state the graph declares.
        """
        full: dict[str, Any] = {}
        for name, channel in self.channels.items():
            if name in values:
                full[name] = values[name]
            else:
                initial = channel.initial()
                if initial is not UNSET:
                    full[name] = initial
        return full

    def view(self, values: Mapping[str, Any]) -> Any:
        """The state as nodes and hosts see it: written values over the defaults.

        A dict for a map schema, an instance of the class for a class schema
        (fields with no value and no default read as ``None``). The instance is
        built without calling ``__init__``: state read back is not re-validated.
        """
        full = self.full_values(values)
        if self.state_class is None:
            return full
        instance: Any = object.__new__(self.state_class)
        for field in attrs.fields(self.state_class):
            object.__setattr__(instance, field.name, full.get(field.name))
        return instance

    def writes_from_input(self, update: Any, *, thread_id: str | None) -> dict[str, Any]:
        """The channel writes of a run's input or a host's state update.

        Raises:
            ReducerError: the update is not a mapping (or an instance of the
                state class), or names a channel the graph does not declare.
        """
        if self.state_class is not None and isinstance(update, self.state_class):
            return {f.name: getattr(update, f.name) for f in attrs.fields(self.state_class)}
        if not isinstance(update, Mapping):
            raise ReducerError(
                f"an input or state update must be a dict of channel writes, "
                f"got {type(update).__name__} (thread {thread_id!r})",
                thread_id=thread_id,
            )
        self.check_writes(update, who="the input", thread_id=thread_id)
        return dict(update)

    def check_writes(
        self, writes: Mapping[str, Any], *, who: str, thread_id: str | None, node: str | None = None
    ) -> None:
        """Refuse writes to channels the graph does not declare.

        Raises:
            ReducerError: naming the writer and the channel.
        """
        for name in writes:
            if name not in self.channels:
                declared = ", ".join(sorted(self.channels)) or "none"
                raise ReducerError(
                    f"{who} writes channel {name!r}, which the graph does not declare "
                    f"(declared: {declared}); thread {thread_id!r}",
                    channel=str(name),
                    node=node,
                    thread_id=thread_id,
                )

    def fold(
        self,
        values: Mapping[str, Any],
        writes: list[tuple[str | None, Mapping[str, Any]]],
        *,
        thread_id: str | None,
    ) -> tuple[dict[str, Any], dict[str, ChannelChange]]:
        """Fold writes, in the order given, onto ``values``.

        Args:
            values: The written channel values before the fold.
            writes: ``(writer, writes)`` pairs in task order; the writer (a node
                name, or ``None`` for input) is named in errors.
            thread_id: Named in errors.

        Returns:
            The new written values, and what changed per channel: the new items
            of an ``append`` channel (or of a ``messages`` channel whose
            writes only appended), the whole new value of any other.

        Raises:
            ReducerError: a write names an undeclared channel or a reducer
                raised (chained).
        """
        new_values = dict(values)
        appended: dict[str, list[Any]] = {}
        replaced: set[str] = set()
        for writer, update in writes:
            who = "the input" if writer is None else f"node {writer!r}"
            self.check_writes(update, who=who, thread_id=thread_id, node=writer)
            for name, incoming in update.items():
                channel = self.channels[name]
                # The first write folds onto UNSET, not the default: MODEL §2 says a
                # reducer's current value is absent on the first write.
                current = new_values.get(name, UNSET)
                try:
                    new_values[name], added = channel.fold_change(current, incoming)
                except Exception as exc:
                    raise ReducerError(
                        f"channel {name!r} could not fold the write of {who}: {exc} (thread {thread_id!r})",
                        channel=name,
                        node=writer,
                        thread_id=thread_id,
                    ) from exc
                # A list that only grew stores its new items; one changed
                # otherwise (a message replaced or removed) is stored whole.
                if added is not None and name not in replaced:
                    appended.setdefault(name, []).extend(added)
                else:
                    replaced.add(name)
                    appended.pop(name, None)
        changes: dict[str, ChannelChange] = {}
        for name in replaced:
            changes[name] = Replace(new_values[name])
        for name, items in appended.items():
            changes[name] = Extend(tuple(items))
        return new_values, changes
