"""``open_store``: a store URL -> an ObjectStore.

- ``None`` or ``""``: ``LocalStore("./compactor-data")``
- a path, or ``file://<path>`` (``file:///abs/path``, percent-encoded as ``Path.as_uri``
  writes it): ``LocalStore``
- ``s3://bucket[/prefix]``: ``S3Store`` (endpoint: ``endpoint_url``, else
  ``AWS_ENDPOINT_URL``, else AWS; multipart part size: ``COMPACTOR_S3_PART_SIZE`` bytes,
  else 8 MiB)

``store.url`` is the canonical form (``file:///abs/path`` or ``s3://bucket[/prefix]``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

from .base import ObjectStore, StoreError
from .local import DEFAULT_ROOT, LocalStore

# S3 bucket naming rules (the general-purpose subset): 3-63 of [a-z0-9.-], alnum ends.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
PART_SIZE_ENV = "COMPACTOR_S3_PART_SIZE"
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def open_store(url: str | None, *, endpoint_url: str | None = None) -> ObjectStore:
    if not url:
        _no_endpoint(endpoint_url, "the default local store")
        return LocalStore(DEFAULT_ROOT)
    scheme = _SCHEME.match(url)
    if scheme is None:
        _no_endpoint(endpoint_url, url)
        return LocalStore(Path(url))
    name = scheme.group(1).lower()
    rest = url[scheme.end() :]
    if name == "file":
        _no_endpoint(endpoint_url, url)
        if rest.startswith("localhost/"):
            rest = rest[len("localhost") :]
        path = unquote(rest)
        if not path:
            raise StoreError(f"store URL {url!r} has no path (try file:///abs/path)")
        return LocalStore(Path(path))
    if name == "s3":
        bucket, _, prefix = rest.partition("/")
        if not _BUCKET.fullmatch(bucket) or ".." in bucket:
            raise StoreError(
                f"store URL {url!r}: {bucket!r} is not a valid S3 bucket name "
                "(3-63 characters: lowercase letters, digits, '.', '-')"
            )
        from .s3 import S3Store  # boto3 and aiobotocore load only when S3 is used

        return S3Store(bucket, prefix, endpoint_url, part_size=_part_size())
    raise StoreError(
        f"unsupported store URL {url!r}: use a directory path, file://PATH or s3://BUCKET[/PREFIX]"
    )


def _part_size() -> int:
    from .s3 import DEFAULT_PART_SIZE

    text = os.environ.get(PART_SIZE_ENV)
    if not text:
        return DEFAULT_PART_SIZE
    digits = text.strip()
    size = int(digits) if digits.isascii() and digits.isdigit() else 0
    if size < 1:
        raise StoreError(f"{PART_SIZE_ENV} must be a positive number of bytes, got {text!r}")
    return size


def _no_endpoint(endpoint_url: str | None, what: str) -> None:
    if endpoint_url:
        raise StoreError(f"--endpoint-url applies to s3:// stores only, not {what}")
