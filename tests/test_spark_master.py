"""A standalone master that is not there is told apart in seconds, before Spark spends a
minute registering with it (spark.master); other masters are left to Spark."""

from __future__ import annotations

import socket

import pytest

from compactor.spark.failures import SparkUnavailable
from compactor.spark.master import check_reachable, standalone_masters


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("master", "masters"),
    [
        ("spark://10.0.0.5:7077", [("10.0.0.5", 7077)]),
        ("spark://a:7077,b:7078", [("a", 7077), ("b", 7078)]),
        ("spark://[::1]:7077", [("::1", 7077)]),
        ("local[2]", []),
        ("yarn", []),
        ("k8s://https://10.0.0.1:443", []),
        ("spark://no-port", []),  # Spark's own words for a malformed URL
    ],
)
def test_the_masters_a_url_names(master: str, masters: list[tuple[str, int]]) -> None:
    assert standalone_masters(master) == masters


def test_a_master_that_refuses_the_connection_is_unavailable() -> None:
    port = _closed_port()
    with pytest.raises(SparkUnavailable) as caught:
        check_reachable(f"spark://127.0.0.1:{port}")
    assert str(caught.value) == (
        f"Spark did not start: no standalone master at spark://127.0.0.1:{port} "
        f"(127.0.0.1:{port}: Connection refused)"
    )
    assert not caught.value.jvm_exited


def test_a_host_that_does_not_resolve_is_unavailable() -> None:
    with pytest.raises(SparkUnavailable, match=r"no-such-host\.invalid: "):
        check_reachable("spark://no-such-host.invalid:7077")


def test_one_listening_master_of_several_is_enough() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        check_reachable(f"spark://127.0.0.1:{_closed_port()},127.0.0.1:{port}")
    check_reachable("local[2]")  # not probed
