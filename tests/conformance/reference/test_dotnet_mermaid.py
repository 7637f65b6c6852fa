"""Ported from the .NET port's ``dotnet/test/Ilmek.Core.Tests/MermaidTests.cs``: Mermaid export (MODEL §9.1).

The .NET suite renders every case of the reference's ``conformance/viz``
fixture and compares the text byte for byte. Those cases are written out
below as Python data (``CASES``: the graph, the options and the drawing
expected). Python draws them with one documented difference: the graph's
name is the drawing's title, in YAML front matter (README, "Predicates,
graphs as data and drawing"), so each expected drawing starts with that
title unless the graph has no name. Everything after it is the reference's
text.

A case is a spec, built with a registry that maps every node type to a
no-op, plus optional code routers (``routers``: source and declared targets,
``None`` for none) and hand-written guards (``guards``). Python's
``from_spec`` compiles at once, so a case with routers or guards is built
with the builder instead, as the spec describes it, then its routers, then
its guards, in the order the reference's harness declares them (the
reference draws edges and routers in declaration order). ``MermaidOptions`` are
``to_mermaid``'s keywords (``direction``, ``include_routers``, ``highlight``:
a checkpoint, or anything with ``next`` and ``pending`` whose items have a
``node``).
"""

from __future__ import annotations

import warnings
from typing import Any

import attrs
import pytest

from ilmek import (
    END,
    START,
    Checkpoint,
    Checkpointer,
    CompiledGraph,
    GraphError,
    ScheduledTask,
    append_field,
    channel,
    from_spec,
    graph,
    run,
    send,
    to_spec,
)
from ilmek.mermaid import to_mermaid


def _noop(state: Any) -> None:
    return None


def _node(name: str, node_type: str = "noop") -> dict[str, Any]:
    return {"id": name, "type": node_type}


def _edge(source: str, target: str, when: dict[str, Any] | None = None) -> dict[str, Any]:
    edge: dict[str, Any] = {"from": source, "to": target}
    if when is not None:
        edge["when"] = when
    return edge


def _drawing(title: str | None, *lines: str) -> str:
    """The text Python draws: the title's front matter (when named), then the reference's lines."""
    head = [] if title is None else ["---", f'title: "{title}"', "---"]
    return "\n".join([*head, *lines]) + "\n"


CASES: dict[str, dict[str, Any]] = {
    "support": {
        "spec": {
            "name": "support",
            "channels": {"messages": {"reducer": "append"}, "intent": {"reducer": "last_write"}},
            "nodes": [_node("agent", "llm"), _node("checkout", "http"), _node("answer", "llm")],
            "edges": [
                _edge(START, "agent"),
                _edge("agent", "checkout", {"channel": "intent", "eq": "buy"}),
                _edge("agent", "answer", {"channel": "intent", "neq": "buy"}),
                _edge("checkout", END),
                _edge("answer", END),
            ],
        },
        "expected": _drawing(
            "support",
            "flowchart TD",
            "  __start__([START])",
            '  agent["agent"]',
            '  checkout["checkout"]',
            '  answer["answer"]',
            "  __end__([END])",
            "  __start__ --> agent",
            '  agent -->|"intent == #quot;buy#quot;"| checkout',
            '  agent -->|"intent != #quot;buy#quot;"| answer',
            "  checkout --> __end__",
            "  answer --> __end__",
        ),
    },
    "predicates": {
        "spec": {
            "name": "predicates",
            "channels": {
                "intent": {"reducer": "last_write"},
                "count": {"reducer": "last_write"},
                "items": {"reducer": "append"},
                "flags": {"reducer": "merge"},
            },
            "nodes": [
                _node(n) for n in ("triage", "buy", "refund", "big", "small", "has_items", "empty", "odd")
            ],
            "edges": [
                _edge(START, "triage"),
                _edge("triage", "buy", {"channel": "intent", "eq": "buy"}),
                _edge("triage", "refund", {"channel": "intent", "in": ["refund", "return", 3, True, None]}),
                _edge("triage", "big", {"channel": "count", "gt": 10}),
                _edge("triage", "small", {"channel": "count", "lt": 2.5}),
                _edge("triage", "has_items", {"channel": "items", "truthy": True}),
                _edge("triage", "empty", {"channel": "items", "truthy": False}),
                _edge("triage", "odd", {"channel": "intent", "neq": 'say "hi" #1 <b>`x`</b>'}),
                _edge("buy", END),
            ],
        },
        "options": {"direction": "LR"},
        "expected": _drawing(
            "predicates",
            "flowchart LR",
            "  __start__([START])",
            *(
                f'  {n}["{n}"]'
                for n in ("triage", "buy", "refund", "big", "small", "has_items", "empty", "odd")
            ),
            "  __end__([END])",
            "  __start__ --> triage",
            '  triage -->|"intent == #quot;buy#quot;"| buy',
            '  triage -->|"intent in [#quot;refund#quot;, #quot;return#quot;, 3, true, null]"| refund',
            '  triage -->|"count #gt; 10"| big',
            '  triage -->|"count #lt; 2.5"| small',
            '  triage -->|"truthy(items)"| has_items',
            '  triage -->|"not truthy(items)"| empty',
            '  triage -->|"intent != #quot;say \\#quot;hi\\#quot; #35;1 '
            '#lt;b#gt;#96;x#96;#lt;/b#gt;#quot;"| odd',
            "  buy --> __end__",
        ),
    },
    "escaping": {
        "spec": {
            "name": "escaping",
            "channels": {},
            "nodes": [
                _node(n)
                for n in ("fetch:docs", "end", "my node", "n0", "Subgraph", "a-b", 'say "#1"', "çay", "_ok_1")
            ],
            "edges": [
                _edge(START, "fetch:docs"),
                _edge("fetch:docs", "end"),
                _edge("end", "my node"),
                _edge("my node", "n0"),
                _edge("n0", "Subgraph"),
                _edge("Subgraph", "a-b"),
                _edge("a-b", 'say "#1"'),
                _edge('say "#1"', "çay"),
                _edge("çay", "_ok_1"),
                _edge("_ok_1", END),
            ],
        },
        "expected": _drawing(
            "escaping",
            "flowchart TD",
            "  __start__([START])",
            '  n0_["fetch:docs"]',
            '  n1["end"]',
            '  n2["my node"]',
            '  n0["n0"]',
            '  n4["Subgraph"]',
            '  n5["a-b"]',
            '  n6["say #quot;#35;1#quot;"]',
            '  n7["çay"]',
            '  _ok_1["_ok_1"]',
            "  __end__([END])",
            "  __start__ --> n0_",
            "  n0_ --> n1",
            "  n1 --> n2",
            "  n2 --> n0",
            "  n0 --> n4",
            "  n4 --> n5",
            "  n5 --> n6",
            "  n6 --> n7",
            "  n7 --> _ok_1",
            "  _ok_1 --> __end__",
        ),
    },
    "routers": {
        "spec": {
            "name": "routers",
            "channels": {"plan": {"reducer": "last_write"}},
            "nodes": [_node(n) for n in ("plan", "tools", "respond", "worker", "r0", "audit")],
            "edges": [
                _edge(START, "plan"),
                _edge("tools", "plan"),
                _edge("worker", "respond"),
                _edge("respond", END),
            ],
        },
        "routers": [("plan", ["tools", "worker", "respond", END]), ("respond", None), ("r0", None)],
        "guards": [("plan", "audit"), ("audit", "r0")],
        "expected": _drawing(
            "routers",
            "flowchart TD",
            "  __start__([START])",
            *(f'  {n}["{n}"]' for n in ("plan", "tools", "respond", "worker", "r0", "audit")),
            '  r0_{"?"}',
            '  r1{"?"}',
            "  __end__([END])",
            "  __start__ --> plan",
            "  tools --> plan",
            "  worker --> respond",
            "  respond --> __end__",
            "  plan -.-> tools",
            "  plan -.-> worker",
            "  plan -.-> respond",
            "  plan -.-> __end__",
            "  respond -.-> r0_",
            "  r0 -.-> r1",
            '  plan -.->|"guard"| audit',
            '  audit -.->|"guard"| r0',
        ),
    },
    "routers-hidden": {
        "spec": {
            "name": "routers-hidden",
            "channels": {},
            "nodes": [_node(n) for n in ("plan", "tools", "respond")],
            "edges": [_edge(START, "plan"), _edge("tools", "plan"), _edge("respond", END)],
        },
        "routers": [("plan", ["tools", "respond"]), ("plan", None)],
        "options": {"include_routers": False, "direction": "BT"},
        "expected": _drawing(
            "routers-hidden",
            "flowchart BT",
            "  __start__([START])",
            *(f'  {n}["{n}"]' for n in ("plan", "tools", "respond")),
            "  __end__([END])",
            "  __start__ --> plan",
            "  tools --> plan",
            "  respond --> __end__",
        ),
    },
    "highlight": {
        "spec": {
            "name": "review",
            "channels": {"draft": {"reducer": "last_write"}},
            "nodes": [_node(n) for n in ("write", "review", "legal", "publish")],
            "edges": [
                _edge(START, "write"),
                _edge("write", "review"),
                _edge("write", "legal"),
                _edge("review", "publish"),
                _edge("legal", "publish"),
                _edge("publish", END),
            ],
        },
        "options": {
            "highlight": {
                "next": [{"node": n} for n in ("review", "legal", "publish", "legal")],
                "pending": [{"node": "review"}],
            }
        },
        "expected": _drawing(
            "review",
            "flowchart TD",
            "  __start__([START])",
            '  write["write"]',
            '  review["⏸ review"]',
            '  legal["legal"]',
            '  publish["publish"]',
            "  __end__([END])",
            "  __start__ --> write",
            "  write --> review",
            "  write --> legal",
            "  review --> publish",
            "  legal --> publish",
            "  publish --> __end__",
            "  classDef next stroke-width:3px",
            "  class legal,publish next",
            "  classDef pending stroke-width:3px,stroke-dasharray:5 3",
            "  class review pending",
        ),
    },
    "no-end": {
        "spec": {
            "name": None,
            "channels": {},
            "nodes": [_node("loop"), _node("orphan")],
            "edges": [_edge(START, "loop"), _edge("loop", "loop")],
        },
        "expected": _drawing(
            None,
            "flowchart TD",
            "  __start__([START])",
            '  loop["loop"]',
            '  orphan["orphan"]',
            "  __start__ --> loop",
            "  loop --> loop",
        ),
    },
}


def _compile(case: dict[str, Any]) -> CompiledGraph:
    """The case's graph: from its spec, or built as the spec says when it adds code routers or guards."""
    spec = case["spec"]
    with warnings.catch_warnings():
        # "orphan" is unreachable on purpose.
        warnings.simplefilter("ignore")
        if not case.get("routers") and not case.get("guards"):
            return from_spec(spec, {node["type"]: lambda config: _noop for node in spec["nodes"]})
        builder = graph(spec["name"])
        for node in spec["nodes"]:
            builder.node(node["id"], _noop, type=node["type"])
        for edge in spec["edges"]:
            builder.edge(edge["from"], edge["to"], when=edge.get("when"))
        for source, targets in case.get("routers", ()):
            builder.router(source, lambda state: [], destinations=targets)
        for source, target in case.get("guards", ()):
            builder.edge(source, target, when=lambda state: True)
        return builder.compile()


def test_the_fixture_is_not_empty() -> None:
    """MermaidTests.FixtureIsNotEmpty: "the fixture is not empty"."""
    assert len(CASES) >= 5


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_compiled_graph_draws_the_cases_text(name: str) -> None:
    """MermaidTests.CompiledGraphMatchesFixture: "the compiled graph renders to <case>.mmd"."""
    case = CASES[name]

    assert case["expected"] == _compile(case).to_mermaid(**case.get("options", {}))


@pytest.mark.parametrize(
    "name", sorted(n for n, c in CASES.items() if not c.get("routers") and not c.get("guards"))
)
def test_a_code_free_cases_spec_draws_the_same_text(name: str) -> None:
    """MermaidTests.SpecMatchesFixture: "a code-free case renders the same text from its stored spec"."""
    case = CASES[name]

    assert case["expected"] == to_mermaid(case["spec"], **case.get("options", {}))


# --- behaviour ----------------------------------------------------------------------------------


def test_a_spec_and_the_graph_built_from_it_draw_alike() -> None:
    """MermaidTests.SpecAndGraphAgree: "a spec and the graph built from it render identically".

    The reference pairs a code guard with its declarative form; a Python
    predicate is both.
    """
    g = (
        graph("loop", {"n": channel.last_write(0)})
        .node("tick", _noop, type="tick")
        .edge(START, "tick")
        .edge("tick", "tick", when={"channel": "n", "lt": 3})
        .edge("tick", END, when={"channel": "n", "gt": 2})
        .compile()
    )

    assert g.to_mermaid() == to_mermaid(to_spec(g))
    assert '  tick -->|"n #lt; 3"| tick\n' in g.to_mermaid()


@attrs.define
class FanState:
    """The .NET suite's ``FanState``: a list of items."""

    items: list[str] = append_field()


def test_a_class_state_graph_draws_its_routers_declared_send_targets() -> None:
    """MermaidTests.TypedRouterTargets: "a typed graph renders its routers' declared targets, send targets
    included"."""
    g = (
        graph("fan", FanState)
        .node("split", _noop)
        .node("work", _noop)
        .edge(START, "split")
        .router(
            "split", lambda state: [send("work", {"item": i}) for i in state.items], destinations=["work"]
        )
        .edge("work", END)
        .compile()
    )

    assert "\n  split -.-> work\n" in g.to_mermaid()


def test_an_undeclared_router_draws_a_question_mark_unless_routers_are_hidden() -> None:
    """MermaidTests.UndeclaredRouter: "an undeclared router draws a ? node; IncludeRouters = false hides
    it"."""
    g = graph("g").node("a", _noop).edge(START, "a").router("a", lambda state: [END]).compile()

    assert "\n  a -.-> r0\n" in g.to_mermaid()
    assert '\n  r0{"?"}\n' in g.to_mermaid()
    assert "r0" not in g.to_mermaid(include_routers=False)


def test_a_router_target_must_be_a_node_or_end() -> None:
    """MermaidTests.UnknownRouterTarget: "a router target must be a node or End"."""
    builder = (
        graph("g")
        .node("a", _noop)
        .edge(START, "a")
        .router("a", lambda state: [END], destinations=["nowhere"])
    )

    with pytest.raises(GraphError, match="'nowhere'"):
        builder.compile()


def test_an_unknown_direction_is_refused() -> None:
    """MermaidTests.UnknownDirection: "an unknown direction is refused".

    A ``ValueError`` in Python (a bad argument), a ``GraphException`` in the
    reference.
    """
    g = graph("g").node("a", _noop).edge(START, "a").compile()

    with pytest.raises(ValueError, match="'XY'"):
        g.to_mermaid(direction="XY")


def test_a_paused_thread_is_highlighted_from_its_checkpoint(ref_checkpointer: Checkpointer) -> None:
    """MermaidTests.HighlightsParkedThread: "highlights a parked thread from its checkpoint".

    ``notify`` ran beside the pause in a superstep that did not commit, so it
    is still next; ``approve`` is pending instead, never both.
    """

    def approve(state: Any, ctx: Any) -> None:
        ctx.interrupt({"q": "ship it?"})

    g = (
        graph("approve", {"log": channel.append()})
        .node("draft", lambda state: {"log": "drafted"})
        .node("approve", approve)
        .node("notify", lambda state: {"log": "notified"})
        .edge(START, "draft")
        .edge("draft", "approve")
        .edge("draft", "notify")
        .edge("approve", END)
        .edge("notify", END)
        .compile()
    )
    paused = run(g, {}, thread_id="t1", checkpointer=ref_checkpointer)
    assert "interrupted" == paused.status

    text = g.to_mermaid(highlight=ref_checkpointer.get("t1"))

    assert '\n  approve["⏸ approve"]\n' in text
    assert "\n  class approve pending\n" in text
    assert "\n  class notify next\n" in text


def test_the_next_tasks_are_highlighted_in_declaration_order_each_once() -> None:
    """MermaidTests.HighlightsNext: "highlights the next tasks in declaration order, each once"."""
    g = (
        graph("g")
        .node("a", _noop)
        .node("b", _noop)
        .node("c", _noop)
        .edge(START, "a")
        .edge("a", "b")
        .edge("a", "c")
        .compile()
    )
    checkpoint = Checkpoint(
        id="ckpt",
        thread_id="t",
        next=[ScheduledTask(node=n, task_key=n) for n in ("c", "b", "b")],
        pending=(),
    )

    text = g.to_mermaid(highlight=checkpoint)

    assert "\n  class b,c next\n" in text
    assert "pending" not in text
