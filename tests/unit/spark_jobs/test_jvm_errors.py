"""What a py4j error's Java exception says, read once and never raising: a stand-in for the JVM's exception
reference (each call to it is a call to the JVM) answers, or fails as a stopped JVM does."""

from __future__ import annotations

import pytest

from spark_jobs.jvm_errors import java_class, java_message, java_said


class _JavaClass:
    def getName(self) -> str:
        return "org.apache.kafka.common.config.ConfigException"


class _JavaException:
    def __init__(self, *, gone: bool = False) -> None:
        self.gone = gone

    def _answer(self, text: object) -> object:
        if self.gone:
            raise ConnectionRefusedError("the JVM has stopped")
        return text

    def toString(self) -> object:
        return self._answer("org.apache.kafka.common.config.ConfigException: Invalid value x\nat line 2")

    def getMessage(self) -> object:
        return self._answer("Invalid value x")

    def getClass(self) -> object:
        return self._answer(_JavaClass())


class _Py4JError(Exception):
    """As a `Py4JJavaError`: its text is one more call to the JVM."""

    def __init__(self, java: _JavaException) -> None:
        super().__init__()
        self.java_exception = java

    def __str__(self) -> str:
        return str(self.java_exception.toString())


def test_a_live_jvm_says_its_exceptions_class_message_and_text() -> None:
    error = _Py4JError(_JavaException())
    assert java_class(error) == "org.apache.kafka.common.config.ConfigException"
    assert java_message(error) == "Invalid value x"
    assert java_said(error).startswith("org.apache.kafka.common.config.ConfigException: Invalid value x\n")


def test_with_the_jvm_gone_each_reader_answers_without_raising() -> None:
    error = _Py4JError(_JavaException(gone=True))
    with pytest.raises(ConnectionRefusedError):
        str(error)  # what the readers must not do
    assert java_class(error) is None
    assert java_message(error) == "_Py4JError"
    assert java_said(error) == "_Py4JError"


def test_an_error_without_a_java_exception_says_its_own_text() -> None:
    error = RuntimeError("the session could not start")
    assert java_class(error) is None
    assert java_message(error) == "the session could not start"
    assert java_said(error) == "the session could not start"


def test_an_error_whose_own_text_fails_says_its_type() -> None:
    class UnprintableError(Exception):
        def __str__(self) -> str:
            raise ValueError("no text")

    assert java_said(UnprintableError()) == "UnprintableError"


class _Unexplained(_JavaException):
    """A Java exception thrown without a message: ``getMessage`` answers null (py4j's None)."""

    def toString(self) -> object:
        return self._answer("java.lang.NullPointerException")

    def getMessage(self) -> object:
        return self._answer(None)


def test_a_java_exception_without_a_message_is_said_by_its_class_not_as_none() -> None:
    """Its null message read as the text "None"."""
    assert java_message(_Py4JError(_Unexplained())) == "java.lang.NullPointerException"
