"""Binding run defaults to a graph: ``compile(checkpointer=..., **defaults)``, ``bind``, ``from_spec``.

A bound checkpointer (or recursion limit, strictness, meta, worker count)
is what every run, resume, stream and host helper of the graph uses unless
the call passes its own, which wins; the compiled graph never changes.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    GraphBuilder,
    InMemoryCheckpointer,
    InvalidArgumentError,
    RecursionLimitError,
    ResumeError,
    channel,
    from_spec,
    graph,
    history,
    pending_interrupts,
    recover,
    resume,
    resume_keyed,
    resume_keyed_stream,
    resume_stream,
    run,
    stream,
    thread_state,
    to_spec,
    update_state,
)

pytestmark = pytest.mark.timeout(60)


def approval() -> GraphBuilder[dict[str, Any]]:
    """One node that asks a question and logs the answer."""

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"log": [f"answer: {ctx.interrupt({'question': 'ok?'})}"]}

    return graph("approval", {"log": channel.append()}).node("ask", ask).edge(START, "ask").edge("ask", END)


def counter() -> GraphBuilder[dict[str, Any]]:
    """A node that loops on itself until ``n`` reaches 5: five supersteps."""
    return (
        graph("counter", {"n": channel.last_write(0)})
        .node("step", lambda state: {"n": state["n"] + 1})
        .edge(START, "step")
        .edge("step", "step", when=lambda state: state["n"] < 5)
    )


def test_a_bound_checkpointer_keeps_the_thread_and_calls_pass_only_a_thread_id(
    checkpointer: Checkpointer,
) -> None:
    """compile(checkpointer=cp): run, resume and thread_state need only thread_id=, on every backend."""
    g = approval().compile(checkpointer=checkpointer)
    paused = run(g, {}, thread_id="t")
    assert ("interrupted", "ask:interrupt#0") == (paused.status, paused.pending[0].id)
    assert paused.checkpoint_id == checkpointer.get("t").id  # type: ignore[union-attr]
    done = resume(g, "yes", thread_id="t")
    assert ("done", {"log": ["answer: yes"]}) == (done.status, done.state)
    assert {"log": ["answer: yes"]} == thread_state(g, thread_id="t")


def test_a_checkpointer_passed_to_the_call_wins_over_the_bound_one(checkpointer: Checkpointer) -> None:
    """A run given checkpointer= writes there, not to the graph's; a resume there finds it."""
    bound = InMemoryCheckpointer()
    g = approval().compile(checkpointer=bound)
    run(g, {}, thread_id="t", checkpointer=checkpointer)
    assert None is bound.get("t")
    assert "interrupted" == checkpointer.get("t").status  # type: ignore[union-attr]
    with pytest.raises(ResumeError):
        resume(g, "yes", thread_id="t")  # the bound store has no such pause
    assert "done" == resume(g, "yes", thread_id="t", checkpointer=checkpointer).status


def test_streams_and_keyed_resumes_use_the_bound_checkpointer() -> None:
    """stream, resume_stream, resume_keyed and resume_keyed_stream all read and write the bound store."""
    cp = InMemoryCheckpointer()
    g = approval().compile(checkpointer=cp)
    events = list(stream(g, {}, thread_id="a"))
    assert "interrupt" == events[-2].type
    assert "done" == list(resume_stream(g, "yes", thread_id="a"))[-1].status  # type: ignore[union-attr]
    run(g, {}, thread_id="b")
    assert "done" == resume_keyed(g, {"ask:interrupt#0": "no"}, thread_id="b").status
    run(g, {}, thread_id="c")
    end = list(resume_keyed_stream(g, {"ask:interrupt#0": "ok"}, thread_id="c"))[-1]
    assert ("run_end", "done") == (end.type, end.status)  # type: ignore[union-attr]
    assert {"a", "b", "c"} == {info.id for info in cp.list_threads()}


def test_bound_run_options_apply_and_a_call_overrides_them() -> None:
    """A bound recursion_limit stops a run; the call's own limit wins over it."""
    g = counter().compile(recursion_limit=3)
    with pytest.raises(RecursionLimitError):
        run(g, {})
    assert {"n": 5} == run(g, {}, recursion_limit=10).state
    assert 3 == g.defaults.recursion_limit


def test_bound_meta_is_laid_under_the_calls_meta() -> None:
    """Nodes see the bound meta's keys with the call's keys over them."""
    seen: list[dict[str, Any]] = []

    def look(state: dict[str, Any], ctx: Any) -> None:
        seen.append(dict(ctx.meta))

    g = graph("m", {}).node("look", look).edge(START, "look").compile(meta={"tenant": "acme", "user": "x"})
    run(g)
    run(g, meta={"user": "ada", "request": 7})
    assert [{"tenant": "acme", "user": "x"}, {"tenant": "acme", "user": "ada", "request": 7}] == seen


def test_a_bound_checkpointer_without_a_thread_id_says_to_pass_one() -> None:
    """run(g) on a graph bound to a checkpointer is an InvalidArgumentError naming it and thread_id=."""
    g = approval().compile(checkpointer=InMemoryCheckpointer())
    with pytest.raises(
        InvalidArgumentError, match=r"graph 'approval' is bound to a checkpointer.*thread_id="
    ):
        run(g, {})
    with pytest.raises(InvalidArgumentError, match=r"thread_id="):
        resume(g, "yes")


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("thread_id", "t", "runs many threads"),
        ("checkpoint_id", "x", "names a checkpoint of one thread"),
        ("expect_checkpoint_id", "x", "names the pause one caller saw"),
        ("cancel", threading.Event(), "abort every later run"),
        ("recursion_limt", 3, "unexpected keyword argument 'recursion_limt'"),
    ],
)
def test_options_that_name_one_run_cannot_be_bound(option: str, value: Any, says: str) -> None:
    """compile() refuses thread_id, checkpoint_id, expect_checkpoint_id, cancel and unknown names, and why."""
    with pytest.raises(InvalidArgumentError, match=says):
        approval().compile(**{option: value})


def test_bound_values_are_checked_at_compile_time() -> None:
    """A bad bound value fails compile(), not the first run."""
    with pytest.raises(InvalidArgumentError, match="recursion_limit"):
        approval().compile(recursion_limit=0)
    with pytest.raises(InvalidArgumentError, match="checkpointer must be a Checkpointer"):
        approval().compile(checkpointer="app.db")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="strict must be True or False"):
        approval().compile(strict="yes")  # type: ignore[arg-type]


def test_bind_returns_a_new_graph_and_leaves_the_old_one_unbound() -> None:
    """g.bind(cp) is a copy bound to cp over g's bindings; g itself, and its meta, stay as they were."""
    meta = {"tenant": "acme"}
    g = approval().compile(recursion_limit=7, meta=meta)
    meta["tenant"] = "changed"
    cp = InMemoryCheckpointer()
    bound = g.bind(cp, strict=False)
    assert (None, cp) == (g.checkpointer, bound.checkpointer)
    assert (7, False, {"tenant": "acme"}) == (
        bound.defaults.recursion_limit,
        bound.defaults.strict,
        dict(bound.defaults.meta or {}),
    )
    assert None is g.defaults.strict
    with pytest.raises(TypeError):
        g.defaults.meta["tenant"] = "x"  # type: ignore[index]
    assert "interrupted" == run(bound, {}, thread_id="t").status
    with pytest.raises(InvalidArgumentError, match="without a checkpointer"):
        run(g, {}, thread_id="t")


SPEC = {
    "name": "echo",
    "channels": {"log": {"reducer": "append"}},
    "nodes": [{"id": "say", "type": "say", "config": {"text": "hi"}}],
    "edges": [{"from": "__start__", "to": "say"}, {"from": "say", "to": "__end__"}],
}
REGISTRY = {"say": lambda config: lambda state: {"log": [config["text"]]}}


def test_from_spec_binds_a_checkpointer_and_to_spec_leaves_it_out() -> None:
    """from_spec(spec, registry, checkpointer=cp) runs on cp with only a thread id; the spec round-trips."""
    cp = InMemoryCheckpointer()
    g = from_spec(SPEC, REGISTRY, checkpointer=cp, recursion_limit=4)
    assert ["hi"] == run(g, {}, thread_id="t").state["log"]
    assert ["hi"] == cp.read_channel("t", "log")
    assert SPEC == to_spec(g)
    with pytest.raises(InvalidArgumentError, match="cancel"):
        from_spec(SPEC, REGISTRY, cancel=threading.Event())


def test_recover_continues_a_thread_with_the_graphs_bound_options(checkpointer: Checkpointer) -> None:
    """recover() runs a stalled thread with the recursion limit its graph binds."""
    g = counter().compile(checkpointer=checkpointer, recursion_limit=2)
    with pytest.raises(RecursionLimitError):
        run(g, {}, thread_id="t")
    [stopped] = recover(g, checkpointer)
    assert ("error", RecursionLimitError) == (stopped.status, type(stopped.errors[0][1]))
    assert [{"n": 5}] == [r.state for r in recover(g.bind(recursion_limit=10), checkpointer)]


def test_host_helpers_take_the_thread_by_keyword_and_use_the_bound_checkpointer(
    checkpointer: Checkpointer,
) -> None:
    """thread_state, pending_interrupts, history and update_state(g, thread_id=...) read the bound store."""
    g = approval().compile(checkpointer=checkpointer)
    paused = run(g, {}, thread_id="t")
    assert paused.pending == pending_interrupts(g, thread_id="t")
    assert [paused.checkpoint_id] == [c.id for c in history(g, thread_id="t", limit=1)]
    edited = update_state(g, thread_id="t", update={"log": ["edited"]})
    assert {"log": ["edited"]} == thread_state(g, thread_id="t")
    assert edited.id == history(g, "t")[0].id
    assert paused.pending[0].id == pending_interrupts(thread_id="t", checkpointer=checkpointer)[0].id


def test_host_helpers_keep_their_positional_forms_and_a_passed_checkpointer_wins() -> None:
    """The SPEC's positional calls still work, and checkpointer= reads another store than the bound one."""
    bound, other = InMemoryCheckpointer(), InMemoryCheckpointer()
    g = approval().compile(checkpointer=bound)
    run(g, {}, thread_id="t", checkpointer=other)
    assert None is thread_state(g, thread_id="t")
    assert {"log": []} == thread_state(g, other, "t")
    assert {"log": []} == thread_state(g, checkpointer=other, thread_id="t")
    assert 1 == len(pending_interrupts(other, "t")) == len(pending_interrupts(g, "t", checkpointer=other))
    assert () == pending_interrupts(g, thread_id="t")
    assert 2 == len(history(other, "t")) == len(history(g, thread_id="t", checkpointer=other))
    assert [] == history(g, thread_id="t")
    update_state(g, other, "t", {"log": ["a"]})
    assert {"log": ["a"]} == thread_state(g, other, "t")


def test_host_helpers_say_what_is_missing() -> None:
    """No checkpointer, no thread or the thread where the checkpointer goes: an error saying what to pass."""
    g = approval().compile()
    with pytest.raises(
        InvalidArgumentError, match=r"thread 't'.*graph 'approval' is not bound.*checkpointer="
    ):
        thread_state(g, thread_id="t")
    with pytest.raises(InvalidArgumentError, match=r"thread_id='t'"):
        thread_state(g, "t")  # type: ignore[call-overload]
    with pytest.raises(
        InvalidArgumentError, match=r"pending_interrupts\(\) needs the thread: pass thread_id="
    ):
        pending_interrupts(g.bind(InMemoryCheckpointer()))  # type: ignore[call-overload]
    with pytest.raises(InvalidArgumentError, match=r"update=\{\.\.\.\}"):
        update_state(g.bind(InMemoryCheckpointer()), thread_id="t")  # type: ignore[call-overload]
    with pytest.raises(InvalidArgumentError, match=r"history\(\) has no checkpointer.*none was given"):
        history(thread_id="t")  # type: ignore[call-overload]
