"""Ported from the .NET port's ``dotnet/test/Ilmek.Core.Tests/TypedEdgeCaseTests.cs``: the typed facade's
edges.

The .NET typed facade (``Graph.Create<TState>``, ``[Merge]``, ``[Append]``)
is Python's ``attrs`` state class (SPEC §2): ``graph(name, SomeClass)``,
``merge_field()``, ``append_field()``. A node still returns a dict of channel
writes (the reference's ``Update.For<T>().Set(...)`` builder).

Not ported (C# typing, no Python meaning):

* "JSON-shaped values are coerced to the property types: long to int, list
  and map element types, nullable" — Python has one integer type and attrs
  fields are stored and read back as written, with no coercion.
* "a selector that is not a property access is refused with a
  GraphException" and "a nested selector (s => s.Log.Count) is refused, not
  aliased to the state's own Count channel" — Python names channels by
  string; there are no expression selectors.

"a typed fan-out node receives its Send payload as the declared input type"
keeps its Python meaning only in part: a Python node declares no input type,
so a send's input reaches it as it was sent; the case checks that an
instance of a registered class arrives as that class.
"""

from __future__ import annotations

from typing import Any

import attrs

from ilmek import (
    START,
    Checkpointer,
    ReducerError,
    append_field,
    command,
    graph,
    merge_field,
    resume_keyed,
    run,
    send,
    serde,
    stream,
)
from ilmek.events import InterruptEvent, RunEnd
from tests.support.reference import compile_allowing_a_warning


@attrs.define
class Numbers:
    """The .NET suite's ``Numbers`` state: plain fields, a merge and an append field, a computed property."""

    count: int = 0
    maybe: int | None = None
    ratio: float = 0.0
    bag: dict[str, Any] = merge_field()
    log: list[str] = append_field()

    @property
    def read_only(self) -> str:
        """Computed, not stored: no channel."""
        return "computed"


@serde.register
@attrs.frozen
class Job:
    """The .NET suite's ``Job``: a send's input."""

    id: str
    size: int


def test_a_read_only_property_is_not_a_channel() -> None:
    """TypedEdgeCaseTests.ReadOnlyIsNotAChannel: "a read-only property is not a channel, so writing it is an
    undeclared-channel error"."""
    g = graph("ro", Numbers).node("n", lambda state: {"read_only": "x"}).edge(START, "n").compile()

    assert "read_only" not in g.channels
    result = run(g)

    assert "error" == result.status
    ((_, error),) = result.errors
    assert isinstance(error, ReducerError)
    assert "'read_only'" in str(error)
    assert "does not declare" in str(error)


def test_field_reducers_are_honoured() -> None:
    """TypedEdgeCaseTests.AttributeReducers: "attribute reducers are honoured: [Merge] merges, [Append]
    appends"."""
    g = (
        graph("attrs", Numbers)
        .node("a", lambda state: {"bag": {"x": 1}, "log": "a"})
        .node("b", lambda state: {"bag": {"y": 2}, "log": ["b", "c"]})
        .edge(START, "a")
        .edge("a", "b")
        .compile()
    )

    assert "merge" == g.channels["bag"].kind
    state = run(g).state
    assert {"x": 1, "y": 2} == state.bag
    assert ["a", "b", "c"] == state.log


def test_a_send_of_a_registered_class_reaches_its_node_as_that_class(ref_checkpointer: Checkpointer) -> None:
    """TypedEdgeCaseTests.TypedSendPayload: "a typed fan-out node receives its Send payload as the declared
    input type".

    Both sends carry a ``Job`` (the reference's second is a dictionary it
    converts; Python converts nothing), and they cross the store.
    """

    received: list[type] = []

    def work(job: Job) -> dict[str, Any]:
        received.append(type(job))
        return {"log": [f"{job.id}:{job.size}"]}

    g = compile_allowing_a_warning(
        graph("jobs", Numbers)
        .node("plan", lambda state: command(goto=[send("work", Job("a", 2)), send("work", Job("b", 3))]))
        .node("work", work)
        .edge(START, "plan")
    )

    result = run(g, None, thread_id="t-jobs", checkpointer=ref_checkpointer)

    assert "done" == result.status
    assert [Job, Job] == received
    assert ["a:2", "b:3"] == sorted(result.state.log)


def test_a_class_state_graph_streams_and_resumes_by_id_like_any_other(ref_checkpointer: Checkpointer) -> None:
    """TypedEdgeCaseTests.TypedKeyedResumeAndStream: "typed ResumeKeyed and StreamEvents behave like the
    untyped surface"."""
    g = (
        graph("typed-keyed", Numbers)
        .node("a", lambda state, ctx: {"log": [ctx.interrupt()]})
        .node("b", lambda state, ctx: {"log": [ctx.interrupt()]})
        .edge(START, "a")
        .edge(START, "b")
        .compile()
    )
    opts: dict[str, Any] = {"thread_id": "tk", "checkpointer": ref_checkpointer}

    events = list(stream(g, None, **opts))

    assert isinstance(events[-1], RunEnd)
    assert any(isinstance(e, InterruptEvent) for e in events)
    finished = resume_keyed(g, {"a:interrupt#0": "A", "b:interrupt#0": "B"}, **opts)
    assert ("done", ["A", "B"]) == (finished.status, finished.state.log)


def test_an_interrupted_class_state_result_has_no_state_but_its_pauses(
    ref_checkpointer: Checkpointer,
) -> None:
    """TypedEdgeCaseTests.TypedInterruptedResult: "an interrupted typed result has no state but carries the
    pending interrupts".

    The TypeScript reference's ``run_end`` of a paused run carries no state
    either, and SPEC §4 gives ``state`` "when done".
    """
    g = graph("g", Numbers).node("a", lambda state, ctx: ctx.interrupt("q")).edge(START, "a").compile()

    result = run(g, None, thread_id="ti", checkpointer=ref_checkpointer)

    assert "interrupted" == result.status
    assert ["q"] == [p.payload for p in result.pending]
    assert None is result.state
