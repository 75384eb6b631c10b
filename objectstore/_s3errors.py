"""botocore/aiohttp exceptions -> our StoreError family, with messages naming the object."""

from __future__ import annotations

import asyncio

import aiohttp
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    IncompleteReadError,
    NoCredentialsError,
    ReadTimeoutError,
    ResponseStreamingError,
)

from .base import ObjectNotFound, PreconditionFailed, StoreError, StoreUnreachable

# Failures while reading a response body (never retried by botocore): resume instead.
BODY_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientPayloadError,
    aiohttp.ClientConnectionError,
    ConnectionError,
    asyncio.IncompleteReadError,
    TimeoutError,
    ResponseStreamingError,
    ReadTimeoutError,
    IncompleteReadError,
    ConnectionClosedError,
)

_DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403", "Forbidden"}


def error_code(e: ClientError) -> tuple[str, int | None]:
    code = str(e.response.get("Error", {}).get("Code", ""))
    status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code, status


def was_retried(e: BaseException | None) -> bool:
    """Whether ``e`` is S3's answer to a retry by botocore: the request was sent before,
    and its answer lost, so it may have been carried out."""
    if not isinstance(e, ClientError):
        return False
    return int(e.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0


def map_error(e: BaseException, *, op: str, where: str, bucket: str, endpoint: str) -> StoreError:
    """``where`` is the object's URL (s3://bucket/prefix/key) or the store's URL."""
    if isinstance(e, StoreError):
        return e
    if isinstance(e, ClientError):
        code, status = error_code(e)
        message = e.response.get("Error", {}).get("Message", "") or str(e)
        if code in ("NoSuchKey", "NotFound") or (code == "404" and status == 404):
            return ObjectNotFound(f"object not found: {where}")
        if code == "NoSuchBucket":
            return StoreError(f"bucket {bucket!r} does not exist at {endpoint} ({op} {where})")
        if status == 412 or code == "PreconditionFailed" or code == "ConditionalRequestConflict":
            return PreconditionFailed(f"{op} {where}: precondition failed ({code}: {message})")
        if code in _DENIED or status == 403:
            return StoreError(f"access denied: {op} {where} at {endpoint} ({code}: {message})")
        return StoreError(f"{op} {where} failed at {endpoint}: {code or status}: {message}")
    if isinstance(e, (EndpointConnectionError, ConnectTimeoutError)):
        return StoreUnreachable(f"cannot reach S3 endpoint {endpoint}: {e} ({op} {where})")
    if isinstance(e, NoCredentialsError):
        return StoreError(f"no AWS credentials found for {where} (standard credential chain)")
    if isinstance(e, BotoCoreError | aiohttp.ClientError | OSError | asyncio.TimeoutError):
        return StoreError(f"{op} {where} failed at {endpoint}: {type(e).__name__}: {e}")
    raise e
