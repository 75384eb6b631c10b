"""Runs the ``compactor`` command in-process, as a user would type it."""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass

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


def assert_one_line_error(result: Result, *fragments: str) -> None:
    assert result.code != 0, result
    assert result.out == "", result
    assert "Traceback" not in result.err
    assert result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err
