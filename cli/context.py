"""What every command gets from the global options: the store, its catalog, the clock."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import cached_property

from compactor.catalog import Catalog, topic_names
from compactor.catalog.config import MAX_MS
from compactor.catalog.numbers import INT64_MAX, INT64_MIN, parse_float, saturated_int, shown
from compactor.objectstore import LocalStore, ObjectStore, StoreError, open_store
from compactor.objectstore.request_tally import SENT, Operation, as_json

DEFAULT_STORE = "./compactor-data"
ENDPOINT_ENVS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
"""Where an S3 store finds its endpoint without ``--endpoint-url``, first set first (as
``objectstore.s3conn`` reads them)."""


class UsageError(Exception):
    """A mistake in the command line; exits with status 2."""


def integer(text: str) -> int:
    """An option's text as an integer in the signed 64-bit range, as Kafka reads a number
    (ASCII digits and one sign, ``catalog.numbers``); argparse's type error, in the
    options' words, if it is not one (the argparse types below start here)."""
    return integer_in(text, INT64_MIN)


def integer_in(text: str, least: int, most: int = INT64_MAX, words: str = "") -> int:
    """``text`` as an integer from ``least`` to ``most``, else argparse's type error:
    "must be at least", "must not be negative" or "must be at most", or ``words`` for
    either end where an option names its range its own way. Read by the saturating
    parse, so a value of thousands of digits is refused by its range in one short line, as
    a ``*.ms`` config or a planner setting is, not read by ``int``."""
    try:
        value = saturated_int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {shown(text)!r}") from None
    if least <= value <= most:
        return value
    got = str(value) if INT64_MIN <= value <= INT64_MAX else shown(text.strip())
    if words:
        raise argparse.ArgumentTypeError(f"{words}, got {got}")
    if value < least:
        below = "must not be negative" if least == 0 else f"must be at least {least}"
        raise argparse.ArgumentTypeError(f"{below}, got {got}")
    above = f"{most} (2^63 - 1)" if most == INT64_MAX else str(most)
    raise argparse.ArgumentTypeError(f"must be at most {above}, got {got}")


def number(text: str) -> float:
    """An argparse type: a finite number, in ASCII digits (``catalog.numbers``)."""
    try:
        return parse_float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {shown(text)!r}") from None


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    return integer_in(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0 (a duration, an offset, a time in ms)."""
    return integer_in(text, 0)


def endpoint_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an S3 endpoint (what botocore would refuse with a ValueError,
    or a scheme other than http/https), or None if it can."""
    from urllib.parse import urlsplit

    from botocore.utils import is_valid_endpoint_url, is_valid_ipv6_endpoint_url

    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        parts.port  # noqa: B018 (a port that is not a number from 0 to 65535 raises)
        valid = is_valid_endpoint_url(url) or is_valid_ipv6_endpoint_url(url)
    except ValueError as e:  # urllib: "Invalid IPv6 URL", a bad port
        return f"{e}"
    if scheme not in ("http", "https"):
        return "not an http:// or https:// URL"
    return None if valid else "no valid host name"


def _clock(text: str) -> int:
    """``--now-ms`` (or COMPACTOR_NOW_MS): a time in ms from 0 to below ``MAX_MS``, the
    time a saturated delete horizon or lag reads as (never), which a clock must not
    reach."""
    try:
        now_ms = saturated_int(text)
    except ValueError:
        raise UsageError(f"--now-ms must be an integer, got {shown(text)!r}") from None
    if now_ms < 0:
        raise UsageError(f"--now-ms must not be negative, got {shown(text)}")
    if now_ms >= MAX_MS:
        raise UsageError(
            f"--now-ms must be below {MAX_MS} (2^63 - 1, the time that reads as never), "
            f"got {shown(text)}"
        )
    return now_ms


def _missing_store(store: ObjectStore) -> str | None:
    """Where ``store`` is a local store whose directory does not exist (a mistyped
    ``--store``), the words that say so; else None."""
    if isinstance(store, LocalStore) and not store.root.is_dir():
        return f"no store at {store.root}: the directory does not exist"
    return None


def _store_exists_or_fail(store: ObjectStore) -> None:
    """A local store's directory must exist for a command that reads (or compacts) a
    store: a mistyped path fails here, rather than reading as an empty, healthy store."""
    missing = _missing_store(store)
    if missing is not None:
        raise StoreError(
            f"{missing} (`compactor topic create` or `compactor demo --store DIR` makes a new "
            "store)"
        )


def unknown_topic(name: str, store: ObjectStore, known: Collection[str]) -> UsageError:
    """The usage error of a topic the catalog does not hold (``catalog.topic_names``), or
    of the reason a local store holds none: a directory that does not exist
    (``_missing_store``)."""
    missing = _missing_store(store)
    if missing is not None:
        return UsageError(f"unknown topic {topic_names.quoted(name)} ({missing})")
    return UsageError(topic_names.unknown_topic(name, known))


@dataclass
class Context:
    store_url: str
    endpoint_url: str | None
    now_ms: int
    fixed_clock: bool = False
    """Whether ``--now-ms`` (or COMPACTOR_NOW_MS) fixed the clock of the time rules; a
    long-running command otherwise reads the wall clock afresh."""
    existing_store: bool = False
    """Whether the command needs a store that exists: a local store's directory that does
    not exist is then a StoreError, not an empty store (commands that create a store,
    ``topic create``, ``ingest``, ``demo``, leave this False; a command opts in with
    ``set_defaults(existing_store=True)``)."""
    sent_at_start: dict[Operation, int] = field(default_factory=SENT.snapshot)
    """This process's request tally when the command began (``requests_sent``)."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Context:
        store_url = args.store or os.environ.get("COMPACTOR_STORE") or DEFAULT_STORE
        now_text = args.now_ms if args.now_ms is not None else os.environ.get("COMPACTOR_NOW_MS")
        now_ms = int(time.time() * 1000) if now_text is None else _clock(now_text)
        if args.endpoint_url:
            problem = endpoint_url_problem(args.endpoint_url)
            if problem is not None:
                raise UsageError(f"--endpoint-url {args.endpoint_url!r}: {problem}")
        return cls(
            store_url,
            args.endpoint_url,
            now_ms,
            fixed_clock=now_text is not None,
            existing_store=getattr(args, "existing_store", False),
        )

    def time_rules_now_ms(self) -> int:
        """The clock of the planner's time rules, now: ``--now-ms`` if given, else the
        wall clock."""
        return self.now_ms if self.fixed_clock else int(time.time() * 1000)

    def requests_sent(self) -> dict[str, dict[str, int]]:
        """The AWS requests this process sent since the command began, by service and
        operation, as a ``--json`` report gives them (``{}`` on a local store): the
        catalog's reads and commits included, and a phase-1 helper's."""
        return as_json(SENT.since(self.sent_at_start))

    @cached_property
    def store(self) -> ObjectStore:
        if not self.endpoint_url and self.store_url.lower().startswith("s3://"):
            for name in ENDPOINT_ENVS:
                value = os.environ.get(name)
                if value:  # the one s3conn uses; a bad one is the store's error
                    problem = endpoint_url_problem(value)
                    if problem is not None:
                        raise StoreError(f"{name}={value!r} is not an S3 endpoint: {problem}")
                    break
        store = open_store(self.store_url, endpoint_url=self.endpoint_url)
        if self.existing_store:
            try:
                _store_exists_or_fail(store)
            except StoreError:
                store.close()
                raise
        return store

    @cached_property
    def catalog(self) -> Catalog:
        return Catalog(self.store)

    def close(self) -> None:
        if "store" in self.__dict__:
            self.store.close()
