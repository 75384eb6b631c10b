"""LocalStore specifics and open_store URL handling."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from compactor.objectstore import (
    LocalStore,
    ObjectNotFound,
    PreconditionFailed,
    StoreError,
    open_store,
)
from compactor.objectstore.local import LOCK_FILE, TMP_DIR
from compactor.objectstore.s3 import S3Store

PROJECT = Path(__file__).resolve().parent.parent


def test_layout_and_hidden_files(local_store: LocalStore) -> None:
    local_store.put("a/b/c", b"data")
    assert (local_store.root / "a" / "b" / "c").read_bytes() == b"data"
    assert (local_store.root / TMP_DIR).is_dir()
    assert (local_store.root / LOCK_FILE).is_file()
    (local_store.root / TMP_DIR / "w-leftover").write_bytes(b"junk")  # e.g. after a crash
    assert [i.key for i in local_store.list()] == ["a/b/c"]
    assert list(local_store.list(".compactor-")) == []
    assert list(local_store.list(f"{TMP_DIR}/")) == []
    assert list(local_store.list(f"{TMP_DIR}/w-")) == []
    assert os.listdir(local_store.root / TMP_DIR) == ["w-leftover"]  # puts leave no temp


def test_reading_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "absent")
    assert list(store.list()) == []
    with pytest.raises(ObjectNotFound):
        store.get("k")
    store.delete("k")
    assert not (tmp_path / "absent").exists()
    store.put("k", b"v")
    assert store.get("k")[0] == b"v"
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.put("k", b"w")
    assert store.get("k")[0] == b"v"


def test_etag_changes_on_every_write_even_same_bytes(local_store: LocalStore) -> None:
    etags = {local_store.put("same", b"payload") for _ in range(50)}
    assert len(etags) == 50
    with pytest.raises(PreconditionFailed):
        local_store.put("same", b"payload", if_match=local_store.put("same", b"payload") + "x")


def test_delete_prunes_empty_directories(local_store: LocalStore) -> None:
    local_store.put("x/y/z/obj", b"1")
    local_store.put("x/keep", b"2")
    local_store.delete("x/y/z/obj")
    assert not (local_store.root / "x" / "y").exists()
    assert (local_store.root / "x" / "keep").exists()


def test_failed_conditional_put_leaves_no_temp_file(local_store: LocalStore) -> None:
    local_store.put("k", b"1")
    with pytest.raises(PreconditionFailed):
        local_store.put("k", b"2", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        local_store.put("k", b"2", if_match="stale")
    w = local_store.open_multipart("k", if_none_match=True)
    w.write(b"3")
    with pytest.raises(PreconditionFailed):
        w.complete()
    assert os.listdir(local_store.root / TMP_DIR) == []
    assert local_store.get("k")[0] == b"1"


def test_os_errors_name_the_path(local_store: LocalStore) -> None:
    local_store.put("file", b"x")
    with pytest.raises(StoreError, match=str(local_store.root / "file")):
        local_store.put("file/below", b"y")  # a file where a directory is needed


_WORKER = textwrap.dedent(
    """
    import sys
    from compactor.objectstore import LocalStore, PreconditionFailed
    store = LocalStore(sys.argv[1])
    for _ in range(int(sys.argv[2])):
        while True:
            data, etag = store.get("counter")
            try:
                store.put("counter", str(int(data) + 1).encode(), if_match=etag)
                break
            except PreconditionFailed:
                pass
    """
)


def test_if_match_is_atomic_across_processes(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    LocalStore(root).put("counter", b"0")
    procs, increments = 4, 100
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    workers = [
        subprocess.Popen([sys.executable, "-c", _WORKER, str(root), str(increments)], env=env)
        for _ in range(procs)
    ]
    assert [p.wait(timeout=60) for p in workers] == [0] * procs
    assert LocalStore(root).get("counter")[0] == str(procs * increments).encode()


# -- open_store ------------------------------------------------------------------------


def test_open_store_default_is_local_compactor_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for url in (None, ""):
        store = open_store(url)
        assert isinstance(store, LocalStore)
        assert store.root == tmp_path / "compactor-data"
        assert store.url == (tmp_path / "compactor-data").as_uri()
        store.close()


def test_open_store_paths_and_file_urls(tmp_path: Path) -> None:
    odd = tmp_path / "with space%"
    for url in (str(odd), odd.as_uri(), f"file://{odd}", f"file://localhost{odd}"):
        store = open_store(url)
        assert isinstance(store, LocalStore), url
        assert store.root == odd, url
        assert open_store(store.url).url == store.url  # the canonical URL round-trips
        store.close()


def test_open_store_s3_urls() -> None:
    store = open_store("s3://my-bucket/some/prefix/", endpoint_url="http://127.0.0.1:9")
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.url) == (
        "my-bucket",
        "some/prefix",
        "s3://my-bucket/some/prefix",
    )
    assert store.endpoint_url == "http://127.0.0.1:9"
    store.close()
    bare = open_store("s3://my.bucket-1", endpoint_url="http://127.0.0.1:9")
    assert bare.url == "s3://my.bucket-1"
    bare.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("s3://", "not a valid S3 bucket"),
        ("s3:///prefix", "not a valid S3 bucket"),
        ("s3://Bad_Bucket/x", "not a valid S3 bucket"),
        ("s3://ab", "not a valid S3 bucket"),
        ("s3://bucket//double", "invalid prefix"),
        ("s3://bucket/../up", "invalid prefix"),
        ("gs://bucket", "unsupported store URL"),
        ("http://127.0.0.1:9/bucket", "unsupported store URL"),
        ("file://", "no path"),
    ],
)
def test_open_store_rejects_bad_urls(url: str, message: str) -> None:
    with pytest.raises(StoreError, match=message):
        open_store(url, endpoint_url="http://127.0.0.1:9" if url.startswith("s3") else None)


def test_endpoint_url_only_for_s3(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="s3:// stores only"):
        open_store(str(tmp_path), endpoint_url="http://127.0.0.1:9")
