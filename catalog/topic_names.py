"""How an error names a topic the catalog does not hold."""

from __future__ import annotations

import difflib
from collections.abc import Collection

from compactor.catalog.numbers import shown

NAMED = 5
"""How many of a store's topics an unknown topic's words name."""
LONGEST = 249
"""Kafka's longest topic name: one no longer is quoted whole (``quoted``)."""


def unknown_topic(name: str, known: Collection[str]) -> str:
    """The words for topic ``name``, which is not among ``known``: the nearest known name
    (a typo's likely meaning) and the store's topics, if it has any."""
    if not known:
        return f"unknown topic {quoted(name)}"
    names = sorted(known)
    near = difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    more = f", and {len(names) - NAMED} more" if len(names) > NAMED else ""
    return f"unknown topic {quoted(name)} ({hint}the store has {', '.join(names[:NAMED])}{more})"


def quoted(name: str) -> str:
    """``name`` as an error quotes it: whole if it could be a topic's, else short."""
    return repr(name if len(name) <= LONGEST else shown(name))
