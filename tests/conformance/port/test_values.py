"""The port suite, values: the codec's types, large and Unicode values, and what cannot be stored."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from ilmek import Checkpoint, Checkpointer, JournalEntry, ScheduledTask, SerializationError
from ilmek.types import task_id_for
from tests.support.port import JOURNAL, UTC, channels_at, ids_of, make_checkpoint, pause, thread_info, typed

pytestmark = pytest.mark.timeout(60)


# --- values -------------------------------------------------------------------------------

SERDE_SAMPLES: dict[str, Any] = {
    "tuple": (1, "a", (2, None), []),
    "bytes": b"\x00\xffbinary\n",
    "bytearray": bytearray(b"mutable"),
    "datetime-utc": dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
    "datetime-offset": dt.datetime(2024, 7, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
    "date": dt.date(1999, 12, 31),
    "time-tz": dt.time(8, 15, 30, 123, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
    "time-naive": dt.time(23, 0),
    "decimal": decimal.Decimal("1.10"),
    "decimal-huge": decimal.Decimal("-12345678901234567890.000000000000000001"),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "set": {1, "two", (3, 4)},
    "frozenset": frozenset({"a", "b"}),
    "non-str-keys": {1: "one", None: "none", (1, 2): "pair", "s": "str"},
    "floats": [0.1, -0.0, 1e300, 1e16, 2**53 + 1],
    "mixed": {"when": dt.date(2020, 1, 1), "ids": [uuid.UUID(int=7)], "raw": {b"k"}},
}


@pytest.mark.parametrize("name", SERDE_SAMPLES)
def test_codec_types_round_trip_exactly_everywhere(checkpointer: Checkpointer, name: str) -> None:
    """Each codec type keeps its type and value in channels, list items, tasks, pauses, journals, metadata."""
    value = SERDE_SAMPLES[name]
    checkpoint = attrs.evolve(
        make_checkpoint("t", "c0001", value=value, items=[value, value]),
        next=(ScheduledTask(node="w", task_key="w#0", is_send=True, input=value),),
        pending=(pause("t", "c0001", value),),
        task_journals={"w#0": (JournalEntry(key="s#0", value=value),)},
        metadata={"value": value},
    )
    checkpointer.put("t", checkpoint)
    checkpointer.put_journal(task_id_for("t", "c0001", "w#0"), [JournalEntry(key="s#0", value=value)])
    checkpointer.put_thread_metadata("t", {"value": value})

    found = checkpointer.get("t")

    assert found is not None
    assert typed(value) == typed(found.channels["value"])
    assert typed([value, value]) == typed(found.channels["items"])
    assert typed([value, value]) == typed(checkpointer.read_channel("t", "items"))
    assert typed(value) == typed(found.next[0].input)
    assert typed(value) == typed(found.pending[0].payload)
    assert typed(value) == typed(found.task_journals["w#0"][0].value)
    assert typed(value) == typed(found.metadata["value"])
    assert typed(value) == typed(checkpointer.get_journal(task_id_for("t", "c0001", "w#0"))[0].value)
    assert typed(value) == typed(thread_info(checkpointer, "t").metadata["value"])


def test_multi_megabyte_values_round_trip(checkpointer: Checkpointer) -> None:
    """A 3 MB string and a list of 5,000 dicts come back whole, also through a child that appends."""
    big_text = ("ilmek ☕ 🧵 " * 300_000)[:3_000_000]
    many = [
        {"i": i, "text": f"item {i}", "tags": ["a", "b"], "nested": {"even": i % 2 == 0}} for i in range(5000)
    ]
    checkpointer.put("t", make_checkpoint("t", "c0001", text=big_text, many=many))
    checkpointer.put("t", make_checkpoint("t", "c0002", "c0001", text=big_text, many=[*many, {"i": 5000}]))

    assert {"text": big_text, "many": many} == channels_at(checkpointer, "t", "c0001")
    assert {"text": big_text, "many": [*many, {"i": 5000}]} == channels_at(checkpointer, "t")
    assert many[4990:] == checkpointer.read_channel("t", "many", 4990, 10)


UNICODE_SAMPLES = {
    "combining": "e\u0301 a\u0308 Z\u0335\u0321 n\u0303",
    "rtl": "שלום עולם — مرحبا بالعالم",
    "zwj": "👩\u200d👩\u200d👧\u200d👦 🏳\ufe0f\u200d🌈 👨🏽\u200d💻",
    # Mathematical Fraktur "Unicode", an Egyptian hieroglyph, an emoji, a private-use plane-16 point.
    "astral": "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522 𓀀 😀 \U0010fffd",
    "nul": "before\x00after\x00",
    "whitespace": "line\nnext\ttab\r\nend\n",
    "bom-and-cjk": "\ufeff漢字かなカナ",
    "escapes": "back\\slash \"quote\" 'single' \\u0000 %s {}",
}


def test_unicode_round_trips_as_values_keys_metadata_and_journals(checkpointer: Checkpointer) -> None:
    """Combining marks, RTL, ZWJ emoji, astral code points, NUL and control whitespace survive everywhere."""
    thread_id = "🧵 unicode"
    keyed = {text: name for name, text in UNICODE_SAMPLES.items()}
    texts = list(UNICODE_SAMPLES.values())
    checkpoint = attrs.evolve(
        make_checkpoint(thread_id, "c0001", samples=dict(UNICODE_SAMPLES), keyed=keyed, texts=texts),
        pending=(pause(thread_id, "c0001", keyed),),
        task_journals={"agent": (JournalEntry(key="ключ#0", value=keyed, kind="step"),)},
        metadata={"keyed": keyed, UNICODE_SAMPLES["rtl"]: texts},
    )
    checkpointer.put(thread_id, checkpoint)
    checkpointer.put(
        thread_id, make_checkpoint(thread_id, "c0002", "c0001", **{"канал📦": texts}, texts=texts * 2)
    )
    journal = [
        JournalEntry(key=f"step {name} ✓", value=text, kind="interrupt", payload=keyed, answered=True)
        for name, text in UNICODE_SAMPLES.items()
    ]
    # Under the checkpoint without carried journals: what comes back is exactly what went in.
    task_id = task_id_for(thread_id, "c0002", "agent")
    checkpointer.put_journal(task_id, journal)
    checkpointer.put_thread_metadata(thread_id, {"keyed": keyed, "title": UNICODE_SAMPLES["zwj"]})

    first = checkpointer.get(thread_id, "c0001")
    assert first is not None
    assert {"samples": UNICODE_SAMPLES, "keyed": keyed, "texts": texts} == dict(first.channels)
    assert (checkpoint.pending, checkpoint.task_journals) == (first.pending, first.task_journals)
    assert dict(checkpoint.metadata) == dict(first.metadata)
    assert {"канал📦": texts, "texts": texts * 2} == channels_at(checkpointer, thread_id)
    assert texts == checkpointer.read_channel(thread_id, "texts", len(texts))
    assert tuple(journal) == checkpointer.get_journal(task_id)
    info = thread_info(checkpointer, thread_id)
    assert {"keyed": keyed, "title": UNICODE_SAMPLES["zwj"]} == dict(info.metadata)
    assert [thread_id] == ids_of(checkpointer.list_threads(metadata={"title": UNICODE_SAMPLES["zwj"]}))


# --- what cannot be stored -----------------------------------------------------------------


class Unstorable:
    """A class the codec does not know."""


BAD_PARTS: dict[str, Callable[[Checkpoint], Checkpoint]] = {
    "new-channel": lambda c: attrs.evolve(c, channels={**c.channels, "broken": Unstorable()}),
    "replaced-channel": lambda c: attrs.evolve(c, channels={**c.channels, "n": Unstorable()}),
    "appended-item": lambda c: attrs.evolve(
        c, channels={**c.channels, "log": [*c.channels["log"], object()]}
    ),
    "nested": lambda c: attrs.evolve(c, channels={**c.channels, "n": {"deep": [1, {"x": Unstorable()}]}}),
    "send-input": lambda c: attrs.evolve(c, next=(ScheduledTask(node="w", task_key="w#0", input=object()),)),
    "pause-payload": lambda c: attrs.evolve(c, pending=(pause(c.thread_id, payload=object()),)),
    "task-journal": lambda c: attrs.evolve(c, task_journals={"w": [JournalEntry(key="k", value=object())]}),
    "metadata": lambda c: attrs.evolve(c, metadata={"run": object()}),
}
CHANNEL_NAMED = {"new-channel": "broken", "replaced-channel": "n", "appended-item": "log", "nested": "n"}


@pytest.mark.parametrize("part", BAD_PARTS)
def test_put_of_an_unstorable_value_raises_and_writes_nothing(checkpointer: Checkpointer, part: str) -> None:
    """SerializationError (naming the channel, for a channel) and the thread is as it was."""
    checkpointer.put("t", make_checkpoint("t", "c0001", n=1, log=["a"]))
    before = checkpointer.get_thread("t")
    bad = BAD_PARTS[part](make_checkpoint("t", "c0002", "c0001", n=1, log=["a", "b"]))

    with pytest.raises(SerializationError) as caught:
        checkpointer.put("t", bad)

    if part in CHANNEL_NAMED:
        assert f"channel {CHANNEL_NAMED[part]!r}" in str(caught.value)
    assert ["c0001"] == ids_of(checkpointer.list("t"))
    assert {"n": 1, "log": ["a"]} == channels_at(checkpointer, "t")
    assert before == checkpointer.get_thread("t")
    assert ["a"] == checkpointer.read_channel("t", "log")


def test_an_unstorable_first_checkpoint_creates_no_thread(checkpointer: Checkpointer) -> None:
    """A thread whose very first checkpoint cannot be stored does not appear at all."""
    with pytest.raises(SerializationError, match="'broken'"):
        checkpointer.put("t", make_checkpoint("t", "c0001", fine=1, broken=Unstorable()))

    assert (None, None, []) == (
        checkpointer.get("t"),
        checkpointer.get_thread("t"),
        checkpointer.list_threads(),
    )


def test_an_unstorable_journal_raises_and_keeps_the_old_journals(checkpointer: Checkpointer) -> None:
    """A journal batch with one bad entry writes none of the batch, naming the step key."""
    first, second = task_id_for("t", "c0001", "a"), task_id_for("t", "c0001", "b")
    checkpointer.put_journal(first, JOURNAL[:1])

    with pytest.raises(SerializationError, match="bad#0"):
        checkpointer.put_journals(
            {
                first: JOURNAL,
                second: [JournalEntry(key="ok#0", value=1), JournalEntry(key="bad#0", value=object())],
            }
        )

    assert {first: JOURNAL[:1]} == checkpointer.get_journals([first, second])


def test_unstorable_thread_metadata_raises_and_keeps_the_old(checkpointer: Checkpointer) -> None:
    """``put_thread_metadata`` with a value the codec refuses changes nothing."""
    checkpointer.put_thread_metadata("t", {"ok": 1})

    with pytest.raises(SerializationError):
        checkpointer.put_thread_metadata("t", {"bad": Unstorable()})

    assert {"ok": 1} == dict(thread_info(checkpointer, "t").metadata)


def test_dict_key_order_is_kept_except_by_jsonb(checkpointer: Checkpointer) -> None:
    """A dict reads back equal everywhere; its key order survives all but Postgres, whose JSONB sorts keys.

    docs/concepts.rst says so: JSONB orders a dict's keys by length, then bytes.
    """
    written = {"zebra": 1, "a": 2, "mm": {"yy": 1, "b": 2}, "é": 3}
    checkpointer.put("t", make_checkpoint("t", "c0001", value=written))
    read = channels_at(checkpointer, "t")["value"]
    assert read == written
    if type(checkpointer).__name__ == "PostgresCheckpointer":
        assert list(read) == ["a", "mm", "é", "zebra"]
        assert list(read["mm"]) == ["b", "yy"]
    else:
        assert list(read) == list(written)
        assert list(read["mm"]) == ["yy", "b"]
