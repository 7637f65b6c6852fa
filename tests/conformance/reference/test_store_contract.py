"""Ported from the reference's checkpointer contract, ``ts/packages/checkpointers/postgres/test/contract.ts``.

The reference runs this suite against each durable backend (SQLite in memory
and in a file, Postgres on PGlite); here every case runs on memory, a SQLite
file and Postgres through the port: ``put``, ``get``, ``list``,
``put_journal``, ``get_journal``, ``drop_journal`` and ``delete_thread``.

Where the Python SPEC decides otherwise the test follows it and says so:
a stored checkpoint is never overwritten (§7), a NUL character round-trips on
every backend, Postgres included (§8), and a step's value comes back from the
journal equal to what the function returned, a ``datetime`` included (§4, §8).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    ConcurrentUpdateError,
    IlmekError,
    Pending,
    PostgresCheckpointer,
    ScheduledTask,
    channel,
    graph,
    resume,
    run,
)
from tests.support.helpers import Calls
from tests.support.reference_edge import done, greet_graph, keys_of, make_checkpoint, pending

pytestmark = pytest.mark.timeout(120)

UNICODE_SAMPLES = {
    "emoji": "🧶 ilmek 👩🏽\u200d💻 🇹🇷",
    "cjk": "編み目 — 针脚 — 뜨개",
    "rtl": "غرزة · תפר",
    "combining": "e\u0301 a\u030a",
    "turkish": "İı Ğğ Şş Çç Öö Üü",
    "quotes": "'\"`; DROP TABLE x; --",
    "whitespace": "tab\tnewline\ncr\r nbsp\u00a0ls\u2028",
}


def ids_of(checkpoints: list[Any]) -> list[str]:
    """The ids of checkpoints, in the order given."""
    return [checkpoint.id for checkpoint in checkpoints]


def test_an_empty_store_reads_nothing_and_no_op_writes_pass(ref_checkpointer: Checkpointer) -> None:
    """contract · "an empty store answers every read with nothing, and no-op writes do not throw"."""
    assert None is ref_checkpointer.get("nobody")
    assert None is ref_checkpointer.get("nobody", "ckpt-missing")
    assert [] == ref_checkpointer.list("nobody")
    assert () == ref_checkpointer.get_journal("nobody:root:x")
    ref_checkpointer.drop_journal("nobody:root:x")
    ref_checkpointer.delete_thread("nobody")


def test_get_without_an_id_is_the_greatest_id_not_the_last_put(ref_checkpointer: Checkpointer) -> None:
    """contract · "get without an id is the max id, not the last one written"."""
    older = make_checkpoint("t", step=1)
    newer = make_checkpoint("t", step=2)
    ref_checkpointer.put("t", newer)
    ref_checkpointer.put("t", older)

    latest = ref_checkpointer.get("t")

    assert newer.id == (latest.id if latest else None)


def test_get_with_an_unknown_id_is_none_not_the_latest(ref_checkpointer: Checkpointer) -> None:
    """contract · "get with an unknown id is null rather than falling back to latest"."""
    ref_checkpointer.put("t", make_checkpoint("t"))

    assert None is ref_checkpointer.get("t", "ckpt-not-here")


def test_another_threads_checkpoint_id_is_not_found_through_this_one(ref_checkpointer: Checkpointer) -> None:
    """contract · "a checkpoint id from another thread is not found through this one"."""
    other = make_checkpoint("other")
    ref_checkpointer.put("other", other)

    assert None is ref_checkpointer.get("t", other.id)


def test_putting_the_same_id_twice_keeps_the_first(ref_checkpointer: Checkpointer) -> None:
    """contract · "putting the same id twice replaces the checkpoint".

    Python SPEC §7, "nothing is overwritten": the second put is refused and the first stays.
    """
    first = make_checkpoint("t", step=1, channels={"v": "first"})
    ref_checkpointer.put("t", first)

    with pytest.raises(ConcurrentUpdateError):
        ref_checkpointer.put("t", attrs.evolve(first, step=2, channels={"v": "second"}))

    stored = ref_checkpointer.list("t")
    assert [(first.id, 1, {"v": "first"})] == [(c.id, c.step, dict(c.channels)) for c in stored]


def test_list_is_newest_first_and_honours_every_limit(ref_checkpointer: Checkpointer) -> None:
    """contract · "list is newest first; limit 0, 1 and more-than-stored all behave"."""
    made = [make_checkpoint("t", step=i) for i in range(4)]
    for checkpoint in made:
        ref_checkpointer.put("t", checkpoint)
    newest_first = ids_of(made)[::-1]

    assert newest_first == ids_of(ref_checkpointer.list("t"))
    assert [] == ref_checkpointer.list("t", limit=0)
    assert newest_first[:1] == ids_of(ref_checkpointer.list("t", limit=1))
    assert newest_first == ids_of(ref_checkpointer.list("t", limit=99))


def test_a_checkpoint_round_trips_every_field(ref_checkpointer: Checkpointer) -> None:
    """contract · "a checkpoint round-trips every field" (``ts`` to the millisecond)."""
    checkpoint = make_checkpoint(
        "t",
        parent_id="ckpt-parent",
        plan_id="ckpt-plan",
        channels={
            "messages": ["a", "b"],
            "cart": {"items": [{"sku": 1, "qty": 2}]},
            "flag": False,
            "none": None,
        },
        next=[
            ScheduledTask(node="worker", task_key="worker#0", is_send=True, input={"item": 1}),
            ScheduledTask(node="agent", task_key="agent"),
        ],
        pending=[
            Pending(
                id="agent:interrupt#0",
                task_id="t:ckpt-plan:agent",
                node="agent",
                key="interrupt#0",
                payload={"q": "?"},
            )
        ],
        step=7,
        ts=dt.datetime.fromtimestamp(1752570000, dt.UTC),
    )
    ref_checkpointer.put("t", checkpoint)

    found = ref_checkpointer.get("t", checkpoint.id)

    assert found is not None
    assert abs(found.ts - checkpoint.ts) < dt.timedelta(milliseconds=1)
    assert checkpoint == attrs.evolve(found, ts=checkpoint.ts)


def test_threads_are_isolated_whatever_their_ids_look_like(ref_checkpointer: Checkpointer) -> None:
    """contract · "threads are isolated, even with ids that look like SQL or wildcards".

    The reference's list includes "", which the Python SPEC refuses (issue #11); " " stands in for it.
    """
    ids = ["t", "t2", "T", "t%", "t_", "'; DROP TABLE x; --", "🧶", " "]
    for thread_id in ids:
        ref_checkpointer.put(thread_id, make_checkpoint(thread_id, channels={"owner": thread_id}))

    owners = [[c.channels["owner"] for c in ref_checkpointer.list(thread_id)] for thread_id in ids]

    assert [[thread_id] for thread_id in ids] == owners


def test_delete_thread_drops_only_that_threads_checkpoints(ref_checkpointer: Checkpointer) -> None:
    """contract · "deleteThread drops only that thread's checkpoints"."""
    for thread_id in ("t", "t2", "t%"):
        ref_checkpointer.put(thread_id, make_checkpoint(thread_id))

    ref_checkpointer.delete_thread("t")

    assert None is ref_checkpointer.get("t")
    assert None is not ref_checkpointer.get("t2")
    assert None is not ref_checkpointer.get("t%")


def test_delete_thread_drops_its_journals_and_no_other_threads(ref_checkpointer: Checkpointer) -> None:
    """contract · "deleteThread drops the thread's journals and no other thread's"."""
    journal = (done("s#0", "v"),)
    owned = ["t:root:work", "t:ckpt-00001-000000-abc:work", "t:ckpt-00002-000000-def:worker#3"]
    foreign = ["t2:root:work", "tx:ckpt-1:work", "other:root:t", "t%:root:work", "t_:root:work"]
    for task_id in owned + foreign:
        ref_checkpointer.put_journal(task_id, journal)

    ref_checkpointer.delete_thread("t")

    assert dict.fromkeys(owned, ()) == {t: ref_checkpointer.get_journal(t) for t in owned}
    assert dict.fromkeys(foreign, journal) == {t: ref_checkpointer.get_journal(t) for t in foreign}


def test_deleting_a_wildcard_thread_id_leaves_lookalikes(ref_checkpointer: Checkpointer) -> None:
    """contract · "deleting a thread whose id has wildcard characters does not touch look-alikes"."""
    journal = (done("s#0", 1),)
    for task_id in ("a%:root:n", "ab:root:n", "a_:root:n", "ax:root:n"):
        ref_checkpointer.put_journal(task_id, journal)

    ref_checkpointer.delete_thread("a%")
    ref_checkpointer.delete_thread("a_")

    kept = {
        t: keys_of(ref_checkpointer.get_journal(t))
        for t in ("a%:root:n", "a_:root:n", "ab:root:n", "ax:root:n")
    }
    assert {"a%:root:n": [], "a_:root:n": [], "ab:root:n": ["s#0"], "ax:root:n": ["s#0"]} == kept


def test_an_empty_journal_round_trips_as_empty(ref_checkpointer: Checkpointer) -> None:
    """contract · "an empty journal round-trips as empty"."""
    ref_checkpointer.put_journal("t:root:n", ())

    assert () == ref_checkpointer.get_journal("t:root:n")


def test_a_journal_keeps_order_pending_status_and_falsy_values(ref_checkpointer: Checkpointer) -> None:
    """contract · "a journal keeps entry order, pending status, and falsy values"."""
    journal = (
        done("z#0", 0),
        done("a#0", ""),
        pending("interrupt#0", {"q": "?"}),
        done("m#0", False),
        done("n#0", None),
    )
    ref_checkpointer.put_journal("t:root:n", journal)

    back = ref_checkpointer.get_journal("t:root:n")

    assert journal == back
    assert [int, str, bool] == [type(back[i].value) for i in (0, 1, 3)]
    assert [("interrupt#0", {"q": "?"})] == [
        (e.key, e.payload) for e in back if not e.answered and e.kind == "interrupt"
    ]


def test_a_step_that_returned_none_is_still_a_completed_step(ref_checkpointer: Checkpointer) -> None:
    """contract · "a step that returned undefined is still a completed step after a round-trip"."""
    ref_checkpointer.put_journal("t:root:n", (done("effect#0", None),))

    assert (done("effect#0", None),) == ref_checkpointer.get_journal("t:root:n")


def test_put_journal_replaces_and_drop_journal_forgets(ref_checkpointer: Checkpointer) -> None:
    """contract · "putJournal replaces, dropJournal forgets"."""
    ref_checkpointer.put_journal("t:root:n", (done("x#0", 1),))
    ref_checkpointer.put_journal("t:root:n", (done("y#0", 2),))

    assert ["y#0"] == keys_of(ref_checkpointer.get_journal("t:root:n"))
    ref_checkpointer.drop_journal("t:root:n")
    assert [] == keys_of(ref_checkpointer.get_journal("t:root:n"))


def test_a_multi_megabyte_payload_round_trips_in_checkpoint_and_journal(
    ref_checkpointer: Checkpointer,
) -> None:
    """contract · "a multi-megabyte payload round-trips in a checkpoint and in a journal"."""
    big = "ilmek " * 700_000
    ref_checkpointer.put("t", make_checkpoint("t", channels={"doc": big, "list": list(range(10_000))}))
    ref_checkpointer.put_journal("t:root:n", (done("blob#0", big),))

    found = ref_checkpointer.get("t")

    assert found is not None
    assert big == found.channels["doc"]
    assert 9_999 == found.channels["list"][-1]
    assert (done("blob#0", big),) == ref_checkpointer.get_journal("t:root:n")


@pytest.mark.parametrize("text", list(UNICODE_SAMPLES.values()), ids=list(UNICODE_SAMPLES))
def test_unicode_round_trips_in_thread_ids_channels_and_journals(
    ref_checkpointer: Checkpointer, text: str
) -> None:
    """contract · "unicode (<sample>) round-trips in thread ids, channels and journals"."""
    ref_checkpointer.put(text, make_checkpoint(text, channels={text: text}))
    ref_checkpointer.put_journal(f"{text}:root:{text}", (done(f"{text}#0", text),))

    found = ref_checkpointer.get(text)

    assert found is not None
    assert {text: text} == dict(found.channels)
    assert (done(f"{text}#0", text),) == ref_checkpointer.get_journal(f"{text}:root:{text}")


def test_a_nul_character_in_a_value_round_trips(ref_checkpointer: Checkpointer) -> None:
    """contract · "a NUL character in a value round-trips" (Python SPEC §8: Postgres too, unlike PGlite)."""
    ref_checkpointer.put("t", make_checkpoint("t", channels={"bin": "a\x00b"}))
    ref_checkpointer.put_journal("t:root:n", (done("nul#0", "a\x00b"),))

    found = ref_checkpointer.get("t")

    assert "a\x00b" == (found.channels["bin"] if found else None)
    assert (done("nul#0", "a\x00b"),) == ref_checkpointer.get_journal("t:root:n")


@pytest.fixture
def postgres_checkpointer(postgres_dsn: str) -> Iterator[PostgresCheckpointer]:
    """A migrated Postgres checkpointer on a fresh database, on ilmek's own connection."""
    with PostgresCheckpointer.connect(postgres_dsn) as checkpointer:
        checkpointer.migrate()
        yield checkpointer


def test_a_nul_in_a_channel_name_on_postgres_is_refused_before_anything_runs(
    postgres_checkpointer: PostgresCheckpointer,
) -> None:
    """Issue #8, beside contract's NUL case: Postgres refuses a NUL in a channel name before any node runs."""
    # Refused where the channel is declared, on every backend, so no run can start.
    with pytest.raises(IlmekError, match="channel"):
        graph("nul", {"a\x00b": channel.last_write(0)})

    assert None is postgres_checkpointer.get("t-nul")


def test_a_step_runs_exactly_once_across_a_pause(ref_checkpointer: Checkpointer) -> None:
    """contract · "a step runs exactly once across an interrupt/resume cycle (§12.1)"."""
    calls = Calls()

    def checkout(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        order = ctx.step("create_order", lambda: calls.hit("create") or f"order-{calls['create']}")
        answer = ctx.interrupt({"q": f"charge {order}?"})
        ctx.step("charge", calls.hit, "charge")
        return {"log": [f"{order}:{answer}"]}

    g = (
        graph("checkout", {"log": channel.append()})
        .node("checkout", checkout)
        .edge(START, "checkout")
        .edge("checkout", END)
        .compile()
    )
    options: dict[str, Any] = {"thread_id": "t-once", "checkpointer": ref_checkpointer}

    paused = run(g, {}, **options)
    assert {"q": "charge order-1?"} == paused.pending[0].payload
    assert ["order-1:yes"] == resume(g, "yes", **options).state["log"]
    assert {"create": 1, "charge": 1} == dict(calls)


def test_a_fresh_run_on_a_deleted_threads_id_never_replays_it(ref_checkpointer: Checkpointer) -> None:
    """contract · "a fresh run on a deleted thread's id never replays the deleted conversation"."""

    g = greet_graph()
    options: dict[str, Any] = {"thread_id": "reused", "checkpointer": ref_checkpointer}

    assert {"hello": "hello alice"} == run(g, {"who": "alice"}, **options).pending[0].payload
    ref_checkpointer.delete_thread("reused")

    assert {"hello": "hello bob"} == run(g, {"who": "bob"}, **options).pending[0].payload
    assert ["hello bob/hi"] == resume(g, "hi", **options).state["log"]


def test_a_non_json_step_value_replays_equal_to_what_was_returned(ref_checkpointer: Checkpointer) -> None:
    """contract · "a non-JSON step value replays as its JSON form (MODEL.md §5.4)".

    Python SPEC §8: a ``datetime`` comes back from the journal as the same ``datetime``, tz kept.
    """
    seen: list[Any] = []
    when = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)

    def node(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        seen.append(ctx.step("when", lambda: when))
        ctx.interrupt()
        return {}

    g = graph("dates", {"log": channel.append()}).node("n", node).edge(START, "n").compile()
    options: dict[str, Any] = {"thread_id": "t-date", "checkpointer": ref_checkpointer}
    run(g, {}, **options)
    resume(g, "ok", **options)

    assert [when, when] == seen
    assert dt.UTC == seen[1].tzinfo
