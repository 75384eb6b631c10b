"""``compactor topic create NAME``: a name Kafka would refuse is a usage error (exit 2,
one line naming the rule: 1 to 249 ASCII letters, digits, '.', '_' or '-', not '.' or
'..'), before the store is touched; a catalog that already holds another name (created
before the rule, or by the catalog API) still loads and serves it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirunner import assert_one_line_error, run_cli, tree

from compactor.catalog import Catalog, TopicConfig
from compactor.catalog.changes import create_topic
from compactor.objectstore import LocalStore

RULE = "as in Kafka, 1 to 249 ASCII letters, digits, '.', '_' or '-', and not '.' or '..'"


@pytest.mark.parametrize(
    "name", ["bad/name", "", ".", "..", "a b", " t", "t\n", "é", "t:1", "x" * 250]
)
def test_a_name_kafka_refuses_is_exit_2_and_changes_nothing(tmp_path: Path, name: str) -> None:
    root = tmp_path / "store"
    assert run_cli("--store", str(root), "topic", "create", "t", "--partitions", "1").code == 0
    before = tree(root)
    for config in ([], ["--config", "cleanup.policy=compact"], ["--config", "nope=1"]):
        r = run_cli("--store", str(root), "topic", "create", name, "--partitions", "1", *config)
        assert_one_line_error(r, f"argument name: {name!r} is not a topic name: {RULE}")
        assert r.err.startswith("compactor: topic create: ")
        assert r.code == 2
        assert tree(root) == before
    # and on a store that does not exist yet: still exit 2, and nothing is created
    fresh = tmp_path / "fresh"
    r = run_cli("--store", str(fresh), "topic", "create", name, "--partitions", "1")
    assert r.code == 2 and not fresh.exists()


@pytest.mark.parametrize("name", ["t", "orders.v2", "a_b-c", "-", "_", "...", "x" * 249, "Ab09"])
def test_every_name_kafka_accepts_is_created(tmp_path: Path, name: str) -> None:
    root = str(tmp_path / "store")
    r = run_cli("--store", root, "topic", "create", "--partitions", "2", "--", name)
    assert r.code == 0, r.err
    assert json.loads(r.out) == {"created": name, "partitions": 2}
    r = run_cli("--store", root, "topic", "describe", "--", name)
    assert r.code == 0, r.err
    assert json.loads(r.out)["name"] == name


def test_a_catalog_holding_another_name_still_loads(tmp_path: Path) -> None:
    """The rule is the command line's, at creation: a topic the catalog already holds is
    read, described, ingested into and compacted whatever its name."""
    root = tmp_path / "store"
    catalog = Catalog(LocalStore(root))
    config = TopicConfig.parse({"cleanup.policy": "compact"})
    catalog.commit(lambda s: create_topic(s, "a b", 1, config))
    store = ["--store", str(root)]
    r = run_cli(*store, "topic", "describe", "a b")
    assert r.code == 0, r.err
    assert json.loads(r.out)["name"] == "a b"
    records = tmp_path / "in.jsonl"
    records.write_text(
        "".join(
            json.dumps({"topic": "a b", "partition": 0, "key": "k", "value": f"v{i}"}) + "\n"
            for i in range(3)
        )
    )
    assert run_cli(*store, "ingest", str(records)).code == 0
    r = run_cli(*store, "compact", "--full")
    assert r.code == 0, r.err
    r = run_cli(*store, "dump", "--topic", "a b", "--partition", "0")
    assert r.code == 0, r.err
    assert [json.loads(line)["value"] for line in r.out.splitlines()] == ["v2"]
    assert run_cli(*store, "verify").code == 0
