"""State: channel reducers, attrs state classes, and the host's view and edits of a thread."""

from __future__ import annotations

import operator
from typing import Any

import attrs
import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    CheckpointNotFoundError,
    ReducerError,
    ResumeError,
    ThreadBusyError,
    append_field,
    channel,
    graph,
    merge_field,
    pending_interrupts,
    reduce_field,
    resume,
    resume_keyed,
    run,
    thread_state,
    update_state,
)
from ilmek.channel import UNSET


@pytest.mark.parametrize(
    ("incoming", "expected"),
    [
        (["a", "b"], ["x", "a", "b"]),
        (("a", "b"), ["x", "a", "b"]),
        ("ab", ["x", "ab"]),
        ({"k": 1}, ["x", {"k": 1}]),
        (None, ["x", None]),
        ([], ["x"]),
    ],
)
def test_append_extends_with_lists_and_tuples_and_appends_anything_else(incoming: Any, expected: Any) -> None:
    """A list or tuple write extends; any other value, a string included, is one item."""
    current = ["x"]
    assert expected == channel.append().fold(current, incoming)
    assert ["x"] == current


def add_to(total: int | None, n: int) -> int:
    """A reducer written for MODEL §2: the current value is None on the first write."""
    return (total or 0) + n


def test_last_write_merge_and_reduce_fold_as_documented() -> None:
    """last_write takes the incoming value, merge is shallow per key, reduce applies fn to every write."""
    assert 2 == channel.last_write(0).fold(1, 2)
    assert {"a": 1, "b": 3, "c": 4} == channel.merge().fold({"a": 1, "b": 2}, {"b": 3, "c": 4})
    assert 5 == channel.reduce(operator.add).fold(2, 3)
    assert 3 == channel.reduce(add_to).fold(UNSET, 3)
    assert 13 == channel.reduce(add_to, 10).fold(10, 3)
    with pytest.raises(TypeError, match="a merge channel takes a mapping"):
        channel.merge().fold({}, [1])
    with pytest.raises(TypeError, match="reduce\\(\\) needs a callable"):
        channel.reduce(42)  # type: ignore[arg-type]


def test_reduce_is_called_on_the_first_write_with_none_as_current() -> None:
    """channel.test.ts "current is undefined on the first write, not UNSET": fn folds every write."""
    seen: list[Any] = []

    def record(current: Any, incoming: int) -> int:
        seen.append(current)
        return add_to(current, incoming)

    reducer = channel.reduce(record, 0)
    assert 5 == reducer.fold(UNSET, 5)
    assert 8 == reducer.fold(5, 3)
    assert [None, 5] == seen


def test_two_writes_in_one_superstep_both_go_through_the_reducer(checkpointer: Checkpointer) -> None:
    """A counter that ignores what is written counts both writers: the first write is folded too."""
    g = (
        graph("count", {"hits": channel.reduce(lambda current, _: (current or 0) + 1)})
        .node("a", lambda s: {"hits": "a"})
        .node("b", lambda s: {"hits": "b"})
        .edge(START, "a")
        .edge(START, "b")
        .compile()
    )
    assert {"hits": 2} == run(g, {}, thread_id="count", checkpointer=checkpointer).state


def test_a_reduce_default_is_only_what_a_read_sees_before_any_write(checkpointer: Checkpointer) -> None:
    """reduce(fn, 42) reads 42 until written; written 5, it holds fn(None, 5), not fn(42, 5)."""
    seen: list[Any] = []

    def write(state: dict[str, Any]) -> dict[str, Any]:
        seen.append(state["total"])
        return {"total": 5}

    g = (
        graph("total", {"total": channel.reduce(add_to, 42)})
        .node("write", write)
        .node("read", lambda s: seen.append(s["total"]) or None)
        .edge(START, "write")
        .edge("write", "read")
        .compile()
    )
    assert {"total": 5} == run(g, {}, thread_id="total", checkpointer=checkpointer).state
    assert [42, 5] == seen


@attrs.frozen
class Tally:
    """A state class whose counter is a reduce_field with a default."""

    hits: int = reduce_field(lambda current, _: (current or 0) + 1, default=100)


def test_a_reduce_field_folds_its_first_write_like_a_reduce_channel() -> None:
    """reduce_field(fn) on an attrs class: the default is read-only, fn sees None first."""
    g = (
        graph("tally", Tally)
        .node("a", lambda s: {"hits": 1})
        .node("b", lambda s: {"hits": 1})
        .edge(START, "a")
        .edge(START, "b")
        .compile()
    )
    assert Tally(hits=2) == run(g, {}).state
    assert Tally(hits=100) == g.schema.view({})


def test_mutable_defaults_are_copied_never_shared() -> None:
    """Two threads starting from a list default do not share the list."""
    shared_default: list[str] = []
    g = (
        graph("defaults", {"items": channel.last_write(shared_default)})
        .node("n", lambda s: s["items"].append("leak") or None)
        .edge(START, "n")
        .compile()
    )
    run(g, {})
    assert [] == shared_default
    assert [] == channel.last_write(shared_default).initial()
    assert channel.last_write(shared_default).initial() is not shared_default


def test_writes_of_one_superstep_fold_in_task_order_for_every_reducer(checkpointer: Checkpointer) -> None:
    """last_write keeps the last task's value, append concatenates in task order, reduce folds in order."""
    g = (
        graph(
            "fold",
            {
                "last": channel.last_write(),
                "log": channel.append(),
                "joined": channel.reduce(lambda a, b: f"{a or ''}{b}", ""),
                "seen": channel.merge(),
            },
        )
        .node("first", lambda s: {"last": 1, "log": [1, 2], "joined": "a", "seen": {"first": 1, "k": 1}})
        .node("second", lambda s: {"last": 2, "log": 3, "joined": "b", "seen": {"second": 2, "k": 2}})
        .edge(START, "first")
        .edge(START, "second")
        .compile()
    )
    result = run(g, {}, thread_id="fold", checkpointer=checkpointer)
    assert {
        "last": 2,
        "log": [1, 2, 3],
        "joined": "ab",
        "seen": {"first": 1, "second": 2, "k": 2},
    } == result.state


def test_writing_an_undeclared_channel_is_a_node_error_naming_node_and_channel(
    checkpointer: Checkpointer,
) -> None:
    """A node writing a channel the graph does not declare fails the run, naming both."""
    g = graph("strict", {"x": channel.last_write()}).node("n", lambda s: {"y": 1}).edge(START, "n").compile()
    result = run(g, {}, thread_id="undeclared", checkpointer=checkpointer)
    ((node, error),) = result.errors
    assert "n" == node
    assert isinstance(error, ReducerError)
    assert "node 'n' writes channel 'y'" in str(error)
    assert "declared: x" in str(error)
    assert "'undeclared'" in str(error)
    assert ("y", "n") == (error.channel, error.node)


def test_a_reducer_that_raises_is_a_reducer_error_and_nothing_is_written(checkpointer: Checkpointer) -> None:
    """A failing reducer ends the run in error, chained from the cause; the thread keeps its checkpoint."""

    def explode(current: Any, incoming: Any) -> Any:
        raise ZeroDivisionError("bad fold")

    g = (
        graph("boom", {"n": channel.reduce(explode, 0)})
        .node("n", lambda s: {"n": 1})
        .edge(START, "n")
        .compile()
    )
    result = run(g, {}, thread_id="boom", checkpointer=checkpointer)
    ((_node, error),) = result.errors
    assert isinstance(error, ReducerError)
    assert isinstance(error.__cause__, ZeroDivisionError)
    assert "channel 'n' could not fold the write of node 'n': bad fold" in str(error)
    assert "unfinished" == checkpointer.get("boom").status


def test_input_must_be_a_dict_of_declared_channels(checkpointer: Checkpointer) -> None:
    """Bad input is refused before anything is written, naming the thread."""
    g = graph("in", {"x": channel.last_write()}).node("n", lambda s: None).edge(START, "n").compile()
    with pytest.raises(ReducerError, match="the input writes channel 'nope'"):
        run(g, {"nope": 1}, thread_id="in", checkpointer=checkpointer)
    with pytest.raises(ReducerError, match="must be a dict of channel writes, got list"):
        run(g, [1, 2], thread_id="in", checkpointer=checkpointer)
    assert checkpointer.get("in") is None


def test_a_node_returning_something_else_is_a_node_error(checkpointer: Checkpointer) -> None:
    """Returning neither a dict, None nor a command fails the node with a helpful message."""
    g = graph("ret", {"x": channel.last_write()}).node("n", lambda s: 42).edge(START, "n").compile()
    ((_, error),) = run(g, {}, thread_id="ret", checkpointer=checkpointer).errors
    assert "node 'n' returned int; return a dict of channel writes, None, or command(...)" in str(error)


@attrs.frozen
class Cart:
    """A typed state for the tests below."""

    items: list[str] = append_field()
    total: float = 0.0
    tags: dict[str, str] = merge_field()
    count: int = reduce_field(add_to, default=0)
    note: str | None = None


def test_an_attrs_class_state_reaches_nodes_and_hosts_as_an_instance(checkpointer: Checkpointer) -> None:
    """Nodes get a Cart; Result.state and thread_state give a Cart back from any backend."""
    seen: list[Any] = []

    def add(state: Cart) -> dict[str, Any]:
        seen.append(state)
        return {"items": ["mug"], "total": state.total + 5.5, "tags": {"b": "2"}, "count": 1}

    g = graph("typed", Cart).node("add", add).edge(START, "add").edge("add", END).compile()
    result = run(
        g, {"items": ["tea"], "tags": {"a": "1"}, "count": 2}, thread_id="typed", checkpointer=checkpointer
    )
    assert isinstance(seen[0], Cart)
    assert Cart(items=["tea"], total=0.0, tags={"a": "1"}, count=2) == seen[0]
    expected = Cart(items=["tea", "mug"], total=5.5, tags={"a": "1", "b": "2"}, count=3)
    assert expected == result.state
    assert expected == thread_state(g, checkpointer, "typed")


def test_an_attrs_instance_as_input_writes_every_field(checkpointer: Checkpointer) -> None:
    """Passing an instance of the state class as input writes all of its fields."""
    g = graph("typed-input", Cart).node("n", lambda s: None).edge(START, "n").compile()
    result = run(g, Cart(items=["a"], total=1.0, note="hi"), thread_id="ti", checkpointer=checkpointer)
    assert Cart(items=["a"], total=1.0, note="hi") == result.state


def test_channels_the_graph_no_longer_declares_are_dropped_from_every_view(
    checkpointer: Checkpointer,
) -> None:
    """channel.test.ts "values for channels the graph does not declare are dropped", across versions."""
    old = (
        graph("v", {"kept": channel.last_write(), "gone": channel.append()})
        .node("n", lambda s: {"kept": 1, "gone": ["x"]})
        .edge(START, "n")
        .compile()
    )
    assert {"kept": 1, "gone": ["x"]} == run(old, {}, thread_id="v", checkpointer=checkpointer).state
    seen: list[Any] = []
    new = (
        graph("v", {"kept": channel.last_write(), "added": channel.last_write("new")})
        .node("n", lambda s: seen.append(dict(s)) or {"kept": 2})
        .edge(START, "n")
        .compile()
    )
    assert {"kept": 1, "added": "new"} == thread_state(new, checkpointer, "v")
    result = run(new, {}, thread_id="v", checkpointer=checkpointer)
    assert [{"kept": 1, "added": "new"}] == seen
    assert {"kept": 2, "added": "new"} == result.state
    assert {"kept": 2, "added": "new"} == thread_state(new, checkpointer, "v")
    assert {"kept": 2, "added": "new"} == new.schema.full_values({"kept": 2, "gone": ["x"]})


def test_thread_state_of_an_unknown_thread_is_none(checkpointer: Checkpointer) -> None:
    """thread_state returns None for a thread that was never run."""
    g = graph("s", {"x": channel.last_write()}).node("n", lambda s: None).edge(START, "n").compile()
    assert thread_state(g, checkpointer, "never") is None
    assert () == pending_interrupts(checkpointer, "never")


def approval_graph() -> Any:
    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt({"amount": state["amount"]})
        return {"decision": f"{answer} for {state['amount']}"}

    return (
        graph("approve", {"amount": channel.last_write(0), "decision": channel.last_write()})
        .node("ask", ask)
        .edge(START, "ask")
        .compile()
    )


def test_update_state_edits_a_paused_thread_and_the_pause_survives(checkpointer: Checkpointer) -> None:
    """A human edit while paused makes a new checkpoint; resuming then sees the edited state."""
    g = approval_graph()
    paused = run(g, {"amount": 100}, thread_id="edit", checkpointer=checkpointer)
    edited = update_state(g, checkpointer, "edit", {"amount": 90})
    assert paused.checkpoint_id == edited.parent_id
    assert "update" == edited.metadata["source"]
    assert ["ask:interrupt#0"] == [p.id for p in pending_interrupts(checkpointer, "edit")]
    assert {"amount": 90} == thread_state(g, checkpointer, "edit")
    done = resume(g, "ok", thread_id="edit", checkpointer=checkpointer)
    assert {"amount": 90, "decision": "ok for 90"} == done.state


def test_update_state_on_a_finished_thread_and_its_errors(checkpointer: Checkpointer) -> None:
    """Editing a done thread works; an unknown thread or channel is refused with a clear error."""
    g = approval_graph()
    with pytest.raises(CheckpointNotFoundError, match="thread 'ghost' has no checkpoint to update"):
        update_state(g, checkpointer, "ghost", {"amount": 1})
    run(g, {"amount": 5}, thread_id="done", checkpointer=checkpointer)
    resume(g, "yes", thread_id="done", checkpointer=checkpointer)
    update_state(g, checkpointer, "done", {"decision": "overridden"})
    assert {"amount": 5, "decision": "overridden"} == thread_state(g, checkpointer, "done")
    with pytest.raises(ReducerError, match="channel 'typo'"):
        update_state(g, checkpointer, "done", {"typo": 1})


def test_update_state_refuses_a_held_thread(checkpointer: Checkpointer) -> None:
    """A human edit while a run holds the thread is a ThreadBusyError."""
    g = approval_graph()
    run(g, {"amount": 1}, thread_id="held", checkpointer=checkpointer)
    with checkpointer.hold("held"), pytest.raises(ThreadBusyError, match="thread 'held'"):
        update_state(g, checkpointer, "held", {"amount": 2})


def test_resume_errors_name_the_thread_and_what_to_call(checkpointer: Checkpointer) -> None:
    """Resuming a thread that is not paused, or running one that is, says what to call instead."""
    g = approval_graph()
    with pytest.raises(ResumeError) as not_started:
        resume(g, "yes", thread_id="fresh", checkpointer=checkpointer)
    assert "cannot resume thread 'fresh': it has no checkpoint" in str(not_started.value)
    assert "run()" in str(not_started.value)
    run(g, {"amount": 1}, thread_id="p", checkpointer=checkpointer)
    with pytest.raises(ResumeError) as paused:
        run(g, {"amount": 2}, thread_id="p", checkpointer=checkpointer)
    assert "thread 'p' is interrupted" in str(paused.value)
    assert "resume()" in str(paused.value)
    assert "ask:interrupt#0" in str(paused.value)
    with pytest.raises(ResumeError, match="is interrupted"):
        run(g, None, thread_id="p", checkpointer=checkpointer)
    with pytest.raises(ResumeError, match="takes a dict of pause id to answer"):
        resume_keyed(g, ["yes"], thread_id="p", checkpointer=checkpointer)  # type: ignore[arg-type]
    with pytest.raises(CheckpointNotFoundError, match="thread 'p' has no checkpoint 'nope'"):
        run(g, None, thread_id="p", checkpointer=checkpointer, checkpoint_id="nope")


def test_a_checkpointer_needs_a_thread_id() -> None:
    """Passing a checkpointer without a thread id is refused at once."""
    from ilmek import InMemoryCheckpointer

    g = approval_graph()
    with pytest.raises(ValueError, match="needs a thread_id"):
        run(g, {}, checkpointer=InMemoryCheckpointer())
