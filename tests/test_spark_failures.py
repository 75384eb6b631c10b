"""``spark.failures``: a task's error, raised again as one marked line, is read back from
the text Spark wraps it in (a Python traceback inside a Java exception) as the same
class and message; anything else is not taken for a task's error. The whole path, on a
real SparkSession, is in test_spark_compact.py."""

from __future__ import annotations

import traceback

import pytest

from compactor.catalog import CatalogError
from compactor.fileformat import FormatError
from compactor.spark.failures import SparkTaskFailed, TaskError, reported, task_failure
from compactor.worker.errors import KeyBufferUnavailable


def _as_spark_tells_it(error: BaseException) -> RuntimeError:
    """The driver's error: the task's traceback text inside a Java-like message."""
    told = "".join(traceback.format_exception(error))
    return RuntimeError(
        "An error occurred while calling o42.collectAndServe.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: "
        f"org.apache.spark.api.python.PythonException: {told}\n"
        "\tat org.apache.spark.api.python.BasePythonRunner.handle(PythonRunner.scala:581)\n"
    )


def _raised(error: Exception) -> TaskError:
    def task() -> None:
        raise error

    with pytest.raises(TaskError) as caught:
        reported(task)()
    return caught.value


@pytest.mark.parametrize(
    "error",
    [
        FormatError("data/L0/x.cf", 16, "'SBLK' frame checksum mismatch"),
        KeyBufferUnavailable("a key buffer of 9 bytes cannot be allocated here"),
        CatalogError("a message\nof two lines"),
    ],
)
def test_a_task_error_reads_back_as_its_class_and_message(error: Exception) -> None:
    failed = task_failure(_as_spark_tells_it(_raised(error)))
    assert isinstance(failed, SparkTaskFailed)
    assert failed.raised_as is type(error)
    assert str(failed) == str(error)


def test_an_error_not_ours_is_named_and_has_no_class() -> None:
    failed = task_failure(_as_spark_tells_it(_raised(KeyError("x"))))
    assert failed is not None and failed.raised_as is None
    assert str(failed) == "KeyError: 'x'"


def test_a_result_passes_through() -> None:
    assert reported(lambda n: n + 1)(1) == 2


@pytest.mark.parametrize(
    "text",
    [
        "Py4JError: the gateway went away",
        "compactor task error: not json",
        'compactor task error: {"module": "compactor.x"}',
    ],
)
def test_no_marked_line_is_no_task_failure(text: str) -> None:
    assert task_failure(RuntimeError(text)) is None


def test_a_class_outside_the_package_is_never_imported() -> None:
    line = 'compactor task error: {"module": "os", "name": "error", "message": "m"}'
    failed = task_failure(RuntimeError(line))
    assert failed is not None and failed.raised_as is None
