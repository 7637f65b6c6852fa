"""The port suite, limits every backend can store: keys of steps and interrupts, and names of channels,
checked before anything runs or is written, with the limit in the error.

A step's record is indexed by thread, checkpoint, task and key together; Postgres refuses an index entry
over 2,704 bytes, and a key it refuses after the step's function ran would make every retry pay again.
"""

from __future__ import annotations

from typing import Any

import pytest

from ilmek import START, Checkpointer, GraphError, InvalidArgumentError, channel, graph, run
from ilmek.checks import MAX_KEY_BYTES, MAX_NAME_BYTES
from ilmek.types import new_checkpoint_id
from tests.support.helpers import Calls
from tests.support.port import make_checkpoint

pytestmark = pytest.mark.timeout(60)


def keyed_step(calls: Calls, key: str) -> Any:
    def pay(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"receipt": ctx.step(key, calls.hit, "charge")}

    return graph("pay", {"receipt": channel.last_write()}).node("pay", pay).edge(START, "pay").compile()


def test_a_step_key_over_the_limit_is_refused_before_its_function_runs(checkpointer: Checkpointer) -> None:
    """A 10,000-character step key: the node fails with an error that names the limit, and the step's
    function never ran (so a retry has nothing to pay twice)."""
    calls = Calls()
    result = run(keyed_step(calls, "k" * 10_000), {}, thread_id="long-key", checkpointer=checkpointer)
    assert "error" == result.status
    [(node, error)] = result.errors
    assert "pay" == node
    assert isinstance(error, InvalidArgumentError)
    assert f"at most {MAX_KEY_BYTES} bytes" in str(error)
    assert {} == dict(calls)


def test_keys_at_the_limit_are_stored_on_every_backend_even_with_the_longest_thread_id(
    checkpointer: Checkpointer,
) -> None:
    """A key of exactly the limit as stored, non-ASCII characters and a NUL included, on a thread whose id
    is 1 KiB: the step is recorded and replays."""
    calls = Calls()
    key = "é\x00" + "k" * (MAX_KEY_BYTES - 2 - 12)  # quoted; "é" and NUL are six bytes each, escaped
    thread_id = "t" * 1024
    g = keyed_step(calls, key)
    assert "done" == run(g, {}, thread_id=thread_id, checkpointer=checkpointer).status
    assert {"charge": 1} == dict(calls)


def test_an_interrupt_key_over_the_limit_is_refused_like_a_step_key(checkpointer: Checkpointer) -> None:
    """An interrupt key over the limit fails the node with the same error, before the pause is recorded."""

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"receipt": ctx.interrupt("ok?", key="q" * (MAX_KEY_BYTES + 1))}

    g = graph("ask", {"receipt": channel.last_write()}).node("ask", ask).edge(START, "ask").compile()
    result = run(g, {}, thread_id="long-pause", checkpointer=checkpointer)
    assert "error" == result.status
    assert isinstance(result.errors[0][1], InvalidArgumentError)
    assert "interrupt key" in str(result.errors[0][1])


@pytest.mark.parametrize("name", ["a\0b", "lone \ud800"], ids=["nul", "surrogate"])
def test_a_channel_name_no_database_can_store_is_refused_by_put_writing_nothing(
    checkpointer: Checkpointer, name: str
) -> None:
    """``put`` of a checkpoint whose channel name holds NUL or a lone surrogate: an InvalidArgumentError on
    every backend (Postgres used to raise its driver's raw ValueError), and nothing is written."""
    checkpoint = make_checkpoint("bad-channel", new_checkpoint_id(), **{name: 1})
    with pytest.raises(InvalidArgumentError, match="a channel name"):
        checkpointer.put("bad-channel", checkpoint)
    assert checkpointer.get("bad-channel") is None


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("n" * (MAX_NAME_BYTES + 1), f"longer than {MAX_NAME_BYTES} bytes"),
        ("a\0b", "NUL"),
        ("x\ud800", "surrogate"),
    ],
    ids=["long", "nul", "surrogate"],
)
def test_a_node_or_channel_name_no_backend_can_store_is_refused_when_the_graph_is_built(
    name: str, said: str
) -> None:
    """Names are part of task ids and journal keys: over 128 bytes, or with NUL or a lone surrogate, a node
    is refused at compile and a channel when declared, with the reason, before anything runs or is stored."""
    with pytest.raises(GraphError, match=said):
        graph("names", {"n": channel.last_write(0)}).node(name, lambda state: {}).edge(START, name).compile()
    with pytest.raises(GraphError, match=said):
        graph("names", {name: channel.last_write(0)})


def test_names_at_the_limit_run_and_are_stored_on_every_backend(checkpointer: Checkpointer) -> None:
    """A node and a channel named with 128 bytes of multibyte text, on the longest thread id, run and read."""
    name = "é" * (MAX_NAME_BYTES // 2)
    thread = "t" * 1024
    g = (
        graph("names", {name: channel.append()})
        .node(name, lambda state: {name: ["ok"]})
        .edge(START, name)
        .compile()
    )
    result = run(g, {}, thread_id=thread, checkpointer=checkpointer)
    assert ("done", {name: ["ok"]}) == (result.status, result.state)
    assert ["ok"] == list(checkpointer.read_channel(thread, name))
