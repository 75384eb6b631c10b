"""Key rules shared by every store, so a key that works locally also works on S3.

A key is a non-empty '/'-separated path: no leading '/', no empty, '.' or '..' parts,
no NUL byte, and its first part does not start with ``.compactor-`` (reserved for the
local store's temp dir and lock file).
"""

from __future__ import annotations

from .base import StoreError

RESERVED_PREFIX = ".compactor-"


def check_key(key: str, where: str) -> str:
    """Return ``key`` unchanged if valid, else raise StoreError naming ``where``."""
    problem = _key_problem(key)
    if problem is not None:
        raise StoreError(f"invalid key {key!r} for {where}: {problem}")
    return key


def check_prefix(prefix: str, where: str) -> str:
    """A listing prefix: '' or a key-like path, optionally ending with '/'. Reserved names
    are allowed here (listings never return them)."""
    if prefix == "":
        return prefix
    problem = _key_problem(prefix.removesuffix("/"), reserved_ok=True)
    if problem is not None:
        raise StoreError(f"invalid prefix {prefix!r} for {where}: {problem}")
    return prefix


def _key_problem(key: str, *, reserved_ok: bool = False) -> str | None:
    if not isinstance(key, str):
        return "keys are strings"
    if key == "":
        return "empty key"
    if "\x00" in key:
        return "NUL byte"
    if key.startswith("/"):
        return "absolute path"
    parts = key.split("/")
    for part in parts:
        if part == "":
            return "empty path component"
        if part in (".", ".."):
            return f"{part!r} path component"
    if not reserved_ok and parts[0].startswith(RESERVED_PREFIX):
        return f"first component may not start with {RESERVED_PREFIX!r} (reserved)"
    return None


def check_conditions(if_none_match: bool, if_match: str | None) -> None:
    if if_none_match and if_match is not None:
        raise ValueError("if_none_match and if_match are mutually exclusive")
