"""S3Store specifics: GETs counted at the server, stream resume through a connection-
cutting proxy, multipart streaming, error mapping, unreachable endpoints."""

from __future__ import annotations

import hashlib
import itertools
import random
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from conftest import RequestLog, S3Endpoint, S3Url
from cutting_proxy import CuttingProxy

from compactor.objectstore import (
    ObjectNotFound,
    ObjectStream,
    PreconditionFailed,
    StoreError,
    StoreUnreachable,
    open_store,
)
from compactor.objectstore.s3 import S3Store
from compactor.objectstore.s3multipart import S3MultipartWriter, multipart_etag

MiB = 1 << 20


def blob(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


@pytest.fixture
def proxied(
    s3_endpoint: S3Endpoint, s3_store: S3Store, request: pytest.FixtureRequest
) -> Iterator[tuple[S3Store, CuttingProxy, str]]:
    """(an S3Store talking through a CuttingProxy, the proxy, the object key); the key is
    cut once at ``request.param`` body bytes."""
    key = "cut/object.bin"
    with CuttingProxy(s3_endpoint.url, f"/{s3_store.bucket}/{key}", request.param) as proxy:
        store = S3Store(s3_store.bucket, endpoint_url=proxy.url)
        try:
            yield store, proxy, key
        finally:
            store.close()


# -- GETs counted at the server ----------------------------------------------------------


def test_one_stream_is_one_get_at_the_server(s3_store: S3Store, request_log: RequestLog) -> None:
    data = blob(5 * MiB + 7, seed=1)
    s3_store.put("counted", data)
    request_log.reset()
    s3_store.gets.reset()
    streams = [s3_store.open_stream("counted") for _ in range(2)]  # a worker's two pointers
    out: list[bytearray] = [bytearray(), bytearray()]
    sizes = [3, 65_537, 1_048_583, 17]
    i = 0
    while len(out[0]) < len(data) or len(out[1]) < len(data):
        for s, buf in zip(streams, out, strict=True):
            buf += s.read(sizes[i % len(sizes)])
            i += 1
    for s in streams:
        s.close()
    assert [bytes(b) for b in out] == [data, data]
    assert request_log.count("GET", "counted", bucket=s3_store.bucket) == 2
    assert s3_store.gets.get("counted") == 2
    s3_store.get("counted")
    s3_store.get_range("counted", 5, 10)
    assert request_log.count("GET", "counted") == 4 == s3_store.gets.get("counted")


def test_prefix_maps_keys_on_the_server(
    s3_endpoint: S3Endpoint, s3_bucket: str, request_log: RequestLog
) -> None:
    store = S3Store(s3_bucket, "tenant/a", endpoint_url=s3_endpoint.url)
    try:
        store.put("x/y", b"1")
        with store.open_stream("x/y") as s:
            assert s.read(10) == b"1"
        assert request_log.count("GET", "tenant/a/x/y") == 1
        assert [i.key for i in store.list()] == ["x/y"]
        client = s3_endpoint.client()
        assert [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket)["Contents"]] == [
            "tenant/a/x/y"
        ]
        client.close()
    finally:
        store.close()


# -- stream resume -----------------------------------------------------------------------


CUT = 2 * MiB + MiB // 2 + 7


def _next_piece(s: ObjectStream, n: int, into: bool) -> bytes:
    """The stream's next ``n`` bytes, by ``read`` or by ``readinto``."""
    if not into:
        return s.read(n)
    buf = bytearray(n)
    got = s.readinto(memoryview(buf))
    return bytes(buf[:got])


@pytest.mark.parametrize("proxied", [CUT], indirect=True)
@pytest.mark.parametrize("mode", ["read", "readinto", "both"])
def test_stream_resumes_after_cut(
    s3_store: S3Store,
    proxied: tuple[S3Store, CuttingProxy, str],
    s3_endpoint: S3Endpoint,
    mode: str,
) -> None:
    store, proxy, key = proxied
    store.gets.reset()  # counts every key's GETs
    data = blob(4 * MiB + 1, seed=2)
    etag = s3_store.put(key, data)
    log = s3_endpoint.log
    if log is not None:
        log.reset()
    out = bytearray()
    with store.open_stream(key) as s:
        for i in itertools.count():
            into = mode == "readinto" or (mode == "both" and i % 2 == 1)
            chunk = _next_piece(s, 77_777 + 300_000 * (i % 2), into)
            if not chunk:
                break
            out += chunk
            assert s.position == len(out)
        assert s.resumes == 1
    assert bytes(out) == data
    assert proxy.cuts == 1
    assert store.gets.get(key) == 2
    first, second = proxy.gets(f"/{store.bucket}/{key}")
    assert "range" not in first and "if-match" not in first
    assert second["if-match"] == etag
    # aiohttp drops what it had buffered when the connection breaks, so the resume point
    # is at or a little before the cut.
    resume_at = int(second["range"].removeprefix("bytes=").removesuffix("-"))
    assert second["range"] == f"bytes={resume_at}-"
    assert CUT - 2 * MiB < resume_at <= CUT
    if log is not None:  # and the server saw exactly those two GETs
        server = log.requests("GET", key, bucket=store.bucket)
        assert len(server) == 2
        assert server[1].headers["range"] == second["range"]
        assert server[1].headers["if-match"] == etag


# The first read fetches 1 MiB; the cut comes well after it (past what aiohttp buffers).
@pytest.mark.parametrize("proxied", [3 * MiB + 123], indirect=True)
def test_stream_fails_if_object_changed_before_resume(
    s3_store: S3Store, proxied: tuple[S3Store, CuttingProxy, str]
) -> None:
    store, proxy, key = proxied
    old, new = blob(5 * MiB, seed=3), blob(5 * MiB, seed=4)
    s3_store.put(key, old)
    out = bytearray()
    with store.open_stream(key) as s:
        out += s.read(1000)
        s3_store.put(key, new)
        with pytest.raises(StoreError, match="changed while streaming"):
            while chunk := s.read(100_000):
                out += chunk
        assert s.resumes == 1
    assert proxy.cuts <= 1  # LocalStack may end the old body itself when it is replaced
    assert 1000 <= len(out) < len(old)
    assert bytes(out) == old[: len(out)]  # never a byte of the new version


@pytest.mark.parametrize("proxied", [3 * MiB], indirect=True)
def test_stream_fails_if_object_deleted_before_resume(
    s3_store: S3Store, proxied: tuple[S3Store, CuttingProxy, str]
) -> None:
    store, proxy, key = proxied
    s3_store.put(key, blob(5 * MiB, seed=5))
    with store.open_stream(key) as s:
        s.read(10)
        s3_store.delete(key)
        with pytest.raises(ObjectNotFound, match="deleted while streaming"):
            while s.read(100_000):
                pass
        assert s.resumes == 1
    # moto keeps serving the deleted body, so the proxy's cut ends it; LocalStack may end the
    # body early itself when the object goes. Either way the one resume finds it gone.
    assert proxy.cuts <= 1


# -- multipart ---------------------------------------------------------------------------


def test_multipart_streams_parts_before_complete(
    s3_store: S3Store, request_log: RequestLog
) -> None:
    size = s3_store.part_size
    w = s3_store.open_multipart("streamed")
    data = blob(6 * size, seed=6)
    for off in range(0, len(data), size // 3):
        w.write(data[off : off + size // 3])
    # Six full parts written, at most two may still be in flight: four are done.
    part_puts = [r for r in request_log.requests("PUT", "streamed") if "partNumber=" in r.query]
    assert len(part_puts) >= 4
    etag = w.complete()
    assert s3_store.get("streamed") == (data, etag)
    part_puts = [r for r in request_log.requests("PUT", "streamed") if "partNumber=" in r.query]
    assert len(part_puts) == 6


def test_multipart_part_failure_aborts(s3_endpoint: S3Endpoint, s3_store: S3Store) -> None:
    size = s3_store.part_size
    client = s3_endpoint.client()
    # No retries: moto answers 500 (S3: 404 NoSuchUpload) for parts of an aborted upload.
    store = S3Store(s3_store.bucket, endpoint_url=s3_endpoint.url, part_size=size, max_attempts=1)
    w = store.open_multipart("doomed")
    w.write(blob(size, seed=7))
    (upload,) = client.list_multipart_uploads(Bucket=s3_store.bucket)["Uploads"]
    client.abort_multipart_upload(Bucket=s3_store.bucket, Key="doomed", UploadId=upload["UploadId"])
    with pytest.raises(StoreError, match="doomed"):
        for _ in range(4):
            w.write(blob(size, seed=8))
        w.complete()
    with pytest.raises(StoreError, match="aborted"):
        w.write(b"x")
    assert client.list_multipart_uploads(Bucket=s3_store.bucket).get("Uploads", []) == []
    with pytest.raises(ObjectNotFound):
        store.head("doomed")
    store.close()
    client.close()


def test_multipart_abort_removes_the_upload(s3_endpoint: S3Endpoint, s3_store: S3Store) -> None:
    client = s3_endpoint.client()
    with pytest.raises(KeyError), s3_store.open_multipart("gone") as w:
        w.write(blob(3 * s3_store.part_size, seed=9))
        assert len(client.list_multipart_uploads(Bucket=s3_store.bucket)["Uploads"]) == 1
        raise KeyError("job failed")
    assert client.list_multipart_uploads(Bucket=s3_store.bucket).get("Uploads", []) == []
    client.close()


def test_an_abort_while_the_upload_is_being_created_removes_it(
    s3_endpoint: S3Endpoint, s3_store: S3Store
) -> None:
    """SIGTERM raises in the main thread, possibly while it waits for CreateMultipartUpload:
    the request goes on, on the connection's loop thread, and the abort waits for its
    answer and aborts the upload it created instead of leaving it behind."""
    client = s3_endpoint.client()
    w = s3_store.open_multipart("interrupted")
    assert isinstance(w, S3MultipartWriter)
    w._create()  # the caller's wait for it "interrupted": the id is never read
    w.abort()
    assert client.list_multipart_uploads(Bucket=s3_store.bucket).get("Uploads", []) == []
    client.close()


@pytest.fixture
def answer_lost(
    s3_endpoint: S3Endpoint, s3_store: S3Store, request: pytest.FixtureRequest
) -> Iterator[tuple[S3Store, CuttingProxy, str]]:
    """(an S3Store talking through a CuttingProxy, the proxy, the request it drops the
    first answer to, as (method, path)): ``request.param`` is (method, path after the
    bucket)."""
    method, path = request.param
    target = f"/{s3_store.bucket}/{path}"
    with CuttingProxy(s3_endpoint.url, target, None, method=method) as proxy:
        store = S3Store(s3_store.bucket, endpoint_url=proxy.url, part_size=s3_endpoint.part_size)
        try:
            yield store, proxy, (method, target)
        finally:
            store.close()


@pytest.mark.parametrize(
    ("answer_lost", "parts"),
    [(("POST", "lost/object.bin?uploadId="), 2.5), (("PUT", "lost/object.bin"), 0.5)],
    indirect=["answer_lost"],
    ids=["complete-multipart-upload", "put-object"],
)
def test_a_write_whose_answer_is_lost_completes(
    answer_lost: tuple[S3Store, CuttingProxy, tuple[str, str]], s3_store: S3Store, parts: float
) -> None:
    """The server carries the request out and its answer never arrives: botocore retries,
    the retry is refused (If-None-Match's 412; NoSuchUpload for the completed upload,
    LocalStack's answer, where moto completes it again), and the writer finds the object
    holding exactly what it uploaded, so the write succeeded."""
    store, proxy, line = answer_lost
    data = blob(int(parts * store.part_size), seed=21)
    with store.open_multipart("lost/object.bin", if_none_match=True) as w:
        w.write(data)
        etag = w.complete()
    assert proxy.dropped == [200]  # the request was carried out
    assert len(proxy.lines(*line)) == 2  # the request, and botocore's retry
    assert s3_store.get("lost/object.bin") == (data, etag)
    assert s3_store.head("lost/object.bin").etag == etag
    assert list(s3_store.pending_uploads()) == []


@pytest.mark.parametrize(
    "answer_lost", [("PUT", "lost/object.bin")], indirect=True, ids=["put-object"]
)
def test_a_create_if_absent_put_whose_answer_is_lost_succeeds(
    answer_lost: tuple[S3Store, CuttingProxy, tuple[str, str]], s3_store: S3Store
) -> None:
    """``put`` with If-None-Match lands and its answer is lost: botocore's retry is
    refused with 412, and the store reads the key back (one GET) and finds exactly the
    bytes it sent, so the PUT succeeded and returns the object's ETag."""
    store, proxy, line = answer_lost
    data = blob(1000, seed=23)
    store.gets.reset()  # counts every key's GETs
    etag = store.put("lost/object.bin", data, if_none_match=True)
    assert proxy.dropped == [200]
    assert len(proxy.lines(*line)) == 2  # the request, and botocore's retry
    assert len(proxy.lines("GET", line[1])) == 1  # the read back
    assert store.gets.get("lost/object.bin") == 1
    assert s3_store.get("lost/object.bin") == (data, etag)


@pytest.mark.parametrize(
    "answer_lost", [("PUT", "lost/object.bin")], indirect=True, ids=["put-object"]
)
@pytest.mark.parametrize("through", ["put", "multipart"])
def test_a_refused_retry_stands_when_the_object_is_another(
    answer_lost: tuple[S3Store, CuttingProxy, tuple[str, str]], s3_store: S3Store, through: str
) -> None:
    """The retry is refused and the key holds what another writer put there first: the
    refusal stands, and that object is untouched."""
    store, proxy, line = answer_lost
    s3_store.put("lost/object.bin", b"first")
    data = blob(1000, seed=22)
    with pytest.raises(PreconditionFailed, match="lost/object.bin"):
        if through == "put":
            store.put("lost/object.bin", data, if_none_match=True)
        else:
            with store.open_multipart("lost/object.bin", if_none_match=True) as w:
                w.write(data)
                w.complete()
    assert (proxy.dropped, len(proxy.lines(*line))) == ([412], 2)
    assert s3_store.get("lost/object.bin")[0] == b"first"


def test_a_refusal_at_the_first_attempt_is_not_read_back(s3_store: S3Store) -> None:
    """A 412 that answers the PUT itself, not a retry, is another writer's object: no GET
    is spent on it, even when the key holds the same bytes."""
    s3_store.put("taken", b"same")
    s3_store.gets.reset()
    with pytest.raises(PreconditionFailed, match="taken"):
        s3_store.put("taken", b"same", if_none_match=True)
    assert s3_store.gets.snapshot() == {}


def test_etags_are_derived_as_s3_derives_them(s3_endpoint: S3Endpoint, s3_store: S3Store) -> None:
    """The writer's ETags against the server's, for an object written whole and one from
    parts; an ETag that is no MD5 (SSE-KMS) derives nothing."""
    client = s3_endpoint.client()
    data = blob(2 * s3_store.part_size + 5, seed=24)
    assert s3_store.put("whole", data) == f'"{hashlib.md5(data).hexdigest()}"'
    key, bucket = "parts", s3_store.bucket
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    size = s3_store.part_size
    etags = [
        client.upload_part(
            Bucket=bucket, Key=key, UploadId=upload, PartNumber=n + 1, Body=data[n * size :][:size]
        )["ETag"]
        for n in range(3)
    ]
    parts = [{"PartNumber": n + 1, "ETag": etag} for n, etag in enumerate(etags)]
    client.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
    )
    assert s3_store.head(key).etag == multipart_etag(etags)
    assert multipart_etag(['"not-an-md5"']) is None
    assert multipart_etag(['"00ff"']) is None
    client.close()


def test_a_completed_upload_overwritten_before_the_retry_is_not_taken_for_its_own(
    s3_endpoint: S3Endpoint, s3_store: S3Store
) -> None:
    """The answer to CompleteMultipartUpload is lost, and another writer replaces the
    object before botocore's retry, which is refused: If-None-Match's 412 on moto,
    NoSuchUpload on LocalStack. The key holds another object, so the writer reports
    PreconditionFailed. Were a server to complete the upload again, the object would be
    the writer's: ``complete`` succeeds iff the object holds exactly what it wrote."""
    key, other = "replaced/object.bin", b"another writer's object"
    path = f"/{s3_store.bucket}/{key}?uploadId="
    data = blob(2 * s3_store.part_size + 3, seed=25)
    on_drop = lambda: s3_store.put(key, other)  # noqa: E731
    with CuttingProxy(s3_endpoint.url, path, None, method="POST", on_drop=on_drop) as proxy:
        store = S3Store(s3_store.bucket, endpoint_url=proxy.url, part_size=s3_store.part_size)
        try:
            with store.open_multipart(key, if_none_match=True) as w:
                w.write(data)
                try:
                    etag: str | None = w.complete()
                except PreconditionFailed:
                    etag = None
        finally:
            store.close()
    assert (proxy.dropped, len(proxy.lines("POST", path))) == ([200], 2)
    held, held_etag = s3_store.get(key)
    assert (held, held_etag) == ((data, etag) if etag is not None else (other, held_etag))
    assert list(s3_store.pending_uploads()) == []


def test_completing_an_upload_aborted_behind_the_writer_fails(
    s3_endpoint: S3Endpoint, s3_store: S3Store
) -> None:
    """NoSuchUpload to a first CompleteMultipartUpload (no retry: the upload was aborted,
    as a lifecycle rule does): a StoreError naming the object, and no object."""
    client = s3_endpoint.client()
    w = s3_store.open_multipart("aborted/object.bin", if_none_match=True)
    w.write(blob(s3_store.part_size, seed=23))  # one part sent, nothing held
    (upload,) = client.list_multipart_uploads(Bucket=s3_store.bucket)["Uploads"]
    listed = {
        "Bucket": s3_store.bucket,
        "Key": "aborted/object.bin",
        "UploadId": upload["UploadId"],
    }
    deadline = time.monotonic() + 30
    while not client.list_parts(**listed).get("Parts") and time.monotonic() < deadline:
        time.sleep(0.01)  # the part stored before the abort: only the complete is refused
    client.abort_multipart_upload(
        Bucket=s3_store.bucket, Key="aborted/object.bin", UploadId=upload["UploadId"]
    )
    with pytest.raises(StoreError, match="complete multipart upload of .*aborted/object.bin") as e:
        w.complete()
    assert not isinstance(e.value, PreconditionFailed)
    with pytest.raises(ObjectNotFound):
        s3_store.head("aborted/object.bin")
    client.close()


# -- errors ------------------------------------------------------------------------------


def test_missing_bucket_is_named(s3_endpoint: S3Endpoint) -> None:
    store = S3Store("no-such-bucket-here", endpoint_url=s3_endpoint.url)
    try:
        with pytest.raises(StoreError, match="no-such-bucket-here") as e:
            store.put("k", b"x")
        assert not isinstance(e.value, ObjectNotFound)
        with pytest.raises(StoreError, match="bucket 'no-such-bucket-here' does not exist"):
            list(store.list())
        with pytest.raises(StoreError, match="does not exist"):
            store.open_stream("k")
    finally:
        store.close()


def test_conditional_error_messages_name_the_object(s3_store: S3Store) -> None:
    s3_store.put("named", b"1")
    with pytest.raises(PreconditionFailed, match=f"s3://{s3_store.bucket}/named"):
        s3_store.put("named", b"2", if_none_match=True)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_unreachable_endpoint_fails_fast() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    store = S3Store("bucket", endpoint_url=url)
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnreachable, match=f"cannot reach S3 endpoint {url}"):
            store.head("k")
        assert time.monotonic() - started < 8
    finally:
        store.close()
    streaming = S3Store("bucket", endpoint_url=url, max_attempts=1)
    try:
        with pytest.raises(StoreUnreachable, match=f"cannot reach S3 endpoint {url}"):
            streaming.open_stream("k")
    finally:
        streaming.close()


# -- endpoint resolution, lifecycle ------------------------------------------------------


def test_endpoint_from_environment(s3_url: S3Url, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_url.endpoint_url)
    store = open_store(s3_url.url)
    try:
        assert isinstance(store, S3Store)
        assert store.endpoint_url == s3_url.endpoint_url
        store.put("via-env", b"ok")
        with store.open_stream("via-env") as s:  # aiobotocore uses the same endpoint
            assert s.read(10) == b"ok"
    finally:
        store.close()


def test_close_stops_the_loop_thread_and_open_streams(s3_store: S3Store) -> None:
    s3_store.put("k", blob(2 * MiB, seed=10))
    stream = s3_store.open_stream("k")
    stream.read(10)
    name = f"s3-loop-{s3_store.bucket}"
    assert any(t.name == name for t in threading.enumerate())
    s3_store.close()
    assert not any(t.name == name for t in threading.enumerate())
    with pytest.raises(StoreError, match="closed"):
        stream.read(10)
    with pytest.raises(StoreError, match="closed"):
        s3_store.open_stream("k")
    s3_store.close()  # idempotent
