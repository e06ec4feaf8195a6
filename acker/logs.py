"""How the commands log: one format for `acker run`, the stages and the Spark jobs, on stderr."""

from __future__ import annotations

import logging

from acker.errors import ConfigError

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# Libraries whose info lines are not the application's: py4j, Spark's bridge to its JVM, logs every call the JVM makes
# into Python, which is a line per micro-batch of a Spark job (and its sockets opening and closing). Their warnings
# show as the application's do (not at ERROR); at DEBUG, their info lines too, never their debug lines: py4j's are
# every command sent to the JVM, with its arguments, the Kafka source's options among them (`kafka.sasl.jaas.config`,
# a password in it).
CHATTY = ("py4j",)


def configure(level: str) -> None:
    """Log at ``level`` (a name, in any case: ``info``, ``WARNING``, ...) and above, in `FORMAT`, to stderr."""
    if level.upper() not in LEVELS:
        raise ConfigError(f"log level {level!r}: one of {', '.join(LEVELS)}")
    logging.basicConfig(level=level.upper(), format=FORMAT)
    number = logging.getLevelNamesMapping()[level.upper()]
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.INFO if number <= logging.DEBUG else max(number, logging.WARNING))
    if number > logging.DEBUG:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_chatty_through_root)


def _chatty_through_root(record: logging.LogRecord) -> bool:
    """False for an info line a `CHATTY` library logs through the root logger (py4j logs "Exception while sending
    command.", with a stack trace, on the root logger whenever Spark's JVM has gone, as when it stops with this
    process's group): it is not the application's either."""
    chatty = record.name == "root" and record.levelno < logging.WARNING
    return not (chatty and any(f"/{name}/" in record.pathname for name in CHATTY))
