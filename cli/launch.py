"""The ``compactor`` script and ``python -m compactor``: starts phase 1's helper before
anything else is imported when the command may run compaction jobs
(``worker.helper_pool.start_for_command``), so that the helper and the command line load
their modules side by side; then runs the command line (``cli.main``)."""

from __future__ import annotations

import sys

from compactor.cli.commands import command_of
from compactor.worker.helper_pool import start_for_command


def main() -> int:
    start_for_command(command_of(sys.argv[1:]))
    from compactor.cli.main import main as command_line  # after the helper has started

    return command_line()
