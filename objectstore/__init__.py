"""Object storage for compactor: one interface (``base``), a local directory store and an
S3 store, and ``open_store`` to pick one from a URL."""

from .base import (
    GetCounter,
    MultipartWriter,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectStream,
    PendingUpload,
    PreconditionFailed,
    StoreError,
    StoreUnreachable,
)
from .local import LocalStore
from .url import open_store

__all__ = [
    "GetCounter",
    "LocalStore",
    "MultipartWriter",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStream",
    "PendingUpload",
    "PreconditionFailed",
    "StoreError",
    "StoreUnreachable",
    "open_store",
]
