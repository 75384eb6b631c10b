"""``--set NAME=VALUE``: planner settings on the commands that plan."""

from __future__ import annotations

import argparse

from compactor.cli.context import UsageError
from compactor.planner.config import PlannerConfig


def add_planner_options(p: argparse.ArgumentParser) -> None:
    names = ", ".join(PlannerConfig().to_json())
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        dest="planner_settings",
        help=f"a planner setting ({names})",
    )


def planner_config(args: argparse.Namespace) -> PlannerConfig:
    """The planner settings of ``--set``: UsageError if one is not NAME=VALUE, ConfigError
    if the planner rejects a name or a value."""
    settings: dict[str, str] = {}
    for item in args.planner_settings:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--set expects NAME=VALUE, got {item!r}")
        settings[name.strip()] = value.strip()
    return PlannerConfig.parse(settings)
