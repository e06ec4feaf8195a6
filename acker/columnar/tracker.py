"""BlockTracker: the tracker's rules applied to columnar message blocks by compiled loops.

Same decisions as `acker.core.tracker.Tracker` for the same messages, and the same counters; outcomes come
back as an `OutcomeBlock` in decision order (within one tick, in table order rather than insertion order: the
order of a tick's outcomes is unspecified for both). Memory: the table of pending trees has 40-byte slots on a
ladder of capacities 1.25× apart, filled to at most 4/5, so a large table holds a tree in 50 to 63 bytes (at least
0.64 full right after growing) and shrinks when under 0.41 full; the tombstone sets keep 8-byte slots (the anchor;
of the records that opened their trees only the oldest per set is kept, for recovery) at most half full (looked up
by every new tree, so kept sparse: a miss there is cheap); message-id sources (spout, ``topic/partition``) are
interned: a few per partition for record coordinates. A message id that is not of the form ``<source>/<offset>`` is
interned whole, one source per tree; sources no pending tree refers to any more are dropped once they outnumber the
pending trees (`_compact_sources`), so such ids cost memory only while their trees are pending.

Not thread-safe.
"""

from __future__ import annotations

import numpy as np

from acker.columnar import _kernels as k
from acker.columnar.block import MessageBlock, OutcomeBlock, RecordSpans, Source
from acker.core.messages import TICK, Ack, Init
from acker.core.tracker import Counters, TrackerConfig

_MIN_CAPACITY = 1 << 10
_NO_ANCHORS = np.zeros(1, np.int64)  # an empty anchor set (one empty slot: a lookup stops there)
_MAX_AHEAD = 1 << 16  # prefetch distance at most (the loop reads the kind and anchor of the message that far on)
_SOURCES_KEPT = 4096  # interned sources kept before compaction is considered (coordinates need a few per partition)


def _ladder(capacity: int, step: float) -> int:
    """The capacity after ``capacity`` on the ladder of ratio ``step`` that starts at the minimum: every table
    climbs the same rungs, so its size depends on how full it is, not on its history."""
    return -(-int(capacity * step) // 64) * 64


def _capacity(current: int, needed: int, max_load: float, step: float) -> int:
    """The rung of the ladder of ratio ``step`` for ``needed`` entries: the current one while the load stays in
    [max_load / step³, max_load]; otherwise the lowest rung loaded at most ``max_load`` when growing, at most
    ``max_load / step`` when shrinking (so that a shrunk table does not grow again at once)."""
    if current * max_load >= needed and (current == _MIN_CAPACITY or needed * step**3 >= current * max_load):
        return current
    limit = max_load if needed > current * max_load else max_load / step
    want = _MIN_CAPACITY
    while want * limit < needed:
        want = _ladder(want, step)
    return want


_TABLE_LOAD = 0.8


def _table_capacity(current: int, needed: int) -> int:
    """Pending trees: filled to 4/5 on rungs 1.25× apart (≤ 63 bytes a tree once large, see the module's note)."""
    return _capacity(current, needed, _TABLE_LOAD, 1.25)


def _tomb_capacity(current: int, needed: int) -> int:
    """A tombstone set: filled to 1/2 on rungs 2× apart. Every new tree misses in every set, and a miss walks the
    whole run: at load 1/2 it costs 2.5 probes, at 4/5 thirteen."""
    return _capacity(current, needed, 0.5, 2.0)


# The table and tombstone sets' size from which the loop prefetches (`_kernels.AHEAD`). Below it they stay in the
# CPU's caches, and the prefetch instructions only cost: 5-9 % at 1 MB (the core benchmark's workload), nothing won
# at 2 MB; 1.13-1.15 x at 4 MB, 1.33-1.47 x at 17 MB (`benchmarks.steady_bench`, 2026-11-30, a 2-vCPU AMD EPYC).
PREFETCH_FROM_BYTES = 3 * 2**20


class BlockTracker:
    __slots__ = (
        "_ahead",
        "_counters",
        "_decided",
        "_prefetch_from",
        "_source_index",
        "_sources",
        "_state",
        "_table",
        "_tomb_counts",
        "_tomb_oldest",
        "_tombs",
        "config",
    )

    def __init__(
        self,
        config: TrackerConfig | None = None,
        capacity: int = _MIN_CAPACITY,
        *,
        prefetch_ahead: int = k.AHEAD,
        prefetch_from_bytes: int = PREFETCH_FROM_BYTES,
    ) -> None:
        """``prefetch_ahead``: how many messages ahead the compiled loop asks for the cache lines a message will
        need (0: it does not; for benchmarks, which measure the difference), once the table and the tombstone sets
        hold ``prefetch_from_bytes`` (0: from the start)."""
        if not 0 <= prefetch_ahead <= _MAX_AHEAD:  # a message index, not a hint: out of range, it would be read
            raise ValueError(f"prefetch_ahead must be within [0, {_MAX_AHEAD}], not {prefetch_ahead}")
        self.config = config or TrackerConfig()
        self._ahead = prefetch_ahead
        self._prefetch_from = prefetch_from_bytes
        self._table: k.Table = k.empty_table(_table_capacity(_MIN_CAPACITY, capacity))
        self._tombs = np.zeros((self.config.buckets + 1, _MIN_CAPACITY), np.int64)
        self._tomb_counts = np.zeros(self.config.buckets + 1, np.int64)
        self._tomb_oldest = np.full(self.config.buckets + 1, k.NO_OFFSET, np.int64)
        self._decided = _NO_ANCHORS
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
        return sum(int(a.nbytes) for a in self._table) + int(self._tombs.nbytes)

    def _resize_for(self, opening: int, burying: int) -> None:
        """Room for ``opening`` more pending entries and ``burying`` more tombstones in any one set; shrink what is
        mostly empty."""
        self._resize_table(opening)
        cap = self._tombs.shape[1]
        want = _tomb_capacity(cap, int(self._tomb_counts.max()) + burying)
        if want != cap:
            self._tombs = k.rehash_tombs(self._tombs, self._tomb_counts, want)

    def _resize_table(self, opening: int) -> None:
        cap = self.capacity
        want = _table_capacity(cap, int(self._state[k.S_ENTRIES]) + opening)
        if want != cap:
            self._table = k.rehash(self._table, want)

    def _due_within(self, ticks: int) -> int:
        """How many entries of the table expire within the next ``ticks`` ticks unless updated (a scan of the table:
        blocks with a tick are rare, as is the scan of each tick in the compiled loop)."""
        keys, gens = self._table[0], self._table[2]
        ahead = (int(self._state[k.S_GENERATION]) + ticks - gens.astype(np.int64)) & k._LOW16
        return int(np.count_nonzero((keys != 0) & (ahead >= self.config.buckets)))

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
        """Compile (or load from the on-disk cache) every compiled loop now rather than on the first record, for
        every layout its arguments take: a column of one outcome row is contiguous, of several it is strided."""
        one = MessageBlock.from_messages([Init(1, "s", "t/0/0", 1), Ack(1, 1), TICK])
        two = MessageBlock.from_messages([Init(2, "s", "t/0/1", 2), Ack(2, 2), Init(3, "s", "t/0/2", 3), Ack(3, 3)])
        tracker = BlockTracker()
        tracker.process(one)
        tracker.oldest_needed(0)
        tracker.set_decided(np.array([7], np.int64))
        tracker.process(two)
        tracker.clear_decided()
        tracker._resize_for(4 * tracker.capacity, 4 * tracker.capacity)

    def set_decided(self, anchors: np.ndarray) -> None:
        """Trees decided before this tracker existed (by a previous owner of the partition), outcomes published:
        until `clear_decided`, their messages are ``late`` and open nothing, as if tombstones. For a replay whose
        start cut a tree in two: the part replayed alone would decide it again, differently. The set is kept apart
        from the tombstone sets (whose rows all have one capacity): 16 bytes an anchor at most."""
        self._decided = (
            k.anchor_set(np.asarray(anchors, np.int64), _tomb_capacity(_MIN_CAPACITY, len(anchors)))
            if len(anchors)
            else _NO_ANCHORS
        )

    def clear_decided(self) -> None:
        """Forget the trees of `set_decided`: their messages from now on are treated as any tree's after its
        tombstone expired."""
        self._decided = _NO_ANCHORS

    def oldest_needed(self, position: int) -> int:
        """The offset from which a replay decides every tree touched since exactly as before: the lowest offset of a
        record that opened a pending tree or a tree finished in the last ``buckets`` ticks, or ``position`` (the
        next offset to read) when there is none. A tree finished earlier may still have a late message after that
        offset: replayed alone, it opens an init-less entry that expires silently, as the original one did."""
        return int(k.oldest_needed(self._table, self._tomb_counts, self._tomb_oldest, position))

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
        ticks = int(np.count_nonzero(block.kinds == k.K_TICK))
        # Every outcome is of a tree whose init was seen: pending before the block, or initialised in it. Each
        # outcome buries one tree, in the set of its tick; all sets have one capacity. A message decides one tree at
        # most; a tick, the trees it expires: those due within the block's ticks (a tree opened in the block expires
        # in it only if it holds `buckets` ticks). Sized for every pending tree at each tick instead, the sets held
        # about 2.4 × what the table does (141 bytes a pending tree at 200,000 against 59).
        room = min(n - ticks, pending + len(block.init_offset))
        if ticks >= self.config.buckets:
            room = pending + len(block.init_offset)
        elif ticks:
            room += self._due_within(ticks)
        # The table is sized for the block's inits: any other message opens an entry only when it comes before its
        # tree's init, which is rare, and the loop stops to grow the table when that fills it. Sized for every
        # message instead, as if each could open one, the table of a service applying 65,536 messages at a time
        # outgrew the CPU's cache and the tracker ran about a fifth slower.
        inits = len(block.init_offset)
        self._resize_for(inits, room)
        out = np.empty((room, k.OUT_COLUMNS), np.int64)
        cursor = np.zeros(4, np.int64)  # message, inits, records and outcome rows done
        sources = self._map_sources(block)
        while self._process(block, sources, records, out, cursor) < n:
            # Half as many again as it holds (grown a rung at a time, many such updates would copy it over and over).
            self._resize_table(inits - int(cursor[1]) + self.pending // 2 + 1)
        produced = int(cursor[3])
        # Outcomes carry their own small source table, so they stay valid whatever the tracker does next.
        rows = out[:produced]
        used, local = k.renumber(rows[:, 3], len(self._sources))
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

    def _process(
        self, block: MessageBlock, sources: k.Array, records: RecordSpans, out: k.Array, cursor: k.Array
    ) -> int:
        """Run the compiled loop from ``cursor`` until the block ends or the table is full; return where it stopped."""
        cfg = self.config
        return int(
            k.process(
                self._table,
                self._tombs,
                self._tomb_counts,
                self._tomb_oldest,
                self._decided,
                self._state,
                self._counters,
                cfg.buckets,
                cfg.high_water or 0,
                cfg.relocate_on_update,
                self._ahead if self.table_bytes() >= self._prefetch_from else 0,
                block.kinds,
                block.anchors,
                block.values,
                block.init_source,
                block.init_offset,
                sources,
                records.ends,
                records.offsets,
                records.timestamps_ms,
                out,
                int(self.capacity * _TABLE_LOAD),
                cursor,
            )
        )

    def _compact_sources(self) -> None:
        """Forget the sources no pending tree refers to, and renumber the others (only pending entries hold a
        source index: tombstones and outcomes do not). Amortised: it runs when the sources outnumber 4 × the
        pending trees, and leaves at most as many as there are pending trees."""
        keys, srcs = self._table[0], self._table[4]
        live = (keys != 0) & (srcs >= 0)
        used = np.unique(srcs[live])
        renumber = np.full(len(self._sources), -1, np.int32)
        renumber[used] = np.arange(len(used), dtype=np.int32)
        srcs[live] = renumber[srcs[live]]
        self._sources = [self._sources[int(i)] for i in used]
        self._source_index = {source: i for i, source in enumerate(self._sources)}
