"""Failures through the command line, as a user meets them: one line on stderr,
``compactor: <message>``, the exit status README.md documents for the error's family, no
traceback unless ``--debug`` asks for one, and a store left byte for byte as it was."""

from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clirunner import run_cli, tree, two_l0_files

from compactor.catalog import CommitConflict, ConfigError, CorruptCatalog
from compactor.cli import stats
from compactor.cli.context import UsageError
from compactor.cli.exit_codes import ExitCode
from compactor.cli.main import FAILURES
from compactor.fileformat import FileWriter, FormatError, Record, records_to_batch
from compactor.objectstore import StoreError, StoreUnreachable
from compactor.worker.errors import PhaseMismatch, WorkerError

README = Path(__file__).resolve().parents[1] / "README.md"
NOW = "1700000000000"


def compactor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m compactor ARGS`` in a fresh process; COMPACTOR_DEBUG only if ``env``
    sets it."""
    environ = {k: v for k, v in os.environ.items() if k != "COMPACTOR_DEBUG"}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "compactor", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )


def one_line(stderr: str) -> str:
    """The one line a failure prints; fails unless stderr is exactly that."""
    assert "Traceback" not in stderr, stderr
    assert stderr.count("\n") == 1 and stderr.endswith("\n"), stderr
    assert stderr.startswith("compactor: "), stderr
    return stderr[:-1]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A local store with one compacted topic and two L0 files."""
    return two_l0_files(tmp_path / "store", NOW)


def _first_file(store: Path) -> str:
    r = run_cli("--store", str(store), "stats", "--json")
    key: str = json.loads(r.out)["files"][0]["key"]
    return key


@pytest.fixture
def corrupt(store: Path) -> tuple[Path, str, int]:
    """``store`` with one bit flipped in the middle of its first L0 file: (store, the
    file's key, its size)."""
    key = _first_file(store)
    path = store / key
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    return store, key, len(data)


def test_a_corrupt_input_fails_compact_in_one_line(corrupt: tuple[Path, str, int]) -> None:
    store, key, size = corrupt
    before = tree(store)
    r = compactor("--store", str(store), "--now-ms", NOW, "compact", "--full")
    assert r.returncode == ExitCode.FORMAT == 6, r.stderr
    assert r.stdout == ""
    line = one_line(r.stderr)
    match = re.fullmatch(rf"compactor: {re.escape(key)}: byte (\d+): .+", line)
    assert match is not None, line
    assert 0 < int(match.group(1)) < size
    assert tree(store) == before  # the catalog and every input, byte for byte; no output


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--debug", "compact", "--full"], {}),
        (["compact", "--full", "--debug"], {}),
        (["compact", "--full"], {"COMPACTOR_DEBUG": "1"}),
    ],
    ids=["--debug before the command", "--debug after it", "COMPACTOR_DEBUG=1"],
)
def test_debug_shows_the_traceback_above_the_line(
    corrupt: tuple[Path, str, int], args: list[str], env: dict[str, str]
) -> None:
    store, key, _ = corrupt
    before = tree(store)
    r = compactor("--store", str(store), "--now-ms", NOW, *args, env=env)
    assert r.returncode == ExitCode.FORMAT, r.stderr
    assert r.stderr.startswith("Traceback (most recent call last):"), r.stderr
    assert "compactor.fileformat.errors.FormatError" in r.stderr
    assert r.stderr.splitlines()[-1].startswith(f"compactor: {key}: byte ")
    assert tree(store) == before


def test_an_input_replaced_by_another_topic_is_a_worker_error(store: Path) -> None:
    """An L0 object overwritten with a valid file of a topic the catalog does not know:
    what only the worker finds (exit 7), naming the job."""
    key = _first_file(store)
    sink = io.BytesIO()
    writer = FileWriter(sink, object_name=key)
    writer.write_section("ghost", 0, [records_to_batch([Record(0, 0, b"k", b"v")])])
    writer.finish()
    assert len(sink.getvalue()) < (store / key).stat().st_size
    (store / key).write_bytes(sink.getvalue())
    before = tree(store)
    r = compactor("--store", str(store), "--now-ms", NOW, "compact", "--full")
    assert r.returncode == ExitCode.WORKER == 7, r.stderr
    line = one_line(r.stderr)
    assert re.fullmatch(r"compactor: job \w+: an input holds a section of topic 'ghost'.*", line)
    assert tree(store) == before


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["compact", "--set", "level.trigger.files=x"], 3, "level.trigger.files must be a number"),
        (["plan", "--set", "no.such=1"], 3, "unknown planner setting 'no.such'"),
        (
            ["topic", "create", "x", "--partitions", "1", "--config", "nope=1"],
            3,
            "unknown topic config 'nope'",
        ),
        (["compact", "--frobnicate"], 2, "unrecognized arguments: --frobnicate"),
        (["compact", "--set", "level.trigger.files"], 2, "--set expects NAME=VALUE"),
    ],
)
def test_a_bad_setting_or_option_is_one_line(
    store: Path, args: list[str], code: int, fragment: str
) -> None:
    before = tree(store)
    r = compactor("--store", str(store), *args)
    assert r.returncode == code, r.stderr
    assert fragment in one_line(r.stderr)
    assert r.stdout == ""
    assert tree(store) == before


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_an_unreachable_store_is_one_line() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    env = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    started = time.monotonic()
    r = compactor("--store", "s3://bucket", "--endpoint-url", url, "stats", env=env)
    assert r.returncode == ExitCode.STORE == 5, r.stderr
    assert f"cannot reach S3 endpoint {url}" in one_line(r.stderr)
    assert time.monotonic() - started < 30  # connection refused: a few quick retries


# --- every family, in process ----------------------------------------------------------


BUG_HINT = " (a bug; run again with --debug for the traceback)"


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        (UsageError("unknown topic 'x'"), 2, "unknown topic 'x'"),
        (ConfigError("retention.ms must be >= -1"), 3, "retention.ms must be >= -1"),
        (CommitConflict("input files are no longer live"), 4, "input files are no longer live"),
        (CorruptCatalog("catalog is malformed"), 4, "catalog is malformed"),
        (StoreUnreachable("cannot reach S3 endpoint e"), 5, "cannot reach S3 endpoint e"),
        (StoreError("access denied: get k"), 5, "access denied: get k"),
        (FormatError("data/L0/f.cf", 17, "bad magic"), 6, "data/L0/f.cf: byte 17: bad magic"),
        (WorkerError("stopping", job_id="j1"), 7, "job j1: stopping"),
        (
            PhaseMismatch("phase 2's pointer is at t/2", job_id="j1", topic="t", partition=1),
            7,
            "job j1: partition t/1: phase 2's pointer is at t/2",
        ),
        (KeyError("x"), 70, "internal error: KeyError: 'x'" + BUG_HINT),
        (RuntimeError("two\nlines"), 70, "internal error: RuntimeError: two lines" + BUG_HINT),
        (KeyboardInterrupt(), 130, "interrupted"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else "",
)
def test_every_family_has_its_status_and_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, error: BaseException, code: int, message: str
) -> None:
    line = f"compactor: {message}"

    def fail(*_: object) -> int:
        raise error

    monkeypatch.delenv("COMPACTOR_DEBUG", raising=False)
    monkeypatch.setattr(stats, "run", fail)
    r = run_cli("--store", str(tmp_path / "store"), "stats")
    assert (r.code, r.out, r.err) == (code, "", line + "\n")
    debug = run_cli("--store", str(tmp_path / "store"), "stats", "--debug")
    assert debug.code == code
    assert debug.err.startswith("Traceback (most recent call last):")
    assert debug.err.endswith(line + "\n")


def test_every_status_is_distinct_and_in_the_readme() -> None:
    codes = [int(c) for c in ExitCode]
    assert len(set(codes)) == len(codes)
    assert len({code for _, code in FAILURES}) == len(FAILURES)
    text = README.read_text()
    section = text[text.index("## Exit codes") :]
    section = section[: section.index("\n## ", 1)]
    documented = [int(m) for m in re.findall(r"^\| (\d+) \|", section, re.MULTILINE)]
    assert documented == sorted(codes)
