"""Runs the ``compactor`` command in-process, as a user would type it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from compactor.cli.main import main


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_cli(*args: str, stdin: bytes | None = None) -> Result:
    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        sys.stdin = old_stdin
    return Result(code, out.getvalue(), err.getvalue())


def spark_cli(store: Path, now_ms: str, *command: str, env: dict[str, str] | None = None) -> Result:
    """``compactor --store STORE --now-ms NOW spark COMMAND...`` as a user runs it: the
    virtualenv's script in its own process (a real JVM under it), ``env`` added to this
    one's."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "compactor"), "--store", str(store)]
        + ["--now-ms", now_ms, "spark", *command],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=600,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def one_line(r: Result, code: int, *fragments: str) -> str:
    """The one line a failure prints; fails unless the status is ``code`` and stderr is
    exactly that line, without a traceback or an internal error."""
    assert r.code == code, r
    assert r.out == "", r
    assert "Traceback" not in r.err, r.err
    assert r.err.count("\n") == 1 and r.err.endswith("\n"), r.err
    assert r.err.startswith("compactor: "), r.err
    assert "internal error" not in r.err, r.err
    for fragment in fragments:
        assert fragment in r.err, r.err
    return r.err[:-1]


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root``: the catalog, the data files, anything left behind."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def assert_one_line_error(result: Result, *fragments: str) -> None:
    assert result.code != 0, result
    assert result.out == "", result
    assert "Traceback" not in result.err
    assert result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


def two_l0_files(root: Path, now_ms: str) -> Path:
    """A local store at ``root`` with one compacted topic t of 2 partitions and two L0
    files of 100 records each, 17 keys overwritten: ``compact --full`` has work to do
    (and files it would delete after the grace period)."""
    s = str(root)
    create = ["topic", "create", "t", "--partitions", "2", "--config", "cleanup.policy=compact"]
    r = run_cli("--store", s, *create)
    assert r.code == 0, r.err
    src = root.parent / f"{root.name}-in.jsonl"
    src.write_text(
        "".join(
            json.dumps({"topic": "t", "partition": i % 2, "key": str(i % 17), "value": "v" * 30})
            + "\n"
            for i in range(200)
        )
    )
    r = run_cli("--store", s, "--now-ms", now_ms, "ingest", str(src), "--max-file-records", "100")
    assert r.code == 0, r.err
    assert len(json.loads(r.out)["files"]) == 2
    return root
