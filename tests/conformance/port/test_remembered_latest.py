"""The port suite: a run with input starts from what its process last committed, and is never fooled by it.

A run with input on a thread this process last wrote skips reading the
thread: its input's write is conditioned on the thread still being at the
checkpoint remembered (on Postgres, a turn is then two round trips, not
three). These tests attack that guess on every backend: another "process"
(a second checkpointer on the same store) moves, forks or deletes the thread
between two turns; the caller changes what a run returned; values whose
stored form differs from the written one (a tuple, a dict's key order on
Postgres, a sealed store) must read as a fresh process reads them; a thread
that paused, failed or plans more must still be read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ilmek import START, Checkpointer, InMemoryCheckpointer, ResumeError, channel, graph, run, update_state
from ilmek.graph import CompiledGraph
from tests.support.backends import Backend
from tests.support.sealed import keyring

pytestmark = pytest.mark.timeout(120)


def _chat(seen: list[Any]) -> CompiledGraph:
    """``messages`` (append), ``profile`` (a whole value); the node records what it read, appends a reply."""

    def reply(state: dict[str, Any]) -> dict[str, Any]:
        profile = state["profile"]
        seen.append(
            {
                "messages": list(state["messages"]),
                "profile": profile,
                "profile keys": list(profile) if isinstance(profile, dict) else None,
                "inner keys": list(profile.get("inner", ())) if isinstance(profile, dict) else None,
                "pair type": type(profile.get("pair")).__name__ if isinstance(profile, dict) else None,
            }
        )
        return {"messages": [f"reply to {state['messages'][-1]}"]}

    return (
        graph("remembered", {"messages": channel.append(), "profile": channel.last_write(None)})
        .node("reply", reply)
        .edge(START, "reply")
        .compile()
    )


#: Keys in an order ``jsonb`` does not keep (it lists shorter keys first), a tuple, nested dicts.
PROFILE = {"zeta-long-key": 1, "b": {"yy": 2, "x": 3}, "inner": {"second": 1, "a": 2}, "pair": ("t", 1)}


def test_a_turn_sees_what_another_process_wrote_in_between(backend: Backend) -> None:
    """The thread moved (another process's turn) since this process wrote it: the next turn here starts
    from that turn, not from the checkpoint this process remembers; each message is there once."""
    first, second = backend.open(), backend.open()
    seen: list[Any] = []
    g = _chat(seen)
    run(g, {"messages": ["one"], "profile": {"n": 1}}, thread_id="moved", checkpointer=first)
    run(g, {"messages": ["two"], "profile": {"n": 2}}, thread_id="moved", checkpointer=second)
    result = run(g, {"messages": ["three"]}, thread_id="moved", checkpointer=first)
    expected = ["one", "reply to one", "two", "reply to two", "three", "reply to three"]
    assert expected == result.state["messages"]
    assert {"n": 2} == seen[-1]["profile"]
    assert expected == run(g, None, thread_id="moved", checkpointer=second).state["messages"]


def test_a_turn_after_another_process_changed_forked_or_deleted_the_thread(backend: Backend) -> None:
    """A state update, a fork and a delete by another process each move the thread where this process
    did not see it: the next turn here starts from where they left it."""
    first, second = backend.open(), backend.open()
    seen: list[Any] = []
    g = _chat(seen)
    done = run(g, {"messages": ["one"]}, thread_id="t", checkpointer=first)
    update_state(g, second, "t", {"profile": {"set": "by update_state"}})
    run(g, {"messages": ["two"]}, thread_id="t", checkpointer=first)
    assert {"set": "by update_state"} == seen[-1]["profile"]

    run(g, {"messages": ["forked"]}, thread_id="t", checkpointer=second, checkpoint_id=done.checkpoint_id)
    result = run(g, {"messages": ["after fork"]}, thread_id="t", checkpointer=first)
    assert [
        "one",
        "reply to one",
        "forked",
        "reply to forked",
        "after fork",
        "reply to after fork",
    ] == result.state["messages"]

    second.delete_thread("t")
    result = run(g, {"messages": ["anew"]}, thread_id="t", checkpointer=first)
    assert ["anew", "reply to anew"] == result.state["messages"]
    assert result.state["profile"] is None


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
def test_a_remembered_turn_reads_values_as_a_fresh_process_does(backend: Backend, sealed: bool) -> None:
    """The node of a turn this process starts from memory sees the values exactly as a process that read
    them from the store sees them: a dict's keys in the store's order (``jsonb``'s on
    Postgres, unless sealed), a tuple as the store gives it back, nested alike."""
    options: dict[str, Any] = {"cipher": keyring("k1")} if sealed else {}
    writer, reader = backend.open(**options), backend.open(**options)
    seen: list[Any] = []
    g = _chat(seen)
    for thread_id in ("by-memory", "by-read"):
        run(g, {"messages": ["hi"], "profile": PROFILE}, thread_id=thread_id, checkpointer=writer)
    run(g, {"messages": ["again"]}, thread_id="by-memory", checkpointer=writer)
    run(g, {"messages": ["again"]}, thread_id="by-read", checkpointer=reader)
    remembered, read = seen[-2], seen[-1]
    assert read == remembered
    assert read["profile keys"] == remembered["profile keys"]
    assert read["inner keys"] == remembered["inner keys"]
    assert read["pair type"] == remembered["pair type"]


def test_what_the_caller_does_to_a_result_never_reaches_the_next_turn(backend: Backend) -> None:
    """The values a run returned are the caller's: changing them changes nothing the next turn reads."""
    checkpointer = backend.open()
    seen: list[Any] = []
    g = _chat(seen)
    result = run(
        g,
        {"messages": ["hi"], "profile": {"inner": {"k": "v"}, "pair": [1]}},
        thread_id="t",
        checkpointer=checkpointer,
    )
    result.state["profile"]["inner"]["k"] = "changed by the caller"
    result.state["profile"]["pair"].append(2)
    result.state["messages"].append("appended by the caller")
    run(g, {"messages": ["again"]}, thread_id="t", checkpointer=checkpointer)
    assert {"inner": {"k": "v"}, "pair": [1]} == seen[-1]["profile"]
    assert ["hi", "reply to hi", "again"] == seen[-1]["messages"]


def test_a_paused_thread_is_read_before_a_plain_run_is_refused(backend: Backend) -> None:
    """A thread this process paused is read, not guessed: a run with input is refused (it would drop the
    pause), nothing written; once answered, turns go on."""
    checkpointer = backend.open()

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.interrupt("ok?")]}

    g = graph("asks", {"log": channel.append()}).node("ask", ask).edge(START, "ask").compile()
    paused = run(g, {"log": ["start"]}, thread_id="p", checkpointer=checkpointer)
    assert "interrupted" == paused.status
    with pytest.raises(ResumeError, match="'p'"):
        run(g, {"log": ["dropped"]}, thread_id="p", checkpointer=checkpointer)
    latest = checkpointer.get("p")
    assert latest is not None
    assert paused.checkpoint_id == latest.id


def test_a_failed_turn_continues_its_plan_with_its_steps_once(backend: Backend) -> None:
    """A thread whose last turn failed plans its task still: the next run with input is read, folds its
    input in and continues that plan, and the step recorded before the failure does not run again."""
    checkpointer = backend.open()
    calls: list[str] = []
    fail = [False]

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("charge", lambda: calls.append("charge") or "charged")
        if fail[0]:
            raise RuntimeError("down")
        return {"log": ["worked"]}

    g = graph("fails", {"log": channel.append()}).node("work", work).edge(START, "work").compile()
    run(g, {"log": ["one"]}, thread_id="f", checkpointer=checkpointer)
    fail[0] = True
    assert "error" == run(g, {"log": ["two"]}, thread_id="f", checkpointer=checkpointer).status
    fail[0] = False
    result = run(g, {"log": ["three"]}, thread_id="f", checkpointer=checkpointer)
    assert ["one", "worked", "two", "three", "worked"] == result.state["log"]
    assert ["charge", "charge"] == calls  # once per turn that planned it, never again on the continuation


def test_turns_racing_from_two_processes_lose_and_repeat_nothing(
    backend: Backend, reopen: Callable[[], Checkpointer]
) -> None:
    """Two processes take turns on one thread in an order neither expects, each guessing from its own last
    write: every message lands once, in the order the turns committed."""
    processes = [backend.open(), backend.open()]
    seen: list[Any] = []
    g = _chat(seen)
    order = [0, 0, 1, 0, 1, 1, 0, 1, 0, 0]
    expected: list[str] = []
    for turn, which in enumerate(order):
        text = f"m{turn}"
        run(g, {"messages": [text]}, thread_id="race", checkpointer=processes[which])
        expected += [text, f"reply to {text}"]
    assert expected == run(g, None, thread_id="race", checkpointer=reopen()).state["messages"]


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
def test_what_a_process_remembers_is_what_a_read_gives(backend: Backend, sealed: bool) -> None:
    """The checkpoint a SQL checkpointer remembers after its own turn equals, field by field, what a
    read of the thread gives: its values (key order and types included), ids, step, time, plan and
    metadata. The in-memory checkpointer reads in the process anyway and remembers nothing."""
    options: dict[str, Any] = {"cipher": keyring("k1")} if sealed else {}
    checkpointer = backend.open(**options)
    g = _chat([])
    run(
        g,
        {"messages": ["hi"], "profile": PROFILE},
        thread_id="t",
        checkpointer=checkpointer,
        meta={"z": 1, "a": [2]},
    )
    remembered = checkpointer._remembered_latest("t")
    if isinstance(checkpointer, InMemoryCheckpointer):
        assert remembered is None
        return
    assert remembered is not None
    read = backend.open(**options).load("t")
    assert read is not None
    assert repr(read) == repr(remembered)
    assert repr(read.channels["profile"]) == repr(remembered.channels["profile"])
    # Each guess is built afresh: what one run does to it never reaches the next.
    remembered.metadata["z"] = "changed"  # type: ignore[index]
    remembered.channels["profile"]["inner"]["a"] = "changed"
    remembered.channels["messages"].append("changed")
    assert repr(read) == repr(checkpointer._remembered_latest("t"))


def test_the_states_a_turn_reported_never_change_afterwards(backend: Backend) -> None:
    """A turn started from memory extends its lists in place while folding its input, and a superstep
    whose three tasks append to one list copies it once: the state each event reported, and the state
    the nodes read, stay as they were when reported."""
    checkpointer = backend.open()
    seen: list[Any] = []

    def writer(name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def node(state: dict[str, Any]) -> dict[str, Any]:
            seen.append(state["messages"])
            return {"messages": [f"{name}{len(state['messages'])}"]}

        return node

    builder = graph("fan", {"messages": channel.append()})
    for name in ("a", "b", "c"):
        builder = builder.node(name, writer(name)).edge(START, name)
    g = builder.compile()
    run(g, {"messages": ["one"]}, thread_id="t", checkpointer=checkpointer)
    result = run(g, {"messages": ["two", "three"]}, thread_id="t", checkpointer=checkpointer)
    states = [event.channels["messages"] for event in result.events if event.type == "state"]
    assert [
        ["one", "a1", "b1", "c1", "two", "three"],
        ["one", "a1", "b1", "c1", "two", "three", "a6", "b6", "c6"],
    ] == states
    assert [["one", "a1", "b1", "c1", "two", "three"]] * 3 == seen[-3:]
    assert all(len(state) == 1 for state in seen[:3])
