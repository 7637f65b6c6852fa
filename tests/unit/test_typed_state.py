"""State as a TypedDict: fields carry their fold with ``Annotated``; nodes receive (and return) plain dicts.

This module uses ``from __future__ import annotations``, so the TypedDicts
below hold their annotations as text: the schema resolves them when the
graph is built.
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, Annotated, Any, NotRequired, Required, TypedDict

import pytest

import ilmek
from ilmek import END, START, Checkpointer, GraphError, graph, run, thread_state, to_spec, update_state

if TYPE_CHECKING:
    from decimal import Decimal

pytestmark = pytest.mark.timeout(60)


def add_to(total: int | None, n: int) -> int:
    """A reducer as SPEC §2 wants it: the current value is None on the first write."""
    return (total or 0) + n


class Message(TypedDict, total=False):
    id: str
    text: str


class Chat(TypedDict, total=False):
    log: Annotated[list[str], ilmek.append]
    tags: Annotated[dict[str, int], ilmek.merge]
    total: Annotated[int, ilmek.reduce(add_to)]
    turns: Annotated[int, ilmek.last_write(0)]
    messages: Annotated[list[Message], ilmek.messages]
    topic: str
    note: Annotated[str, "documentation other tools put here"]


def turn(state: Chat) -> Chat:
    """Writes every field once; reads what the previous turn left."""
    return {
        "log": [f"turn {state['turns']}"],
        "tags": {"seen": 1},
        "total": 5,
        "turns": state["turns"] + 1,
        "messages": [{"id": "m1", "text": f"reply {state['turns']}"}],
        "topic": "typing",
    }


def chat_graph() -> ilmek.CompiledGraph[Chat]:
    return graph("chat", Chat).node("turn", turn).edge(START, "turn").edge("turn", END).compile()


def test_each_annotated_field_becomes_the_channel_its_marker_names() -> None:
    """append, merge, reduce(fn), last_write(default), messages; any other field is last_write."""
    channels = chat_graph().channels
    kinds = {name: ch.kind for name, ch in channels.items()}
    assert {
        "log": "append",
        "tags": "merge",
        "total": "reduce",
        "turns": "last_write",
        "messages": "messages",
        "topic": "last_write",
        "note": "last_write",
    } == kinds
    assert (0, ilmek.UNSET) == (channels["turns"].default, channels["topic"].default)


def test_a_typed_dict_graph_folds_writes_by_field_and_nodes_see_plain_dicts(
    checkpointer: Checkpointer,
) -> None:
    """Two turns on every backend: each field folds with its reducer; state reads back as a dict."""
    g = chat_graph().bind(checkpointer)
    run(g, {"tags": {"from": 0}, "total": 1}, thread_id="t")
    result = run(g, {"messages": [{"id": "u", "text": "hi"}]}, thread_id="t")
    expected = {
        "log": ["turn 0", "turn 1"],
        "tags": {"from": 0, "seen": 1},
        "total": 11,
        "turns": 2,
        "messages": [{"id": "m1", "text": "reply 1"}, {"id": "u", "text": "hi"}],
        "topic": "typing",
    }
    assert expected == result.state
    state = thread_state(g, thread_id="t")
    assert dict is type(state)
    assert expected == state
    update_state(g, thread_id="t", update={"log": ["edited"]})
    assert ["turn 0", "turn 1", "edited"] == thread_state(g, thread_id="t")["log"]  # type: ignore[index]


class Wrapped(TypedDict):
    log: Required[Annotated[list[str], ilmek.append]]
    seen: Annotated[NotRequired[list[str]], ilmek.append()]


def test_required_and_not_required_wrap_or_sit_inside_annotated() -> None:
    """Required[Annotated[...]] and Annotated[NotRequired[...], ...] both carry their marker."""
    assert {"log": "append", "seen": "append"} == {
        n: c.kind for n, c in graph("w", Wrapped).schema.channels.items()
    }


class ReduceWithoutFunction(TypedDict):
    total: Annotated[int, ilmek.reduce]


class TwoFolds(TypedDict):
    log: Annotated[list[str], ilmek.append, ilmek.merge]


def add_messages(left: list[Any], right: list[Any]) -> list[Any]:
    """A user's own fold, as LangGraph users write one."""
    return left + right


class FoldedWithOperatorAdd(TypedDict):
    log: Annotated[list[str], operator.add]


class FoldedWithALambda(TypedDict):
    total: Annotated[int, lambda current, update: current + update]


class FoldedWithOwnFunction(TypedDict):
    messages: Annotated[list[Any], add_messages]


class FoldedWithAPartial(TypedDict):
    log: Required[Annotated[list[str], functools.partial(add_messages, [])]]


@pytest.mark.parametrize(
    ("schema", "field", "name"),
    [
        (FoldedWithOperatorAdd, "log", "add"),
        (FoldedWithALambda, "total", "<lambda>"),
        (FoldedWithOwnFunction, "messages", "add_messages"),
        (FoldedWithAPartial, "log", "partial"),
    ],
)
def test_a_function_in_annotated_that_is_not_an_ilmek_fold_is_a_graph_error(
    schema: type, field: str, name: str
) -> None:
    """operator.add, a lambda, a user's add_messages: a callable ilmek would not call is refused (it used to
    make a silent last_write field that kept only the last write), naming the field and ilmek.reduce(fn)."""
    with pytest.raises(GraphError) as caught:
        graph("folded", schema)
    message = str(caught.value)
    assert f"field {field!r} of {schema.__qualname__}" in message
    assert name in message
    assert "ilmek.reduce(" in message
    assert "last write" in message


class Marker:
    """A class used as Annotated metadata by some other library (a class is callable, but no fold)."""


class DocumentedOnly(TypedDict):
    note: Annotated[str, "a description"]
    size: Annotated[int, Marker, Marker(), 3, None]


def test_metadata_that_is_not_a_function_is_left_to_other_tools() -> None:
    """Strings, numbers, marker classes and their instances in Annotated are not ilmek's: last_write."""
    assert {"note": "last_write", "size": "last_write"} == {
        name: channel.kind for name, channel in graph("documented", DocumentedOnly).schema.channels.items()
    }


class Unresolvable(TypedDict):
    price: Decimal  # imported only for type checkers: unknown at run time


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        (ReduceWithoutFunction, r"marked with ilmek\.reduce but not given its function"),
        (TwoFolds, "declares 2 folds"),
        (Unresolvable, r"annotations of Unresolvable could not be resolved \(NameError"),
    ],
)
def test_a_typed_dict_the_schema_cannot_read_is_a_graph_error(schema: type, says: str) -> None:
    """reduce without its function, two folds on one field, a name unknown at run time: GraphError."""
    with pytest.raises(GraphError, match=says):
        graph("bad", schema)


def test_a_typed_dict_graph_declares_channels_only_as_fields_and_exports_them() -> None:
    """.channel() is refused naming the class; to_spec writes each field's reducer."""
    with pytest.raises(GraphError, match="state is the class Wrapped"):
        graph("w", Wrapped).channel("extra", ilmek.channel.append())
    g = graph("w", Wrapped).node("n", lambda s: None, type="noop").edge(START, "n").compile()
    assert {"log": {"reducer": "append"}, "seen": {"reducer": "append"}} == to_spec(g)["channels"]


def test_a_node_of_a_typed_dict_graph_reads_fields_by_key() -> None:
    """A node typed with the TypedDict receives a dict; a field never written, without default, is absent."""
    seen: list[dict[str, Any]] = []

    def look(state: Chat) -> None:
        seen.append(dict(state))

    run(graph("look", Chat).node("look", look).edge(START, "look").compile(), {"topic": "x"})
    assert [{"log": [], "tags": {}, "turns": 0, "messages": [], "topic": "x"}] == seen
