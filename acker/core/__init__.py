"""The pure core: protocol messages, the tracker that decides outcomes, and the tuple-tree helpers.

Nothing here performs I/O, reads a clock or draws random numbers on its own (ids come from an injected
generator); Kafka, Avro and Spark live at the edges of the package.
"""

from acker.core.ids import IdGenerator, partition_of
from acker.core.messages import TICK, Ack, Anchor, Fail, Init, Message, Ok, ResetTimeout, Tick
from acker.core.outcomes import Acked, Nacked, NackReason, Outcome
from acker.core.rotating_map import RotatingMap
from acker.core.tracker import Counters, Tracker, TrackerConfig

__all__ = [
    "TICK",
    "Ack",
    "Acked",
    "Anchor",
    "Counters",
    "Fail",
    "IdGenerator",
    "Init",
    "Message",
    "NackReason",
    "Nacked",
    "Ok",
    "Outcome",
    "ResetTimeout",
    "RotatingMap",
    "Tick",
    "Tracker",
    "TrackerConfig",
    "partition_of",
]
