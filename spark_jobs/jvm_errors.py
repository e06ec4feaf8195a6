"""What the Java exception behind a py4j error says.

A ``Py4JJavaError`` holds a reference to its exception in Spark's JVM, not its text: every read is a call to that
JVM, which fails once the JVM has stopped (a Ctrl-C to the process group, a job's own stop), and ``str(error)``
itself makes such a call. Each reader here asks once, guarded, and never raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _ask(error: BaseException, read: Callable[[Any], object]) -> str | None:
    """``read`` of the Java exception ``error`` carries, as text; None without one, when its JVM has gone, or when
    ``read`` answers Java's null (a message never given: py4j's None, which read as the text "None")."""
    java = getattr(error, "java_exception", None)
    if java is None:
        return None
    try:
        answer = read(java)
    except Exception:  # the JVM gone
        return None
    return None if answer is None else str(answer)


def _or_own(said: str | None, error: BaseException) -> str:
    """``said`` where the JVM answered; else the error's own text: its type's name for a py4j error (whose text is
    another call to the JVM) or for an error whose ``str`` fails."""
    if said is not None:
        return said
    if hasattr(error, "java_exception"):
        return type(error).__name__
    try:
        return str(error)
    except Exception:
        return type(error).__name__


def java_class(error: BaseException) -> str | None:
    """The class name of the Java exception ``error`` carries; None for any other error, or with the JVM gone."""
    return _ask(error, lambda java: java.getClass().getName())


def java_message(error: BaseException) -> str:
    """The message of the Java exception behind ``error`` (``getMessage``); its class (``toString``) when it has no
    message; else as `_or_own`."""
    return _or_own(_ask(error, lambda java: java.getMessage()) or _ask(error, lambda java: java.toString()), error)


def java_said(error: BaseException) -> str:
    """The Java exception's own text, "class: message" (``toString``); else as `_or_own`."""
    return _or_own(_ask(error, lambda java: java.toString()), error)
