"""The value cache's bound bounds memory: it counts what its entries hold, not a guess per item.

On a SQLite file and on Postgres, where values live in the database and all
a process keeps of them between reads is its cache: 20 threads of eight
128 KB items each (20 MB of text) written and read back through a cache
bounded at 2 MB keep about 2 MB alive (tracemalloc), not the 20 MB an
item-counting bound let through (it counted 64 bytes per item, 8 KB here).
"""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import pytest

from ilmek import START, channel, graph, run
from ilmek.checkpoint._delta import ValueCache
from ilmek.checkpoint._held import held_bytes
from tests.support.stores import Store, store_fixture  # noqa: F401 - the store fixture

pytestmark = pytest.mark.timeout(120)

ITEM = 128 * 1024
ITEMS = 8
THREADS = 20
BOUND = 2 * 1024 * 1024


def big_items(thread: int) -> list[str]:
    return [f"{thread:02d}-{index}-" + "x" * ITEM for index in range(ITEMS)]


def values_cache(checkpointer: Any) -> ValueCache:
    cache = checkpointer._reads.values
    assert isinstance(cache, ValueCache)
    return cache


def test_held_bytes_counts_the_items_it_reaches() -> None:
    """A list of eight 128 KB strings holds over 1 MB; a shared list is counted once (a shared string at
    each place, erring high); dicts, tuples and bytes inside are counted."""
    items = big_items(0)
    assert held_bytes(items) >= ITEMS * ITEM
    shared = ["y" * ITEM]
    assert held_bytes([shared, shared, shared]) < 2 * ITEM
    text = "y" * ITEM
    assert held_bytes([text, text]) >= 2 * ITEM
    assert held_bytes({"a": [text], "b": (1.5, None, b"z" * ITEM)}) >= 2 * ITEM


def test_a_cache_bounded_at_2_mb_holds_about_2_mb_of_20_mb_read(store: Store) -> None:
    checkpointer = store.open()
    cache = values_cache(checkpointer)
    cache.max_bytes = BOUND
    flow = (
        graph("big", {"log": channel.append()})
        .node("grow", lambda state: {"log": ["grown"]})
        .edge(START, "grow")
        .compile()
    )
    try:
        gc.collect()
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            for thread in range(THREADS):
                # Written (the commit grows the cached list), then read cold (the read fills it).
                result = run(
                    flow, {"log": big_items(thread)}, thread_id=f"big-{thread}", checkpointer=checkpointer
                )
                assert "done" == result.status, result
                del result
            cache.clear()
            for thread in range(THREADS):
                state = checkpointer.get(f"big-{thread}")
                assert state is not None
                assert ITEMS + 1 == len(state.channels["log"])
                assert state.channels["log"][0].startswith(f"{thread:02d}-0-")
                del state
            gc.collect()
            after, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # The cache's 2 MB and the store's own small caches; 20 MB read went through.
        assert after - before < 2 * BOUND, f"{(after - before) / 1e6:.1f} MB still held after the reads"
        assert cache.held <= BOUND
        assert cache.held > 0, "the cache kept nothing: the bound only holds if something is cached"
    finally:
        checkpointer.close()


def test_an_entry_grown_past_the_bound_is_dropped() -> None:
    """A cached list appended to in place is counted as it grows, and leaves once it alone is too big."""
    cache = ValueCache(max_bytes=ITEMS * ITEM)
    items = big_items(0)[:4]
    cache.put("log", items, held_bytes(items))
    assert cache.get("log") is items
    grown = big_items(1)
    items.extend(grown)
    cache.grow("log", held_bytes(grown))
    assert cache.get("log") is None
    assert 0 == cache.held
