"""``compactor demo``, as the README runs it but smaller: its own S3 endpoint on loopback,
every strategy and a delete-policy topic, compaction until idle and the full compaction,
then the views and ``verify`` checked; and the same against a store given with --store."""

from __future__ import annotations

import json
import re
from pathlib import Path

from clirunner import assert_one_line_error, run_cli
from test_level_codecs import codecs_in

from compactor.catalog import Catalog
from compactor.cli.demo import agent_shares
from compactor.objectstore import LocalStore

SMALL = ["--records", "20000", "--max-file-bytes", "16384", "--key-buffer-bytes", "65536"]


def _report(out: str) -> dict[str, str]:
    return dict(re.findall(r"^([a-z ]+): (.*)$", out, flags=re.M))


def test_demo_on_its_own_s3_endpoint() -> None:
    r = run_cli("demo", *SMALL)
    assert r.code == 0, r.out + r.err
    report = _report(r.out)
    assert report["store"].startswith("s3://compactor-demo at http://127.0.0.1:")
    assert report["materialized views"].startswith("unchanged")
    assert report["verify"] == "OK"
    assert "the embedded S3 endpoint's included" in report["peak memory"]
    jobs = re.findall(r"^job (\S+): .*GETs per input file \[([\d, ]+)\]", r.out, flags=re.M)
    assert [rule for rule, _ in jobs][-1] == "full"
    assert "L0->L1" in {rule for rule, _ in jobs}
    assert all(set(gets.split(", ")) == {"2"} for _, gets in jobs)
    after = re.search(r"^  L0: .*->\s+(\d+) files", r.out, flags=re.M)
    assert after is not None and after.group(1) == "0"


def test_demo_on_a_given_store(tmp_path: Path) -> None:
    r = run_cli("--store", str(tmp_path / "store"), "demo", *SMALL)
    assert r.code == 0, r.out + r.err
    report = _report(r.out)
    assert report["verify"] == "OK"
    assert report["materialized views"].startswith("unchanged")
    assert "embedded" not in report["peak memory"]
    assert run_cli("--store", str(tmp_path / "store"), "verify").code == 0


def test_demo_writes_each_level_in_the_codecs_it_is_given(tmp_path: Path) -> None:
    """``--compression`` for the agents' L0 files and ``--compression-top`` /
    ``--compression-below-top`` for the jobs' outputs, as on ``ingest`` and ``compact``,
    each unlike its default: every compaction commit records its level's codec, and every
    file the demo wrote (its inputs stay in the store past the commit) holds only the
    frames of its level's codec."""
    store = tmp_path / "store"
    codecs = ["--compression", "zstd", "--compression-below-top", "none"]
    r = run_cli("--store", str(store), "demo", *SMALL, *codecs, "--compression-top", "lz4")
    assert r.code == 0, r.out + r.err
    assert _report(r.out)["verify"] == "OK"
    history = json.loads(run_cli("--store", str(store), "history", "--json").out)
    recorded = {
        (e["job"]["output_level"], e["run"]["compression"])
        for e in history
        if e["kind"] == "compaction"
    }
    assert recorded == {(1, None), (4, "lz4")}
    expected = {"L0": {"zstd"}, "L1": set(), "L4": {"lz4"}}
    written = {level.name: list(level.glob("*.cf")) for level in (store / "data").iterdir()}
    assert set(written) == set(expected) and all(written.values())
    for level, files in written.items():
        assert all(codecs_in(f.read_bytes()) == expected[level] for f in files), level


def test_demo_rejects_an_unknown_codec_in_one_line() -> None:
    r = run_cli("demo", *SMALL, "--compression-top", "gzip")
    assert_one_line_error(r, "gzip")


def test_every_record_asked_for_is_written_by_agents_of_unequal_shares(tmp_path: Path) -> None:
    """1,003 records from 4 agents are 1,003 offsets (251, 251, 251, 250): before, each
    agent wrote ``records // agents`` and 3 records went unwritten, though counted."""
    store = tmp_path / "store"
    r = run_cli("--store", str(store), "demo", "--records", "1003", "--agents", "4")
    assert r.code == 0, r.out + r.err
    assert "ingested 1,003 records from 4 agents" in r.out
    offsets = Catalog(LocalStore(store)).snapshot().next_offsets
    assert sum(offsets.values()) == 1003


def test_more_agents_than_records_is_refused_before_the_store_is_made(tmp_path: Path) -> None:
    """Each agent writes at least one record: an agent of none committed empty ingests
    (``--agents`` of 2^63 - 1 made files until it was killed)."""
    store = tmp_path / "store"
    r = run_cli("--store", str(store), "demo", "--records", "3", "--agents", "4")
    assert_one_line_error(r, "--agents must be at most --records", "4 agents for 3 records")
    assert r.code == 2
    assert not store.exists()
    assert list(agent_shares(10, 4)) == [3, 3, 2, 2]
    assert list(agent_shares(8, 4)) == [2, 2, 2, 2]
