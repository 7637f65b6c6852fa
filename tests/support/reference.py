"""What the reference suites build again and again: graph shapes, counted effects.

The TypeScript and .NET suites build the same scenario graphs; each is built
once here and named after the reference graph it is.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from ilmek import (
    END,
    START,
    Checkpointer,
    CompiledGraph,
    GraphBuilder,
    RetryPolicy,
    channel,
    command,
    graph,
    send,
)
from tests.support.helpers import Calls

T = TypeVar("T")

SUPPORT_SPEC: dict[str, Any] = {
    "name": "support",
    "channels": {
        "messages": {"reducer": "append"},
        "intent": {"reducer": "last_write"},
    },
    "nodes": [
        {"id": "classify", "type": "set_intent", "config": {"intent": "buy"}},
        {"id": "buy", "type": "say", "config": {"text": "bought"}},
        {"id": "browse", "type": "say", "config": {"text": "browsed"}},
    ],
    "edges": [
        {"from": "__start__", "to": "classify"},
        {"from": "classify", "to": "buy", "when": {"channel": "intent", "eq": "buy"}},
        {"from": "classify", "to": "browse", "when": {"channel": "intent", "neq": "buy"}},
        {"from": "buy", "to": "__end__"},
        {"from": "browse", "to": "__end__"},
    ],
}
"""spec.test.ts's DOC, exactly as a TypeScript or .NET builder writes it: "exactly the kind of
document a drag-and-drop builder would store in a row". Never edit it: copy it first."""

SUPPORT_REGISTRY: dict[str, Any] = {
    "set_intent": lambda config: lambda state: {"intent": config["intent"]},
    "say": lambda config: lambda state: {"messages": [config["text"]]},
}
"""The node types ``SUPPORT_SPEC`` names, as spec.test.ts registers them."""


def dotnet_opts(checkpointer: Checkpointer, thread_id: str, **more: Any) -> dict[str, Any]:
    """The .NET suite's ``Opts(cp, threadId)``: a run's thread and checkpointer, and ``more``."""
    return {"thread_id": thread_id, "checkpointer": checkpointer, **more}


def linear(name: str, fn: Callable[..., Any]) -> CompiledGraph:
    """START -> work -> END, with an append channel ``log`` and a list channel ``items``.

    The reference's ``linear`` helper (TypeScript and .NET suites alike).
    """
    return (
        graph(name)
        .channel("log", channel.append())
        .channel("items", channel.last_write([]))
        .node("work", fn)
        .edge(START, "work")
        .edge("work", END)
        .compile()
    )


def pausing(name: str) -> CompiledGraph:
    """A linear graph whose node asks ``{"q": "?"}`` once, then logs ``done``."""

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.interrupt({"q": "?"})
        return {"log": ["done"]}

    return linear(name, work)


def compile_allowing_a_warning(builder: GraphBuilder) -> CompiledGraph:
    """Compile a graph whose node is reached only by ``command(goto=...)``.

    The reference compiles it silently; SPEC §3 allows a warning naming the
    fix, never an error. The warning is let through (not required).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return builder.compile()


def counted(calls: Calls, name: str, value: T) -> Callable[[], T]:
    """A step function that counts its call under ``name`` and returns ``value``."""

    def effect() -> T:
        calls.hit(name)
        return value

    return effect


# --- the graphs both reference suites build -------------------------------------------------


def checkout(calls: Calls) -> CompiledGraph:
    """Graph "checkout" (§12.1): ``create_order``, a pause "Charge order?", then ``charge``; both counted."""

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        order = ctx.step("create_order", counted(calls, "create_order", "order-1"))
        answer = ctx.interrupt({"question": "Charge order?"})
        charged = ctx.step("charge", counted(calls, "charge", f"charged-{order}"))
        return {"log": [f"{order}/{answer}/{charged}"]}

    return linear("checkout", work)


def two_interrupts() -> CompiledGraph:
    """Graph "double" (§12.2): one node asks ``first`` then ``second`` and logs ``first+second``."""

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        first = ctx.interrupt({"q": "first"})
        second = ctx.interrupt({"q": "second"})
        return {"log": [f"{first}+{second}"]}

    return linear("double", work)


def approve_each_item(calls: Calls) -> CompiledGraph:
    """Graph "loop" (§12.3): per item a counted ``prepare:<item>`` step, then a pause ``approve:<item>``."""

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        approvals = []
        for item in state["items"]:
            ctx.step(f"prepare:{item}", counted(calls, item, f"prep-{item}"))
            approvals.append(ctx.interrupt({"q": f"approve {item}"}, f"approve:{item}"))
        return {"log": approvals}

    return linear("loop", work)


def race() -> CompiledGraph:
    """Graph "race" (§12.4): ``declaredFirst`` ends last, ``declaredSecond`` first; both set ``winner``."""

    def declared_first(state: Any) -> dict[str, Any]:
        time.sleep(0.06)
        return {"winner": "declaredFirst"}

    return (
        graph("race")
        .channel("winner", channel.last_write())
        .node("declaredFirst", declared_first)
        .node("declaredSecond", lambda state: {"winner": "declaredSecond"})
        .edge(START, "declaredFirst")
        .edge(START, "declaredSecond")
        .edge("declaredFirst", END)
        .edge("declaredSecond", END)
        .compile()
    )


def crashes_once_after_a_step(calls: Calls) -> CompiledGraph:
    """Graph "flaky" (§12.5): ``work`` journals ``expensive``, then fails on its first pass only."""

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.step("expensive", counted(calls, "expensive", "computed"))
        if not calls["failed"]:
            calls.hit("failed")
            raise RuntimeError("transient boom")
        return {"log": ["survived"]}

    return linear("flaky", work)


def wobbly(take_branch: list[bool]) -> CompiledGraph:
    """Graph "wobbly" (§12.7): ``work`` journals ``sometimes`` only while ``take_branch[0]``, then pauses."""

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        if take_branch[0]:
            ctx.step("sometimes", lambda: "did_it")
        ctx.interrupt({"q": "ok?"})
        return {"log": ["end"]}

    return linear("wobbly", work)


def map_reduce(seen: list[int], fan_in: str) -> CompiledGraph:
    """Graph "mapreduce" (§12.9): ``map`` sends each item to ``worker``, which fan back in at ``fan_in``.

    Each worker records its ``n`` in ``seen`` and appends ``n * 10`` to ``results``.
    """

    def worker(state: Any) -> dict[str, Any]:
        seen.append(state["n"])
        return {"results": [state["n"] * 10]}

    return (
        graph("mapreduce")
        .channel("items", channel.last_write([]))
        .channel("results", channel.append())
        .node("map", lambda state: None)
        .node("worker", worker)
        .node(fan_in, lambda state: None)
        .edge(START, "map")
        .router("map", lambda state: [send("worker", {"n": n}) for n in state["items"]])
        .edge("worker", fan_in)
        .edge(fan_in, END)
        .compile()
    )


def two_pauses() -> CompiledGraph:
    """Graph "fanout" (§12.8): ``a`` and ``b`` pause in one superstep and log their answers."""
    return (
        graph("fanout")
        .channel("log", channel.append())
        .node("a", lambda state, ctx: {"log": [ctx.interrupt({"q": "a?"})]})
        .node("b", lambda state, ctx: {"log": [ctx.interrupt({"q": "b?"})]})
        .edge(START, "a")
        .edge(START, "b")
        .edge("a", END)
        .edge("b", END)
        .compile()
    )


def send_pauses() -> CompiledGraph:
    """Graph "fanout-hitl": ``map`` sends ids ``a`` and ``b`` to ``worker``, which pauses, then logs."""

    def worker(state: Any, ctx: Any) -> dict[str, Any]:
        ok = ctx.interrupt({"q": f"approve {state['id']}?"})
        return {"out": [f"{state['id']}:{ok}"]}

    return (
        graph("fanout-hitl")
        .channel("out", channel.append())
        .node("map", lambda state: None)
        .node("worker", worker)
        .edge(START, "map")
        .router("map", lambda state: [send("worker", {"id": "a"}), send("worker", {"id": "b"})])
        .edge("worker", END)
        .compile()
    )


def goto_over_a_static_edge() -> GraphBuilder:
    """Graph "router-node" (§12.10): ``classify`` sets ``intent`` and goes to ``buy``, not ``browse``.

    Returned uncompiled: ``buy`` is reached only by the goto.
    """
    return (
        graph("router-node")
        .channel("log", channel.append())
        .channel("intent", channel.last_write(""))
        .node("classify", lambda state: command(update={"intent": "buy", "log": ["classified"]}, goto="buy"))
        .node("buy", lambda state: {"log": ["bought"]})
        .node("browse", lambda state: {"log": ["browsed"]})
        .edge(START, "classify")
        .edge("classify", "browse")
        .edge("buy", END)
        .edge("browse", END)
    )


def command_without_goto() -> CompiledGraph:
    """Graph "cmd-fallback": ``a`` returns a command with no goto; its static edge leads to ``b``."""
    return (
        graph("cmd-fallback")
        .channel("log", channel.append())
        .node("a", lambda state: command(update={"log": ["a"]}))
        .node("b", lambda state: {"log": ["b"]})
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
    )


def goto_sends() -> GraphBuilder:
    """Graph "cmd-send": ``plan``'s goto sends ``n`` 1 and 2 to ``worker``, which logs them to ``out``.

    Returned uncompiled: ``worker`` is reached only by the goto's sends.
    """
    return (
        graph("cmd-send")
        .channel("out", channel.append())
        .node("plan", lambda state: command(goto=[send("worker", {"n": 1}), send("worker", {"n": 2})]))
        .node("worker", lambda state: {"out": [state["n"]]})
        .edge(START, "plan")
        .edge("worker", END)
    )


def charge_then_flaky_api(calls: Calls) -> CompiledGraph:
    """Graph "resilient" (§12.11): a journaled ``charge``, then ``call_api`` failing twice; 3 attempts."""

    def call_api() -> str:
        calls.hit("call_api")
        if calls["call_api"] < 3:
            raise RuntimeError(f"transient {calls['call_api']}")
        return "ok"

    def charge_then_call(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.step("charge", counted(calls, "charge", "charged"))
        ctx.step("call_api", call_api)
        return {"log": ["done"]}

    return (
        graph("resilient")
        .channel("log", channel.append())
        .node("charge_then_call", charge_then_call, retry=RetryPolicy(max_attempts=3, backoff=0))
        .edge(START, "charge_then_call")
        .edge("charge_then_call", END)
        .compile()
    )


def fails_twice() -> CompiledGraph:
    """Graph "retry-events": ``flaky`` fails on its first two attempts of five."""
    attempts = Calls()

    def flaky(state: Any) -> dict[str, Any]:
        attempts.hit("flaky")
        if attempts["flaky"] < 3:
            raise RuntimeError(f"boom {attempts['flaky']}")
        return {"log": ["ok"]}

    return (
        graph("retry-events")
        .channel("log", channel.append())
        .node("flaky", flaky, retry=RetryPolicy(max_attempts=5, backoff=0))
        .edge(START, "flaky")
        .edge("flaky", END)
        .compile()
    )


def asks_under_retry(calls: Calls) -> CompiledGraph:
    """Graph "interrupt-not-error": ``asks`` (3 attempts) counts each attempt, then pauses."""

    def asks(state: Any, ctx: Any) -> dict[str, Any]:
        calls.hit("asks")
        ctx.interrupt({"q": "?"})
        return {"log": ["resumed"]}

    return (
        graph("interrupt-not-error")
        .channel("log", channel.append())
        .node("asks", asks, retry=RetryPolicy(max_attempts=3, backoff=0))
        .edge(START, "asks")
        .edge("asks", END)
        .compile()
    )
