"""Bad option values through the command line, as a user types them: one line on stderr,
the exit status of README.md's "Exit codes" (a usage error: 2; never 70, which is kept
for bugs), no traceback, and nothing written to the store (or no store made)."""

from __future__ import annotations

import json
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from clirunner import Result, one_line, run_cli, tree, two_l0_files

from compactor.cli.exit_codes import ExitCode
from compactor.cli.key_buffer import MAX_KEY_BUFFER_BYTES
from compactor.worker.kernel import ENTRY_BYTES, KeyBuffer

NOW = "1700000000000"
COMPACTOR = Path(sys.executable).parent / "compactor"
NO_QUEUE = "http://127.0.0.1:9/000000000000/jobs"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A local store with one compacted topic and two L0 files: ``compact --full`` has
    work to do (and files it would delete after the grace period)."""
    return two_l0_files(tmp_path / "store", NOW)


@pytest.fixture
def job_file(store: Path, tmp_path: Path) -> Path:
    """A job document the planner would run on ``store`` now (``replay JOB.json``)."""
    r = run_cli(
        "--store", str(store), "--now-ms", NOW, "plan", "--set", "level.trigger.files=2", "--json"
    )
    assert r.code == 0, r.err
    (job,) = json.loads(r.out)["jobs"]
    del job["input_levels"]
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    return path


# --- 1, 6: --key-buffer-bytes ----------------------------------------------------------


def test_the_maximum_is_the_kernels() -> None:
    """The limit the option states is the key buffer's own: 2^32 - 1 entries of
    ENTRY_BYTES, in bytes; one entry more is what the kernel refuses (before it
    allocates anything)."""
    assert MAX_KEY_BUFFER_BYTES == (2**32 - 1) * ENTRY_BYTES
    with pytest.raises(ValueError, match="2\\^32 - 1 entries"):
        KeyBuffer(MAX_KEY_BUFFER_BYTES + ENTRY_BYTES)


TOO_BIG = ["99999999999999999999", "200000000000", str(MAX_KEY_BUFFER_BYTES + ENTRY_BYTES)]


@pytest.mark.parametrize("size", [*TOO_BIG, str(ENTRY_BYTES - 1), "0", "-1", "1e9"])
@pytest.mark.parametrize(
    "command",
    [
        ["compact", "--full"],
        ["compact", "--until-idle"],
        ["worker", "--queue-url", "http://127.0.0.1:9/000000000000/q"],
        ["replay", "JOB", "--execute"],
        ["spark", "compact", "--full"],
    ],
    ids=["compact --full", "compact --until-idle", "worker", "replay --execute", "spark"],
)
def test_key_buffer_bytes_out_of_range_is_a_usage_error(
    store: Path, job_file: Path, command: list[str], size: str
) -> None:
    before = tree(store)
    argv = [str(job_file) if word == "JOB" else word for word in command]
    r = run_cli("--store", str(store), "--now-ms", NOW, *argv, "--key-buffer-bytes", size)
    line = one_line(r, ExitCode.USAGE, "--key-buffer-bytes")
    if size in TOO_BIG:
        assert f"{MAX_KEY_BUFFER_BYTES}" in line  # names the maximum, in bytes
    assert tree(store) == before


def test_demo_checks_the_key_buffer_before_it_writes(tmp_path: Path) -> None:
    """Item 6: ``demo`` made ``_catalog/`` and L0 files before the key buffer failed."""
    root = tmp_path / "demo-store"
    for size in ("200000000000", "40"):
        r = run_cli("--store", str(root), "demo", "--records", "100", "--key-buffer-bytes", size)
        one_line(r, ExitCode.USAGE, "--key-buffer-bytes", str(MAX_KEY_BUFFER_BYTES))
        assert not root.exists()


UNDER_LIMIT = 4 << 30
"""The address space a command gets below: a key buffer of more cannot be mapped, whatever
the machine's overcommit policy (RLIMIT_AS caps every mapping)."""


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (UNDER_LIMIT, UNDER_LIMIT))


@pytest.mark.parametrize("command", [["compact", "--full"], ["replay", "JOB", "--execute"]])
def test_a_key_buffer_the_machine_cannot_allocate_is_a_usage_error(
    store: Path, job_file: Path, command: list[str]
) -> None:
    """A size in range that the process cannot map was "internal error: MemoryError (a
    bug...)", exit 70. It is the worker's error (exit 7), one line naming the option, and
    nothing read or written."""
    before = tree(store)
    argv = [str(job_file) if word == "JOB" else word for word in command]
    size = str(2 * UNDER_LIMIT)
    done = subprocess.run(
        [str(COMPACTOR), "--store", str(store), "--now-ms", NOW, *argv]
        + ["--key-buffer-bytes", size],
        capture_output=True,
        text=True,
        preexec_fn=_limited,
        timeout=120,
    )
    line = one_line(Result(done.returncode, done.stdout, done.stderr), ExitCode.WORKER)
    assert f"a key buffer of {int(size):,} bytes cannot be allocated" in line
    assert "--key-buffer-bytes" in line
    assert tree(store) == before


def test_the_largest_and_smallest_sizes_still_parse(store: Path) -> None:
    from compactor.cli.main import build_parser

    for size in (ENTRY_BYTES, MAX_KEY_BUFFER_BYTES):
        argv = ["--store", str(store), "compact", "--key-buffer-bytes", str(size)]
        assert build_parser(argv).parse_args(argv).key_buffer_bytes == size
    argv = ["--store", str(store), "replay", "j.json"]  # replay: None, the commit's own size
    assert build_parser(argv).parse_args(argv).key_buffer_bytes is None


# --- 2: the S3 endpoint ----------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "notaurl",
        "http://[::1",
        "ftp://host",
        "http://",
        "http://127.0.0.1:99999",
        "http://127.0.0.1:abc",
        "http://127.0.0.1:-1",
    ],
)
def test_a_bad_endpoint_url_option_is_a_usage_error(url: str) -> None:
    """The option is the command line's: exit 2, before any client is made."""
    r = run_cli("--endpoint-url", url, "--store", "s3://bucket", "verify")
    one_line(r, ExitCode.USAGE, "--endpoint-url", repr(url))


@pytest.mark.parametrize("name", ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"])
@pytest.mark.parametrize("url", ["notaurl", "http://[::1"])
def test_a_bad_endpoint_url_in_the_environment_is_a_store_error(
    monkeypatch: pytest.MonkeyPatch, name: str, url: str
) -> None:
    """The environment's endpoint is where the store is: a store error (exit 5), naming
    the variable, as an unreachable endpoint is."""
    for other in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, url)
    r = run_cli("--store", "s3://bucket", "verify")
    one_line(r, ExitCode.STORE, name, repr(url))


def test_a_good_endpoint_url_is_not_refused(tmp_path: Path) -> None:
    """A well-formed endpoint passes the check; with a local store it is still refused
    as before (the store's error), not as a malformed URL."""
    r = run_cli("--endpoint-url", "http://[::1]:9000", "--store", str(tmp_path), "stats")
    one_line(r, ExitCode.STORE, "--endpoint-url applies to s3:// stores only")


# --- 3: --metrics-port -----------------------------------------------------------------


def _worker_serving_metrics(store: Path, port: str) -> Result:
    """``worker --metrics-port PORT`` on a queue URL that answers nothing."""
    queue = "http://127.0.0.1:9/000000000000/q"
    return run_cli("--store", str(store), "worker", "--queue-url", queue, "--metrics-port", port)


@pytest.mark.parametrize("port", ["70000", "65536", "-1", "http"])
def test_a_metrics_port_out_of_range_is_a_usage_error(store: Path, port: str) -> None:
    r = _worker_serving_metrics(store, port)
    one_line(r, ExitCode.USAGE, "--metrics-port")


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))  # where the metrics server binds
        s.listen()
        yield s.getsockname()[1]


def test_a_metrics_port_in_use_is_one_line(store: Path, busy_port: int) -> None:
    """A port that cannot be bound is a usage error (exit 2): the fix is the command line's
    (another --metrics-port), and no other status fits (not the store, not the queue; 70 is
    for bugs). The port is bound first, so the worker fails before it asks the queue (the
    queue URL here answers nothing) or touches the store."""
    before = tree(store)
    r = _worker_serving_metrics(store, str(busy_port))
    one_line(r, ExitCode.USAGE, f"--metrics-port {busy_port}", "in use")
    assert tree(store) == before


# --- 4: a local store that does not exist ----------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["verify"],
        ["compact"],
        ["compact", "--full"],
        ["plan"],
        ["stats"],
        ["history"],
        ["catalog", "upgrade"],
        ["inspect", "data/L0/x.cf"],
        ["replay", "--from-history", "1"],
        # The store before the queue (none answers at this URL): a worker asked it first,
        # and a preview received its messages, before either found no store.
        ["worker", "--queue-url", NO_QUEUE],
        ["replay", "--from-queue", NO_QUEUE],
        ["replay", "--from-queue", NO_QUEUE, "--execute"],
    ],
    ids=" ".join,
)
def test_a_missing_local_store_is_not_an_empty_one(tmp_path: Path, command: list[str]) -> None:
    missing = tmp_path / "no" / "such" / "store"
    r = run_cli("--store", str(missing), "--now-ms", NOW, *command)
    one_line(r, ExitCode.STORE, str(missing), "does not exist")
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(
    "command",
    [["dump", "--topic", "t", "--partition", "0"], ["topic", "describe", "t"]],
    ids=" ".join,
)
def test_an_unknown_topic_of_a_missing_store_says_why(tmp_path: Path, command: list[str]) -> None:
    """Still a usage error (exit 2, "unknown topic"), naming the store that is not there."""
    missing = tmp_path / "no" / "such" / "store"
    r = run_cli("--store", str(missing), *command)
    one_line(r, ExitCode.USAGE, "unknown topic 't'", f"no store at {missing}")
    assert not (tmp_path / "no").exists()
    r = run_cli("--store", str(tmp_path), *command)
    assert one_line(r, ExitCode.USAGE) == "compactor: unknown topic 't'"


def test_an_empty_existing_store_still_verifies(tmp_path: Path) -> None:
    """An existing directory is a store (an empty one): only a missing one fails."""
    r = run_cli("--store", str(tmp_path), "verify")
    assert r.code == 0, r.err
    assert r.out.startswith("OK")


def test_topic_create_still_makes_a_store(tmp_path: Path) -> None:
    root = tmp_path / "new" / "store"
    r = run_cli("--store", str(root), "topic", "create", "t", "--partitions", "1")
    assert r.code == 0, r.err
    assert (root / "_catalog").is_dir()
    assert run_cli("--store", str(root), "verify").code == 0


def test_demo_still_makes_a_store(tmp_path: Path) -> None:
    root = tmp_path / "new" / "store"
    r = run_cli("--store", str(root), "demo", "--records", "200", "--agents", "1")
    assert r.code == 0, r.err
    assert (root / "_catalog").is_dir()


# --- 5: negative durations, clocks and offsets -----------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["compact", "--full", "--grace-ms", "-5"],
        ["compact", "--history-retention-ms", "-1"],
        ["--now-ms", "-1", "compact"],
        ["compact", "--now-ms", "-1"],
        ["schedule", "--queue-url", "http://127.0.0.1:9/000000000000/q", "--grace-ms", "-1"],
        [
            "schedule",
            "--queue-url",
            "http://127.0.0.1:9/000000000000/q",
            "--history-retention-ms",
            "-1",
            "--once",
        ],
        ["spark", "compact", "--full", "--grace-ms", "-1"],
        ["dump", "--topic", "t", "--partition", "0", "--from-offset", "-7"],
    ],
    ids=" ".join,
)
def test_a_negative_value_is_a_usage_error(store: Path, argv: list[str]) -> None:
    before = tree(store)
    r = run_cli("--store", str(store), *argv)
    line = one_line(r, ExitCode.USAGE, "negative")
    (value,) = [w for w in argv if w.startswith("-") and w[1:].isdigit()]
    assert argv[argv.index(value) - 1] in line  # the option's name
    assert tree(store) == before  # --grace-ms -5 deleted the replaced inputs at once


def test_a_negative_clock_in_the_environment_is_a_usage_error(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMPACTOR_NOW_MS", "-1")
    one_line(run_cli("--store", str(store), "stats"), ExitCode.USAGE, "negative")


def test_zero_is_still_accepted(store: Path) -> None:
    """The positive control of the negative test: --grace-ms 0 runs (and deletes the
    replaced inputs at once, which is what --grace-ms -5 must not do)."""
    before = tree(store)
    r = run_cli(
        "--store", str(store), "--now-ms", NOW, "compact", "--full", "--grace-ms", "0",
        "--history-retention-ms", "0",
    )  # fmt: skip
    assert r.code == 0, r.err
    assert tree(store) != before
    r = run_cli(
        "--store", str(store), "dump", "--topic", "t", "--partition", "0", "--from-offset", "0"
    )
    assert r.code == 0, r.err
    assert r.out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--now-ms", "١٧٠٠٠٠٠٠٠٠٠٠٠", "compact"], "--now-ms must be an integer"),
        (["--now-ms", "1_700_000_000_000", "compact"], "--now-ms must be an integer"),
        (["compact", "--full", "--grace-ms", "٥"], "--grace-ms: expected an integer"),
        (["compact", "--full", "--grace-ms", "1_000"], "--grace-ms: expected an integer"),
        (["dump", "--topic", "t", "--partition", "٠"], "--partition: expected an integer"),
        (["simulate", "--hours", "١"], "--hours: expected a number"),
        (["simulate", "--hours", "nan"], "--hours: expected a number"),
        (["simulate", "--key-skew", "1e999"], "--key-skew: expected a number"),
    ],
    ids=" ".join,
)
def test_digits_other_than_ascii_are_a_usage_error(
    store: Path, argv: list[str], words: str
) -> None:
    """``int`` takes Arabic-Indic digits and underscores; a number on the command line is
    ASCII digits, as in a topic config (``catalog.config``), and the store is untouched."""
    before = tree(store)
    one_line(run_cli("--store", str(store), *argv), ExitCode.USAGE, words)
    assert tree(store) == before


def test_ascii_numbers_with_a_sign_or_spaces_still_parse(store: Path) -> None:
    """The positive control: what the check lets through still runs."""
    r = run_cli("--store", str(store), "--now-ms", f" +{NOW} ", "plan", "--json")
    assert r.code == 0, r.err


@pytest.mark.parametrize("value", ["٥", "1_0", "nan", "+", ""])
def test_a_planner_setting_in_other_digits_is_a_config_error(store: Path, value: str) -> None:
    before = tree(store)
    r = run_cli("--store", str(store), "plan", "--set", f"level.trigger.files={value}")
    one_line(r, ExitCode.CONFIG, "level.trigger.files must be a number")
    r = run_cli("--store", str(store), "plan", "--set", f"top.run.size.ratio={value}")
    one_line(r, ExitCode.CONFIG, "top.run.size.ratio must be a number")
    assert tree(store) == before


def test_planner_settings_in_ascii_still_parse(store: Path) -> None:
    r = run_cli(
        "--store", str(store), "plan", "--json",
        "--set", "level.trigger.files= 4 ", "--set", "top.run.size.ratio=1.5e0",
    )  # fmt: skip
    assert r.code == 0, r.err


@pytest.mark.parametrize(
    "setting",
    [
        "full.compaction.interval.ms=9223372036854775808",
        "tombstone.buffer.ms=99999999999999999999999",
        "level.trigger.files=9223372036854775808",
        "max.partition.uncompressed.bytes=18446744073709551616",
    ],
)
def test_a_planner_setting_past_2_63_is_a_config_error(store: Path, setting: str) -> None:
    """As a topic's ``*.ms`` is (Kafka's Long.MAX_VALUE): no setting is larger."""
    before = tree(store)
    r = run_cli("--store", str(store), "plan", "--set", setting)
    one_line(r, ExitCode.CONFIG, setting.partition("=")[0], "at most 9223372036854775807")
    assert tree(store) == before


def test_a_planner_setting_of_5000_digits_is_one_short_line(store: Path) -> None:
    """Past ``int``'s digit limit, still "at most" (not "not a number"), the value cut."""
    r = run_cli("--store", str(store), "plan", "--set", "level.trigger.files=" + "9" * 5000)
    line = one_line(r, ExitCode.CONFIG, "must be at most", "(5000 characters)")
    assert len(line) < 200


def test_a_planner_setting_of_2_63_less_1_still_parses(store: Path) -> None:
    r = run_cli(
        "--store", str(store), "plan", "--set", "full.compaction.interval.ms=9223372036854775807"
    )
    assert r.code == 0, r.err


def test_a_partition_count_past_the_catalogs_is_a_usage_error(tmp_path: Path) -> None:
    """Refused as an option (exit 2) before a store is made, as 0 is."""
    root = tmp_path / "store"
    for count in ("100001", "0"):
        r = run_cli("--store", str(root), "topic", "create", "t", "--partitions", count)
        one_line(r, ExitCode.USAGE, "--partitions")
    assert not root.exists()
    r = run_cli("--store", str(root), "topic", "create", "t", "--partitions", "100000")
    assert r.code == 0, r.err


@pytest.mark.parametrize("key", ["/tmp/a.cf", "", "../x", "data//x.cf"])
def test_inspect_of_a_key_no_store_has_is_a_usage_error(store: Path, key: str) -> None:
    """A local path given where a key goes is the command line's mistake (exit 2); a
    well-formed key that is not there stays the store's (exit 5)."""
    r = run_cli("--store", str(store), "inspect", key)
    one_line(r, ExitCode.USAGE, "invalid key")
    r = run_cli("--store", str(store), "inspect", "data/L0/none.cf")
    one_line(r, ExitCode.STORE, "not found")


@pytest.mark.parametrize(
    "argv",
    [
        ["--key-skew", "-1"],
        ["--job-overhead-s", "-1000"],
    ],
    ids=" ".join,
)
def test_a_simulation_option_out_of_range_is_a_usage_error(tmp_path: Path, argv: list[str]) -> None:
    r = run_cli("--store", str(tmp_path), "simulate", "--hours", "0.01", *argv)
    one_line(r, ExitCode.USAGE, argv[0])


@pytest.mark.parametrize("skew", ["0", "60", "1e308"])
def test_any_key_skew_simulates(tmp_path: Path, skew: str) -> None:
    """A skew so steep that the first key takes every update is a model, not a bug."""
    r = run_cli(
        "--store", str(tmp_path), "simulate", "--hours", "0.01", "--key-skew", skew, "--json"
    )
    assert r.code == 0, r.err
    assert json.loads(r.out)
