"""Helpers the reference suites use again and again: graph shapes, counted effects."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from ilmek import END, START, CompiledGraph, GraphBuilder, channel, graph
from tests.helpers import Calls

T = TypeVar("T")


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
