"""kill -9 before each object write of a commit and of the format-1 upgrade: the store
verifies after every crash, the commit happened entirely or not at all, and running the
operation again converges. Also: upgrading a real format-1 store (tests/fixtures)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from clirunner import run_cli

from compactor.catalog import Catalog
from compactor.objectstore import LocalStore

HERE = Path(__file__).parent
CRASHER = HERE / "catalog_crasher.py"
FORMAT1 = HERE / "fixtures" / "format1-store"


def _crash(root: Path, mode: str, writes: int) -> bool:
    """Runs the operation, killed before its ``writes``-th write; True if it was killed."""
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    proc = subprocess.run(
        [sys.executable, str(CRASHER), str(root), mode, str(writes)],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode in (0, -signal.SIGKILL), proc.stderr.decode()
    return proc.returncode == -signal.SIGKILL


def _verify(root: Path) -> None:
    r = run_cli("--store", str(root), "verify")
    assert r.code == 0, r.out + r.err


def _dump(root: Path) -> list[str]:
    lines = []
    for p in range(2):
        r = run_cli("--store", str(root), "dump", "--topic", "t", "--partition", str(p))
        assert r.code == 0, r.err
        lines += r.out.splitlines()
    return lines


def _base(tmp_path: Path) -> Path:
    """A store at version 3 (a topic and two ingests), so the crashing ingest commits
    version 4, where the interval-2 checkpoint and its hint are written too."""
    root = tmp_path / "base"
    assert run_cli("--store", str(root), "topic", "create", "t", "--partitions", "2").code == 0
    for i in range(2):
        line = json.dumps({"topic": "t", "partition": i, "key": "x", "value": "y"}) + "\n"
        assert run_cli("--store", str(root), "ingest", "-", stdin=line.encode()).code == 0
    assert Catalog(LocalStore(root)).snapshot().version == 3
    return root


def test_kill_9_before_each_write_of_an_ingest_commit(tmp_path: Path) -> None:
    base = _base(tmp_path)
    # Two L0 files, their two manifests, the log entry, the checkpoint, the hint.
    writes, entry_write = 7, 4
    for n in range(writes + 1):
        root = tmp_path / f"crash-{n}"
        shutil.copytree(base, root)
        killed = _crash(root, "ingest", n)
        assert killed == (n < writes)
        _verify(root)
        snap = Catalog(LocalStore(root)).snapshot()
        committed = n > entry_write
        assert snap.version == (4 if committed else 3)
        assert sum(f.record_count for f in snap.files) == 2 + (4 if committed else 0)
        _crash(root, "ingest", 10**6)  # the same ingest again, uninterrupted
        _verify(root)
        again = Catalog(LocalStore(root)).snapshot()
        assert sum(f.record_count for f in again.files) == 2 + (8 if committed else 4)


def test_a_format1_store_reads_as_is_and_upgrades_in_place(tmp_path: Path) -> None:
    root = tmp_path / "store"
    shutil.copytree(FORMAT1, root)
    original = (root / "_catalog" / "catalog.json").read_bytes()
    before = _dump(root)
    assert before  # the fixture holds records of both partitions
    _verify(root)
    assert (root / "_catalog" / "catalog.json").read_bytes() == original  # reads change nothing
    r = run_cli("--store", str(root), "catalog", "upgrade")
    assert r.code == 0, r.err
    assert json.loads(r.out) == {"upgraded": True, "version": 7}
    _verify(root)
    assert _dump(root) == before
    history = json.loads(run_cli("--store", str(root), "history", "--json").out)
    assert [(h["id"], h["kind"]) for h in history] == [("7", "upgrade")]
    fence = json.loads((root / "_catalog" / "catalog.json").read_bytes())
    assert fence["format"] == 2 and fence["upgraded"] == json.loads(original)
    # The garbage carried over is collected as usual, and compaction goes on.
    c = run_cli("--store", str(root), "--now-ms", "1800000000000", "compact", "--full", "--json")
    assert c.code == 0, c.err
    _verify(root)
    assert _dump(root) != [] and {json.loads(x)["key"] for x in _dump(root)} <= {"a", "b", "c"}


@pytest.mark.parametrize("n", range(7))
def test_kill_9_before_each_write_of_the_upgrade(tmp_path: Path, n: int) -> None:
    root = tmp_path / "store"
    shutil.copytree(FORMAT1, root)
    before = _dump(root)
    # The fence, two manifests (the live files), the checkpoint, the hint, the entry.
    killed = _crash(root, "upgrade", n)
    assert killed == (n < 6)
    _verify(root)
    assert _dump(root) == before
    _crash(root, "upgrade", 10**6)
    _verify(root)
    assert _dump(root) == before
    assert Catalog(LocalStore(root)).snapshot().version == 7
