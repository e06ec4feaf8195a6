"""How the commands log: one format for `acker run`, the stages and the Spark jobs, on stderr."""

from __future__ import annotations

import logging

from acker.errors import ConfigError

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# Libraries whose info lines are not the application's: py4j, Spark's bridge to its JVM, logs every call the JVM makes
# into Python, which is a line per micro-batch of a Spark job (and its sockets opening and closing). Their warnings
# show as the application's do (not at ERROR); at DEBUG, everything does.
CHATTY = ("py4j",)


def configure(level: str) -> None:
    """Log at ``level`` (a name, in any case: ``info``, ``WARNING``, ...) and above, in `FORMAT`, to stderr."""
    if level.upper() not in LEVELS:
        raise ConfigError(f"log level {level!r}: one of {', '.join(LEVELS)}")
    logging.basicConfig(level=level.upper(), format=FORMAT)
    number = logging.getLevelNamesMapping()[level.upper()]
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.NOTSET if number <= logging.DEBUG else max(number, logging.WARNING))
