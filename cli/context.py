"""What every command gets from the global options: the store, its catalog, the clock."""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from functools import cached_property

from compactor.catalog import Catalog
from compactor.objectstore import ObjectStore, open_store

DEFAULT_STORE = "./compactor-data"


class UsageError(Exception):
    """A mistake in the command line; exits with status 2."""


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


@dataclass
class Context:
    store_url: str
    endpoint_url: str | None
    now_ms: int
    fixed_clock: bool = False
    """Whether ``--now-ms`` (or COMPACTOR_NOW_MS) fixed the clock of the time rules; a
    long-running command otherwise reads the wall clock afresh."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Context:
        store_url = args.store or os.environ.get("COMPACTOR_STORE") or DEFAULT_STORE
        now_text = args.now_ms if args.now_ms is not None else os.environ.get("COMPACTOR_NOW_MS")
        if now_text is None:
            now_ms = int(time.time() * 1000)
        else:
            try:
                now_ms = int(now_text)
            except ValueError:
                raise UsageError(f"--now-ms must be an integer, got {now_text!r}") from None
        return cls(store_url, args.endpoint_url, now_ms, fixed_clock=now_text is not None)

    def time_rules_now_ms(self) -> int:
        """The clock of the planner's time rules, now: ``--now-ms`` if given, else the
        wall clock."""
        return self.now_ms if self.fixed_clock else int(time.time() * 1000)

    @cached_property
    def store(self) -> ObjectStore:
        return open_store(self.store_url, endpoint_url=self.endpoint_url)

    @cached_property
    def catalog(self) -> Catalog:
        return Catalog(self.store)

    def close(self) -> None:
        if "store" in self.__dict__:
            self.store.close()
