"""The project's one exception hierarchy.

    AckerError                      root: catch this to catch everything the project raises
    ├── ProtocolError               a protocol message that can never be valid (zero or out-of-range id, ...)
    ├── ConfigError                 configuration that cannot work (buckets < 2, ...)
    ├── ReplayInputError            a line of `acker replay` input that is not a protocol message
    ├── UnreadableHeadersError      a consumed record whose headers the Kafka client cannot read
    └── RefusedOutputError          a stage's write to a topic it may not write (the acker's own, its source)

Errors from Kafka and Avro are wrapped at the edge that calls them, keeping the original error code.
"""

from __future__ import annotations


class AckerError(Exception):
    """Root of every exception the project raises on purpose."""


class ProtocolError(AckerError, ValueError):
    """A protocol message that can never be valid, such as a zero anchor or tuple id."""


class ConfigError(AckerError, ValueError):
    """A configuration value that cannot work."""


class ReplayInputError(AckerError, ValueError):
    """A line of offline-replay input that does not describe a protocol message."""


class UnreadableHeadersError(AckerError, ValueError):
    """A consumed record whose headers the Kafka client cannot read (a header name that is not UTF-8)."""


class RefusedOutputError(AckerError):
    """A spout's or bolt's write to a topic it may not write (`acker.topics.output_refusal`). Not a ValueError: a
    function's ``except ValueError`` around its parsing and emits would swallow it, and its input be acked with the
    tuple dropped."""
