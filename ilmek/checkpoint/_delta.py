"""Channel storage that grows with the work, not with the history.

A stored checkpoint does not hold its channel values; it holds a *manifest*
that says where each value lives:

* a **blob** (``BlobRef``): a whole value, written once when the value
  changed and shared by every later checkpoint until it changes again;
* a **log** (``LogRef``): a list stored one item per row. A checkpoint sees
  the first ``length`` items. Appending to a list writes only the new items.
  When a checkpoint appends to a list whose log has already grown past it
  (a fork), a child log starts at that point; the items before it are read
  from the parent log, so forks share their ancestors' items.

This module holds that algorithm once. A backend supplies the few storage
primitives of :class:`DeltaStore` (dicts in memory, rows in SQL), so every
backend stores the same way.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from .. import forks, serde
from ..types import ChannelChange, Extend, Replace
from ._held import held_bytes, held_bytes_of_items
from ._records import EncodedChange, channel_slot, corrupt, decode_stored_value
from ._sealing import Sealer

__all__ = [
    "BlobRef",
    "DeltaStore",
    "LogInfo",
    "LogRef",
    "ValueCache",
    "blob_ids",
    "diff_channels",
    "extend_cached_logs",
    "manifest_from_plain",
    "manifest_to_plain",
    "read_channel_slice",
    "read_channels",
    "same_value",
    "write_channels",
]


@attrs.frozen
class BlobRef:
    """A channel value stored whole, as blob ``blob_id``."""

    blob_id: int


@attrs.frozen
class LogRef:
    """A list channel: the first ``length`` items of log ``log_id`` (and its ancestors)."""

    log_id: int
    length: int


ChannelRef = BlobRef | LogRef


@attrs.frozen
class LogInfo:
    """A log: items from ``base`` on stored under it, the ones before inherited from ``parent_id``."""

    log_id: int
    parent_id: int | None
    base: int


def manifest_to_plain(manifest: Mapping[str, ChannelRef]) -> dict[str, list[Any]]:
    """A manifest as JSON-able data: ``{"ch": ["b", id]}`` or ``{"ch": ["l", id, length]}``."""
    plain: dict[str, list[Any]] = {}
    for name, ref in manifest.items():
        if isinstance(ref, BlobRef):
            plain[name] = ["b", ref.blob_id]
        else:
            plain[name] = ["l", ref.log_id, ref.length]
    return plain


def _stored_int(value: Any) -> bool:
    return type(value) is int and 0 <= value < 2**63


def manifest_from_plain(
    plain: Any, *, thread_id: str, checkpoint_id: str | None = None
) -> dict[str, ChannelRef]:
    """The inverse of :func:`manifest_to_plain`, checking every part of it.

    Raises:
        CorruptCheckpointError: the stored manifest is malformed.
    """
    if not isinstance(plain, dict):
        raise corrupt(
            "its channel manifest is not an object", thread_id=thread_id, checkpoint_id=checkpoint_id
        )
    manifest: dict[str, ChannelRef] = {}
    for name, ref in plain.items():
        if isinstance(ref, list) and len(ref) == 2 and ref[0] == "b" and _stored_int(ref[1]):
            manifest[name] = BlobRef(ref[1])
        elif (
            isinstance(ref, list)
            and len(ref) == 3
            and ref[0] == "l"
            and _stored_int(ref[1])
            and _stored_int(ref[2])
        ):
            manifest[name] = LogRef(ref[1], ref[2])
        else:
            raise corrupt(
                f"channel {name!r} has a malformed stored reference {_short(ref)}",
                thread_id=thread_id,
                checkpoint_id=checkpoint_id,
            )
    return manifest


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def blob_ids(manifests: Iterable[Mapping[str, ChannelRef]]) -> set[int]:
    """The blobs some of these manifests still point at (what pruning must keep)."""
    return {ref.blob_id for manifest in manifests for ref in manifest.values() if isinstance(ref, BlobRef)}


class DeltaStore(Protocol):
    """The storage primitives a backend provides; each acts inside the caller's transaction.

    Stored values go in and come out as stored (sealed, with a keyring):
    this module opens them, knowing which channel each belongs to. Each
    row keeps its *origin* beside it: the checkpoint that wrote it (``None``
    in rows stored before ilmek recorded it), part of what its value is
    sealed to.
    """

    #: How the store's values are sealed and opened.
    sealer: Sealer

    def insert_blob(self, thread_id: str, channel: str, origin: str, text: str) -> int:
        """Store a whole value written by checkpoint ``origin``; return its new blob id."""

    def fetch_blobs(self, thread_id: str, blob_ids: Sequence[int]) -> dict[int, tuple[str | None, Any]]:
        """``(origin, stored value)`` (text, or JSON a driver parsed) of the given blobs of the thread."""

    def create_log(self, thread_id: str, channel: str, parent_id: int | None, base: int, length: int) -> int:
        """Start a log holding items ``[base, length)``; return its id."""

    def append_items(
        self, thread_id: str, log_id: int, start: int, origin: str, texts: Sequence[str]
    ) -> bool:
        """Store items at ``start, start + 1, ...`` of the thread's log if ``start`` is its end.

        Returns:
            False, storing nothing, when the log already has an item at
            ``start`` (a fork grew it) or is not the thread's.
        """

    def insert_items(
        self, thread_id: str, log_id: int, start: int, origin: str, texts: Sequence[str]
    ) -> None:
        """Store items at indices ``start, start + 1, ...`` of a log just created."""

    def fetch_logs(self, thread_id: str) -> dict[int, LogInfo]:
        """Every log of the thread."""

    def fetch_items(
        self, thread_id: str, spans: Sequence[tuple[int, int, int]]
    ) -> dict[int, list[tuple[int, str | None, Any]]]:
        """``(index, origin, stored value)`` of the items of each ``(log_id, start, stop)`` span, by log.

        The spans name distinct logs (a log appears once in any list's ancestry).
        """


def _blob_values(store: DeltaStore, thread_id: str, wanted: Mapping[int, str]) -> dict[int, Any]:
    """The values of blobs (by id, with the channel each is read as), opened and decoded."""
    found = store.fetch_blobs(thread_id, list(wanted))
    return {
        blob_id: decode_stored_value(
            channel_slot(store.sealer, thread_id, wanted[blob_id], origin=origin),
            stored,
            thread_id=thread_id,
            table="blobs",
        )
        for blob_id, (origin, stored) in found.items()
        if blob_id in wanted
    }


def _item_values(
    store: DeltaStore, thread_id: str, plan: Mapping[str, Sequence[tuple[int, int, int]]]
) -> dict[int, list[Any]]:
    """The items of each channel's spans (one fetch for all), each opened at its place in its channel."""
    fetched = store.fetch_items(thread_id, [span for spans in plan.values() for span in spans])
    sealer = store.sealer
    values: dict[int, list[Any]] = {}
    for channel, spans in plan.items():
        for log_id, _start, _stop in spans:
            values[log_id] = [
                decode_stored_value(
                    channel_slot(sealer, thread_id, channel, origin=origin, index=index),
                    stored,
                    thread_id=thread_id,
                    table="items",
                )
                for index, origin, stored in fetched.get(log_id, ())
            ]
    return values


def same_value(left: Any, right: Any) -> bool:
    """Whether two values would be stored alike: equal, and of the same types all the way down.

    Plain ``==`` is not enough: ``1 == True == 1.0``, yet each is stored
    differently and must come back as itself.
    """
    if left is right:
        return True
    if type(left) is not type(right):
        return False
    if type(left) in (list, tuple):
        return len(left) == len(right) and all(same_value(a, b) for a, b in zip(left, right, strict=True))
    if type(left) is dict:
        return left.keys() == right.keys() and all(same_value(left[k], right[k]) for k in left)
    if type(left) is float:
        return repr(left) == repr(right)  # tells -0.0 from 0.0, and NaN equals NaN
    return bool(left == right)


def diff_channels(parent: Mapping[str, Any] | None, channels: Mapping[str, Any]) -> dict[str, ChannelChange]:
    """What changed from ``parent`` to ``channels``, for a checkpoint put without a hint.

    A list that only grew becomes an :class:`Extend`; any other changed or
    new value a :class:`Replace`.
    """
    changes: dict[str, ChannelChange] = {}
    for name, value in channels.items():
        if parent is not None and name in parent:
            before = parent[name]
            if (
                type(before) is list
                and type(value) is list
                and len(value) >= len(before)
                and all(same_value(a, b) for a, b in zip(before, value[: len(before)], strict=True))
            ):
                if len(value) > len(before):
                    changes[name] = Extend(tuple(value[len(before) :]))
                continue
            if same_value(before, value):
                continue
        elif type(value) is list:
            changes[name] = Extend(tuple(value))
            continue
        changes[name] = Replace(value)
    return changes


def write_channels(
    store: DeltaStore,
    thread_id: str,
    parent_manifest: Mapping[str, ChannelRef],
    changes: Sequence[EncodedChange],
    keep: set[str] | None = None,
) -> dict[str, ChannelRef]:
    """Store ``changes`` on top of the parent's manifest; return the new manifest.

    Args:
        store: The backend's primitives, inside its open write transaction.
        thread_id: The thread.
        parent_manifest: Where the parent checkpoint's values live.
        changes: The encoded changes.
        keep: When given, the channels the new checkpoint has; any other
            channel of the parent is dropped from the manifest.
    """
    manifest: dict[str, ChannelRef] = {
        name: ref for name, ref in parent_manifest.items() if keep is None or name in keep
    }
    for change in changes:
        name, origin = change.channel, change.origin
        if change.items is None:
            assert change.value is not None
            manifest[name] = BlobRef(store.insert_blob(thread_id, name, origin, change.value))
            continue
        texts = list(change.items)
        ref = manifest.get(name)
        if isinstance(ref, LogRef):
            if not texts:
                continue
            new_length = ref.length + len(texts)
            log_id = ref.log_id
            # The items' positions are the list's, in a forked child log too.
            stored = change.stored_items(texts, ref.length)
            if not store.append_items(thread_id, log_id, ref.length, origin, stored):
                log_id = store.create_log(thread_id, name, ref.log_id, ref.length, new_length)
                store.insert_items(thread_id, log_id, ref.length, origin, stored)
            manifest[name] = LogRef(log_id, new_length)
            continue
        if isinstance(ref, BlobRef):
            # The list was stored whole until now: move it into a log once.
            found = _blob_values(store, thread_id, {ref.blob_id: name})
            before = found.get(ref.blob_id)
            if not isinstance(before, list):
                raise corrupt(
                    f"channel {name!r} should hold a list before its items are appended",
                    thread_id=thread_id,
                    table="blobs",
                )
            texts = [serde.encode(item, where=f"channel {name!r}") for item in before] + texts
        log_id = store.create_log(thread_id, name, None, 0, len(texts))
        store.insert_items(thread_id, log_id, 0, origin, change.stored_items(texts, 0))
        manifest[name] = LogRef(log_id, len(texts))
    return manifest


def _spans(
    logs: Mapping[int, LogInfo], log_id: int, start: int, stop: int, *, thread_id: str
) -> list[tuple[int, int, int]]:
    """The ``(log, start, stop)`` pieces that make up items ``[start, stop)`` of a log.

    Raises:
        CorruptCheckpointError: the logs' parent pointers loop, or items are missing.
    """
    spans: list[tuple[int, int, int]] = []
    current: LogInfo | None = logs.get(log_id)
    upper = stop
    seen: set[int] = set()
    while current is not None and upper > start:
        if current.log_id in seen or current.base < 0:
            raise corrupt(
                f"the stored logs of list {log_id} loop or are malformed", thread_id=thread_id, table="logs"
            )
        seen.add(current.log_id)
        lower = max(current.base, start)
        if lower < upper:
            spans.append((current.log_id, lower, upper))
        upper = min(upper, current.base)
        current = logs.get(current.parent_id) if current.parent_id is not None else None
    if upper > start:
        raise corrupt(f"list {log_id} is missing items {start}..{upper}", thread_id=thread_id, table="logs")
    spans.reverse()
    return spans


class ValueCache:
    """Decoded stored data that never changes once written, shared by reads in one process.

    Log items and checkpoint manifests are immutable, so a cached value is
    always right; a log read at a greater length fetches only the items it
    is missing. Bounded by the memory what it holds occupies (each entry's
    size measured by :func:`ilmek.checkpoint._held.held_bytes` when it is
    put, and grown by what is appended to it).
    """

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._size = 0
        self._lock = forks.ForkSafeLock()

    def get(self, key: Hashable) -> Any:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: Hashable, value: Any, size: int) -> None:
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._size -= old[1]
            self._entries[key] = (value, size)
            self._size += size
            self._evict_over_bound()

    def grow(self, key: Hashable, added: int) -> None:
        """Count ``added`` more bytes for an entry whose value was extended in place."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return
            value, size = found
            if size + added > self.max_bytes:
                del self._entries[key]
                self._size -= size
                return
            self._entries[key] = (value, size + added)
            self._entries.move_to_end(key)
            self._size += added
            self._evict_over_bound()

    def discard(self, key: Hashable) -> None:
        """Forget ``key``'s entry, if there is one."""
        with self._lock:
            found = self._entries.pop(key, None)
            if found is not None:
                self._size -= found[1]

    def _evict_over_bound(self) -> None:
        # Under the lock: the least recently used entries go until the rest fit.
        while self._size > self.max_bytes and self._entries:
            _, (_, evicted) = self._entries.popitem(last=False)
            self._size -= evicted

    @property
    def held(self) -> int:
        """The bytes its entries are counted as holding."""
        return self._size

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._size = 0


class _Items(list):  # type: ignore[type-arg]
    """A cached log's decoded items: only ever appended to, under the cache's write path.

    Its items are never handed out; readers copy the slice they need, so a
    later append (another commit of this process) cannot change what a read
    returned. Appends only happen after a commit that extended the log at its
    end, so the first ``n`` items a reader slices never change.
    """


def read_channels(
    store: DeltaStore,
    thread_id: str,
    manifest: Mapping[str, ChannelRef],
    cache: ValueCache | None = None,
    *,
    remember: bool = True,
) -> dict[str, Any]:
    """The channel values a manifest points at, in a bounded number of reads.

    Blobs are fetched in one call, logs' ancestry in one, and the missing
    items of every list in one more, however long the history. The cache,
    keyed by thread, serves items already known; ``remember=False`` (a read
    inside a transaction that may still roll back) adds nothing to it, nor
    does a read inside :func:`ilmek.serde.showing_unregistered`.
    """
    # Placeholders for unregistered classes are for display only: never cached.
    remember = remember and not serde.shows_unregistered()
    values: dict[str, Any] = {}
    blob_ids = {ref.blob_id: name for name, ref in manifest.items() if isinstance(ref, BlobRef)}
    if blob_ids:
        blobs = _blob_values(store, thread_id, blob_ids)
        for name, ref in manifest.items():
            if isinstance(ref, BlobRef):
                if ref.blob_id not in blobs:
                    raise corrupt(
                        f"channel {name!r} points at a value (blob {ref.blob_id}) this thread does not have",
                        thread_id=thread_id,
                        table="blobs",
                    )
                values[name] = blobs[ref.blob_id]
    log_refs = {name: ref for name, ref in manifest.items() if isinstance(ref, LogRef)}
    if log_refs:
        values.update(_read_logs(store, thread_id, log_refs, cache, remember))
    return values


def _read_logs(
    store: DeltaStore,
    thread_id: str,
    refs: Mapping[str, LogRef],
    cache: ValueCache | None,
    remember: bool,
) -> dict[str, list[Any]]:
    known: dict[str, list[Any]] = {}
    need: dict[str, LogRef] = {}
    for name, ref in refs.items():
        cached = cache.get(("l", thread_id, ref.log_id)) if cache is not None else None
        if cached is not None and len(cached) >= ref.length:
            # A slice of the cached list is a new plain list: the one copy a read needs.
            known[name] = cached[: ref.length]
        else:
            known[name] = list(cached) if cached is not None else []
            need[name] = ref
    if need:
        plan: dict[str, list[tuple[int, int, int]]] = {}
        logs: dict[int, LogInfo] | None = None
        for name, ref in need.items():
            start = len(known[name])
            base = cache.get(("base", thread_id, ref.log_id)) if cache is not None else None
            if base is not None and start >= base:
                # Only this log's own items are missing: no need to walk its ancestry.
                plan[name] = [(ref.log_id, start, ref.length)]
                continue
            if logs is None:
                logs = store.fetch_logs(thread_id)
                if cache is not None and remember:
                    for info in logs.values():
                        cache.put(("base", thread_id, info.log_id), info.base, 1)
            plan[name] = _spans(logs, ref.log_id, start, ref.length, thread_id=thread_id)
        fetched = _item_values(store, thread_id, plan)
        for name, spans in plan.items():
            items = known[name]
            for log_id, _start, _stop in spans:
                items.extend(fetched.get(log_id, ()))
            if len(items) != need[name].length:
                raise corrupt(
                    f"channel {name!r} should hold {need[name].length} items, found {len(items)}",
                    thread_id=thread_id,
                    table="items",
                )
            if cache is not None and remember:
                cached_items = _Items(items)
                cache.put(("l", thread_id, need[name].log_id), cached_items, held_bytes(cached_items))
    return known


def extend_cached_logs(
    cache: ValueCache,
    thread_id: str,
    parent_manifest: Mapping[str, ChannelRef],
    manifest: Mapping[str, ChannelRef],
    changes: Sequence[EncodedChange],
    decode: Callable[[str], Any] = serde.decode,
) -> None:
    """After a commit ilmek owns, grow the cached lists by the items it appended.

    The next read of the thread then finds them here instead of asking the
    database for what this process just wrote (a new list's items too).
    Items are decoded from their stored text, so the cache never shares
    objects with the caller, by ``decode``: as the store gives them back
    (on Postgres a dict's keys come back in ``jsonb``'s order). Never call
    it for writes inside the caller's transaction.
    """
    for change in changes:
        if change.items is None:
            continue
        before, after = parent_manifest.get(change.channel), manifest.get(change.channel)
        if not isinstance(after, LogRef):
            continue
        if not (isinstance(before, LogRef) and before.log_id == after.log_id):
            if after.length == len(change.items):
                # A log made for this commit that holds exactly its items (a
                # new list): the thread's next read finds them here.
                items = _Items(decode(text) for text in change.items)
                cache.put(("l", thread_id, after.log_id), items, held_bytes(items))
                # It starts the list (its base is 0): a read of items appended elsewhere needs no ancestry.
                cache.put(("base", thread_id, after.log_id), 0, 1)
            continue
        key = ("l", thread_id, after.log_id)
        cached = cache.get(key)
        if isinstance(cached, _Items) and len(cached) == before.length:
            # Grown in place (amortized O(new items), not a copy of the history):
            # readers only ever take a slice of the first ``length`` items.
            added = [decode(text) for text in change.items]
            cached.extend(added)
            # A list's slots grow by one pointer per item, amortized.
            cache.grow(key, held_bytes_of_items(added) + 8 * len(added))


def read_channel_slice(
    store: DeltaStore,
    thread_id: str,
    channel: str,
    ref: ChannelRef,
    offset: int,
    limit: int | None,
) -> list[Any]:
    """Items ``[offset, offset + limit)`` of list channel ``channel``, reading only those."""
    if isinstance(ref, BlobRef):
        found = _blob_values(store, thread_id, {ref.blob_id: channel})
        if ref.blob_id not in found:
            raise corrupt(
                f"the channel points at a value (blob {ref.blob_id}) this thread does not have",
                thread_id=thread_id,
                table="blobs",
            )
        value = found[ref.blob_id]
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"the channel holds {type(value).__name__}, not a list")
        stop = len(value) if limit is None else offset + limit
        return list(value[offset:stop])
    stop = ref.length if limit is None else min(ref.length, offset + limit)
    if offset >= stop:
        return []
    logs = store.fetch_logs(thread_id)
    spans = _spans(logs, ref.log_id, offset, stop, thread_id=thread_id)
    fetched = _item_values(store, thread_id, {channel: spans})
    items: list[Any] = []
    for log_id, _start, _stop in spans:
        items.extend(fetched.get(log_id, ()))
    return items
