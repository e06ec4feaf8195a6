"""The columnar fast path: the same tracker rules as `acker.core.tracker`, over blocks of messages.

`acker.core.tracker.Tracker` is the reference: readable, one message at a time, standard library only. This
package applies the same rules to a `MessageBlock` (numpy columns, the shape the acker topic's records carry) in a
compiled loop over an open-addressing table, for throughput and a few dozen bytes per pending tree. The two are
kept equal by differential property tests (`tests/unit/columnar`).
"""

from acker.columnar.block import MessageBlock, OutcomeBlock
from acker.columnar.tracker import BlockTracker

__all__ = ["BlockTracker", "MessageBlock", "OutcomeBlock"]
