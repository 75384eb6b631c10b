"""How an error names a topic the catalog does not hold."""

from __future__ import annotations

import difflib
from collections.abc import Collection

from compactor.catalog.numbers import shown

NAMED = 5
"""How many of a store's topics an unknown topic's words name."""


def unknown_topic(name: str, known: Collection[str]) -> str:
    """The words for topic ``name``, which is not among ``known``: the nearest known name
    (a typo's likely meaning) and the store's topics, or that it has none; the name quoted
    short (``shown``)."""
    if not known:
        return f"unknown topic {shown(name)!r} (the store has no topics)"
    names = sorted(known)
    near = difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    more = f", and {len(names) - NAMED} more" if len(names) > NAMED else ""
    return f"unknown topic {shown(name)!r} ({hint}the store has {', '.join(names[:NAMED])}{more})"
