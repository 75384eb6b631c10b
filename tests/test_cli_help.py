"""``--help`` of every command says what each of its options and arguments is for, and
prints (argparse formats each text with %, so a stray one fails only when shown)."""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Iterator

import pytest

from compactor.cli.main import build_parser


def _parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


COMMANDS = list(_parsers(build_parser()))


def test_every_option_and_argument_has_help() -> None:
    missing = [
        f"{' '.join(path)} {action.option_strings or action.dest}"
        for path, parser in COMMANDS
        for action in parser._actions
        if action.help is None and not isinstance(action, argparse._SubParsersAction)
    ]
    assert not missing, missing


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=" ".join)
def test_help_prints(path: tuple[str, ...]) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        build_parser([*path, "--help"]).parse_args([*path, "--help"])
    assert done.value.code == 0
    assert out.getvalue().startswith("usage: compactor")
