"""``--metrics-port P``, as ``worker`` and ``schedule`` take it: Prometheus text served on
0.0.0.0:P, bound before the command touches the store or the queue."""

from __future__ import annotations

import argparse

from compactor.cli.context import UsageError, integer_in
from compactor.jobqueue.events import EventLog
from compactor.jobqueue.metrics import ServedMetrics


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0..65535 (0: any free port)."""
    return integer_in(text, 0, 65535, "must be a TCP port, 0..65535")


def add_metrics_port_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        help="serve Prometheus metrics on this port (0: any free port, logged)",
    )


def serve_metrics(metrics: ServedMetrics, port: int | None, log: EventLog) -> None:
    """Serves ``--metrics-port`` if given, and logs the port bound (``metrics_serving``).
    A port that cannot be bound (in use, not permitted) is the command line's to change:
    a usage error, in one line."""
    if port is None:
        return
    try:
        bound = metrics.serve(port)
    except OSError as e:
        raise UsageError(
            f"--metrics-port {port}: cannot serve metrics: {e.strerror or e}"
        ) from None
    log("metrics_serving", port=bound)
