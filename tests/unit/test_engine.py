"""The engine on every backend: the ilmek/1 conformance scenarios and what we add.

Each scenario counts calls to the functions its nodes journal, so "ran
once" is checked, not assumed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    ConcurrentUpdateError,
    GraphError,
    NondeterminismError,
    RecursionLimitError,
    ResumeError,
    RetryPolicy,
    ThreadBusyError,
    channel,
    command,
    graph,
    history,
    pending_interrupts,
    resume,
    resume_keyed,
    run,
    send,
    stream,
    thread_state,
)
from tests.support.helpers import Calls

pytestmark = pytest.mark.timeout(60)


def checkout_graph(calls: Calls, charges: list[Any]) -> Any:
    def create_order(cart: list[str]) -> dict[str, Any]:
        calls.hit("create_order")
        return {"id": 7, "total": 249.9, "items": cart}

    def charge(order: dict[str, Any], ok: Any) -> str:
        calls.hit("charge")
        charges.append(ok)
        return "charged" if ok == "yes" else "cancelled"

    def checkout(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        order = ctx.step("create_order", create_order, state["cart"])
        ok = ctx.interrupt({"question": f"Charge {order['total']}?"})
        outcome = ctx.step("charge", charge, order, ok)
        return {"log": [outcome]}

    return (
        graph("checkout", {"cart": channel.last_write([]), "log": channel.append()})
        .node("checkout", checkout)
        .edge(START, "checkout")
        .edge("checkout", END)
        .compile()
    )


def test_checkout_flow_pauses_and_resumes_with_each_step_once(
    checkpointer: Checkpointer,
) -> None:
    """The spec's checkout: the pause asks the question; resume charges once, creates once."""
    calls, charges = Calls(), []
    g = checkout_graph(calls, charges)
    first = run(g, {"cart": ["coffee", "mug"]}, thread_id="conv-42", checkpointer=checkpointer)
    assert "interrupted" == first.status
    assert 1 == len(first.pending)
    pause = first.pending[0]
    assert ("checkout:interrupt#0", "checkout", "interrupt#0") == (
        pause.id,
        pause.node,
        pause.key,
    )
    assert {"question": "Charge 249.9?"} == pause.payload
    assert pause.task_id.startswith("conv-42:")
    second = resume(g, "yes", thread_id="conv-42", checkpointer=checkpointer)
    assert "done" == second.status
    assert {"cart": ["coffee", "mug"], "log": ["charged"]} == second.state
    assert {"create_order": 1, "charge": 1} == dict(calls)
    assert ["yes"] == charges


def test_fork_from_the_pause_keeps_paid_steps_and_both_branches(
    checkpointer: Checkpointer,
) -> None:
    """Answering the old pause differently forks: create_order is not re-run, charge runs with 'no'."""
    calls, charges = Calls(), []
    g = checkout_graph(calls, charges)
    paused = run(g, {"cart": ["tea"]}, thread_id="t", checkpointer=checkpointer)
    done = resume(g, "yes", thread_id="t", checkpointer=checkpointer)
    fork = resume(
        g,
        "no",
        thread_id="t",
        checkpointer=checkpointer,
        checkpoint_id=paused.checkpoint_id,
    )
    assert "done" == fork.status
    assert {"create_order": 1, "charge": 2} == dict(calls)
    assert ["yes", "no"] == charges
    assert {"cart": ["tea"], "log": ["cancelled"]} == fork.state
    yes_branch = checkpointer.get("t", done.checkpoint_id)
    no_branch = checkpointer.get("t", fork.checkpoint_id)
    assert yes_branch is not None
    assert no_branch is not None
    assert ["charged"] == yes_branch.channels["log"]
    assert ["cancelled"] == no_branch.channels["log"]
    assert paused.checkpoint_id == yes_branch.parent_id
    # The new branch starts with a copy of the pause, so its answer is its own.
    fork_point = checkpointer.get("t", no_branch.parent_id)
    assert fork_point is not None
    assert (paused.checkpoint_id, "fork") == (fork_point.parent_id, fork_point.metadata["source"])
    assert fork.checkpoint_id == checkpointer.get("t").id
    assert fork.checkpoint_id > done.checkpoint_id


def test_two_interrupts_in_one_node_resolve_one_resume_each(
    checkpointer: Checkpointer,
) -> None:
    """Scenario 2: two pauses in one node, answered one by one, each step once."""
    calls = Calls()

    def node(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("before", calls.hit, "before")
        first = ctx.interrupt("Delete production?")
        ctx.step("between", calls.hit, "between")
        second = ctx.interrupt("Really sure?")
        ctx.step("after", calls.hit, "after")
        return {"answers": [first, second]}

    g = graph("two", {"answers": channel.append()}).node("ask", node).edge(START, "ask").compile()
    r1 = run(g, {}, thread_id="t2", checkpointer=checkpointer)
    assert ["ask:interrupt#0"] == [p.id for p in r1.pending]
    r2 = resume(g, "yes", thread_id="t2", checkpointer=checkpointer)
    assert ["ask:interrupt#1"] == [p.id for p in r2.pending]
    assert "Really sure?" == r2.pending[0].payload
    r3 = resume(g, "very", thread_id="t2", checkpointer=checkpointer)
    assert "done" == r3.status
    assert ["yes", "very"] == r3.state["answers"]
    assert {"before": 1, "between": 1, "after": 1} == dict(calls)


def test_interrupt_in_a_loop_with_stable_keys_resumes_at_the_right_item(
    checkpointer: Checkpointer,
) -> None:
    """Scenario 3: a pause per item, keyed by item; each item's effect happens once."""
    calls = Calls()

    def approve_all(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        approved = []
        for item in state["items"]:
            ctx.step(f"prepare:{item}", calls.hit, f"prepare:{item}")
            if ctx.interrupt({"approve": item}, key=f"approve:{item}") == "ok":
                approved.append(ctx.step(f"ship:{item}", lambda i=item: calls.hit(f"ship:{i}") or i))
        return {"shipped": approved}

    g = (
        graph("loop", {"items": channel.last_write([]), "shipped": channel.append()})
        .node("approve", approve_all)
        .edge(START, "approve")
        .compile()
    )
    result = run(g, {"items": ["a", "b", "c"]}, thread_id="loop", checkpointer=checkpointer)
    seen = []
    while result.status == "interrupted":
        (pause,) = result.pending
        seen.append(pause.id)
        answer = "no" if pause.payload == {"approve": "b"} else "ok"
        result = resume(g, answer, thread_id="loop", checkpointer=checkpointer)
    assert ["approve:approve:a#0", "approve:approve:b#0", "approve:approve:c#0"] == seen
    assert ["a", "c"] == result.state["shipped"]
    assert {
        "prepare:a": 1,
        "prepare:b": 1,
        "prepare:c": 1,
        "ship:a": 1,
        "ship:c": 1,
    } == dict(calls)


def test_reduce_follows_task_order_not_finishing_order(
    checkpointer: Checkpointer,
) -> None:
    """Scenario 4: the slow first-declared node's write still folds first."""
    fast_ran = threading.Event()

    def slow(state: dict[str, Any]) -> dict[str, Any]:
        # Finishes well after fast, however late a loaded machine starts fast's worker.
        assert fast_ran.wait(10)
        time.sleep(0.2)
        return {"log": ["slow"], "last": "slow"}

    def fast(state: dict[str, Any]) -> dict[str, Any]:
        fast_ran.set()
        return {"log": ["fast"], "last": "fast"}

    g = (
        graph("order", {"log": channel.append(), "last": channel.last_write()})
        .node("slow", slow)
        .node("fast", fast)
        .edge(START, "slow")
        .edge(START, "fast")
        .compile()
    )
    result = run(g, {}, thread_id="order", checkpointer=checkpointer)
    assert {"log": ["slow", "fast"], "last": "fast"} == result.state
    ends = [e.node for e in result.events if e.type == "node_end"]
    assert ["fast", "slow"] == ends


def test_failure_mid_superstep_continues_with_zero_reexecuted_steps(
    checkpointer: Checkpointer,
) -> None:
    """Scenario 5: a failed superstep keeps its journals; run(None) replays them all."""
    calls = Calls()
    flaky = {"fail": True}

    def worker(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        a = ctx.step("a", lambda: calls.hit("a") or 1)
        b = ctx.step("b", lambda: calls.hit("b") or 2)
        return {"total": a + b}

    def breaker(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("x", lambda: calls.hit("x"))
        if flaky["fail"]:
            raise RuntimeError("the payment gateway timed out")
        return {"note": "ok"}

    g = (
        graph("crash", {"total": channel.last_write(0), "note": channel.last_write("")})
        .node("worker", worker)
        .node("breaker", breaker)
        .edge(START, "worker")
        .edge(START, "breaker")
        .compile()
    )
    failed = run(g, {}, thread_id="crash", checkpointer=checkpointer)
    assert "error" == failed.status
    ((node, error),) = failed.errors
    assert "breaker" == node
    assert "timed out" in str(error)
    latest = checkpointer.get("crash")
    assert latest is not None
    assert "unfinished" == latest.status
    assert {"total": 0, "note": ""} == thread_state(g, checkpointer, "crash")
    flaky["fail"] = False
    finished = run(g, None, thread_id="crash", checkpointer=checkpointer)
    assert "done" == finished.status
    assert {"total": 3, "note": "ok"} == finished.state
    assert {"a": 1, "b": 1, "x": 1} == dict(calls)


def test_raise_for_status_reraises_the_node_error_with_a_note(
    checkpointer: Checkpointer,
) -> None:
    """raise_for_status re-raises the first node error, noting graph, node and thread."""

    def boom(state: dict[str, Any]) -> None:
        raise KeyError("sku-9")

    g = graph("shop", {"x": channel.last_write()}).node("boom", boom).edge(START, "boom").compile()
    result = run(g, {}, thread_id="notes", checkpointer=checkpointer)
    with pytest.raises(KeyError) as caught:
        result.raise_for_status()
    assert "raised by node 'boom' of graph 'shop', thread 'notes'" in caught.value.__notes__
    fine = graph("ok", {"x": channel.last_write()}).node("n", lambda s: None).edge(START, "n").compile()
    done = run(fine, {}, thread_id="fine", checkpointer=checkpointer)
    assert done is done.raise_for_status()


def test_strict_mode_names_the_vanished_key(checkpointer: Checkpointer) -> None:
    """Scenario 7: a replay that skips a recorded step raises NondeterminismError naming it."""
    mode = {"first": True}

    def node(state: dict[str, Any], ctx: Any) -> None:
        if mode["first"]:
            ctx.step("charge-card", lambda: "charged")
            raise RuntimeError("crash after charging")
        ctx.step("send-email", lambda: "sent")

    g = graph("strict", {"x": channel.last_write()}).node("n", node).edge(START, "n").compile()
    run(g, {}, thread_id="s", checkpointer=checkpointer)
    mode["first"] = False
    result = run(g, None, thread_id="s", checkpointer=checkpointer)
    assert "error" == result.status
    ((_, error),) = result.errors
    assert isinstance(error, NondeterminismError)
    assert "charge-card#0" == error.key
    assert "'charge-card#0'" in str(error)
    assert "thread 's'" in str(error)
    lenient = run(g, None, thread_id="s", checkpointer=checkpointer, strict=False)
    assert "done" == lenient.status


def test_concurrent_pauses_get_their_own_answers_and_bare_answer_is_refused(
    checkpointer: Checkpointer,
) -> None:
    """Scenario 8: two nodes pausing at once are answered by id; a bare answer is refused."""

    def asker(name: str) -> Any:
        def node(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
            return {"answers": {name: ctx.interrupt(f"{name}?")}}

        return node

    g = (
        graph("pair", {"answers": channel.merge()})
        .node("left", asker("left"))
        .node("right", asker("right"))
        .edge(START, "left")
        .edge(START, "right")
        .compile()
    )
    paused = run(g, {}, thread_id="pair", checkpointer=checkpointer)
    assert ["left:interrupt#0", "right:interrupt#0"] == [p.id for p in paused.pending]
    with pytest.raises(ResumeError) as bare:
        resume(g, {"approved": True}, thread_id="pair", checkpointer=checkpointer)
    assert "2 interrupts are pending" in str(bare.value)
    assert "resume_keyed" in str(bare.value)
    with pytest.raises(ResumeError) as partial:
        resume_keyed(g, {"left:interrupt#0": "L"}, thread_id="pair", checkpointer=checkpointer)
    assert "'right:interrupt#0'" in str(partial.value)
    assert 2 == len(pending_interrupts(checkpointer, "pair"))
    done = resume_keyed(
        g,
        {
            "left:interrupt#0": "L",
            "right:interrupt#0": "R",
            "stale:interrupt#0": "ignored",
        },
        thread_id="pair",
        checkpointer=checkpointer,
    )
    assert {"answers": {"left": "L", "right": "R"}} == done.state


def test_retry_reruns_the_body_but_not_its_completed_steps(
    checkpointer: Checkpointer,
) -> None:
    """Scenario 11: a node that fails twice is retried; its charge step ran once."""
    calls = Calls()

    def pay(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        receipt = ctx.step("charge", lambda: calls.hit("charge") or "r-1")
        calls.hit("attempt")
        if calls["attempt"] < 3:
            raise ConnectionError("flaky receipt mailer")
        return {"receipt": receipt}

    g = (
        graph("retry", {"receipt": channel.last_write()})
        .node("pay", pay, retry=RetryPolicy(max_attempts=3, backoff=0.01))
        .edge(START, "pay")
        .compile()
    )
    result = run(g, {}, thread_id="r", checkpointer=checkpointer)
    assert "done" == result.status
    assert "r-1" == result.state["receipt"]
    assert {"charge": 1, "attempt": 3} == dict(calls)
    retries = [(e.attempt, str(e.error)) for e in result.events if e.type == "node_retry"]
    # As in the reference, a node_retry numbers the attempt about to run.
    assert [(2, "flaky receipt mailer"), (3, "flaky receipt mailer")] == retries


def test_retry_on_can_veto_and_attempts_run_out(checkpointer: Checkpointer) -> None:
    """retry_on=False fails at once; exhausted attempts end the run with the last error."""
    calls = Calls()

    def fail(state: dict[str, Any]) -> None:
        calls.hit("fail")
        raise ValueError(f"bad input #{calls['fail']}")

    vetoed = (
        graph("veto", {"x": channel.last_write()})
        .node(
            "fail",
            fail,
            retry=RetryPolicy(max_attempts=5, backoff=0, retry_on=lambda e: False),
        )
        .edge(START, "fail")
        .compile()
    )
    assert "error" == run(vetoed, {}, thread_id="v", checkpointer=checkpointer).status
    assert 1 == calls["fail"]
    exhausted = (
        graph("out", {"x": channel.last_write()})
        .node("fail", fail, retry=RetryPolicy(max_attempts=2, backoff=0))
        .edge(START, "fail")
        .compile()
    )
    result = run(exhausted, {}, thread_id="o", checkpointer=checkpointer)
    assert "bad input #3" == str(result.errors[0][1])


def test_racing_resumes_of_one_paused_thread_charge_once(reopen: Any) -> None:
    """Two threads resume one pause at once: one completes, the other is refused; one charge."""
    calls, charges = Calls(), []
    g = checkout_graph(calls, charges)
    checkpointer = reopen()
    run(g, {"cart": ["lamp"]}, thread_id="race", checkpointer=checkpointer)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []
    lock = threading.Lock()

    def approve() -> None:
        mine = reopen()
        barrier.wait()
        try:
            outcome = resume(g, "yes", thread_id="race", checkpointer=mine).status
        except (ThreadBusyError, ResumeError, ConcurrentUpdateError) as error:
            outcome = type(error).__name__
        with lock:
            outcomes.append(outcome)

    workers = [threading.Thread(target=approve) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert 1 == outcomes.count("done"), outcomes
    assert {"create_order": 1, "charge": 1} == dict(calls)


def test_a_run_holds_its_thread_against_a_second_run(
    checkpointer: Checkpointer,
) -> None:
    """While a node runs, another run of the thread gets ThreadBusyError and writes nothing."""
    inside, release = threading.Event(), threading.Event()

    def slow(state: dict[str, Any]) -> dict[str, Any]:
        inside.set()
        release.wait(10)
        return {"n": 1}

    g = graph("hold", {"n": channel.last_write(0)}).node("slow", slow).edge(START, "slow").compile()
    first: list[Any] = []
    worker = threading.Thread(
        target=lambda: first.append(run(g, {}, thread_id="h", checkpointer=checkpointer))
    )
    worker.start()
    assert inside.wait(10)
    before = [c.id for c in checkpointer.list("h")]
    with pytest.raises(ThreadBusyError) as busy:
        run(g, {"n": 5}, thread_id="h", checkpointer=checkpointer)
    assert "thread 'h'" in str(busy.value)
    assert "try again" in str(busy.value)
    assert before == [c.id for c in checkpointer.list("h")]
    release.set()
    worker.join()
    assert "done" == first[0].status
    assert "done" == run(g, {"n": 5}, thread_id="h", checkpointer=checkpointer).status


def test_input_is_committed_before_any_node_runs(checkpointer: Checkpointer) -> None:
    """The first checkpoint holds the folded input; a node can already see it stored."""
    seen: list[Any] = []

    def node(state: dict[str, Any], ctx: Any) -> None:
        seen.append(dict(checkpointer.get(ctx.thread_id).channels))

    g = graph("durable", {"msgs": channel.append()}).node("n", node).edge(START, "n").compile()
    run(g, {"msgs": "hello"}, thread_id="d", checkpointer=checkpointer)
    assert [{"msgs": ["hello"]}] == seen
    oldest = checkpointer.list("d")[-1]
    assert "input" == oldest.metadata["source"]
    assert oldest.parent_id is None


def test_new_input_on_an_unfinished_thread_continues_its_plan_replaying_its_steps(
    checkpointer: Checkpointer,
) -> None:
    """Input on a thread a node error left unfinished continues that plan: the paid step is not re-run."""
    calls = Calls()
    fail = {"on": True}

    def node(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("effect", calls.hit, "effect")
        if fail["on"]:
            raise RuntimeError("down")
        return {"seen": state["msgs"]}

    g = (
        graph("replan", {"msgs": channel.append(), "seen": channel.last_write()})
        .node("n", node)
        .edge(START, "n")
        .compile()
    )
    run(g, {"msgs": "a"}, thread_id="rp", checkpointer=checkpointer)
    fail["on"] = False
    result = run(g, {"msgs": "b"}, thread_id="rp", checkpointer=checkpointer)
    assert ["a", "b"] == result.state["seen"]
    assert 1 == calls["effect"]


def test_a_conversation_of_many_turns_is_not_limited_by_recursion_limit(
    checkpointer: Checkpointer,
) -> None:
    """The recursion limit counts a run's own supersteps, not the thread's."""
    g = (
        graph("chat", {"msgs": channel.append()})
        .node("echo", lambda s: {"msgs": f"echo {len(s['msgs'])}"})
        .edge(START, "echo")
        .compile()
    )
    for turn in range(30):
        result = run(
            g,
            {"msgs": f"turn {turn}"},
            thread_id="chat",
            checkpointer=checkpointer,
            recursion_limit=2,
        )
        assert "done" == result.status
    assert 60 == len(result.state["msgs"])


def test_recursion_limit_raises_and_the_last_checkpoint_stands(
    checkpointer: Checkpointer,
) -> None:
    """A looping graph stops at the limit; run(None) continues from the last checkpoint."""

    def tick(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"n": state["n"] + 1, "left": ctx.remaining_steps}

    g = (
        graph("loop", {"n": channel.last_write(0), "left": channel.last_write()})
        .node("tick", tick)
        .edge(START, "tick")
        .edge("tick", "tick", when=lambda s: s["n"] < 7)
        .compile()
    )
    with pytest.raises(RecursionLimitError) as caught:
        run(g, {}, thread_id="rl", checkpointer=checkpointer, recursion_limit=4)
    assert 4 == caught.value.limit
    assert "thread 'rl'" in str(caught.value)
    assert "run(g, None" in str(caught.value)
    # remaining_steps counts the superstep running: 4, 3, 2, 1 (as the reference does).
    assert {"n": 4, "left": 1} == thread_state(g, checkpointer, "rl")
    result = run(g, None, thread_id="rl", checkpointer=checkpointer, recursion_limit=4)
    assert {"n": 7, "left": 2} == result.state


def test_cancel_ends_at_the_next_boundary_and_the_thread_continues(
    checkpointer: Checkpointer,
) -> None:
    """A set cancel event aborts at the next superstep boundary; run(None) finishes later."""
    cancel = threading.Event()
    seen_cancel: list[Any] = []

    def tick(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        seen_cancel.append(ctx.cancel)
        if state["n"] == 2:
            cancel.set()
        return {"n": state["n"] + 1}

    g = (
        graph("cancel", {"n": channel.last_write(0)})
        .node("tick", tick)
        .edge(START, "tick")
        .edge("tick", "tick", when=lambda s: s["n"] < 6)
        .compile()
    )
    aborted = run(g, {}, thread_id="c", checkpointer=checkpointer, cancel=cancel)
    assert "aborted" == aborted.status
    assert aborted.abort_reason
    assert aborted.state is None  # as in the reference: state is the result of a finished run
    assert {"n": 3} == thread_state(g, checkpointer, "c")
    assert [cancel] * 3 == seen_cancel
    finished = run(g, None, thread_id="c", checkpointer=checkpointer)
    assert {"n": 6} == finished.state


def test_events_come_in_order_with_gapless_seq(checkpointer: Checkpointer) -> None:
    """Every event carries the run's ids and seq 1..n in the documented order."""

    def node(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.emit({"progress": 1})
        return {"x": 1}

    g = graph("ev", {"x": channel.last_write()}).node("n", node).edge(START, "n").compile()
    events = list(stream(g, {"x": 0}, thread_id="ev", checkpointer=checkpointer))
    assert list(range(1, len(events) + 1)) == [e.seq for e in events]
    assert {"ev"} == {e.thread_id for e in events}
    assert 1 == len({e.run_id for e in events})
    assert [
        "run_start",
        "state",
        "checkpoint",
        "step_start",
        "node_start",
        "custom",
        "node_end",
        "state",
        "checkpoint",
        "run_end",
    ] == [e.type for e in events]
    assert all(() == e.ns for e in events)


def test_history_lists_every_checkpoint_newest_first(
    checkpointer: Checkpointer,
) -> None:
    """history() lists the input, pause and loop checkpoints, newest first, lazily."""
    g = checkout_graph(Calls(), [])
    run(g, {"cart": ["x"]}, thread_id="hist", checkpointer=checkpointer)
    resume(g, "yes", thread_id="hist", checkpointer=checkpointer)
    records = history(checkpointer, "hist")
    assert ["loop", "pause", "input"] == [c.metadata["source"] for c in records]
    assert sorted((c.id for c in records), reverse=True) == [c.id for c in records]
    assert ["charged"] == records[0].channels["log"]
    assert 2 == len(history(checkpointer, "hist", limit=2))


def test_a_step_and_an_interrupt_sharing_a_key_is_nondeterminism(checkpointer: Checkpointer) -> None:
    """On replay, asking for a step where the journal holds an interrupt of that key is refused."""
    phase = {"ask": True}

    def node(state: dict[str, Any], ctx: Any) -> None:
        if phase["ask"]:
            ctx.interrupt("ok?", key="check")
        else:
            ctx.step("check", lambda: "value")

    g = graph("kinds", {"x": channel.last_write()}).node("n", node).edge(START, "n").compile()
    run(g, {}, thread_id="kinds", checkpointer=checkpointer)
    phase["ask"] = False
    result = resume(g, "yes", thread_id="kinds", checkpointer=checkpointer)
    ((_, error),) = result.errors
    assert isinstance(error, NondeterminismError)
    assert "check#0" == error.key
    assert "the journal holds an interrupt under that key" in str(error)


def test_resume_after_an_unfinished_resume_needs_the_same_answer(checkpointer: Checkpointer) -> None:
    """A resume whose superstep failed keeps its answer: the same answer replays, another is refused."""
    calls = Calls()
    fail = {"on": True}

    def node(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt("charge?")
        ctx.step("charge", calls.hit, f"charge:{answer}")
        if fail["on"]:
            raise RuntimeError("receipt printer jammed")
        return {"x": answer}

    g = graph("again", {"x": channel.last_write()}).node("n", node).edge(START, "n").compile()
    run(g, {}, thread_id="again", checkpointer=checkpointer)
    assert "error" == resume(g, "yes", thread_id="again", checkpointer=checkpointer).status
    with pytest.raises(ResumeError) as different:
        resume(g, "no", thread_id="again", checkpointer=checkpointer)
    assert "already answered with 'yes'" in str(different.value)
    fail["on"] = False
    done = resume(g, "yes", thread_id="again", checkpointer=checkpointer)
    assert {"x": "yes"} == done.state
    assert {"charge:yes": 1} == dict(calls)


def test_a_node_that_swallows_its_pause_fails_loudly(checkpointer: Checkpointer) -> None:
    """Catching BaseException around ctx.interrupt would lose the pause: the run ends in error instead."""

    def node(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        try:  # noqa: SIM105 - the mistake under test, written as users write it
            ctx.interrupt("approve?")
        except BaseException:
            pass
        return {"x": "went on"}

    g = graph("swallow", {"x": channel.last_write()}).node("n", node).edge(START, "n").compile()
    result = run(g, {}, thread_id="swallow", checkpointer=checkpointer)
    ((_, error),) = result.errors
    assert isinstance(error, NondeterminismError)
    assert "caught the InterruptSignal" in str(error)
    assert {} == thread_state(g, checkpointer, "swallow")


def test_steps_may_run_from_threads_the_node_starts(checkpointer: Checkpointer) -> None:
    """ctx.step is safe to call from several threads of one node; each key is recorded once."""
    from concurrent.futures import ThreadPoolExecutor

    calls = Calls()

    def fan(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        with ThreadPoolExecutor(4) as pool:
            results = list(
                pool.map(lambda i: ctx.step(f"fetch:{i}", lambda: calls.hit(f"f{i}") or i), range(8))
            )
        return {"x": sum(results)}

    g = graph("threads", {"x": channel.last_write()}).node("n", fan).edge(START, "n").compile()
    assert {"x": 28} == run(g, {}, thread_id="th", checkpointer=checkpointer).state
    assert 8 == len(calls)
    assert {1} == set(calls.values())


@pytest.mark.parametrize("name", ["step:two", "worker#1", "a:b#0"])
def test_node_names_with_colons_and_hashes_run_pause_and_resume(name: str, checkpointer: Any) -> None:
    """Names the reference accepts (``:`` and ``#`` delimit ilmek's task and pause ids): the node
    runs, pauses, and its pause is answered by id, on every backend."""
    calls = Calls()

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("charge", calls.hit, "charge")
        return {"log": [ctx.interrupt({"q": "ok?"}, key="ok:#")]}

    g = graph("names", {"log": channel.append()}).node(name, ask).edge(START, name).edge(name, END).compile()
    paused = run(g, {"log": ["go"]}, thread_id="t", checkpointer=checkpointer)
    assert "interrupted" == paused.status
    (pause,) = paused.pending
    assert name == pause.node
    done = resume_keyed(g, {pause.id: "yes"}, thread_id="t", checkpointer=checkpointer)

    assert "done" == done.status
    assert ["go", "yes"] == done.state["log"]
    assert {"charge": 1} == dict(calls)


def test_a_send_whose_task_would_share_a_planned_nodes_name_is_a_graph_error() -> None:
    """Node ``w#0`` planned in the superstep where the first send to ``w`` is made: the two tasks
    could not be told apart, so the plan fails naming the node to rename."""
    g = (
        graph("clash", {"log": channel.append()})
        .node("fan", lambda s: command(goto=["w#0", send("w", {"log": ["sent"]})]), destinations=["w#0", "w"])
        .node("w", lambda s: {"log": ["w"]})
        .node("w#0", lambda s: {"log": ["w#0"]})
        .edge(START, "fan")
        .compile()
    )
    with pytest.raises(GraphError, match="rename node 'w#0'"):
        run(g, {"log": ["go"]})
