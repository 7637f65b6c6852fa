"""The port suite, subgraphs (SPEC §5a): a compiled graph as a node or a ``ctx.call``, two levels deep.

Every step is counted: a child's completed steps must never run again, on a resume, a retry, a
continued failure or a fork from a pause. Pause ids carry the namespace path, events carry ``ns``,
and a thread with children still reads, lists and deletes as one thread. The three LangGraph
subgraph bugs (#6792, #3206, #4866) are written here as ilmek programs that must pass.
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    AnswerRejectedError,
    Checkpointer,
    CompiledGraph,
    InvalidArgumentError,
    RetryPolicy,
    answers,
    channel,
    graph,
    history,
    resume,
    resume_keyed,
    run,
    send,
    stream,
    stream_modes,
    thread_state,
    tick,
    update_state,
)
from ilmek.namespaces import is_child_thread
from tests.support.helpers import Calls

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.parametrize("backend", ["memory", "sqlite-file", "postgres-pool"], indirect=True),
]

OUTER = "outer:outer"
INNER = "review:review"
APPROVE = f"{OUTER}/{INNER}/ask:approve#0"


def _channels() -> dict[str, Any]:
    return {"log": channel.append(), "verdict": channel.last_write(None)}


def nested(
    calls: Calls, *, failures: list[str] | None = None, retry: RetryPolicy | None = None, **interrupt: Any
) -> CompiledGraph:
    """root → outer (a subgraph) → review (a subgraph) → prepare, ask (a pause), finish.

    Each node records a journaled step counted in ``calls``; ``finish`` raises while
    ``failures`` has items (one per attempt); ``retry`` is the root's policy for ``outer``.
    """

    def prepare(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("prepare", calls.hit, "prepare")
        return {"log": ["prepared"]}

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("before-ask", calls.hit, "before-ask")
        verdict = ctx.interrupt({"question": "approve?"}, key="approve", **interrupt)
        ctx.step(f"after-ask-{verdict}", calls.hit, f"after-ask-{verdict}")
        return {"log": [f"asked:{verdict}"], "verdict": verdict}

    def finish(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("finish", calls.hit, "finish")
        if failures:
            raise RuntimeError(failures.pop())
        return {"log": ["finished"]}

    inner = (
        graph("inner", _channels())
        .node("prepare", prepare)
        .node("ask", ask)
        .node("finish", finish)
        .edge(START, "prepare")
        .edge("prepare", "ask")
        .edge("ask", "finish")
        .edge("finish", END)
        .compile()
    )
    outer = (
        graph("outer", _channels()).node("review", inner).edge(START, "review").edge("review", END).compile()
    )
    return (
        graph("root", {**_channels(), "root_only": channel.last_write(0)})
        .node("first", lambda state: {"log": ["first"]})
        .node("outer", outer, retry=retry)
        .edge(START, "first")
        .edge("first", "outer")
        .edge("outer", END)
        .compile()
    )


def _once_each(calls: Calls, *names: str) -> None:
    assert dict.fromkeys(names, 1) == {name: calls[name] for name in names}


def test_a_subgraph_node_takes_the_shared_channels_and_adds_only_its_new_items(
    checkpointer: Checkpointer,
) -> None:
    """The child gets the parent's channels it declares; the parent's append channel gains only new items."""
    child = (
        graph("child", {"log": channel.append(), "mine": channel.last_write(0)})
        .node("work", lambda state: {"log": [f"saw {len(state['log'])}"], "mine": 7})
        .edge(START, "work")
        .edge("work", END)
        .compile()
    )
    parent = (
        graph("parent", {"log": channel.append(), "other": channel.last_write("kept")})
        .node("child", child)
        .edge(START, "child")
        .edge("child", END)
        .compile()
    )

    done = run(parent, {"log": ["a", "b"]}, thread_id="shared", checkpointer=checkpointer)

    assert "done" == done.status
    assert {"log": ["a", "b", "saw 2"], "other": "kept"} == done.state


def test_a_pause_two_levels_down_surfaces_with_its_path_and_never_reruns_finished_work(
    checkpointer: Checkpointer,
) -> None:
    """LangGraph #6792 and #3206: steps before the child's pause run once; the child is not skipped."""
    calls = Calls()
    g = nested(calls)
    opts: dict[str, Any] = {"thread_id": "deep", "checkpointer": checkpointer}

    paused = run(g, {"log": ["in"]}, **opts)

    assert "interrupted" == paused.status
    (pause,) = paused.pending
    assert (APPROVE, (OUTER, INNER), {"question": "approve?"}) == (pause.id, pause.ns, pause.payload)
    assert "outer" == pause.node
    done = resume(g, "yes", **opts)

    assert "done" == done.status
    assert ["in", "first", "prepared", "asked:yes", "finished"] == done.state["log"]
    assert "yes" == done.state["verdict"]
    _once_each(calls, "prepare", "before-ask", "after-ask-yes", "finish")


def test_resume_keyed_answers_a_child_pause_by_its_id(checkpointer: Checkpointer) -> None:
    """``resume_keyed`` takes the path-qualified id; an unknown id is refused and nothing is recorded."""
    calls = Calls()
    g = nested(calls)
    opts: dict[str, Any] = {"thread_id": "keyed", "checkpointer": checkpointer}
    run(g, {}, **opts)

    with pytest.raises(Exception, match="approve"):
        resume_keyed(g, {"ask:approve#0": "yes"}, **opts)
    done = resume_keyed(g, {APPROVE: "no"}, **opts)

    assert "no" == done.state["verdict"]
    _once_each(calls, "prepare", "before-ask", "after-ask-no")


def test_a_child_pause_keeps_its_contract_and_its_deadline(checkpointer: Checkpointer) -> None:
    """The contract is checked at the parent's resume; ``tick`` applies the child's ``on_timeout``."""
    calls = Calls()
    g = nested(calls, answers=answers.choice("yes", "no"), deadline=dt.timedelta(hours=1), on_timeout="no")
    opts: dict[str, Any] = {"thread_id": "terms", "checkpointer": checkpointer}
    (pause,) = run(g, {}, **opts).pending
    assert pause.answers is not None
    assert pause.deadline is not None

    with pytest.raises(AnswerRejectedError):
        resume(g, "maybe", **opts)
    (ticked,) = tick(g, checkpointer, now=pause.deadline + dt.timedelta(seconds=1))

    assert "done" == ticked.status
    assert "no" == ticked.state["verdict"]
    _once_each(calls, "prepare", "before-ask", "after-ask-no", "finish")


def test_a_failing_grandchild_fails_the_parent_and_a_retry_replays_its_steps(
    checkpointer: Checkpointer,
) -> None:
    """A node error deep down ends the resume ``error``, naming the path; the same answer continues."""
    calls = Calls()
    g = nested(calls, failures=["boom"])
    opts: dict[str, Any] = {"thread_id": "fails", "checkpointer": checkpointer}
    run(g, {}, **opts)

    failed = resume(g, "yes", **opts)
    assert "error" == failed.status
    error = failed.errors[0][1]
    assert f"the subgraph at '{OUTER}/{INNER}' failed in node 'finish': RuntimeError: boom" in str(error)
    assert ((OUTER, INNER), "finish") == (error.ns, error.node)
    done = resume(g, "yes", **opts)

    assert "done" == done.status
    assert ["first", "prepared", "asked:yes", "finished"] == done.state["log"]
    _once_each(calls, "prepare", "before-ask", "after-ask-yes", "finish")


def test_a_retry_policy_on_the_parent_node_continues_the_child(checkpointer: Checkpointer) -> None:
    """The parent node's retry runs the child again from its checkpoint: the finished step is not repeated."""
    calls = Calls()
    failures = ["once"]

    def flaky(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("flaky", calls.hit, "flaky")
        if failures:
            raise RuntimeError(failures.pop())
        return {"log": ["flaky"]}

    child = (
        graph("child", {"log": channel.append()})
        .node("paid", lambda state, ctx: ctx.step("paid", calls.hit, "paid") or {"log": ["paid"]})
        .node("flaky", flaky)
        .edge(START, "paid")
        .edge("paid", "flaky")
        .edge("flaky", END)
        .compile()
    )
    parent = (
        graph("parent", {"log": channel.append()})
        .node("child", child, retry=RetryPolicy(max_attempts=2, backoff=0))
        .edge(START, "child")
        .edge("child", END)
        .compile()
    )

    done = run(parent, {}, thread_id="retry", checkpointer=checkpointer)

    assert "done" == done.status
    assert ["paid", "flaky"] == done.state["log"]
    assert (1, 1) == (calls["paid"], calls["flaky"])  # each step recorded once, replayed on the retry


def test_a_fork_from_the_parent_pause_forks_the_child(checkpointer: Checkpointer) -> None:
    """Answering the same pause again on a fork keeps the child's paid steps and reruns only what follows."""
    calls = Calls()
    g = nested(calls)
    opts: dict[str, Any] = {"thread_id": "fork", "checkpointer": checkpointer}
    paused = run(g, {}, **opts)
    assert "yes" == resume(g, "yes", **opts).state["verdict"]

    forked = resume(g, "no", checkpoint_id=paused.checkpoint_id, **opts)

    assert "done" == forked.status
    assert ["first", "prepared", "asked:no", "finished"] == forked.state["log"]
    _once_each(calls, "prepare", "before-ask", "after-ask-yes", "after-ask-no")
    assert 2 == calls["finish"]


def test_ctx_call_runs_a_child_with_explicit_input_and_returns_its_state(checkpointer: Checkpointer) -> None:
    """``ctx.call`` journals the child under its key; a pause inside it is answered by its path."""
    calls = Calls()

    def quote(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        price = ctx.step("price", lambda: calls.hit("price") or state["amount"] * 2)
        ok = ctx.interrupt({"price": price})
        return {"price": price, "ok": ok}

    child = (
        graph(
            "quote",
            {"amount": channel.last_write(0), "price": channel.last_write(0), "ok": channel.last_write()},
        )
        .node("quote", quote)
        .edge(START, "quote")
        .edge("quote", END)
        .compile()
    )

    def checkout(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("reserve", calls.hit, "reserve")
        final = ctx.call(child, {"amount": state["amount"]}, key="quote")
        return {"summary": f"{final['price']}:{final['ok']}"}

    parent = (
        graph("shop", {"amount": channel.last_write(0), "summary": channel.last_write("")})
        .node("checkout", checkout)
        .edge(START, "checkout")
        .edge("checkout", END)
        .compile()
    )
    opts: dict[str, Any] = {"thread_id": "call", "checkpointer": checkpointer}

    (pause,) = run(parent, {"amount": 5}, **opts).pending
    assert ("quote#0:checkout/quote:interrupt#0", ("quote#0:checkout",)) == (pause.id, pause.ns)
    done = resume(parent, True, **opts)

    assert "10:True" == done.state["summary"]
    assert (1, 1) == (calls["reserve"], calls["price"])


def test_child_events_carry_their_namespace_and_a_child_pause_shows_in_updates(
    checkpointer: Checkpointer,
) -> None:
    """Every child event has its ns path; ``updates`` names it and yields ``__interrupt__`` for the pause."""
    g = nested(Calls())
    events = list(stream(g, {}, thread_id="events", checkpointer=checkpointer))

    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert {(), (OUTER,), (OUTER, INNER)} == {e.ns for e in events}
    assert all(e.thread_id == "events" for e in events)
    parts = list(stream_modes(events, "updates"))
    assert ({"prepare": {"log": ["prepared"]}}, (OUTER, INNER)) in [(p.data, p.ns) for p in parts]
    (interrupt,) = [p for p in parts if "__interrupt__" in p.data and p.ns == ()]
    assert APPROVE == interrupt.data["__interrupt__"][0].id


def test_one_thread_one_tree_lists_reads_and_deletes_the_children_with_the_root(
    checkpointer: Checkpointer,
) -> None:
    """Lists show the root only; ``subgraphs=True`` and ``history(ns=)`` show children; delete takes all."""
    g = nested(Calls())
    opts: dict[str, Any] = {"thread_id": "tree", "checkpointer": checkpointer}
    run(g, {"log": ["in"]}, **opts)

    assert ["tree"] == [t.id for t in checkpointer.list_threads()]
    states = thread_state(g, checkpointer, "tree", subgraphs=True)
    assert states is not None
    assert [(), (OUTER,), (OUTER, INNER)] == list(states)
    assert ["in", "first", "prepared"] == states[(OUTER, INNER)]["log"]
    child_history = history(checkpointer, "tree", ns=(OUTER, INNER))
    assert child_history
    assert all(is_child_thread(c.thread_id) for c in child_history)
    assert child_history[0].pending[0].id == "ask:approve#0"

    checkpointer.delete_thread("tree")

    assert [] == checkpointer.list_threads()
    assert [] == [c for c in child_history if checkpointer.get(c.thread_id) is not None]


def test_update_state_edits_a_paused_child_and_the_child_goes_on_from_the_edit(
    checkpointer: Checkpointer,
) -> None:
    """LangGraph #4866: read the child's state from the parent, edit it by ns, resume: the edit holds."""
    calls = Calls()
    g = nested(calls)
    opts: dict[str, Any] = {"thread_id": "edit", "checkpointer": checkpointer}
    run(g, {}, **opts)

    update_state(g, checkpointer, "edit", {"log": ["edited"]}, ns=(OUTER, INNER))
    states = thread_state(g, checkpointer, "edit", subgraphs=True)
    assert states is not None
    assert states[(OUTER, INNER)]["log"][-1] == "edited"
    done = resume(g, "yes", **opts)

    assert ["first", "prepared", "edited", "asked:yes", "finished"] == done.state["log"]
    _once_each(calls, "prepare", "before-ask", "after-ask-yes", "finish")


def test_prune_drops_the_children_of_pruned_supersteps_and_keeps_those_a_pause_needs(
    checkpointer: Checkpointer,
) -> None:
    """After ``prune``, an old run's children and grandchildren are gone; the paused run's stay."""
    calls = Calls()
    g = nested(calls)
    opts: dict[str, Any] = {"thread_id": "prune", "checkpointer": checkpointer}
    run(g, {}, **opts)
    resume(g, "yes", **opts)
    old = [history(checkpointer, "prune", ns=ns)[0].thread_id for ns in [(OUTER,), (OUTER, INNER)]]
    run(g, {"log": ["again"]}, **opts)
    current = [history(checkpointer, "prune", ns=ns)[0].thread_id for ns in [(OUTER,), (OUTER, INNER)]]
    assert not set(old) & set(current)

    assert checkpointer.prune("prune", keep_last=1) > 0

    assert [None, None] == [checkpointer.get_thread(tid) for tid in old]
    assert all(checkpointer.get_thread(tid) is not None for tid in current)
    done = resume(g, "no", **opts)
    assert "done" == done.status
    assert (1, 1) == (calls["after-ask-no"], calls["after-ask-yes"])
    assert 2 == calls["prepare"]  # once per run: the second run's child is a new one


def test_sends_to_a_subgraph_node_run_one_child_each_under_their_own_namespace(
    checkpointer: Checkpointer,
) -> None:
    """Each send's input is its child's input; the children's writes fan back in schedule order."""
    child = (
        graph("child", {"log": channel.append(), "item": channel.last_write(None)})
        .node("work", lambda state: {"log": [f"did {state['item']}"]})
        .edge(START, "work")
        .edge("work", END)
        .compile()
    )
    parent = (
        graph("parent", {"log": channel.append(), "items": channel.last_write([])})
        .node("fan", lambda state: None)
        .node("work", child)
        .edge(START, "fan")
        .router(
            "fan",
            lambda state, ctx: [send("work", {"item": i}) for i in state["items"]],
            destinations=["work"],
        )
        .edge("work", END)
        .compile()
    )

    events = list(stream(parent, {"items": [1, 2, 3]}, thread_id="sends", checkpointer=checkpointer))

    assert ["did 1", "did 2", "did 3"] == events[-1].state["log"]
    assert {("work:work#0",), ("work:work#1",), ("work:work#2",)} == {e.ns for e in events if e.ns}


def test_a_retry_of_the_root_node_continues_the_grandchild_where_it_failed(
    checkpointer: Checkpointer,
) -> None:
    """The root node's retry re-runs the failed grandchild: its steps and the pause's answer replay."""
    calls = Calls()
    g = nested(calls, failures=["flaky"], retry=RetryPolicy(max_attempts=2, backoff=0))
    opts: dict[str, Any] = {"thread_id": "deep-retry", "checkpointer": checkpointer}
    run(g, {}, **opts)

    done = resume(g, "yes", **opts)

    assert "done" == done.status
    assert ["first", "prepared", "asked:yes", "finished"] == done.state["log"]
    _once_each(calls, "prepare", "before-ask", "after-ask-yes", "finish")


def test_delete_threads_counts_roots_only_and_takes_their_children(checkpointer: Checkpointer) -> None:
    """The bulk delete (what ``ilmek gc`` calls) never picks a child alone and leaves no child behind."""
    g = nested(Calls())
    run(g, {}, thread_id="bulk", checkpointer=checkpointer)
    children = [history(checkpointer, "bulk", ns=ns)[0].thread_id for ns in [(OUTER,), (OUTER, INNER)]]

    assert 1 == checkpointer.delete_threads(status="interrupted")

    assert [None, None, None] == [checkpointer.get_thread(tid) for tid in ["bulk", *children]]


def test_a_thread_id_holding_the_reserved_separator_is_refused_before_anything_runs(
    checkpointer: Checkpointer,
) -> None:
    """U+001F marks a subgraph's thread: a caller's thread id holding it is an InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError, match="U\\+001F"):
        run(nested(Calls()), {}, thread_id="a\x1fb", checkpointer=checkpointer)

    assert [] == checkpointer.list_threads()
    assert checkpointer.get_thread("a\x1fb") is None


def test_a_call_key_holding_the_reserved_separator_fails_the_node_and_runs_no_child(
    checkpointer: Checkpointer,
) -> None:
    """A ``ctx.call`` key with U+001F would make the child's id read as a grandchild's: the node fails with
    an InvalidArgumentError naming it, before the child runs."""
    ran: list[str] = []
    child = (
        graph("child", {"log": channel.append()})
        .node("c", lambda s: ran.append("child") or {"log": ["c"]})
        .edge(START, "c")
        .compile()
    )

    def calling(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"log": ctx.call(child, {}, key="a\x1fb")["log"]}

    g = graph("calls", {"log": channel.append()}).node("calling", calling).edge(START, "calling").compile()
    result = run(g, {}, thread_id="keyed", checkpointer=checkpointer)

    assert "error" == result.status
    ((node, error),) = result.errors
    assert "calling" == node
    assert isinstance(error, InvalidArgumentError)
    assert "U+001F" in str(error)
    assert [] == ran
    assert not any(is_child_thread(t) for t in _stored_ids(checkpointer))


def test_a_cancel_heard_inside_a_child_aborts_the_run_and_a_new_run_continues_the_child(
    checkpointer: Checkpointer,
) -> None:
    """The child stops at its own boundary; the root ends ``aborted`` (not ``error``); nothing runs twice."""
    calls = Calls()

    def first(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("first", calls.hit, "first")
        ctx.cancel.set()  # as request_cancel() would, from anywhere
        return {"log": ["first"]}

    def second(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("second", calls.hit, "second")
        return {"log": ["second"]}

    child = (
        graph("child", {"log": channel.append()})
        .node("first", first)
        .node("second", second)
        .edge(START, "first")
        .edge("first", "second")
        .edge("second", END)
        .compile()
    )
    parent = graph("parent", {"log": channel.append()}).node("child", child).edge(START, "child").compile()
    opts: dict[str, Any] = {"thread_id": "cancel", "checkpointer": checkpointer}

    stopped = run(parent, {}, cancel=threading.Event(), **opts)
    assert "aborted" == stopped.status
    info = checkpointer.get_thread("cancel")
    assert info is not None
    assert info.error is None
    done = run(parent, None, **opts)

    assert ["first", "second"] == done.state["log"]
    _once_each(calls, "first", "second")


def test_a_child_pause_is_noticed_once_as_the_roots_pause(checkpointer: Checkpointer) -> None:
    """The root's ``on_pause`` hears the child's pause on the root thread; the child's own hook never does."""
    heard: list[tuple[str, str, str]] = []
    asker = (
        graph("asker", {"log": channel.append()})
        .node("ask", lambda state, ctx: {"log": [ctx.interrupt("ship?")]})
        .edge(START, "ask")
        .compile(on_pause=lambda notice: heard.append(("child", notice.thread_id, notice.pending.id)))
    )
    root = (
        graph("root", {"log": channel.append()})
        .node("sub", asker)
        .edge(START, "sub")
        .compile(on_pause=lambda notice: heard.append(("root", notice.thread_id, notice.pending.id)))
    )

    run(root, {}, thread_id="notices", checkpointer=checkpointer)

    assert [("root", "notices", "sub:sub/ask:interrupt#0")] == heard


def test_a_child_nodes_events_reach_the_parents_stream_while_it_runs(checkpointer: Checkpointer) -> None:
    """Streamed, a node two levels down emits an event and waits for the reader to have it before it
    returns (as an LLM's tokens would stream): the reader gets it while the node runs, not when it ends.
    (A client bound to the caller's thread runs every task there, so nothing reaches the reader until the
    node returns: there it arrives after.)"""
    from ilmek.events import CustomEvent

    live = checkpointer.tasks_on_caller_thread is not True
    seen = threading.Event()
    outcome: list[str] = []

    def talk(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.emit({"token": "Hel"})
        outcome.append("seen" if seen.wait(5.0 if live else 0.0) else "not seen")
        return {"log": ["said"]}

    inner = graph("inner", {"log": channel.append()}).node("talk", talk).edge(START, "talk").compile()
    outer = graph("outer", {"log": channel.append()}).node("inner", inner).edge(START, "inner").compile()
    root = graph("root", {"log": channel.append()}).node("outer", outer).edge(START, "outer").compile()
    for event in stream(root, {}, thread_id="live", checkpointer=checkpointer):
        if isinstance(event, CustomEvent) and event.payload == {"token": "Hel"}:
            assert ("outer:outer", "inner:inner") == event.ns
            seen.set()
    assert seen.is_set()
    assert ["seen" if live else "not seen"] == outcome


@pytest.mark.parametrize("removing", ["delete_thread", "delete_threads", "prune"])
def test_removing_a_thread_never_touches_the_children_of_a_thread_whose_id_differs_in_case(
    checkpointer: Checkpointer, removing: str
) -> None:
    """Thread ids are exact: deleting (one, or in a batch) or pruning ``"ORDER"`` leaves the subgraph threads
    of ``"order"`` and of ``"0rder"`` whole (SQLite's LIKE ignores case: the children were found by it)."""
    g = nested(Calls())
    for thread_id in ("order", "ORDER", "0rder"):
        run(g, {"log": ["in"]}, thread_id=thread_id, checkpointer=checkpointer)
    kept = {
        thread_id: [c.thread_id for c in history(checkpointer, thread_id, ns=(OUTER, INNER))]
        for thread_id in ("order", "0rder")
    }
    assert all(kept.values())
    if removing == "delete_thread":
        checkpointer.delete_thread("ORDER")
    elif removing == "delete_threads":
        checkpointer.put_thread_metadata("order", {"touched": 1})
        checkpointer.put_thread_metadata("0rder", {"touched": 1})
        assert 1 == checkpointer.delete_threads(limit=1)  # the least recently updated: "ORDER"
    else:
        resume(g, "yes", thread_id="ORDER", checkpointer=checkpointer)
        checkpointer.prune("ORDER", keep_last=1)
    if removing != "prune":
        assert checkpointer.get("ORDER") is None
    for thread_id, children in kept.items():
        assert [] == [c for c in children if checkpointer.get(c) is None], thread_id
        states = thread_state(g, checkpointer, thread_id, subgraphs=True)
        assert states is not None
        assert ["in", "first", "prepared"] == states[(OUTER, INNER)]["log"]


def _stored_ids(checkpointer: Checkpointer) -> list[str]:
    """Every thread id stored, children included (read through each root's subgraph listing)."""
    ids: list[str] = []
    for info in checkpointer.list_threads():
        ids.append(info.id)
        ids.extend(checkpointer._child_thread_ids(info.id, limit=100))
    return ids
