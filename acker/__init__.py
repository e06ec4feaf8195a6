"""kafka-acker: Storm's acker for plain Kafka pipelines.

Every source record becomes the root of a tuple tree; a single 64-bit XOR word per tree reaches zero exactly when
everything derived from the record has been processed. See README.md for the protocol.
"""

__version__ = "0.1.0"
