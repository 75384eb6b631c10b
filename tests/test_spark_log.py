"""A ``spark`` command's stderr is its own (cli.spark_log): nothing of Spark's log on a
success, one line on a failure, and a Spark that does not start is exit 9 with the JVM's
own words, the store untouched. Each case runs the command as a user does, a real JVM."""

from __future__ import annotations

import socket
from pathlib import Path

from clirunner import one_line, spark_cli, tree, two_l0_files

from compactor.cli.exit_codes import ExitCode
from compactor.cli.spark_log import jvm_words

NOW = "1700000000000"


def test_a_success_prints_nothing_of_spark_and_keeps_its_log_where_asked(
    tmp_path: Path,
) -> None:
    store = two_l0_files(tmp_path / "store", NOW)
    log = tmp_path / "spark.log"
    done = spark_cli(store, NOW, "index", "--master", "local[1]", "--spark-log", str(log))
    assert done.code == 0, done.err[-3000:]
    assert done.err == ""
    assert done.out.splitlines()[-1] == "2 indexes written"
    assert "log4j" in log.read_text()  # Spark's start-up lines went to the file
    again = spark_cli(store, NOW, "index", "--master", "local[1]")  # no file asked: none kept
    assert again.code == 0 and again.err == "", again.err[-3000:]
    assert again.out.splitlines()[-1] == "0 indexes written"


def test_no_java_is_exit_9_with_the_launchers_words_and_the_store_untouched(
    tmp_path: Path,
) -> None:
    store = two_l0_files(tmp_path / "store", NOW)
    before = tree(store)
    missing = tmp_path / "no-jre"
    for command in (["compact", "--full"], ["index"]):
        done = spark_cli(store, NOW, *command, env={"JAVA_HOME": str(missing)})
        line = one_line(done, ExitCode.SPARK)
        assert line.startswith("compactor: Spark did not start: "), line
        assert f"{missing}/bin/java: No such file or directory" in line, line
        assert tree(store) == before


def test_a_master_spark_refuses_is_exit_9_in_its_words(tmp_path: Path) -> None:
    store = two_l0_files(tmp_path / "store", NOW)
    before = tree(store)
    done = spark_cli(store, NOW, "compact", "--master", "nowhere", "--full")
    line = one_line(done, ExitCode.SPARK)
    assert line == (
        "compactor: Spark did not start: "
        "Master must either be yarn or start with spark, k8s, or local"
    ), line
    assert tree(store) == before
    debug = spark_cli(store, NOW, "index", "--master", "nowhere", "--debug")
    assert debug.code == ExitCode.SPARK
    assert "Master must either be yarn" in debug.err  # --debug leaves Spark's log
    assert "Traceback" in debug.err
    assert debug.err.splitlines()[-1].startswith("compactor: ")


def test_a_standalone_master_that_is_not_there_is_exit_9_before_spark_starts(
    tmp_path: Path,
) -> None:
    """Spark would spend a minute on it ("All masters are unresponsive!"); the command
    names the master and why in the one line, and neither plans nor leases."""
    store = two_l0_files(tmp_path / "store", NOW)
    before = tree(store)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    master = f"spark://127.0.0.1:{port}"
    for command in (["compact", "--full"], ["index"]):
        line = one_line(spark_cli(store, NOW, *command, "--master", master), ExitCode.SPARK)
        assert line == (
            f"compactor: Spark did not start: no standalone master at {master} "
            f"(127.0.0.1:{port}: Connection refused)"
        ), line
    assert tree(store) == before


def test_a_setting_spark_refuses_at_start_is_exit_9_in_its_words(tmp_path: Path) -> None:
    """The JVM runs, but Spark's context does not start (pyspark's Py4J error): the words
    are those of the exception Spark logged, not its "Error initializing SparkContext."."""
    store = two_l0_files(tmp_path / "store", NOW)
    before = tree(store)
    line = one_line(spark_cli(store, NOW, "index", "--master", "local[0]"), ExitCode.SPARK)
    assert line == "compactor: Spark did not start: Asked to run locally with 0 threads", line
    assert tree(store) == before


def test_spark_log_may_be_a_stream(tmp_path: Path) -> None:
    """``--spark-log /dev/stderr`` puts Spark's log back on stderr; a file that cannot
    be read back is written all the same."""
    store = two_l0_files(tmp_path / "store", NOW)
    done = spark_cli(store, NOW, "index", "--master", "local[1]", "--spark-log", "/dev/stderr")
    assert done.code == 0, done.err[-3000:]
    assert "log4j" in done.err
    assert done.out.splitlines()[-1] == "2 indexes written"


def test_a_spark_log_that_cannot_be_written_is_a_usage_error(tmp_path: Path) -> None:
    store = two_l0_files(tmp_path / "store", NOW)
    target = tmp_path / "missing-dir" / "spark.log"
    line = one_line(spark_cli(store, NOW, "index", "--spark-log", str(target)), ExitCode.USAGE)
    assert line == f"compactor: --spark-log {target}: No such file or directory", line


def test_the_words_of_a_jvm_that_did_not_start() -> None:
    """From the three ways Spark's JVM was seen to stop here: the exception its main
    thread died of, a launcher that found no java, a standalone master that never
    answered (Spark's last ERROR line); start-up chatter and stack frames are never
    the words."""
    start = (
        "WARNING: Using incubator modules: jdk.incubator.vector\n"
        "Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties\n"
        "26/12/01 18:49:30 WARN Utils: Your hostname, vm, resolves to a loopback address\n"
    )
    thrown = (
        start + 'Exception in thread "main" org.apache.spark.SparkException: Master must '
        "either be yarn or start with spark, k8s, or local\n"
        "\tat org.apache.spark.deploy.SparkSubmit.main(SparkSubmit.scala)\n"
    )
    assert (
        jvm_words(thrown, exited=True)
        == "Master must either be yarn or start with spark, k8s, or local"
    )
    launcher = (
        ".../spark-class: line 71: /x/bin/java: No such file or directory\n"
        ".../spark-class: line 97: CMD: bad array subscript\n"
    )
    assert (
        jvm_words(launcher, exited=True)
        == ".../spark-class: line 71: /x/bin/java: No such file or directory"
    )
    unanswered = (
        start + "26/12/01 18:49:31 WARN StandaloneAppClient$ClientEndpoint: Failed to connect\n"
        "org.apache.spark.SparkException: Exception thrown in awaitResult: \n"
        "\t... 4 more\n"
        "26/12/01 18:50:31 ERROR StandaloneSchedulerBackend: Application has been killed. "
        "Reason: All masters are unresponsive! Giving up.\n"
    )
    assert jvm_words(unanswered, exited=False) == (
        "Application has been killed. Reason: All masters are unresponsive! Giving up."
    )
    refused = (
        start.replace("26/12/01 18:49:30", "2026-12-01T19:05:49,650")  # an ISO-8601 layout
        + "2026-12-01T19:05:50,001 ERROR SparkContext: Error initializing SparkContext.\n"
        "org.apache.spark.SparkException: Asked to run locally with 0 threads\n"
        "\tat org.apache.spark.SparkContext$.createTaskScheduler(SparkContext.scala)\n"
    )
    assert jvm_words(refused, exited=False) == "Asked to run locally with 0 threads"
    assert jvm_words(start, exited=True) is None
    assert jvm_words(launcher, exited=False) is None  # a running JVM: pyspark's words
