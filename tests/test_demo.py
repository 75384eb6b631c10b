"""``compactor demo``, as the README runs it but smaller: its own S3 endpoint on loopback,
every strategy and a delete-policy topic, compaction until idle and the full compaction,
then the views and ``verify`` checked; and the same against a store given with --store."""

from __future__ import annotations

import re
from pathlib import Path

from clirunner import run_cli

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
