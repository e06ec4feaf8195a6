"""BlockTracker: the tracker's rules applied to columnar message blocks by compiled loops.

Same decisions as `acker.core.tracker.Tracker` for the same messages, and the same counters; outcomes come
back as an `OutcomeBlock` in decision order (within one tick, in table order rather than insertion order: the
order of a tick's outcomes is unspecified for both). Memory: 45 bytes a slot at a load factor kept between 1/8
and 1/2 while the table is large, i.e. 90 to 360 bytes per pending tree (or tombstone), 94 at one million;
message-id sources (spout, ``topic/partition``) are interned: a few per partition for record coordinates. A message
id that is not of the form ``<source>/<offset>`` is interned whole, one source per tree; sources no pending tree
refers to any more are dropped once they outnumber the pending trees (`_compact_sources`), so such ids cost memory
only while their trees are pending.

Not thread-safe.
"""

from __future__ import annotations

import numpy as np

from acker.columnar import _kernels as k
from acker.columnar.block import MessageBlock, OutcomeBlock, RecordSpans, Source
from acker.core.messages import TICK, Ack, Init
from acker.core.tracker import Counters, TrackerConfig

_MIN_SHIFT_CAPACITY = 1 << 10
_SOURCES_KEPT = 4096  # interned sources kept before compaction is considered (coordinates need a few per partition)


def _capacity(current: int, needed: int) -> int:
    """A power of two keeping the load between 1/8 and 1/2 (no smaller than the minimum)."""
    want = current
    while needed * 2 > want:
        want *= 2
    while want > _MIN_SHIFT_CAPACITY and needed * 8 < want:
        want //= 2
    return want


class BlockTracker:
    __slots__ = (
        "_counters",
        "_shift",
        "_source_index",
        "_sources",
        "_state",
        "_table",
        "_tomb_counts",
        "_tomb_firsts",
        "_tomb_shift",
        "_tombs",
        "config",
    )

    def __init__(self, config: TrackerConfig | None = None, capacity: int = _MIN_SHIFT_CAPACITY) -> None:
        self.config = config or TrackerConfig()
        cap = max(_MIN_SHIFT_CAPACITY, 1 << max(0, capacity - 1).bit_length())
        self._shift = 64 - cap.bit_length() + 1
        self._table: k.Table = k.empty_table(cap)
        self._tombs = np.zeros((self.config.buckets + 1, _MIN_SHIFT_CAPACITY), np.int64)
        self._tomb_firsts = np.zeros((self.config.buckets + 1, _MIN_SHIFT_CAPACITY), np.uint32)
        self._tomb_counts = np.zeros(self.config.buckets + 1, np.int64)
        self._tomb_shift = 64 - _MIN_SHIFT_CAPACITY.bit_length() + 1
        self._state = np.zeros(3, np.int64)
        self._counters = np.zeros(10, np.int64)
        self._sources: list[Source] = []
        self._source_index: dict[Source, int] = {}

    @property
    def capacity(self) -> int:
        return int(self._table[0].shape[0])

    @property
    def pending(self) -> int:
        return int(self._state[k.S_PENDING])

    @property
    def tick_count(self) -> int:
        return int(self._state[k.S_GENERATION])

    @property
    def counters(self) -> Counters:
        return Counters(*(int(c) for c in self._counters))

    def table_bytes(self) -> int:
        """Bytes held by the table and tombstone arrays (the tracker's memory apart from interned sources)."""
        return sum(int(a.nbytes) for a in self._table) + int(self._tombs.nbytes) + int(self._tomb_firsts.nbytes)

    def _resize_for(self, opening: int, burying: int) -> None:
        """Room for ``opening`` more pending entries and ``burying`` more tombstones in any one set; shrink what is
        mostly empty."""
        self._shift, self._table = self._sized(self._shift, self._table, int(self._state[k.S_ENTRIES]), opening)
        cap = self._tombs.shape[1]
        fullest = int(self._tomb_counts.max())
        want = _capacity(cap, fullest + burying)
        if want != cap:
            self._tomb_shift = 64 - want.bit_length() + 1
            self._tombs, self._tomb_firsts = k.rehash_tombs(
                self._tombs, self._tomb_counts, self._tomb_firsts, self._tomb_shift
            )

    @staticmethod
    def _sized(shift: int, table: k.Table, entries: int, incoming: int) -> tuple[int, k.Table]:
        cap = int(table[0].shape[0])
        want = _capacity(cap, entries + incoming)
        if want == cap:
            return shift, table
        shift = 64 - want.bit_length() + 1
        return shift, k.rehash(table, shift)

    def _map_sources(self, block: MessageBlock) -> k.Array:
        mapped = np.empty(max(1, len(block.sources)), np.int32)
        for local, source in enumerate(block.sources):
            index = self._source_index.get(source)
            if index is None:
                index = len(self._sources)
                self._sources.append(source)
                self._source_index[source] = index
            mapped[local] = index
        return mapped

    @staticmethod
    def warm_up() -> None:
        """Compile (or load from the on-disk cache) every compiled loop now rather than on the first record."""
        block = MessageBlock.from_messages([Init(1, "s", "t/0/0", 1), Ack(1, 1), TICK])
        tracker = BlockTracker()
        tracker.process(block)
        tracker.oldest_needed(0)
        tracker._resize_for(4 * tracker.capacity, 4 * tracker.capacity)

    def oldest_needed(self, position: int) -> int:
        """The offset from which a replay decides every tree touched since exactly as before: the lowest offset of a
        record that opened a pending tree or a tree finished in the last ``buckets`` ticks, or ``position`` (the
        next offset to read) when there is none. A tree finished earlier may still have a late message after that
        offset: replayed alone, it opens an init-less entry that expires silently, as the original one did."""
        return int(k.oldest_needed(self._table, self._tombs, self._tomb_counts, self._tomb_firsts, position))

    def process(self, block: MessageBlock, record_offset: int = 0, timestamp_ms: int = 0) -> OutcomeBlock:
        """Apply every message of ``block``, carried by one Kafka record, in order; return the outcomes decided.

        ``record_offset`` and ``timestamp_ms`` describe that record: the offset is what `oldest_needed` reports,
        the timestamp is when an init was sent and when an outcome was decided.
        """
        return self.process_records(block, RecordSpans.single(len(block), record_offset, timestamp_ms))

    def process_records(self, block: MessageBlock, records: RecordSpans) -> OutcomeBlock:
        """`process` for a block carried by several records (one call for many small records is much cheaper
        than one call per record)."""
        n = len(block)
        pending = int(self._state[k.S_PENDING])
        ticks = bool(np.any(block.kinds == k.K_TICK))
        # Every outcome is of a tree whose init was seen: pending before the block, or initialised in it; without a
        # tick, each also needs a message of the block. Each outcome buries one tree, in the set of its tick.
        room = pending + len(block.init_offset)
        if not ticks:
            room = min(n, room)
        self._resize_for(n, room)
        out = np.empty((room, k.OUT_COLUMNS), np.int64)
        cfg = self.config
        produced = k.process(
            self._table,
            self._shift,
            self._tombs,
            self._tomb_counts,
            self._tomb_firsts,
            self._tomb_shift,
            self._state,
            self._counters,
            cfg.buckets,
            cfg.high_water or 0,
            cfg.relocate_on_update,
            block.kinds,
            block.anchors,
            block.values,
            block.init_source,
            block.init_offset,
            self._map_sources(block),
            records.ends,
            records.offsets,
            records.timestamps_ms,
            out,
        )
        # Outcomes carry their own small source table, so they stay valid whatever the tracker does next.
        rows = out[:produced]
        used, local = np.unique(rows[:, 3], return_inverse=True)
        names = [self._sources[int(s)] for s in used]
        if len(self._sources) > _SOURCES_KEPT + 4 * int(self._state[k.S_PENDING]):
            self._compact_sources()
        return OutcomeBlock(
            rows[:, 0].copy(),
            rows[:, 1].astype(np.uint8),
            rows[:, 2].copy(),
            local.astype(np.int32).reshape(-1),
            rows[:, 4].copy(),
            rows[:, 5].copy(),
            rows[:, 6].copy(),
            names,
        )

    def _compact_sources(self) -> None:
        """Forget the sources no pending tree refers to, and renumber the others (only pending entries hold a
        source index: tombstones and outcomes do not). Amortised: it runs when the sources outnumber 4 × the
        pending trees, and leaves at most as many as there are pending trees."""
        keys, srcs = self._table[0], self._table[5]
        live = (keys != 0) & (srcs >= 0)
        used = np.unique(srcs[live])
        renumber = np.full(len(self._sources), -1, np.int32)
        renumber[used] = np.arange(len(used), dtype=np.int32)
        srcs[live] = renumber[srcs[live]]
        self._sources = [self._sources[int(i)] for i in used]
        self._source_index = {source: i for i, source in enumerate(self._sources)}
