"""Drawing graphs as Mermaid flowcharts: the text, and that Mermaid's own parser accepts it.

Every drawing in ``DRAWINGS`` is parsed by the real Mermaid package under
Node (``tests/mermaid/``, installed by ``scripts/test``), in one Node process
for the module. Tests that port a case of the reference's ``mermaid.test.ts``
name it in their docstring.
"""

from __future__ import annotations

import itertools
import json
import pathlib
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from ilmek import END, START, InMemoryCheckpointer, channel, command, graph, run, send
from ilmek.graph import CompiledGraph
from ilmek.mermaid import to_mermaid
from ilmek.predicates import describe
from ilmek.spec import from_spec, to_spec
from tests.support.conftest_postgres import unavailable

pytestmark = pytest.mark.timeout(120)

CHECKER = pathlib.Path(__file__).resolve().parents[1] / "mermaid"


def noop(state: Any) -> None:
    return None


def mermaid_readings(drawings: list[str]) -> list[dict[str, Any]]:
    """What Mermaid makes of each drawing: a problem, or the node and edge labels it displays."""
    node = shutil.which("node")
    if node is None:
        unavailable("Node.js is not installed, so Mermaid cannot parse the drawings; install nodejs")
    if not (CHECKER / "node_modules" / "mermaid").is_dir():
        unavailable("tests/mermaid has no node_modules; run `npm ci` there (bash scripts/test does)")
    done = subprocess.run(
        [node, str(CHECKER / "parse.mjs")],
        input=json.dumps(drawings),
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"the Mermaid checker failed:\n{done.stderr}")
    readings: list[dict[str, Any]] = json.loads(done.stdout)
    return readings


Picture = tuple[list[str], list[tuple[str, str, str, str]]]


def picture(
    g: CompiledGraph, *, include_routers: bool = True, pending: frozenset[str] = frozenset()
) -> Picture:
    """The node labels and (from, to, label, stroke) edges a drawing of ``g`` must show, sorted."""

    def label(name: str) -> str:
        if name in (START, END):
            return "START" if name == START else "END"
        return ("⏸ " if name in pending else "") + name.replace("\r", " ").replace("\n", " ")

    nodes = ["START", *(label(name) for name in g.nodes)]
    edges: list[tuple[str, str, str, str]] = []
    for edge in g.edges:
        if edge.predicate is not None:
            text, stroke = describe(edge.predicate).replace("\n", " "), "normal"
        else:
            text, stroke = ("guard", "dotted") if edge.guard is not None else ("", "normal")
        edges.append((label(edge.source), label(edge.target), text, stroke))
    for router in g.routers if include_routers else ():
        if router.destinations is None:
            nodes.append("?")
        targets = ["?"] if router.destinations is None else [label(t) for t in router.destinations]
        edges.extend((label(router.source), target, "", "dotted") for target in targets)
    for name, spec in g.nodes.items():
        edges.extend((label(name), label(target), "goto", "dotted") for target in spec.destinations or ())
    if any("END" == target for _, target, _, _ in edges):
        nodes.append("END")
    return sorted(nodes), sorted(edges)


# Names Mermaid's grammar could read as syntax: keywords in any case, link
# shapes (o, x), direction words, ids our generated ids could clash with.
AWKWARD_NAMES = [
    "end",
    "End",
    "graph",
    "subgraph",
    "style",
    "click",
    "class",
    "classDef",
    "linkStyle",
    "direction",
    "default",
    "flowchart",
    "call",
    "href",
    "interpolate",
    "accTitle",
    "accDescr",
    "LR",
    "TD",
    "o",
    "x",
    "ox",
    "xo",
    "endpoint",
    "n0",
    "r0",
    "__start___",
    "my node",
    "a-b",
    "1st",
    "çay",
    "名前",
    "🙂 smile",
    'say "hi"',
    "semi;colon",
    "<b>bold</b>",
    "a&b",
    "100%",
    "%% not a comment",
    "pipe|name",
    "back`tick",
    "brace{x}",
    "paren(x)",
    "bracket[x]",
    "tab\there",
    "line\nbreak",
    "step:two",
    "worker#1",
    "a:b#c",
]


def awkward_names() -> CompiledGraph:
    """A chain through every awkward name, with a router that declared targets and one that did not."""
    builder = graph("awkward names", {"v": channel.last_write()})
    for name in AWKWARD_NAMES:
        builder.node(name, noop)
    builder.edge(START, AWKWARD_NAMES[0])
    for source, target in itertools.pairwise(AWKWARD_NAMES):
        builder.edge(source, target)
    builder.edge(AWKWARD_NAMES[-1], END)
    builder.router("end", lambda s: END, destinations=["style", "o", END])
    builder.router("graph", lambda s: END)
    builder.edge("x", "x")
    return builder.compile()


HOSTILE_TEXT = 'he said "hi" | <b> & %% #1 #quot; `x` ; } ] ) -->\nnext line'


def predicates() -> CompiledGraph:
    """Guarded edges whose predicates hold quotes, pipes, angle brackets, ampersands and more."""
    channels = {"v": channel.last_write(), 'odd "channel" | name': channel.last_write()}
    return (
        graph("predicates", channels)
        .node("a", noop)
        .node("b", noop)
        .node("c", noop)
        .edge(START, "a")
        .edge("a", "b", when={"channel": "v", "eq": HOSTILE_TEXT})
        .edge("a", "c", when={"channel": 'odd "channel" | name', "in": ["a|b", "<>", "&amp;", None, 1.5]})
        .edge(
            "b",
            "c",
            when={"not": {"any": [{"channel": "v", "truthy": True}, {"channel": "v", "exists": False}]}},
        )
        .edge("c", END, when={"all": [{"channel": "v", "gt": 1}, {"channel": "v", "le": 9.5}]})
        .edge("c", "a", when={"channel": "v", "neq": {"k": [1, True, None]}})
        .edge("b", END, when=lambda state: True)
        .compile()
    )


def control() -> CompiledGraph:
    """Routers with and without destinations, sends, and a node's declared goto destinations."""
    return (
        graph("control", {"items": channel.last_write([]), "done": channel.append()})
        .node("split", noop)
        .node("work", noop)
        .node("agent", lambda s: command(goto="tools"), destinations=["tools", END])
        .node("tools", noop)
        .edge(START, "split")
        .router("split", lambda s: [send("work", {"item": i}) for i in s["items"]], destinations=["work"])
        .router("work", lambda s: "agent")
        .router(START, lambda s: "agent", destinations=["agent", END])
        .compile()
    )


def one_node(name: str) -> CompiledGraph:
    """A one-node graph with the given name."""
    return graph(name).node("a", noop).edge(START, "a").edge("a", END).compile()


SPEC_WITH_ANY_NAMES = {
    "name": "stored %% spec",
    "channels": {"v": {}},
    "nodes": [
        {"id": "fetch:docs", "type": "t"},
        {"id": 'say "#1"', "type": "t", "destinations": ["end"]},
        {"id": "end", "type": "t"},
    ],
    "edges": [
        {"from": "__start__", "to": "fetch:docs"},
        {"from": "fetch:docs", "to": 'say "#1"', "when": {"channel": "v", "ne": "#quot;"}},
        {"from": "end", "to": "__end__"},
        {"from": "end", "to": "forgotten"},
    ],
}
SPEC_PICTURE: Picture = (
    sorted(["START", "fetch:docs", 'say "#1"', "end", "forgotten", "END"]),
    sorted(
        [
            ("START", "fetch:docs", "", "normal"),
            ("fetch:docs", 'say "#1"', 'v != "#quot;"', "normal"),
            ("end", "END", "", "normal"),
            ("end", "forgotten", "", "normal"),
            ('say "#1"', "end", "goto", "dotted"),
        ]
    ),
)
MARKS = {"next": [{"node": "split"}, {"node": "work"}], "pending": [{"node": "work"}]}
UNNAMED = {"name": None, "nodes": [{"id": "a", "type": "t"}], "edges": [{"from": START, "to": "a"}]}

# Each drawing with the title (None: no title) and picture Mermaid must read from it.
DRAWINGS: dict[str, Callable[[], tuple[str, str | None, Picture]]] = {
    "awkward node names": lambda: (awkward_names().to_mermaid(), "awkward names", picture(awkward_names())),
    "awkward node names, routers hidden": lambda: (
        awkward_names().to_mermaid(include_routers=False),
        "awkward names",
        picture(awkward_names(), include_routers=False),
    ),
    "predicates with hostile text": lambda: (predicates().to_mermaid(), "predicates", picture(predicates())),
    "routers, sends and gotos": lambda: (control().to_mermaid(), "control", picture(control())),
    **{
        f"highlight, {direction}": lambda direction=direction: (
            control().to_mermaid(direction=direction, highlight=MARKS),
            "control",
            picture(control(), pending=frozenset({"work"})),
        )
        for direction in ("LR", "BT", "RL", "TB")
    },
    "a stored spec with names no graph allows": lambda: (
        to_mermaid(SPEC_WITH_ANY_NAMES),
        "stored %% spec",
        SPEC_PICTURE,
    ),
    "an unnamed graph": lambda: (
        to_mermaid(UNNAMED),
        None,
        picture(from_spec(UNNAMED, {"t": lambda config: noop})),
    ),
    "only START and END": lambda: (
        graph("empty").edge(START, END).compile().to_mermaid(),
        "empty",
        picture(graph("empty").edge(START, END).compile()),
    ),
    **{
        f"a name {why}": lambda name=name: (one_node(name).to_mermaid(), name, picture(one_node(name)))
        for why, name in [
            ("with %%", "checkout %% flow"),
            ("that is a directive", '%%{init: {"theme": "dark"}}%%'),
            ("with quotes and front matter", 'say "hi"\n---\ntitle: x\n---'),
            ("with control characters", "bell\x07 nel\x85 ls\u2028 bom\ufeff tab\t"),
            ("in unicode", "çay 🙂 名前 عربي"),
            ("like YAML", "- [a, b]: {c: d} # comment &anchor *alias !tag"),
        ]
    },
}


@pytest.fixture(scope="module")
def readings() -> dict[str, dict[str, Any]]:
    """Mermaid's reading of every drawing, from one Node process."""
    drawn = [draw()[0] for draw in DRAWINGS.values()]
    return dict(zip(DRAWINGS, mermaid_readings(drawn), strict=True))


@pytest.mark.parametrize("name", DRAWINGS)
def test_mermaid_reads_the_drawing_as_the_graph(name: str, readings: dict[str, dict[str, Any]]) -> None:
    """Mermaid's own parser accepts the drawing and displays every node and edge label as named."""
    text, title, (nodes, edges) = DRAWINGS[name]()
    reading = readings[name]
    assert reading["problem"] is None, f"{reading['problem']}\n\n{text}"
    assert nodes == sorted(reading["nodes"])
    assert edges == sorted(tuple(edge) for edge in reading["edges"])
    # YAML reads a JSON string as JSON does; Mermaid accepting the front matter proves it is YAML.
    lines = text.splitlines()
    if title is None:
        assert lines[0].startswith("flowchart ")
    else:
        assert ("---", "---") == (lines[0], lines[2])
        assert title == json.loads(lines[1].removeprefix("title: "))


def test_the_checker_does_reject_a_broken_drawing() -> None:
    """The old drawing (comment on the flowchart line, END's id a keyword) is refused: the check bites."""
    old = 'flowchart TD  %% checkout\n    start(["START"])\n    end(["END"])\n    start --> end\n'
    (reading,) = mermaid_readings([old])
    assert reading["problem"] is not None


# --- the text -------------------------------------------------------------------------


def test_ids_are_names_when_plain_and_generated_otherwise() -> None:
    """Plain names keep their name as id; keywords, odd characters and clashes get n<i>, suffixed."""
    lines = awkward_names().to_mermaid().splitlines()
    ids = {name: index for index, name in enumerate(AWKWARD_NAMES)}
    assert '  n0_["end"]' in lines  # "n0" is a real node, so the generated id moves aside
    assert '  n0["n0"]' in lines
    assert f'  n{ids["End"]}["End"]' in lines
    assert f'  n{ids["classDef"]}["classDef"]' in lines
    assert f'  n{ids["my node"]}["my node"]' in lines
    assert '  endpoint["endpoint"]' in lines
    assert '  ox["ox"]' in lines
    quoted, broken = ids['say "hi"'], ids["line\nbreak"]
    assert f'  n{quoted}["say #quot;hi#quot;"]' in lines
    assert f'  n{broken}["line break"]' in lines
    assert f'  n{ids["100%"]}["100#37;"]' in lines
    # The undeclared router's "?" avoids the node named r0.
    assert '  r0_{"?"}' in lines
    assert f"  n{ids['graph']} -.-> r0_" in lines


def test_the_title_is_front_matter_and_only_when_named() -> None:
    """The graph's name is a YAML front-matter title, quoted so no name can break out of it."""
    assert one_node('a "b"\n%%').to_mermaid().startswith('---\ntitle: "a \\"b\\"\\n%%"\n---\nflowchart TD\n')
    assert one_node("çay").to_mermaid().startswith('---\ntitle: "\\u00e7ay"\n---\n')
    assert to_mermaid(UNNAMED).startswith("flowchart TD\n")


def test_each_kind_of_edge_has_its_own_arrow() -> None:
    """Static and predicate edges are solid; a Python guard, a router and a goto dotted."""
    lines = control().to_mermaid().splitlines()
    assert "  __start__ --> split" in lines
    assert "  split -.-> work" in lines
    assert '  agent -.->|"goto"| tools' in lines
    assert '  agent -.->|"goto"| __end__' in lines
    assert "  __start__ -.-> agent" in lines
    assert "  work -.-> r0" in lines
    text = predicates().to_mermaid()
    lines = text.splitlines()
    hostile = '  a -->|"v == #quot;he said \\#quot;hi\\#quot; #124; #lt;b#gt; #38; #37;#37; #35;1 #35;quot;'
    assert hostile in text
    assert '  b -.->|"guard"| __end__' in lines
    assert '  c -->|"(v #gt; 1) and (v #lt;= 9.5)"| __end__' in lines
    assert '  b -->|"not ((truthy(v)) or (not exists(v)))"| c' in lines


def test_a_spec_and_the_graph_built_from_it_draw_the_same() -> None:
    """mermaid.test.ts "a spec and the graph built from it render identically"."""
    g = (
        graph("loop", {"n": channel.last_write(0)})
        .node("tick", noop, type="tick")
        .edge(START, "tick")
        .edge("tick", "tick", when={"channel": "n", "lt": 3})
        .edge("tick", END, when={"channel": "n", "gt": 2})
        .compile()
    )
    assert g.to_mermaid() == to_mermaid(to_spec(g))
    assert '  tick -->|"n #lt; 3"| tick' in g.to_mermaid().splitlines()


def test_a_routers_declared_targets_include_its_send_targets() -> None:
    """mermaid.test.ts "a router's declared targets include its send targets"."""
    assert "  split -.-> work" in control().to_mermaid().splitlines()


def test_an_undeclared_router_draws_one_question_mark_and_can_be_hidden() -> None:
    """mermaid.test.ts "an undeclared router draws one ? per router; includeRouters: false hides them"."""
    g = graph("r").node("a", noop).edge(START, "a").router("a", lambda s: END).compile()
    lines = g.to_mermaid().splitlines()
    assert "  a -.-> r0" in lines
    assert '  r0{"?"}' in lines
    assert "r0" not in g.to_mermaid(include_routers=False)


def test_an_unknown_direction_is_refused() -> None:
    """mermaid.test.ts "an unknown direction is refused"."""
    g = graph("d").node("a", noop).edge(START, "a").compile()
    with pytest.raises(ValueError, match="unknown Mermaid direction 'XY'"):
        g.to_mermaid(direction="XY")
    assert g.to_mermaid(direction="LR").splitlines()[3] == "flowchart LR"


def test_end_is_drawn_only_when_something_leads_there() -> None:
    """No END node for a graph whose every path ends by having no successor."""
    g = graph("no-end").node("a", noop).edge(START, "a").compile()
    assert "__end__" not in g.to_mermaid()


def test_highlights_a_parked_thread_from_its_checkpoint() -> None:
    """mermaid.test.ts "highlights a parked thread from its checkpoint"."""
    checkpointer = InMemoryCheckpointer()

    def approve(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.interrupt({"q": "ship it?"})
        return {}

    g = (
        graph("approve", {"log": channel.append()})
        .node("draft", lambda s: {"log": ["drafted"]})
        .node("approve", approve)
        .node("notify", lambda s: {"log": ["notified"]})
        .edge(START, "draft")
        .edge("draft", "approve")
        .edge("draft", "notify")
        .edge("approve", END)
        .edge("notify", END)
        .compile()
    )
    assert "interrupted" == run(g, {}, thread_id="t1", checkpointer=checkpointer).status
    lines = g.to_mermaid(highlight=checkpointer.get("t1")).splitlines()
    assert '  approve["⏸ approve"]' in lines
    assert "  class approve pending" in lines
    # The superstep did not commit: notify is still next, approve is pending instead, never both.
    assert "  class notify next" in lines


def test_highlights_the_next_tasks_between_supersteps() -> None:
    """mermaid.test.ts "highlights the next tasks of a checkpoint between supersteps"."""
    g = (
        graph("next")
        .node("a", noop)
        .node("b", noop)
        .node("c", noop)
        .edge(START, "a")
        .edge("a", "b")
        .edge("a", "c")
        .compile()
    )
    text = g.to_mermaid(highlight={"next": [{"node": "c"}, {"node": "b"}, {"node": "b"}], "pending": []})
    assert "  class b,c next" in text.splitlines()
    assert "pending" not in text


def test_a_stored_spec_draws_nodes_its_edges_name_but_it_forgot() -> None:
    """A spec is drawn without a registry or validation beyond what the picture needs."""
    lines = to_mermaid(SPEC_WITH_ANY_NAMES).splitlines()
    assert '  n0["fetch:docs"]' in lines
    assert '  n1["say #quot;#35;1#quot;"]' in lines
    assert '  forgotten["forgotten"]' in lines
    assert '  n0 -->|"v != #quot;#35;quot;#quot;"| n1' in lines
    assert '  n1 -.->|"goto"| n2' in lines


# --- subgraphs ------------------------------------------------------------------------


def test_a_subgraph_node_is_drawn_as_a_mermaid_subgraph_block_two_levels_deep() -> None:
    """Each subgraph node is a ``subgraph`` block holding its child's nodes; Mermaid reads the nesting."""
    inner = graph("inner", {"x": channel.last_write(0)}).node("ask", noop).edge(START, "ask").edge("ask", END)
    outer = (
        graph("outer", {"x": channel.last_write(0)})
        .node("review", inner.compile())
        .edge(START, "review")
        .edge("review", END)
    )
    root = (
        graph("root", {"x": channel.last_write(0)})
        .node("first", noop)
        .node("outer", outer.compile())
        .edge(START, "first")
        .edge("first", "outer")
        .edge("outer", END)
        .compile()
    )
    text = root.to_mermaid()

    (reading,) = mermaid_readings([text])

    assert reading["problem"] is None, f"{reading['problem']}\n\n{text}"
    assert "ask" in reading["nodes"]
    blocks = dict(reading["subgraphs"])
    assert {"outer", "review"} == set(blocks)
    assert "outer_review" in blocks["outer"]  # a block inside a block is named by its id
    assert "ask" in blocks["review"]
    assert ("first", "outer", "", "normal") in [tuple(edge) for edge in reading["edges"]]
