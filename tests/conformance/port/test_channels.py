"""The port suite, channel storage and ``read_channel``: what each checkpoint holds, and paging it.

Lists growing by a suffix, replaced values, removed channels, forks, deep
chains; and ``read_channel`` reading a slice of a long list at any checkpoint.
"""

from __future__ import annotations

from typing import Any

import pytest

from ilmek import Checkpointer, CheckpointNotFoundError
from tests.support.port import channels_at, cid, make_checkpoint, put_chain, typed

pytestmark = pytest.mark.timeout(60)


# --- channel storage --------------------------------------------------------------------


def test_a_list_growing_by_a_suffix_keeps_every_version(checkpointer: Checkpointer) -> None:
    """A list that grows reads whole at the child and unchanged at the parent."""
    put_chain(checkpointer, "t", [{"log": ["a"]}, {"log": ["a", "b", "c"]}, {"log": ["a", "b", "c"]}])

    assert {"log": ["a"]} == channels_at(checkpointer, "t", cid(0))
    assert {"log": ["a", "b", "c"]} == channels_at(checkpointer, "t", cid(1))
    assert {"log": ["a", "b", "c"]} == channels_at(checkpointer, "t", cid(2))


@pytest.mark.parametrize(
    "versions",
    [
        pytest.param([["a", "b", "c"], ["x"], ["x", "y"]], id="shorter-then-grows"),
        pytest.param([["a", "b"], ["a", "c"], ["a", "c", "d"]], id="same-length-other-item"),
        pytest.param([["a"], [], ["z"]], id="emptied"),
        pytest.param([[1, 2], "now text", [3]], id="list-text-list"),
        pytest.param([{"k": 1}, [{"k": 1}], [{"k": 1}, {"k": 2}]], id="dict-to-list"),
        pytest.param([["a"], ("a", "b"), ["a", "b"]], id="list-tuple-list"),
    ],
)
def test_a_replaced_value_reads_as_replaced_at_every_checkpoint(
    checkpointer: Checkpointer, versions: list[Any]
) -> None:
    """Lists replaced by other lists or other types read back exactly, version by version."""
    ids = put_chain(checkpointer, "t", ({"v": version} for version in versions))

    for checkpoint_id, version in zip(ids, versions, strict=True):
        assert typed({"v": version}) == typed(channels_at(checkpointer, "t", checkpoint_id))


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param({"n": 1}, {"n": True}, id="dict-int-to-bool"),
        pytest.param([1], [1.0], id="list-int-to-float"),
        pytest.param([1], [True, 2], id="list-prefix-int-to-bool"),
    ],
)
def test_a_value_changing_type_but_not_equality_is_stored(
    checkpointer: Checkpointer, before: Any, after: Any
) -> None:
    """A child whose value equals its parent's under ``==`` but differs in type reads as the child's."""
    put_chain(checkpointer, "t", [{"v": before}, {"v": after}])

    assert typed({"v": after}) == typed(channels_at(checkpointer, "t"))


def test_a_channel_removed_in_a_child_is_absent_there_only(checkpointer: Checkpointer) -> None:
    """A channel missing from a child is not inherited from its parent; the parent keeps it."""
    put_chain(checkpointer, "t", [{"a": 1, "log": ["x"], "gone": {"k": 1}}, {"a": 1}, {"a": 2, "log": ["y"]}])

    assert {"a": 1, "log": ["x"], "gone": {"k": 1}} == channels_at(checkpointer, "t", cid(0))
    assert {"a": 1} == channels_at(checkpointer, "t", cid(1))
    assert {"a": 2, "log": ["y"]} == channels_at(checkpointer, "t", cid(2))


def test_the_branches_of_a_fork_keep_their_own_items(checkpointer: Checkpointer) -> None:
    """Two children of one parent append different items; both read right and the parent is unchanged."""
    put = checkpointer.put
    put("t", make_checkpoint("t", "c0001", log=["a"], note="root"))
    put("t", make_checkpoint("t", "c0002", "c0001", log=["a", "b"], note="left"))
    put("t", make_checkpoint("t", "c0003", "c0001", log=["a", "c"], note="root"))
    put("t", make_checkpoint("t", "c0004", "c0002", log=["a", "b", "d"], note="left"))
    put("t", make_checkpoint("t", "c0005", "c0003", log=["a", "c", "e"], note="right"))
    put("t", make_checkpoint("t", "c0006", "c0002", log=["a", "b", "f"], note="left again"))

    assert {"log": ["a"], "note": "root"} == channels_at(checkpointer, "t", "c0001")
    assert {"log": ["a", "b"], "note": "left"} == channels_at(checkpointer, "t", "c0002")
    assert {"log": ["a", "c"], "note": "root"} == channels_at(checkpointer, "t", "c0003")
    assert {"log": ["a", "b", "d"], "note": "left"} == channels_at(checkpointer, "t", "c0004")
    assert {"log": ["a", "c", "e"], "note": "right"} == channels_at(checkpointer, "t", "c0005")
    assert {"log": ["a", "b", "f"], "note": "left again"} == channels_at(checkpointer, "t", "c0006")


def test_a_deep_chain_has_every_item_in_order(checkpointer: Checkpointer) -> None:
    """200 checkpoints appending one item each: the latest has all 200, a middle one its prefix."""
    ids = put_chain(checkpointer, "t", ({"log": list(range(n + 1)), "n": n} for n in range(200)))

    assert {"log": list(range(200)), "n": 199} == channels_at(checkpointer, "t")
    assert {"log": list(range(100)), "n": 99} == channels_at(checkpointer, "t", ids[99])
    assert 200 == len(checkpointer.list("t"))


def test_an_empty_list_channel_reads_as_an_empty_list_and_grows(checkpointer: Checkpointer) -> None:
    """``[]`` comes back as ``[]`` (a list) and can then be appended to."""
    put_chain(checkpointer, "t", [{"log": []}, {"log": ["a"]}])

    assert typed({"log": []}) == typed(channels_at(checkpointer, "t", cid(0)))
    assert {"log": ["a"]} == channels_at(checkpointer, "t", cid(1))


def test_a_child_of_an_unknown_parent_stores_its_full_values(checkpointer: Checkpointer) -> None:
    """A checkpoint whose parent was never stored still reads back whole."""
    checkpointer.put("t", make_checkpoint("t", "c0005", "c0004", log=["a", "b"], n=5))

    assert {"log": ["a", "b"], "n": 5} == channels_at(checkpointer, "t")


# --- read_channel -------------------------------------------------------------------------

LONG = [{"i": i} for i in range(1000)]


@pytest.fixture
def long_list(checkpointer: Checkpointer) -> Checkpointer:
    """Thread ``t``: c0001 has 600 items, c0002 all 1,000 of ``LONG``, fork c0003 (of c0001) one more."""
    checkpointer.put("t", make_checkpoint("t", "c0001", log=LONG[:600], text="not a list"))
    checkpointer.put("t", make_checkpoint("t", "c0002", "c0001", log=LONG, text="not a list"))
    checkpointer.put("t", make_checkpoint("t", "c0003", "c0001", log=[*LONG[:600], "fork"], text="x"))
    # c0004 continues the main line, so the latest is the 1,000-item list.
    checkpointer.put("t", make_checkpoint("t", "c0004", "c0002", log=LONG, text="not a list"))
    return checkpointer


def test_read_channel_pages_through_a_long_list(long_list: Checkpointer) -> None:
    """Pages of any size, read in turn, add up to the whole list of the latest checkpoint."""
    pages = [long_list.read_channel("t", "log", offset, 128) for offset in range(0, 1000, 128)]

    assert [128] * 7 + [104] == [len(page) for page in pages]
    assert LONG == [item for page in pages for item in page]
    assert LONG == long_list.read_channel("t", "log")


@pytest.mark.parametrize(
    ("offset", "limit", "expected"),
    [
        (0, 3, LONG[:3]),
        (595, 10, LONG[595:605]),
        (995, None, LONG[995:]),
        (990, 50, LONG[990:]),
        (1000, None, []),
        (5000, 10, []),
        (10, 0, []),
    ],
)
def test_read_channel_reads_the_asked_slice(
    long_list: Checkpointer, offset: int, limit: int | None, expected: list[Any]
) -> None:
    """Items ``[offset, offset + limit)``, cut short at the end of the list."""
    assert expected == long_list.read_channel("t", "log", offset, limit)


def test_read_channel_reads_an_older_checkpoint_by_id(long_list: Checkpointer) -> None:
    """``checkpoint_id`` reads that checkpoint's list, not the latest one's."""
    assert LONG[:600] == long_list.read_channel("t", "log", checkpoint_id="c0001")
    assert LONG[590:600] == long_list.read_channel("t", "log", 590, 50, checkpoint_id="c0001")


def test_read_channel_reads_a_forks_own_items(long_list: Checkpointer) -> None:
    """A fork's list is its parent's prefix plus its own items, also across the fork point."""
    assert [*LONG[598:600], "fork"] == long_list.read_channel("t", "log", 598, 10, checkpoint_id="c0003")
    assert 601 == len(long_list.read_channel("t", "log", checkpoint_id="c0003"))


def test_read_channel_of_a_never_written_channel_is_empty(long_list: Checkpointer) -> None:
    """A channel the checkpoint does not have reads as ``[]``."""
    assert [] == long_list.read_channel("t", "never")
    assert [] == long_list.read_channel("t", "never", 5, 5, checkpoint_id="c0001")


def test_read_channel_pages_a_list_stored_whole(checkpointer: Checkpointer) -> None:
    """A list that replaced a longer one pages like any other."""
    put_chain(checkpointer, "t", [{"log": ["a", "b", "c", "d"]}, {"log": ["x", "y", "z"]}])

    assert ["y", "z"] == checkpointer.read_channel("t", "log", 1)
    assert ["x"] == checkpointer.read_channel("t", "log", 0, 1)
    assert ["b", "c"] == checkpointer.read_channel("t", "log", 1, 2, checkpoint_id=cid(0))


@pytest.mark.parametrize(
    ("thread_id", "checkpoint_id"),
    [("t", "c0009"), ("nobody", None), ("nobody", "c0001"), ("other", "c0001")],
)
def test_read_channel_of_a_missing_checkpoint_raises(
    long_list: Checkpointer, thread_id: str, checkpoint_id: str | None
) -> None:
    """An unknown checkpoint, an unknown thread or another thread's checkpoint is CheckpointNotFoundError."""
    long_list.put("other", make_checkpoint("other", "c0002"))

    with pytest.raises(CheckpointNotFoundError):
        long_list.read_channel(thread_id, "log", checkpoint_id=checkpoint_id)


@pytest.mark.parametrize("value", ["a string", {"k": [1]}, 42, None])
def test_read_channel_of_a_channel_holding_no_list_is_a_type_error(
    checkpointer: Checkpointer, value: Any
) -> None:
    """A channel holding a str, dict, int or None cannot be paged: TypeError."""
    checkpointer.put("t", make_checkpoint("t", "c0001", value=value))

    with pytest.raises(TypeError):
        checkpointer.read_channel("t", "value")
