"""The messages channel: append by id, replace in place, remove, fresh ids; stored as an append channel.

What LangGraph users know as ``add_messages``: ``channel.messages()`` (or
``ilmek.messages`` in a ``TypedDict``). A write that only appends stays rows
of new items, so ``read_channel`` pages it in SQL; a replace or remove stores
the list whole once.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sqlite3
from typing import Any

import attrs
import pytest

import ilmek
from ilmek import (
    END,
    START,
    Checkpointer,
    ReducerError,
    channel,
    from_spec,
    graph,
    history,
    run,
    thread_state,
    to_spec,
)
from ilmek.channel import UNSET
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.schema import StateSchema
from ilmek.types import Extend, Replace

pytestmark = pytest.mark.timeout(60)


def msg(message_id: str | None, text: str) -> dict[str, Any]:
    """A chat message as a dict (``id`` left out when ``None``)."""
    return {"role": "user", "text": text} if message_id is None else {"id": message_id, "text": text}


def fold(current: Any, incoming: Any) -> Any:
    """What a messages channel holds after one write."""
    return channel.messages().fold(current, incoming)


def test_new_ids_append_known_ids_replace_in_place_and_removals_remove() -> None:
    """Appends keep order, a known id is replaced where it stood, {"id": X, "remove": True} drops X."""
    start = fold(UNSET, [msg("a", "hi"), msg("b", "there")])
    assert [msg("a", "hi"), msg("b", "there")] == start
    assert [msg("a", "hi"), msg("b", "THERE"), msg("c", "new")] == fold(
        start, [msg("b", "THERE"), msg("c", "new")]
    )
    assert [msg("b", "there")] == fold(start, [{"id": "a", "remove": True}])
    assert [msg("b", "there")] == fold(start, ilmek.remove("a"))
    assert [msg("b", "there"), msg("a", "back")] == fold(start, [ilmek.remove("a"), msg("a", "back")])
    assert [msg("a", "hi"), msg("b", "there")] == start  # never mutated


def test_an_item_without_an_id_gets_a_fresh_one_and_the_callers_value_is_untouched() -> None:
    """A dict without an id (or with None) is stored as a copy with a new uuid4-shaped hex id."""
    mine = msg(None, "hello")
    folded = fold(UNSET, [mine, {"id": None, "text": "x"}])
    assert "id" not in mine
    ids = [item["id"] for item in folded]
    assert 2 == len(set(ids))
    assert all(32 == len(i) and int(i, 16) >= 0 for i in ids)
    assert [{**mine, "id": ids[0]}, {"id": ids[1], "text": "x"}] == folded


@attrs.frozen
class AttrsMessage:
    text: str
    id: str | None = None


@dataclasses.dataclass(frozen=True)
class DataMessage:
    text: str
    id: str | None = None


def test_attrs_and_dataclass_messages_are_kept_by_their_id_attribute() -> None:
    """Values with an ``id`` attribute replace by it, and get a fresh one (a copy) when it is None."""
    first = fold(UNSET, [AttrsMessage("a", "1"), DataMessage("b")])
    assert AttrsMessage("a", "1") == first[0]
    assert isinstance(first[1], DataMessage)
    assert (str, "b") == (type(first[1].id), first[1].text)
    assert [AttrsMessage("A", "1"), first[1]] == fold(first, AttrsMessage("A", "1"))


@pytest.mark.parametrize(
    ("write", "says"),
    [
        ([ilmek.remove("nope")], "no message with id 'nope' to remove"),
        (["just text"], "holds dicts with an 'id'"),
        ([{"id": ["not", "hashable"]}], "a message id must be a string"),
    ],
)
def test_a_bad_messages_write_is_a_reducer_error_naming_channel_and_thread(write: Any, says: str) -> None:
    """Removing an unknown id, an item with no place for an id, an unhashable id: a ReducerError."""
    schema = StateSchema.build({"messages": channel.messages()})
    with pytest.raises(ReducerError, match=rf"channel 'messages' could not fold.*{says}.*thread 't'"):
        schema.fold({"messages": [msg("a", "hi")]}, [("agent", {"messages": write})], thread_id="t")


def test_an_append_only_write_is_stored_as_new_items_and_a_replace_or_remove_whole() -> None:
    """schema.fold reports Extend (the new items, fresh ids and all) unless an item is replaced or removed."""
    schema = StateSchema.build({"messages": channel.messages()})
    values, changes = schema.fold(
        {"messages": [msg("a", "hi")]}, [("n", {"messages": [msg(None, "x")]})], thread_id="t"
    )
    assert Extend((values["messages"][1],)) == changes["messages"]
    _, changes = schema.fold(values, [("n", {"messages": [msg("a", "HI")]})], thread_id="t")
    assert isinstance(changes["messages"], Replace)
    # Two writes of one superstep: an append, then a removal; the whole list is stored.
    writes = [("x", {"messages": [msg("b", "b")]}), ("y", {"messages": [ilmek.remove("a")]})]
    values, changes = schema.fold({"messages": [msg("a", "hi")]}, writes, thread_id="t")
    assert Replace([msg("b", "b")]) == changes["messages"]


def chat() -> Any:
    """A graph whose one node applies the turn's ``edits`` to ``messages`` and appends a reply."""

    def agent(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [*state["edits"], {"id": f"r{len(state['messages'])}", "text": "reply"}]}

    return (
        graph("chat", {"messages": channel.messages(), "edits": channel.last_write([])})
        .node("agent", agent)
        .edge(START, "agent")
        .edge("agent", END)
        .compile()
    )


def test_replace_remove_and_append_on_every_backend_and_read_channel_pages_them(
    checkpointer: Checkpointer,
) -> None:
    """Turns that append, replace and remove read back right, at the latest and at older checkpoints."""
    g = chat().bind(checkpointer)
    run(g, {"messages": [msg("u0", "hello")]}, thread_id="t")
    after_first = history(g, thread_id="t", limit=1)[0].id
    run(g, {"messages": [msg("u1", "more")], "edits": [msg("r1", "edited reply")]}, thread_id="t")
    run(g, {"messages": [msg(None, "anon")], "edits": [ilmek.remove("u0")]}, thread_id="t")
    state = thread_state(g, thread_id="t")
    assert state is not None
    anon_id = state["messages"][3]["id"]
    expected = [
        msg("r1", "edited reply"),
        msg("u1", "more"),
        {"id": "r3", "text": "reply"},
        {"role": "user", "text": "anon", "id": anon_id},
        {"id": "r5", "text": "reply"},
    ]
    assert expected == state["messages"]
    assert expected == checkpointer.read_channel("t", "messages")
    assert expected[1:3] == checkpointer.read_channel("t", "messages", offset=1, limit=2)
    old = [msg("u0", "hello"), {"id": "r1", "text": "reply"}]
    assert old == checkpointer.read_channel("t", "messages", checkpoint_id=after_first)
    # The id given at fold time is what every later read sees.
    assert anon_id == thread_state(g, thread_id="t")["messages"][3]["id"]  # type: ignore[index]


def test_appending_messages_writes_one_row_per_new_item_and_a_replace_stores_the_list_once(
    tmp_path: pathlib.Path,
) -> None:
    """On SQLite: ten appending turns write twenty item rows and no blob; a replace writes one blob."""
    path = tmp_path / "chat.db"
    g = chat().bind(SqliteCheckpointer(path))
    for turn in range(10):
        run(g, {"messages": [msg(f"u{turn}", "hi")]}, thread_id="t")

    def count(table: str) -> int:
        with sqlite3.connect(path) as conn:
            where = " WHERE channel = 'messages'" if table == "blobs" else ""
            found: int = conn.execute(f"SELECT count(*) FROM ilmek_{table}{where}").fetchone()[0]
            return found

    assert (20, 0) == (count("items"), count("blobs"))
    run(g, {"edits": [msg("u0", "edited")]}, thread_id="t")
    assert (20, 1) == (count("items"), count("blobs"))
    assert 21 == len(g.checkpointer.read_channel("t", "messages"))  # type: ignore[union-attr]


def test_a_spec_with_a_messages_channel_round_trips_and_runs() -> None:
    """{"reducer": "messages"} loads as a messages channel and exports unchanged."""
    spec = {
        "name": "chat",
        "channels": {"messages": {"reducer": "messages"}},
        "nodes": [{"id": "say", "type": "say", "config": {}}],
        "edges": [{"from": "__start__", "to": "say"}, {"from": "say", "to": "__end__"}],
    }
    g = from_spec(spec, {"say": lambda config: lambda state: {"messages": [msg("a", "replaced")]}})
    assert spec == to_spec(g)
    assert "messages" == g.channels["messages"].kind
    assert [msg("a", "replaced")] == run(g, {"messages": [msg("a", "first")]}).state["messages"]


def fold_seconds(ids: list[Any]) -> float:
    """The time of one write (a new message, then a replace) onto a channel holding messages of ``ids``."""
    import time

    kind = ilmek.channel.messages()
    current = [{"id": item_id, "text": "x"} for item_id in ids]
    began = time.perf_counter()
    appended = kind.fold(current, {"id": "new", "text": "y"})
    kind.fold(appended, {"id": ids[-1], "text": "changed"})
    return time.perf_counter() - began


def test_ids_that_all_share_one_hash_cost_no_more_than_ordinary_ids() -> None:
    """20,000 int ids forged to share a hash (k * (2**61 - 1)): a write costs about what ordinary ids cost."""
    count = 20_000
    colliding = [k * (2**61 - 1) for k in range(1, count + 1)]
    assert 1 == len({hash(item_id) for item_id in colliding})
    ordinary = list(range(1, count + 1))
    baseline = min(fold_seconds(ordinary) for _ in range(3))
    forged = min(fold_seconds(colliding) for _ in range(2))
    assert forged < 5 * baseline + 0.05, (forged, baseline)


def test_ids_of_different_types_are_different_ids() -> None:
    """1, 1.0, True and "1" name four messages (stored, they differ): ids are keyed by type and value."""
    kind = ilmek.channel.messages()
    folded = kind.fold(
        UNSET, [{"id": 1}, {"id": 1.0}, {"id": True}, {"id": "1"}, {"id": (1, "a")}, {"id": 1, "v": 2}]
    )
    assert [{"id": 1, "v": 2}, {"id": 1.0}, {"id": True}, {"id": "1"}, {"id": (1, "a")}] == folded
