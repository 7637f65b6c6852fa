"""The ids ilmek makes: run and thread ids, checkpoint ids across processes, a pause's task key."""

from __future__ import annotations

import os
import uuid

import pytest

import ilmek
from ilmek import channel
from ilmek.types import new_checkpoint_id, new_random_id


def test_random_ids_are_version_4_uuids_in_hex() -> None:
    """Run and thread ids keep the shape of ``uuid.uuid4().hex`` (32 digits, version 4, RFC 4122)."""
    ids = [new_random_id() for _ in range(200)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(hex=text)
        assert (32, text, 4, uuid.RFC_4122) == (len(text), parsed.hex, parsed.version, parsed.variant)


def test_a_run_names_itself_and_a_new_thread_with_random_ids() -> None:
    """A run without a thread id gets a fresh one; each run gets its own run id."""
    g = ilmek.graph("ids", {"n": channel.last_write(0)})
    g = g.node("a", lambda state, ctx: {"n": state["n"] + 1}).edge(ilmek.START, "a").edge("a", ilmek.END)
    compiled = g.compile()
    first, second = ilmek.run(compiled, {"n": 1}), ilmek.run(compiled, {"n": 1})
    names = [first.run_id, second.run_id, first.thread_id, second.thread_id]
    assert 4 == len(set(names))
    assert all(uuid.UUID(hex=name).version == 4 for name in names)


def test_checkpoint_ids_increase_within_a_process() -> None:
    """Ids made one after another sort in the order they were made, even within one millisecond."""
    ids = [new_checkpoint_id() for _ in range(2000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_an_id_after_a_later_clock_still_sorts_after_it() -> None:
    """Given a thread's latest id from a machine whose clock runs ahead, the new id sorts after it."""
    ahead = f"{(1 << 47) - 1:012x}-0003-00000000"
    new = new_checkpoint_id(after=ahead)
    assert new > ahead


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_tells_its_ids_apart_from_its_parents() -> None:
    """A forked child draws its own process tag: its ids differ from the parent's in the last part."""
    parent_tag = new_checkpoint_id().rsplit("-", 1)[1]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its tag and leave without running pytest's teardown
        try:
            os.write(write_end, new_checkpoint_id().rsplit("-", 1)[1].encode())
        finally:
            os._exit(0)
    os.close(write_end)
    child_tag = os.read(read_end, 64).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    assert 8 == len(child_tag)
    assert child_tag != parent_tag
    assert parent_tag == new_checkpoint_id().rsplit("-", 1)[1]


@pytest.mark.parametrize(
    ("pause_id", "key", "task_key"),
    [
        ("review:interrupt#0", "interrupt#0", "review"),
        ("ask:a:b#2:approve", "approve", "ask:a:b#2"),  # node names may hold ':' and '#'
        ("send:3:ask:interrupt#1", "interrupt#1", "send:3:ask"),
        ("odd", "interrupt#0", "odd"),  # a stored id without the ending: the id itself
    ],
)
def test_a_pause_names_its_task_by_its_id_without_the_key(pause_id: str, key: str, task_key: str) -> None:
    """Pending.task_key is the id less ``:<key>``, however many ``:`` the node's name holds."""
    pause = ilmek.Pending(id=pause_id, task_id="j", node="n", key=key)
    assert task_key == pause.task_key
