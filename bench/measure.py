"""A small launcher: run a command as a child and record its peak RSS, CPU and wall time.

    python -m bench.measure RESULT.json COMMAND [ARGS...]

Why a launcher: Linux charges a child, at ``exec``, with the peak RSS of the memory it
was forked from (``ru_maxrss`` keeps the old mm's high-water mark; with vfork, as
``subprocess`` uses, that is the parent's own peak). ``bench.run`` holds a workload's
arrays and output digests in memory, so its children would all report at least its peak.
This launcher imports almost nothing (~10 MB RSS), forks and execs the command, and reaps
it with ``os.wait4``: the child's ``ru_maxrss`` is then its own peak (never below this
launcher's ~10 MB). It writes JSON {wall_s, max_rss_kib, user_s, sys_s, returncode} and
exits with the command's status. stdin/stdout/stderr are inherited.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m bench.measure RESULT.json COMMAND [ARGS...]", file=sys.stderr)
        return 2
    result, cmd = argv[0], argv[1:]
    sys.stdout.flush()
    sys.stderr.flush()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    with open(result, "w") as f:
        json.dump(
            {
                "wall_s": wall,
                "max_rss_kib": usage.ru_maxrss,
                "user_s": usage.ru_utime,
                "sys_s": usage.ru_stime,
                "returncode": code,
            },
            f,
        )
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
