"""Ported from the .NET port's ``dotnet/test/Ilmek.Core.Tests/ChannelTests.cs``: the reducers.

The reference folds with ``Channel.Reduce(name, current, incoming)``; Python's
is :meth:`ilmek.channel.Channel.fold`, which knows no channel name, and the
graph's schema (``g.schema.fold``) wraps a failing fold in a ``ReducerError``
naming the channel, so the cases about error messages go through a run or the
schema. The .NET ``Channels.Reduce`` kind is called ``custom`` there and
``reduce`` here. ``g.Materialize(values)`` is the state a host reads back,
here ``thread_state`` over a stored checkpoint.

Not ported (C# typing, no Python meaning): "State.Get refuses a wrong type
with a message naming the channel" and "State.GetList filters to the requested
element type and tolerates a non-list" — Python state is a plain ``dict``,
read with ``state["n"]``, and has no typed accessors.
"""

from __future__ import annotations

from typing import Any

import pytest

from ilmek import (
    END,
    START,
    UNSET,
    Checkpointer,
    ReducerError,
    SerializationError,
    channel,
    graph,
    run,
    thread_state,
)
from ilmek.events import NodeError
from tests.support.reference_edge import make_checkpoint

# --- last_write ---------------------------------------------------------------------------------


def test_last_write_incoming_wins_including_over_an_unset_channel() -> None:
    """ChannelTests.LastWriteIncomingWins: "last_write: incoming wins, including over an unset channel"."""
    ch = channel.last_write(0)

    assert 1 == ch.fold(UNSET, 1)
    assert 2 == ch.fold(1, 2)
    assert "last_write" == ch.kind


def test_last_write_writing_none_is_a_write() -> None:
    """ChannelTests.LastWriteNullIsAWrite: "last_write: writing null is a write, not a no-op"."""
    assert None is channel.last_write(7).fold(7, None)


# --- append -------------------------------------------------------------------------------------


def test_append_folds_one_item_and_many_items_alike() -> None:
    """ChannelTests.AppendOneAndMany: "append: folds one item and many items alike"."""
    ch = channel.append()

    assert ["a"] == ch.fold(UNSET, "a")
    assert ["a", "b", "c"] == ch.fold(["a"], ["b", "c"])


def test_append_a_string_is_one_item() -> None:
    """ChannelTests.AppendStringIsOneItem: "append: a string is one item, never split into characters"."""
    assert ["hello"] == channel.append().fold(UNSET, "hello")


def test_append_a_dict_is_one_item() -> None:
    """ChannelTests.AppendDictionaryIsOneItem: "append: a dictionary is one item, not a list of its pairs"."""
    message = {"role": "user", "text": "hi"}

    result = channel.append().fold(UNSET, message)

    assert 1 == len(result)
    assert result[0] is message


def test_append_a_dict_written_by_a_node_lands_as_one_message() -> None:
    """ChannelTests.AppendDictionaryThroughARun: "append: a dictionary appended through a run lands as one
    message"."""
    g = (
        graph("messages", {"messages": channel.append()})
        .node("a", lambda state: {"messages": {"role": "user"}})
        .node("b", lambda state: {"messages": {"role": "assistant"}})
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
    )

    result = run(g)

    assert ["user", "assistant"] == [m["role"] for m in result.state["messages"]]


def test_append_does_not_mutate_the_current_value() -> None:
    """ChannelTests.AppendDoesNotMutate: "append: does not mutate the current value"."""
    current = ["a"]

    after = channel.append().fold(current, "b")

    assert ["a"] == current
    assert after is not current


def test_append_an_empty_list_is_a_no_op_that_still_copies() -> None:
    """ChannelTests.AppendEmptyList: "append: an empty list is a no-op that still copies"."""
    current = ["a"]

    after = channel.append().fold(current, [])

    assert ["a"] == after
    assert after is not current


def test_append_onto_a_value_that_is_not_a_list_is_a_reducer_error(ref_checkpointer: Checkpointer) -> None:
    """ChannelTests.AppendNonListCurrentThrows: "append: a non-list current value is a ReducerException, not
    silently discarded history".

    As the reference tells it: the thread was written while ``items`` was a
    ``last_write`` channel, and is run again by a graph that now declares it
    ``append``. The node's write is refused, naming the channel, and the
    stored value stays.
    """
    opts: dict[str, Any] = {"thread_id": "t-shape", "checkpointer": ref_checkpointer}
    before = (
        graph("shape", {"items": channel.last_write()})
        .node("n", lambda state: {"items": 5})
        .edge(START, "n")
        .compile()
    )
    after = (
        graph("shape", {"items": channel.append()})
        .node("n", lambda state: {"items": "a"})
        .edge(START, "n")
        .compile()
    )
    assert "done" == run(before, {}, **opts).status

    result = run(after, {}, **opts)

    assert "error" == result.status
    ((node, error),) = result.errors
    assert "n" == node
    assert isinstance(error, ReducerError)
    assert "'items'" in str(error)
    assert {"items": 5} == thread_state(after, ref_checkpointer, "t-shape")


def test_append_onto_a_tuple_extends_it() -> None:
    """ChannelTests.AppendArrayCurrent: "append: an array current value is extended, not replaced"."""
    assert ["a", "b"] == channel.append().fold(("a",), "b")


def test_append_default_is_a_fresh_list_per_read() -> None:
    """ChannelTests.AppendDefaultIsNotShared: "append: the default is a fresh list per read, so in-place
    mutation cannot leak".

    The node mutates the list it reads (which it must not do): the next run
    still starts from an empty list.
    """
    ch = channel.append()
    assert ch.initial() is not ch.initial()
    seen: list[list[Any]] = []

    def bad(state: dict[str, Any]) -> None:
        seen.append(list(state["log"]))
        state["log"].append("leaked")

    g = graph("mutator", {"log": ch}).node("bad", bad).edge(START, "bad").edge("bad", END).compile()

    run(g)
    second = run(g)

    assert "done" == second.status
    assert [[], []] == seen
    assert [] == second.state["log"]


# --- merge --------------------------------------------------------------------------------------


def test_merge_incoming_wins_per_key() -> None:
    """ChannelTests.MergeIncomingWins: "merge: incoming wins per key"."""
    ch = channel.merge()

    assert {"a": 1} == ch.fold(UNSET, {"a": 1})
    assert {"a": 1, "b": 3} == ch.fold({"a": 1, "b": 2}, {"b": 3})


def test_merge_is_shallow() -> None:
    """ChannelTests.MergeIsShallow: "merge: the merge is shallow"."""
    merged = channel.merge().fold({"nested": {"keep": 1}}, {"nested": {"other": 2}})

    assert {"other": 2} == merged["nested"]


def test_merge_does_not_mutate_the_current_value() -> None:
    """ChannelTests.MergeDoesNotMutate: "merge: does not mutate the current value"."""
    current = {"a": 1}

    channel.merge().fold(current, {"a": 2})

    assert 1 == current["a"]


def test_merge_of_a_value_that_is_not_a_dict_is_a_reducer_error_naming_the_channel() -> None:
    """ChannelTests.MergeNonDictionaryThrows: "merge: a non-dictionary update is a ReducerException naming the
    channel".

    Python's message says "mapping" where the reference's says "dictionary".
    """
    g = (
        graph("profile", {"profile": channel.merge()})
        .node("writer", lambda state: {"profile": "nope"})
        .edge(START, "writer")
        .compile()
    )

    result = run(g)

    assert "error" == result.status
    ((node, error),) = result.errors
    assert "writer" == node
    assert isinstance(error, ReducerError)
    assert "'profile'" in str(error)
    assert "mapping" in str(error)


def test_merge_default_is_a_fresh_dict_per_read() -> None:
    """ChannelTests.MergeDefaultIsNotShared: "merge: the default is a fresh dictionary per read"."""
    ch = channel.merge()

    assert ch.initial() is not ch.initial()
    assert {} == ch.initial()


# --- reduce (the reference's custom) ------------------------------------------------------------


def test_reduce_sees_none_on_the_first_write_never_unset() -> None:
    """ChannelTests.CustomSeesNullFirst: "custom: current is null on the first write, never the Unset
    sentinel"."""
    seen: list[Any] = []

    def total(current: Any, incoming: int) -> int:
        seen.append(current)
        return int(current or 0) + incoming

    ch = channel.reduce(total, 0)

    assert 5 == ch.fold(UNSET, 5)
    assert 8 == ch.fold(5, 3)
    assert [None, 5] == seen
    assert "reduce" == ch.kind
    assert 0 == ch.default


def test_a_raising_reducer_is_a_reducer_error_naming_the_channel_with_the_cause() -> None:
    """ChannelTests.ThrowingReducerIsWrapped: "a throwing reducer surfaces as a ReducerException naming the
    channel, cause attached".

    The reference's message also prints the current value ("(unset)");
    Python's names the channel and the writer, and chains the cause.
    """

    def boom(current: Any, incoming: Any) -> Any:
        raise RuntimeError("nope")

    g = (
        graph("boom", {"count": channel.reduce(boom)})
        .node("n", lambda state: None)
        .edge(START, "n")
        .compile()
    )

    with pytest.raises(ReducerError) as raised:
        g.schema.fold({}, [("writer", {"count": 1})], thread_id="t")

    assert "'count'" in str(raised.value)
    assert "count" == raised.value.channel
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert "nope" == str(raised.value.__cause__)


def test_a_reducer_type_mismatch_in_a_run_is_an_error_of_the_writing_node() -> None:
    """ChannelTests.ReducerMismatchInRun: "a reducer type mismatch inside a run ends it in error,
    attributed to the writing node"."""
    g = (
        graph("mismatch", {"total": channel.reduce(lambda current, n: (current or 0) + n, 0)})
        .node("writer", lambda state: {"total": "not a number"})
        .edge(START, "writer")
        .edge("writer", END)
        .compile()
    )

    result = run(g)

    assert "error" == result.status
    ((node, error),) = result.errors
    assert "writer" == node
    assert isinstance(error, ReducerError)
    assert ["writer"] == [e.node for e in result.events if isinstance(e, NodeError)]


# --- the state a host reads back (the reference's materialize) -----------------------------------


def _declares_three(name: str) -> Any:
    return (
        graph(name)
        .channel("log", channel.append())
        .channel("intent", channel.last_write("none"))
        .channel("other", channel.last_write("x"))
        .node("n", lambda state: None)
        .edge(START, "n")
        .compile()
    )


def test_unwritten_channels_read_as_their_defaults(ref_checkpointer: Checkpointer) -> None:
    """ChannelTests.MaterializeDefaults: "materialize: unwritten, null and Unset all read as the channel
    default".

    Unwritten channels read as their defaults. ``None`` follows the
    TypeScript reference, where ``null`` is a value and only ``undefined``
    reads as the default (.NET's ``null`` stands for both): a stored ``None``
    reads as ``None``. ``UNSET`` cannot be stored at all.
    """
    g = _declares_three("m")
    ref_checkpointer.put("t-defaults", make_checkpoint("t-defaults", channels={"intent": None}))

    assert {"log": [], "intent": None, "other": "x"} == thread_state(g, ref_checkpointer, "t-defaults")
    with pytest.raises(SerializationError):
        run(g, {"other": UNSET}, thread_id="t-unset", checkpointer=ref_checkpointer)


def test_values_of_channels_the_graph_does_not_declare_are_dropped(ref_checkpointer: Checkpointer) -> None:
    """ChannelTests.MaterializeDropsStrays: "materialize: values for channels the graph does not declare are
    dropped"."""
    g = (
        graph("m", {"intent": channel.last_write("none")})
        .node("n", lambda state: None)
        .edge(START, "n")
        .compile()
    )
    ref_checkpointer.put("t-strays", make_checkpoint("t-strays", channels={"stray": 1, "intent": "buy"}))

    assert {"intent": "buy"} == thread_state(g, ref_checkpointer, "t-strays")
