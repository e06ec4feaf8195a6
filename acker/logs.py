"""How the commands log: one format for `acker run`, the stages and the Spark jobs, on stderr."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def configure(level: str) -> None:
    """Log at ``level`` (a name: ``INFO``, ``WARNING``, ...) and above, in `FORMAT`, to stderr."""
    logging.basicConfig(level=level, format=FORMAT)
