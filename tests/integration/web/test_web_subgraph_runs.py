"""The thread page and subgraphs: a child's checkpoints and journals under the task that ran it, at any depth.

Each backend's store (memory, a SQLite file, the session's Postgres server)
holds a thread paused two subgraphs down; the console is served by
``wsgiref`` on 127.0.0.1 and read over a real connection. The ids the page
must show are read through :func:`ilmek.history` with ``ns=``, never built.
"""

from __future__ import annotations

import builtins
import html
import html.parser
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    CompiledGraph,
    InMemoryCheckpointer,
    NodeContext,
    channel,
    graph,
    history,
    resume_keyed,
    run,
)
from ilmek.checkpoint.base import Checkpointer
from ilmek.namespaces import is_child_thread
from ilmek.types import Checkpoint
from tests.support.web_support import fetch, serving

pytestmark = pytest.mark.timeout(120)

OUTER, INNER = "outer:outer", "review:review"
HOSTILE_KEY = "<script>alert('key')</script>"
HOSTILE_VALUE = "<img src=x onerror=alert(1)>"


def nested() -> CompiledGraph:
    """root → outer (records ``prep``) → review, whose ``ask`` records a hostile step then pauses."""

    def ask(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        ctx.step("lookup", lambda: "stock of order 7: 3")
        ctx.step(HOSTILE_KEY, lambda: HOSTILE_VALUE)
        return {"log": [ctx.interrupt({"question": "Ship order 7?"}, key="approve")]}

    def prep(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"log": [ctx.step("prep", lambda: "packed")]}

    inner = graph("inner", {"log": channel.append()}).node("ask", ask).edge(START, "ask").edge("ask", END)
    outer = graph("outer", {"log": channel.append()}).node("prep", prep).node("review", inner.compile())
    outer = outer.edge(START, "prep").edge("prep", "review").edge("review", END)
    root = graph("root", {"log": channel.append()}).node("outer", outer.compile())
    return root.edge(START, "outer").edge("outer", END).compile()


class _Runs(html.parser.HTMLParser):
    """Each subgraph section's ``data-ns``, the sections it sits in, its root task, and the text inside it."""

    def __init__(self) -> None:
        super().__init__()
        # (tag, ns or None, task div id or None), for every open section/div
        self.open: list[tuple[str, str | None, str | None]] = []
        self.parents: dict[str, tuple[str, ...]] = {}
        self.task: dict[str, str | None] = {}
        self.text: dict[str, list[str]] = {}

    def handle_starttag(self, name: str, attrs: list[tuple[str, str | None]]) -> None:
        if name not in ("section", "div"):
            return
        found = dict(attrs)
        ns = found.get("data-ns") if "subgraph-run" in (found.get("class") or "") else None
        task = found.get("id") if (found.get("id") or "").startswith("task-") else None
        if ns is not None:
            self.parents[ns] = tuple(n for _, n, _ in self.open if n is not None)
            self.task[ns] = next((t for _, _, t in self.open if t is not None), None)
            self.text[ns] = []
        self.open.append((name, ns, task))

    def handle_endtag(self, name: str) -> None:
        if name in ("section", "div") and self.open:
            self.open.pop()

    def handle_data(self, data: str) -> None:
        for _, ns, _ in self.open:
            if ns is not None:
                self.text[ns].append(data)


def runs_of(page: str) -> _Runs:
    """The subgraph sections of a page."""
    parser = _Runs()
    parser.feed(page)
    return parser


def thread_page(checkpointer: Checkpointer, checkpoint_id: str | None = None) -> str:
    """The thread page of ``order-7`` (at ``checkpoint_id``), fetched over HTTP; fails unless 200."""
    with serving(checkpointer, {"root": nested()}) as server:
        url = f"{server.url.rstrip('/')}/thread?id=order-7"
        status, body = fetch(url + (f"&checkpoint={checkpoint_id}" if checkpoint_id else ""))
    assert 200 == status, body[:500]
    return body


def test_a_pause_two_levels_down_shows_both_children_nested_under_the_parent(
    checkpointer: Checkpointer,
) -> None:
    """The child's and grandchild's checkpoints (ids from history(ns=)) and journals, each in its parent."""
    run(nested(), {}, thread_id="order-7", checkpointer=checkpointer)
    child = history(checkpointer, "order-7", ns=(OUTER,))
    grandchild = history(checkpointer, "order-7", ns=(OUTER, INNER))

    body = thread_page(checkpointer)
    runs = runs_of(body)

    assert 1 == body.count(f'data-ns="{OUTER}"')
    assert 1 == body.count(f'data-ns="{OUTER}/{INNER}"')
    assert () == runs.parents[OUTER]
    assert (OUTER,) == runs.parents[f"{OUTER}/{INNER}"]
    child_text = "".join(runs.text[OUTER])
    grandchild_text = "".join(runs.text[f"{OUTER}/{INNER}"])
    assert child
    assert grandchild
    for checkpoint in child:
        assert checkpoint.id in child_text
        assert checkpoint.id not in grandchild_text  # each child's checkpoints sit in its own section
    for checkpoint in grandchild:
        assert checkpoint.id in grandchild_text
    assert "packed" not in grandchild_text  # the child's committed step is not the grandchild's
    assert "stock of order 7: 3" in grandchild_text
    assert "Ship order 7?" in grandchild_text
    assert "\x1f" not in body


def test_the_drawing_marks_where_inside_the_children_the_thread_waits(checkpointer: Checkpointer) -> None:
    """``outer`` paused in the root, ``review`` in the child's drawing, ``ask`` in the grandchild's."""
    run(nested(), {}, thread_id="order-7", checkpointer=checkpointer)

    body = thread_page(checkpointer)

    start = body.index('<svg class="graph"')
    svg = body[start : body.index("</svg>", start)]
    child = svg[svg.index('data-inside="outer"') :]
    grandchild = child[child.index('data-inside="review"') :]
    assert '<g class="gnode subgraph paused" data-node="outer">' in svg
    assert '<g class="gnode subgraph paused" data-node="review">' in child
    assert '<g class="gnode paused" data-node="ask">' in grandchild
    assert 3 == svg.count(" paused")  # nothing else is marked waiting


def test_hostile_keys_and_values_recorded_in_a_grandchild_are_escaped(checkpointer: Checkpointer) -> None:
    """A journal key and a result holding markup are text on the page, never tags."""
    run(nested(), {}, thread_id="order-7", checkpointer=checkpointer)

    body = thread_page(checkpointer)

    assert HOSTILE_KEY not in body
    assert HOSTILE_VALUE not in body
    assert "&lt;script&gt;alert(" in body
    assert HOSTILE_VALUE in "".join(runs_of(body).text[f"{OUTER}/{INNER}"])


def test_a_finished_child_is_listed_under_the_root_checkpoint_that_ran_it(checkpointer: Checkpointer) -> None:
    """After the answer, the root checkpoint planning ``outer`` shows the children's done checkpoints."""
    run(nested(), {}, thread_id="order-7", checkpointer=checkpointer)
    done: Any = resume_keyed(
        nested(), {f"{OUTER}/{INNER}/ask:approve#0": "yes"}, thread_id="order-7", checkpointer=checkpointer
    )
    assert "done" == done.status
    planning = next(c for c in history(checkpointer, "order-7") if [t.node for t in c.next] == ["outer"])
    grandchild = history(checkpointer, "order-7", ns=(OUTER, INNER))

    runs = runs_of(thread_page(checkpointer, planning.id))

    text = "".join(runs.text[f"{OUTER}/{INNER}"])
    assert grandchild[0].id in text
    assert "finished" in text
    assert (OUTER,) == runs.parents[f"{OUTER}/{INNER}"]


CALL_KEY, CALL_NODE, CHILD_NODE = '<i>k&"</i>', "n<x>", 'a<b onclick="x">'


def calling() -> CompiledGraph:
    """root: ``n<x>`` calls ``inner`` with ``ctx.call`` under a hostile key; its hostile node pauses."""
    ask = lambda state, ctx: {"log": [ctx.interrupt({"question": "Refund?"}, key="approve")]}  # noqa: E731
    inner = graph("inner", {"log": channel.append()}).node(CHILD_NODE, ask)
    inner = inner.edge(START, CHILD_NODE).edge(CHILD_NODE, END).compile()

    def body(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"log": ctx.call(inner, {}, key=CALL_KEY)["log"]}

    root = graph("root", {"log": channel.append()}).node(CALL_NODE, body)
    return root.edge(START, CALL_NODE).edge(CALL_NODE, END).compile()


def test_a_paused_ctx_call_child_with_hostile_names_is_listed_and_escaped(checkpointer: Checkpointer) -> None:
    """The call's namespace (a hostile key and node) heads its section as text; its checkpoints are listed."""
    paused: Any = run(calling(), {}, thread_id="order-7", checkpointer=checkpointer)
    (ns,) = {pause.ns for pause in paused.pending}
    child = history(checkpointer, "order-7", ns=ns)

    with serving(checkpointer, {"root": calling()}) as server:
        status, body = fetch(f"{server.url.rstrip('/')}/thread?id=order-7")

    assert 200 == status, body[:500]
    runs = runs_of(body)
    assert [ns[0]] == list(runs.parents)
    text = "".join(runs.text[ns[0]])
    assert child
    for checkpoint in child:
        assert checkpoint.id in text
    assert "Refund?" in text
    for hostile in (CALL_KEY, CALL_NODE, CHILD_NODE):
        assert hostile not in body
    assert CHILD_NODE in text


def test_a_finished_ctx_call_child_is_found_through_its_tasks_journal(checkpointer: Checkpointer) -> None:
    """A call that paused, was answered and finished, its task then pausing itself: still listed."""
    ask = lambda state, ctx: {"log": [ctx.interrupt({"question": "Refund?"}, key="approve")]}  # noqa: E731
    inner = graph("inner", {"log": channel.append()}).node("ask", ask).edge(START, "ask").edge("ask", END)

    def body(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        called = ctx.call(inner.compile(), {}, key="refund")
        return {"log": [*called["log"], ctx.interrupt({"question": "Send the mail?"}, key="send")]}

    root = graph("root", {"log": channel.append()}).node("work", body).edge(START, "work").edge("work", END)
    compiled = root.compile()
    first: Any = run(compiled, {}, thread_id="order-7", checkpointer=checkpointer)
    (pause,) = first.pending
    second: Any = resume_keyed(compiled, {pause.id: "yes"}, thread_id="order-7", checkpointer=checkpointer)
    assert [()] == [p.ns for p in second.pending]  # only the task's own pause is open
    done = history(checkpointer, "order-7", ns=pause.ns)

    with serving(checkpointer, {"root": compiled}) as server:
        status, page = fetch(f"{server.url.rstrip('/')}/thread?id=order-7")

    assert 200 == status, page[:500]
    text = "".join(runs_of(page).text[pause.ns[0]])
    assert "done" == done[0].status
    assert done[0].id in text
    assert "finished" in text


def test_two_subgraph_tasks_of_one_superstep_each_list_their_own_child(checkpointer: Checkpointer) -> None:
    """Nodes ``left`` and ``right`` run a subgraph side by side and both pause: each child under its task."""
    ask = lambda state, ctx: {"log": [ctx.interrupt({"question": "Go?"}, key="go")]}  # noqa: E731
    inner = graph("inner", {"log": channel.append()}).node("ask", ask).edge(START, "ask").edge("ask", END)
    root = (
        graph("root", {"log": channel.append()}).node("left", inner.compile()).node("right", inner.compile())
    )
    compiled = root.edge(START, "left").edge(START, "right").edge("left", END).edge("right", END).compile()
    run(compiled, {}, thread_id="order-7", checkpointer=checkpointer)
    ids = {ns: history(checkpointer, "order-7", ns=(ns,))[0].id for ns in ("left:left", "right:right")}

    with serving(checkpointer, {"root": compiled}) as server:
        status, page = fetch(f"{server.url.rstrip('/')}/thread?id=order-7")

    assert 200 == status, page[:500]
    runs = runs_of(page)
    assert set(ids) == set(runs.parents)
    for ns, latest in ids.items():
        assert latest in "".join(runs.text[ns])
        other = next(id_ for n, id_ in ids.items() if n != ns)
        assert other not in "".join(runs.text[ns])


def test_a_page_reads_at_most_child_reads_subgraph_runs_and_says_so(checkpointer: Checkpointer) -> None:
    """A superstep sending to a subgraph node more times than a page reads: CHILD_READS shown, and a note."""
    from ilmek import send
    from ilmek.web.children import CHILD_READS

    inner = graph("inner", {"log": channel.append()}).node("tick", lambda state: {"log": ["t"]})
    inner = inner.edge(START, "tick").edge("tick", END)
    root = (
        graph("root", {"log": channel.append()}).node("fan", lambda state: {}).node("child", inner.compile())
    )
    root = root.edge(START, "fan").router(
        "fan", lambda state: [send("child", {}) for _ in range(CHILD_READS + 2)]
    )
    compiled = root.edge("child", END).compile()
    run(compiled, {}, thread_id="order-7", checkpointer=checkpointer)
    planning = next(c for c in history(checkpointer, "order-7") if c.next and c.next[0].node == "child")

    with serving(checkpointer, {"root": compiled}) as server:
        status, page = fetch(f"{server.url.rstrip('/')}/thread?id=order-7&checkpoint={planning.id}")

    assert 200 == status, page[:500]
    assert CHILD_READS == len(runs_of(page).parents)
    assert f"the first {CHILD_READS} are shown" in page


def two_steps() -> CompiledGraph:
    """A child that never pauses: ``a`` then ``b``, each adding to ``log``."""
    inner = graph("inner", {"log": channel.append()}).node("a", lambda state: {"log": ["a ran"]})
    inner = inner.node("b", lambda state: {"log": ["b ran"]})
    return inner.edge(START, "a").edge("a", "b").edge("b", END).compile()


def calling_quietly(calls: int) -> CompiledGraph:
    """root: ``work`` runs :func:`two_steps` ``calls`` times by ``ctx.call(key="sum")`` and finishes."""
    inner = two_steps()

    def work(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"log": [item for _ in range(calls) for item in ctx.call(inner, {}, key="sum")["log"]]}

    root = graph("root", {"log": channel.append()}).node("work", work)
    return root.edge(START, "work").edge("work", END).compile()


def planning_page(checkpointer: Checkpointer, compiled: CompiledGraph, node: str) -> str:
    """The page of ``order-7`` at the checkpoint whose superstep ran ``node``, over HTTP; fails unless 200."""
    planning = next(c for c in history(checkpointer, "order-7") if [t.node for t in c.next] == [node])
    with serving(checkpointer, {"root": compiled}) as server:
        status, page = fetch(f"{server.url.rstrip('/')}/thread?id=order-7&checkpoint={planning.id}")
    assert 200 == status, page[:500]
    return page


def test_a_ctx_call_child_that_never_paused_is_listed_under_its_task(checkpointer: Checkpointer) -> None:
    """After the run finished, the checkpoint that ran ``work`` lists the child's 3 checkpoints under it."""
    compiled = calling_quietly(1)
    assert "done" == run(compiled, {}, thread_id="order-7", checkpointer=checkpointer).status
    child = history(checkpointer, "order-7", ns=("sum#0:work",))

    runs = runs_of(planning_page(checkpointer, compiled, "work"))

    assert ["sum#0:work"] == list(runs.parents)
    assert "task-work" == runs.task["sum#0:work"]
    text = "".join(runs.text["sum#0:work"])
    assert 3 == len(child)  # its input, then a, then b
    for checkpoint in child:
        assert checkpoint.id in text
    assert "done" == child[0].status
    assert "finished" in text


def test_a_ctx_call_made_twice_in_one_node_lists_both_parts(checkpointer: Checkpointer) -> None:
    """``key#0`` and ``key#1`` are two children of one task, each section with its own checkpoints only."""
    compiled = calling_quietly(2)
    assert "done" == run(compiled, {}, thread_id="order-7", checkpointer=checkpointer).status
    ids = {
        ns: {c.id for c in history(checkpointer, "order-7", ns=(ns,))} for ns in ("sum#0:work", "sum#1:work")
    }

    runs = runs_of(planning_page(checkpointer, compiled, "work"))

    assert ["sum#0:work", "sum#1:work"] == list(runs.parents)  # in the order they ran
    for ns, own in ids.items():
        other = next(checkpoints for n, checkpoints in ids.items() if n != ns)
        text = "".join(runs.text[ns])
        assert "task-work" == runs.task[ns]
        assert () == runs.parents[ns]
        assert own
        assert all(checkpoint_id in text for checkpoint_id in own)
        assert not any(checkpoint_id in text for checkpoint_id in other)


def test_a_quiet_ctx_call_inside_a_finished_subgraph_node_is_nested_in_it(checkpointer: Checkpointer) -> None:
    """A subgraph node whose node ``ctx.call``ed a child that never paused: the grandchild is in the child."""
    inner = two_steps()

    def total(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"log": ctx.call(inner, {}, key="sum")["log"]}

    outer = graph("outer", {"log": channel.append()}).node("total", total)
    outer = outer.edge(START, "total").edge("total", END).compile()
    root = graph("root", {"log": channel.append()}).node("outer", outer)
    compiled = root.edge(START, "outer").edge("outer", END).compile()
    assert "done" == run(compiled, {}, thread_id="order-7", checkpointer=checkpointer).status
    grandchild = history(checkpointer, "order-7", ns=(OUTER, "sum#0:total"))

    runs = runs_of(planning_page(checkpointer, compiled, "outer"))

    nested_ns = f"{OUTER}/sum#0:total"
    assert (OUTER,) == runs.parents[nested_ns]
    assert "task-outer" == runs.task[nested_ns]
    assert grandchild
    assert all(checkpoint.id in "".join(runs.text[nested_ns]) for checkpoint in grandchild)


class _CountingReads(InMemoryCheckpointer):
    """Counts what the page reads of child threads: their listings, and the stored-children reads."""

    def __init__(self) -> None:
        super().__init__()
        self.child_lists = 0
        self.child_listings = 0

    def list(self, thread_id: str, **options: Any) -> builtins.list[Checkpoint]:
        self.child_lists += is_child_thread(thread_id)
        return super().list(thread_id, **options)

    def _child_thread_ids(
        self, thread_id: str, plan_id: str | None = None, *, limit: int
    ) -> builtins.list[str]:
        self.child_listings += 1
        return super()._child_thread_ids(thread_id, plan_id, limit=limit)


def test_more_quiet_ctx_calls_than_a_page_reads_are_cut_with_a_note_and_bounded_reads() -> None:
    """CHILD_READS + 3 quiet calls: CHILD_READS shown in call order, the note, one stored read per child."""
    from ilmek.web.children import CHILD_READS

    checkpointer = _CountingReads()
    compiled = calling_quietly(CHILD_READS + 3)
    run(compiled, {}, thread_id="order-7", checkpointer=checkpointer)
    checkpointer.child_lists = checkpointer.child_listings = 0

    page = planning_page(checkpointer, compiled, "work")

    shown = [int(ns.split("#")[1].split(":")[0]) for ns in runs_of(page).parents]
    assert CHILD_READS == len(shown)
    assert sorted(shown) == shown  # in the order they ran: sum#9 before sum#11
    assert f"the first {CHILD_READS} are shown" in page
    assert CHILD_READS == checkpointer.child_lists
    assert CHILD_READS + 1 == checkpointer.child_listings  # the root's plan, then each child once
