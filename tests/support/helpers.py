"""Small helpers shared by the test modules."""

from __future__ import annotations

import threading
from collections import Counter

from ilmek import END, START, channel, graph
from ilmek.graph import CompiledGraph


class Calls(Counter[str]):
    """Counts calls by name, thread-safely: what a journaled step really ran."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def hit(self, name: str) -> None:
        with self._lock:
            self[name] += 1


def reply_chat(name: str) -> CompiledGraph:
    """``log`` (append) and one node that replies to its last entry: a turn is one superstep."""
    return (
        graph(name, {"log": channel.append()})
        .node("reply", lambda state: {"log": [f"reply to {state['log'][-1]}"]})
        .edge(START, "reply")
        .edge("reply", END)
        .compile()
    )


def one_node_graph() -> CompiledGraph:
    """``n`` (last write, 0) and one node that sets it to 1: the smallest run that writes a checkpoint."""
    return (
        graph("one", {"n": channel.last_write(0)})
        .node("n", lambda state: {"n": 1})
        .edge(START, "n")
        .compile()
    )
