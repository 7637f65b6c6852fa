"""A graph's state schema: its channels, and the typed view nodes receive.

A schema is a plain map of channel name to :class:`~ilmek.channel.Channel`,
an ``attrs`` class whose fields are channels, or a ``TypedDict`` whose fields
carry their fold in ``Annotated``. The engine always works on the channel
map; for an ``attrs`` schema, :meth:`StateSchema.view` builds the instance
nodes and hosts see (a ``TypedDict`` state is a plain dict).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from . import channel as channels
from . import checks, serde
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


# What ``Annotated[T, marker]`` may carry: a channel, or the function that makes one.
_MARKERS: dict[Any, Any] = {
    channels.append: channels.append,
    channels.merge: channels.merge,
    channels.messages: channels.messages,
    channels.last_write: channels.last_write,
}


def _marker_channel(cls: type, field: str, metadata: tuple[Any, ...]) -> Channel | None:
    """The channel a field's ``Annotated`` metadata declares, if any (other metadata is left alone)."""
    found: list[Channel] = []
    for item in metadata:
        if isinstance(item, Channel):
            found.append(item)
        elif item is channels.reduce:
            raise GraphError(
                f"field {field!r} of {cls.__qualname__} is marked with ilmek.reduce but not given its "
                "function: write Annotated[int, ilmek.reduce(fn)]"
            )
        elif any(item is marker for marker in _MARKERS):
            found.append(_MARKERS[item]())
        elif callable(item) and not isinstance(item, type):
            raise _foreign_fold(cls, field, item)
    if len(found) > 1:
        raise GraphError(f"field {field!r} of {cls.__qualname__} declares {len(found)} folds; give it one")
    return found[0] if found else None


def _foreign_fold(cls: type, field: str, fold: Any) -> GraphError:
    """A function in ``Annotated`` that ilmek would never call (``operator.add``, LangGraph's habit).

    Left alone it would make a ``last_write`` field that silently keeps only
    the last write; a class (some library's marker) is not taken for one.
    """
    name = getattr(fold, "__name__", None) or type(fold).__name__
    return GraphError(
        f"field {field!r} of {cls.__qualname__} is annotated with {name}, a function ilmek does not "
        "call: such a field would keep only the last write. To fold writes with it, write "
        f"Annotated[..., ilmek.reduce({name})] (it is called with None as the current value on the first "
        "write); ilmek.append concatenates lists and ilmek.messages merges chat messages by id"
    )


def _channels_of_typed_dict(cls: type) -> dict[str, Channel]:
    try:
        # Resolved here, not at import: a TypedDict written under
        # `from __future__ import annotations` holds its annotations as text.
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:
        raise GraphError(
            f"the annotations of {cls.__qualname__} could not be resolved ({type(exc).__name__}: {exc}); "
            "every name its fields use must be importable from its module at run time"
        ) from exc
    found: dict[str, Channel] = {}
    for name, hint in hints.items():
        _check_channel_name(name, found)
        # Required[...] and NotRequired[...] may wrap Annotated[...], or sit inside it.
        while typing.get_origin(hint) in (typing.Required, typing.NotRequired):
            hint = typing.get_args(hint)[0]
        declared = None
        if typing.get_origin(hint) is typing.Annotated:
            declared = _marker_channel(cls, name, hint.__metadata__)
        found[name] = declared if declared is not None else last_write()
    return found


def _check_channel_name(name: Any, declared: Mapping[str, Channel]) -> None:
    if not isinstance(name, str) or not name:
        raise GraphError(f"channel names are non-empty strings, got {name!r}")
    problem = checks.name_problem(name)
    if problem is not None:
        # Refused here, not by one backend's driver: every backend stays alike.
        raise GraphError(f"channel name {name!r} {problem}; rename the channel")
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
    typed_dict: type | None = None

    @classmethod
    def build(cls, definition: Mapping[str, Channel] | type | None) -> StateSchema:
        """A schema from a channel map, an ``attrs`` class, a ``TypedDict`` or nothing.

        A ``TypedDict`` field is a ``last_write`` channel unless ``Annotated``
        gives its fold: ``Annotated[list[str], ilmek.append]``,
        ``Annotated[dict[str, int], ilmek.merge]``,
        ``Annotated[list[Message], ilmek.messages]``,
        ``Annotated[int, ilmek.reduce(fn)]`` or
        ``Annotated[int, ilmek.last_write(0)]`` (any channel works).

        Raises:
            GraphError: the definition is none of these, a map value is not a
                channel, a ``TypedDict``'s annotations cannot be resolved, a
                field declares two folds, or carries a function in
                ``Annotated`` that is not ilmek's (``operator.add``: wrap it in
                ``ilmek.reduce``).
        """
        if definition is None:
            return cls()
        if isinstance(definition, type) and typing.is_typeddict(definition):
            return cls(_channels_of_typed_dict(definition), typed_dict=definition)
        if isinstance(definition, type):
            if not attrs.has(definition):
                raise GraphError(
                    f"a state class must be an attrs class or a TypedDict; {definition.__qualname__} is "
                    "neither (decorate it with @attrs.define, or derive it from typing.TypedDict)"
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
        raise GraphError(
            f"a schema is a dict of channels, an attrs class or a TypedDict, got {type(definition).__name__}"
        )

    def with_channel(self, name: str, channel: Channel) -> StateSchema:
        """This schema plus one more channel (only for map schemas).

        Raises:
            GraphError: the schema is a class, the name is not a non-empty
                string, holds NUL or is already declared, or ``channel`` is
                not a channel.
        """
        declared_by = self.state_class or self.typed_dict
        if declared_by is not None:
            raise GraphError(
                f"this graph's state is the class {declared_by.__qualname__}; "
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
        owned: bool = False,
    ) -> tuple[dict[str, Any], dict[str, ChannelChange]]:
        """Fold writes, in the order given, onto ``values``.

        An ``append`` channel's list is copied once per fold, at its first
        write (a long conversation's bulk); later writes of the same fold
        extend that copy.

        Args:
            values: The written channel values before the fold.
            writes: ``(writer, writes)`` pairs in task order; the writer (a node
                name, or ``None`` for input) is named in errors.
            thread_id: Named in errors.
            owned: The caller gives ``values``' lists up (nobody else holds
                them): ``append`` channels are extended in place, not copied.

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
        # The append channels whose list this fold may extend in place: given up, or its own copy.
        extendable: set[str] = set()
        for name, value in values.items() if owned else ():
            channel = self.channels.get(name)
            if type(value) is list and channel is not None and channel.kind == "append":
                extendable.add(name)
        for writer, update in writes:
            who = "the input" if writer is None else f"node {writer!r}"
            self.check_writes(update, who=who, thread_id=thread_id, node=writer)
            for name, incoming in update.items():
                channel = self.channels[name]
                # The first write folds onto UNSET, not the default: MODEL §2 says a
                # reducer's current value is absent on the first write.
                current = new_values.get(name, UNSET)
                if name in extendable:
                    items = channel.new_items(incoming)
                    current.extend(items)
                    appended.setdefault(name, []).extend(items)
                    continue
                try:
                    new_values[name], added = channel.fold_change(current, incoming)
                    if channel.kind == "append":
                        extendable.add(name)
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
