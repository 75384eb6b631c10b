"""The commands of the command line, and which one a line names: imported by the
``compactor`` script before anything else (``cli.launch``), so the standard library only."""

from __future__ import annotations

from collections.abc import Sequence

COMMANDS: dict[str, str] = {
    "topic": "topic",
    "ingest": "ingest_cmd",
    "dump": "dump",
    "verify": "verify_cmd",
    "stats": "stats",
    "plan": "plan_cmd",
    "compact": "compact",
    "history": "history_cmd",
    "catalog": "history_cmd",
    "replay": "replay_cmd",
    "inspect": "inspect_cmd",
    "schedule": "schedule_cmd",
    "worker": "worker_cmd",
    "spark": "spark_cmd",
    "simulate": "simulate",
    "demo": "demo",
}
"""Each command, and the module of ``compactor.cli`` that registers it (in the order of
``compactor --help``)."""
_VALUED = ("--store", "--endpoint-url", "--now-ms")
"""The global options that take a value as the next word."""


def command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs: its first word that is not an option (or a global
    option's value), if that names one; None for a line that asks for ``--help`` before
    any command, names none, or names one that does not exist."""
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help"):
            return None
        if word in _VALUED:
            next(words, None)
        elif not word.startswith("-"):
            return word if word in COMMANDS else None
    return None
