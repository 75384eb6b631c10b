"""Whether a standalone master can be reached before Spark is asked to register with it.

Spark's driver tries a ``spark://`` master 3 times, 20 s apart, before it gives up ("All
masters are unresponsive!"), so a master URL with a typo or a firewall in the way kept
``compactor spark`` silent for about a minute. One TCP connection to each of the URL's
masters (a standalone cluster with standby masters lists them all) tells a master that
is not there from one that is, in at most ``CONNECT_TIMEOUT_S``. A port that accepts the
connection but is no Spark master still takes Spark's minute.

Plain Python: no pyspark, no JVM.
"""

from __future__ import annotations

import socket

from compactor.spark.failures import SparkUnavailable

CONNECT_TIMEOUT_S = 10.0
_SCHEME = "spark://"


def standalone_masters(master: str) -> list[tuple[str, int]]:
    """The (host, port) of each master a ``spark://host:port[,host:port...]`` URL names;
    [] for any other master (``local[*]``, ``yarn``, ``k8s://...``), which is not probed.
    A host:port that is not one is left to Spark, which refuses it in its own words."""
    if not master.startswith(_SCHEME):
        return []
    found = []
    for part in master[len(_SCHEME) :].split(","):
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit():
            return []
        found.append((host.strip("[]"), int(port)))
    return found


def check_reachable(master: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """SparkUnavailable unless one of ``master``'s standalone masters accepts a TCP
    connection (nothing is sent on it); other masters pass unchecked."""
    masters = standalone_masters(master)
    why = []
    for host, port in masters:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except socket.gaierror as exc:
            why.append(f"{host}: {exc.strerror or exc}")
        except TimeoutError:
            why.append(f"{host}:{port}: no answer in {timeout_s:g} s")
        except OSError as exc:
            why.append(f"{host}:{port}: {exc.strerror or exc}")
    if why:
        raise SparkUnavailable(f"no standalone master at {master} ({'; '.join(why)})", False)
