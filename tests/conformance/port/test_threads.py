"""The port suite, threads: any text as an id, ``delete_thread``, and the host API's thread listing.

Where the contract leaves room, this suite decides:

* A ``list_threads`` metadata filter matches a stored value that is equal and
  of the same JSON type (``1`` matches neither ``True`` nor ``"1"``); a nested
  dict matches as a whole value, whatever its key order, never as a subset.
* A thread that has metadata but no checkpoint yet has ``checkpoint_id`` None
  and step 0; its status is left open.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs
import pytest

from ilmek import START, Checkpointer, JournalEntry, NodeContext, channel, graph, resume, run
from ilmek.types import ThreadStatus, task_id_for
from tests.support.port import (
    TASK,
    UTC,
    assert_gone,
    channels_at,
    ids_of,
    make_checkpoint,
    pause,
    thread_info,
    wait_for_clock_tick,
)

pytestmark = pytest.mark.timeout(60)


# --- delete_thread and thread ids that look alike ---------------------------------------

LOOKALIKE_IDS = [
    "t",
    "t%",
    "t_",
    "t2",
    "T",
    "t:x",
    "t\\",
    "t ",
    "🧵",
    'it\'s "quoted"',
    "x'; DROP TABLE ilmek_checkpoints; --",
]


def populate(checkpointer: Checkpointer, thread_id: str) -> None:
    """Give a thread two checkpoints, a journal and metadata, all naming the thread."""
    checkpointer.put(thread_id, make_checkpoint(thread_id, "c0001", log=[thread_id], owner=thread_id))
    checkpointer.put(
        thread_id, make_checkpoint(thread_id, "c0002", "c0001", log=[thread_id, 2], owner=thread_id)
    )
    checkpointer.put_journal(
        task_id_for(thread_id, "c0001", "agent"), [JournalEntry(key="k#0", value=thread_id)]
    )
    checkpointer.put_thread_metadata(thread_id, {"owner": thread_id})


def assert_populated(checkpointer: Checkpointer, thread_id: str) -> None:
    """Everything :func:`populate` wrote for the thread is there and names that thread."""
    assert {"log": [thread_id, 2], "owner": thread_id} == channels_at(checkpointer, thread_id)
    assert {"log": [thread_id], "owner": thread_id} == channels_at(checkpointer, thread_id, "c0001")
    assert ["c0002", "c0001"] == ids_of(checkpointer.list(thread_id))
    assert (JournalEntry(key="k#0", value=thread_id),) == checkpointer.get_journal(
        task_id_for(thread_id, "c0001", "agent")
    )
    info = thread_info(checkpointer, thread_id)
    assert (thread_id, "c0002", {"owner": thread_id}) == (info.id, info.checkpoint_id, dict(info.metadata))
    assert [thread_id, 2] == checkpointer.read_channel(thread_id, "log")


@pytest.mark.parametrize("thread_id", LOOKALIKE_IDS)
def test_any_text_works_as_a_thread_id(checkpointer: Checkpointer, thread_id: str) -> None:
    """Put, get, list, journals, the host API and delete all work for ids with %, _, quotes, emoji, SQL."""
    populate(checkpointer, thread_id)

    assert_populated(checkpointer, thread_id)
    assert [thread_id] == ids_of(checkpointer.list_threads())

    checkpointer.delete_thread(thread_id)

    assert_gone(checkpointer, thread_id)


#: Thread ids that would break a JSON object or a statement made by pasting text (on Postgres a superstep's
#: and an answer's arguments travel as one JSON object).
CALL_IDS = [
    'it\'s "quoted"',
    "t\\",
    '","owner":"someone else',
    '{"thread": "t", "take": false}',
    "%(call)s %s :call ?",
    "🧵 ünï\u2028",
    "x'; DROP TABLE ilmek_checkpoints; --",
]
#: A channel name with a quote, a backslash and braces: it is a key of the manifest the call carries.
ODD_CHANNEL = 'said "hi" \\ {}'


@pytest.mark.parametrize("thread_id", CALL_IDS)
def test_a_run_its_step_its_pause_and_the_answer_keep_any_thread_id_and_channel_name(
    checkpointer: Checkpointer, thread_id: str
) -> None:
    """The writes of a run's input, a step, a pause, an answer and the last superstep keep a thread id and a
    channel name with quotes, backslashes, JSON, placeholders and SQL in them exactly as given; the
    step runs once and nothing lands on another thread."""
    charged: list[str] = []

    def work(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        receipt = ctx.step("charge", lambda: charged.append(thread_id) or len(charged))
        answer = ctx.interrupt({"thread": thread_id})
        return {ODD_CHANNEL: [f"{receipt}:{answer}"]}

    g = graph("odd", {ODD_CHANNEL: channel.append()}).node("work", work).edge(START, "work").compile()

    paused = run(g, {ODD_CHANNEL: [thread_id]}, thread_id=thread_id, checkpointer=checkpointer)
    assert ("interrupted", {"thread": thread_id}) == (paused.status, paused.pending[0].payload)
    done = resume(g, "yes", thread_id=thread_id, checkpointer=checkpointer)

    assert ("done", {ODD_CHANNEL: [thread_id, "1:yes"]}) == (done.status, dict(done.state))
    assert [thread_id] == charged
    assert [thread_id] == ids_of(checkpointer.list_threads())
    latest = checkpointer.get(thread_id)
    assert latest is not None
    assert (thread_id, {ODD_CHANNEL: [thread_id, "1:yes"]}) == (latest.thread_id, dict(latest.channels))


def test_delete_thread_leaves_lookalike_threads_untouched(checkpointer: Checkpointer) -> None:
    """Deleting any one of the look-alike ids removes only it; each is deleted in turn, then restored."""
    for thread_id in LOOKALIKE_IDS:
        populate(checkpointer, thread_id)

    for target in LOOKALIKE_IDS:
        checkpointer.delete_thread(target)

        assert_gone(checkpointer, target)
        for other in LOOKALIKE_IDS:
            if other != target:
                assert_populated(checkpointer, other)
        populate(checkpointer, target)


def test_delete_thread_of_an_unknown_thread_is_fine(checkpointer: Checkpointer) -> None:
    """Deleting a thread that does not exist does nothing and raises nothing."""
    populate(checkpointer, "t")

    checkpointer.delete_thread("nobody")
    checkpointer.delete_thread("t%")

    assert_populated(checkpointer, "t")


def test_a_deleted_thread_id_starts_afresh(checkpointer: Checkpointer) -> None:
    """After ``delete_thread`` the id can be used again and nothing old shows through."""
    populate(checkpointer, "t")
    checkpointer.delete_thread("t")

    checkpointer.put("t", make_checkpoint("t", "c0001", fresh=True))

    assert {"fresh": True} == channels_at(checkpointer, "t")
    assert ["c0001"] == ids_of(checkpointer.list("t"))
    info = thread_info(checkpointer, "t")
    assert {} == dict(info.metadata)
    assert [] == checkpointer.read_channel("t", "log")


# --- the host API: threads ----------------------------------------------------------------


def put_with_status(
    checkpointer: Checkpointer, thread_id: str, status: ThreadStatus, checkpoint_id: str = "c0001"
) -> None:
    """Put a checkpoint that leaves the thread ``done``, ``interrupted`` or ``unfinished``."""
    checkpoint = make_checkpoint(thread_id, checkpoint_id)
    if status == "interrupted":
        # Pauses win over scheduled tasks: a paused superstep still lists its tasks.
        checkpoint = attrs.evolve(checkpoint, next=(TASK,), pending=(pause(thread_id, checkpoint_id),))
    elif status == "unfinished":
        checkpoint = attrs.evolve(checkpoint, next=(TASK,))
    checkpointer.put(thread_id, checkpoint)


def test_list_threads_puts_the_most_recently_updated_first(checkpointer: Checkpointer) -> None:
    """Threads list by their last update, newest first; a new checkpoint or new metadata moves one up."""
    for thread_id in ("b", "c", "a"):
        checkpointer.put(thread_id, make_checkpoint(thread_id, "c0001"))
        wait_for_clock_tick()
    assert ["a", "c", "b"] == ids_of(checkpointer.list_threads())

    checkpointer.put("b", make_checkpoint("b", "c0002", "c0001"))
    wait_for_clock_tick()
    assert ["b", "a", "c"] == ids_of(checkpointer.list_threads())

    checkpointer.put_thread_metadata("c", {"touched": True})
    assert ["c", "b", "a"] == ids_of(checkpointer.list_threads())


def test_list_threads_is_empty_without_threads(checkpointer: Checkpointer) -> None:
    """A fresh store lists no threads."""
    assert [] == checkpointer.list_threads()


@pytest.mark.parametrize(
    ("search", "expected"),
    [
        ("order", {"Order-42", "order-7", "ORDERS"}),
        ("ORDER-", {"Order-42", "order-7"}),
        ("rs", {"ORDERS"}),
        ("%", {"t%"}),
        ("_", {"t_"}),
        ("\\", {"t\\x"}),
        ("'", {"it's"}),
        ("🧵", {"🧵 thread"}),
        ("nothing like it", set()),
    ],
)
def test_list_threads_search_is_a_case_insensitive_substring(
    checkpointer: Checkpointer, search: str, expected: set[str]
) -> None:
    """``search`` keeps ids containing the text, ignoring ASCII case; %, _ and \\ are literal."""
    for thread_id in ("Order-42", "order-7", "ORDERS", "invoice-1", "t%", "t_", "t\\x", "it's", "🧵 thread"):
        checkpointer.put(thread_id, make_checkpoint(thread_id, "c0001"))

    assert expected == set(ids_of(checkpointer.list_threads(search=search)))


METADATA = {
    "a": {
        "team": "x",
        "n": 1,
        "flag": True,
        "note": None,
        "cfg": {"k": "v", "depth": 2},
        "zero": 0,
        "tags": ["a", "b"],
    },
    "b": {"team": "x", "n": True, "flag": False, "zero": False},
    "c": {"team": "y", "n": 1, "cfg": {"k": "v"}, "tags": ["a"]},
    "d": {"team": "x", "n": "1", "flag": 1},
    "e": {},
}


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        pytest.param({"team": "x"}, {"a", "b", "d"}, id="str"),
        pytest.param({"team": "x", "n": 1}, {"a"}, id="two-keys"),
        pytest.param({"team": "y", "n": 1, "cfg": {"k": "v"}}, {"c"}, id="three-keys"),
        pytest.param({"team": "X"}, set(), id="values-are-case-sensitive"),
        pytest.param({"n": 1}, {"a", "c"}, id="int-is-not-bool-or-str"),
        pytest.param({"n": True}, {"b"}, id="bool-is-not-int"),
        pytest.param({"n": "1"}, {"d"}, id="str-is-not-int"),
        pytest.param({"flag": True}, {"a"}, id="true-is-not-1"),
        pytest.param({"zero": 0}, {"a"}, id="zero-is-not-false"),
        pytest.param({"zero": False}, {"b"}, id="false-is-not-zero"),
        pytest.param({"note": None}, {"a"}, id="none-needs-the-key"),
        pytest.param({"missing": None}, set(), id="absent-key-is-not-none"),
        pytest.param({"cfg": {"k": "v", "depth": 2}}, {"a"}, id="nested-dict"),
        pytest.param({"tags": ["a", "b"]}, {"a"}, id="list"),
    ],
)
def test_list_threads_metadata_filter_matches_equal_values_of_the_same_type(
    checkpointer: Checkpointer, metadata: dict[str, Any], expected: set[str]
) -> None:
    """Every filter pair must be in the thread's metadata, equal and of the same type."""
    for thread_id, thread_metadata in METADATA.items():
        checkpointer.put_thread_metadata(thread_id, thread_metadata)

    assert expected == set(ids_of(checkpointer.list_threads(metadata=metadata)))


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        pytest.param({"cfg": {"k": "v"}}, {"c"}, id="dict-part"),
        pytest.param({"cfg": {}}, set(), id="empty-dict"),
        pytest.param({"tags": ["a"]}, {"c"}, id="list-part"),
        pytest.param({"tags": ["b", "a"]}, set(), id="list-reordered"),
        pytest.param({"tags": []}, set(), id="empty-list"),
    ],
)
def test_list_threads_metadata_filter_compares_nested_values_whole(
    checkpointer: Checkpointer, metadata: dict[str, Any], expected: set[str]
) -> None:
    """A dict or list in the filter must equal the stored one, not be contained in it."""
    for thread_id, thread_metadata in METADATA.items():
        checkpointer.put_thread_metadata(thread_id, thread_metadata)

    assert expected == set(ids_of(checkpointer.list_threads(metadata=metadata)))


def test_list_threads_metadata_filter_ignores_nested_key_order(checkpointer: Checkpointer) -> None:
    """A nested dict filter matches an equal dict whose keys were written in another order."""
    checkpointer.put_thread_metadata("a", {"cfg": {"k": "v", "depth": 2}})

    assert ["a"] == ids_of(checkpointer.list_threads(metadata={"cfg": {"depth": 2, "k": "v"}}))


ODD_METADATA: dict[str, dict[str, Any]] = {
    "dotted": {"a.b": "x", "$": 1.0, '"q"': "quoted", "[0]": 2**64, "ключ": "значение"},
    "nested": {"a": {"b": "x"}, "$": 1, "nul": "a\x00b"},
    "plain": {"a.b": "y", "$": True, "nul": "ab", "[0]": 2**64 + 1},
}


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        pytest.param({"a.b": "x"}, {"dotted"}, id="a-key-with-a-dot-is-not-a-path"),
        pytest.param({'"q"': "quoted"}, {"dotted"}, id="a-key-with-quotes"),
        pytest.param({"ключ": "значение"}, {"dotted"}, id="unicode"),
        pytest.param({"$": 1}, {"dotted", "nested"}, id="one-equals-one-point-zero"),
        pytest.param({"$": 1.0}, {"dotted", "nested"}, id="one-point-zero-equals-one"),
        pytest.param({"$": True}, {"plain"}, id="true-is-not-one-point-zero"),
        pytest.param({"[0]": 2**64}, {"dotted"}, id="an-integer-beyond-64-bits"),
        pytest.param({"nul": "a\x00b"}, {"nested"}, id="text-holding-nul"),
        pytest.param({"nul": "ab"}, {"plain"}, id="text-without-nul"),
    ],
)
def test_list_threads_metadata_filter_takes_keys_as_text_and_numbers_by_value(
    checkpointer: Checkpointer, metadata: dict[str, Any], expected: set[str]
) -> None:
    """A key is matched as written (a dot, a quote or ``$`` is no path), numbers by value, NUL text whole."""
    for thread_id, thread_metadata in ODD_METADATA.items():
        checkpointer.put_thread_metadata(thread_id, thread_metadata)

    assert expected == set(ids_of(checkpointer.list_threads(metadata=metadata)))


def test_list_threads_metadata_filter_pages_the_matches_newest_first(checkpointer: Checkpointer) -> None:
    """With a metadata filter, offset and limit page through the matching threads only, in update order."""
    for index in range(9):
        checkpointer.put(f"t{index}", make_checkpoint(f"t{index}", f"c{index:04d}"))
        checkpointer.put_thread_metadata(f"t{index}", {"team": "x" if index % 3 else "y"})
        wait_for_clock_tick()

    pages = [
        ids_of(checkpointer.list_threads(metadata={"team": "x"}, offset=offset, limit=2))
        for offset in (0, 2, 4, 6)
    ]

    assert [["t8", "t7"], ["t5", "t4"], ["t2", "t1"], []] == pages


@pytest.fixture
def statuses(checkpointer: Checkpointer) -> Checkpointer:
    """Threads ``d1``, ``d2`` (done), ``i1`` (interrupted), ``u1``, ``u2`` (unfinished)."""
    for thread_id, status in [
        ("d1", "done"),
        ("i1", "interrupted"),
        ("u1", "unfinished"),
        ("d2", "done"),
        ("u2", "unfinished"),
    ]:
        put_with_status(checkpointer, thread_id, status)
    return checkpointer


@pytest.mark.parametrize(
    ("status", "expected"),
    [("done", {"d1", "d2"}), ("interrupted", {"i1"}), ("unfinished", {"u1", "u2"})],
)
def test_list_threads_filters_by_status(
    statuses: Checkpointer, status: ThreadStatus, expected: set[str]
) -> None:
    """Status comes from the latest checkpoint: pauses interrupted, tasks unfinished, else done."""
    found = statuses.list_threads(status=status)

    assert expected == set(ids_of(found))
    assert {status} == {info.status for info in found}


def test_status_follows_the_latest_checkpoint(checkpointer: Checkpointer) -> None:
    """A thread's status is that of its greatest id, whatever order checkpoints were put in."""
    put_with_status(checkpointer, "t", "interrupted", "c0001")
    assert "interrupted" == thread_info(checkpointer, "t").status

    put_with_status(checkpointer, "t", "done", "c0003")
    put_with_status(checkpointer, "t", "unfinished", "c0002")

    info = thread_info(checkpointer, "t")
    assert ("done", "c0003") == (info.status, info.checkpoint_id)
    assert [] == checkpointer.list_threads(status="unfinished")


def test_list_threads_pages_without_overlap(checkpointer: Checkpointer) -> None:
    """``offset`` and ``limit`` cut the same order into pages that neither overlap nor skip."""
    for n in range(7):
        put_with_status(checkpointer, f"thread-{n}", "done" if n % 2 else "unfinished")
    everything = ids_of(checkpointer.list_threads())

    pages = [ids_of(checkpointer.list_threads(offset=offset, limit=3)) for offset in (0, 3, 6, 9)]

    assert 7 == len(everything)
    assert [everything[0:3], everything[3:6], everything[6:7], []] == pages
    assert everything[2:] == ids_of(checkpointer.list_threads(offset=2))
    assert [] == checkpointer.list_threads(limit=0)
    unfinished = ids_of(checkpointer.list_threads(status="unfinished"))
    assert unfinished[1:3] == ids_of(checkpointer.list_threads(status="unfinished", offset=1, limit=2))


def test_get_thread_describes_the_thread(checkpointer: Checkpointer) -> None:
    """``get_thread`` has the id, UTC times (created <= updated), status, step, latest id and metadata."""
    before = dt.datetime.now(UTC)
    checkpointer.put("t", make_checkpoint("t", "c0001"))
    checkpointer.put_thread_metadata("t", {"user": "ada", "tags": ["x"]})
    first = thread_info(checkpointer, "t")
    wait_for_clock_tick()
    checkpointer.put("t", attrs.evolve(make_checkpoint("t", "c0002", "c0001"), next=(TASK,), step=4))
    after = dt.datetime.now(UTC)

    info = thread_info(checkpointer, "t")

    assert ("t", "unfinished", 4, "c0002") == (info.id, info.status, info.step, info.checkpoint_id)
    assert {"user": "ada", "tags": ["x"]} == dict(info.metadata)
    assert dt.timedelta(0) == info.created_at.utcoffset() == info.updated_at.utcoffset()
    assert first.created_at == info.created_at
    assert before - dt.timedelta(seconds=1) <= info.created_at <= first.updated_at <= info.updated_at
    assert first.updated_at < info.updated_at <= after + dt.timedelta(seconds=1)
    assert [info] == checkpointer.list_threads()


def test_get_thread_of_an_unknown_thread_is_none(checkpointer: Checkpointer) -> None:
    """A thread never written has no summary."""
    checkpointer.put("t", make_checkpoint("t", "c0001"))

    assert None is checkpointer.get_thread("t%")


def test_put_thread_metadata_replaces_it(checkpointer: Checkpointer) -> None:
    """New metadata replaces the old whole, keys not repeated are gone."""
    checkpointer.put("t", make_checkpoint("t", "c0001"))
    checkpointer.put_thread_metadata("t", {"a": 1, "b": 2})
    checkpointer.put_thread_metadata("t", {"b": 3})

    assert {"b": 3} == dict(thread_info(checkpointer, "t").metadata)
    assert ["t"] == ids_of(checkpointer.list_threads(metadata={"b": 3}))
    assert [] == checkpointer.list_threads(metadata={"a": 1})


def test_put_thread_metadata_works_before_any_checkpoint(checkpointer: Checkpointer) -> None:
    """Metadata can name a thread before it runs; its first checkpoint keeps that metadata."""
    checkpointer.put_thread_metadata("t", {"owner": "ada"})

    info = thread_info(checkpointer, "t")
    assert ("t", None, 0, {"owner": "ada"}) == (info.id, info.checkpoint_id, info.step, dict(info.metadata))
    assert ["t"] == ids_of(checkpointer.list_threads(metadata={"owner": "ada"}))
    assert None is checkpointer.get("t")

    put_with_status(checkpointer, "t", "interrupted")

    info = thread_info(checkpointer, "t")
    assert ("c0001", "interrupted", {"owner": "ada"}) == (
        info.checkpoint_id,
        info.status,
        dict(info.metadata),
    )


# --- the child threads the console reads (internal: Checkpointer._child_thread_ids) ---

ROOT = "o%_!'r"


def test_child_thread_ids_lists_a_threads_own_children_newest_plan_first(checkpointer: Checkpointer) -> None:
    """Children only (no grandchild), no look-alike root, no case variant; by plan; ``limit`` the newest."""
    from ilmek.namespaces import child_thread_id

    older, newer, again = (
        child_thread_id(ROOT, "p1", "sum#0:work"),
        child_thread_id(ROOT, "p2", "sum#0:work"),
        child_thread_id(ROOT, "p2", "sum#1:work"),
    )
    grandchild = child_thread_id(older, "q1", "sum#0:total")
    lookalikes = [
        child_thread_id("o%_!'rX", "p1", "sum#0:work"),
        child_thread_id("oX_!'r", "p1", "sum#0:work"),  # what an unescaped "%" or "_" would match
        child_thread_id("O%_!'R", "p1", "sum#0:work"),  # what a case-insensitive match would take
        ROOT,
        f"{ROOT} ",
    ]
    for thread_id in [older, newer, again, grandchild, *lookalikes]:
        checkpointer.put_thread_metadata(thread_id, {"n": 1})

    assert [again, newer, older] == checkpointer._child_thread_ids(ROOT, limit=10)
    assert [again, newer] == checkpointer._child_thread_ids(ROOT, limit=2)
    assert [older] == checkpointer._child_thread_ids(ROOT, "p1", limit=10)
    assert [again, newer] == checkpointer._child_thread_ids(ROOT, "p2", limit=10)
    assert [] == checkpointer._child_thread_ids(ROOT, "p3", limit=10)
    assert [grandchild] == checkpointer._child_thread_ids(older, limit=10)
    assert [] == checkpointer._child_thread_ids(grandchild, limit=10)
