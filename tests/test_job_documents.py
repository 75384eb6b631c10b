"""Job documents (``planner.job``): every reader (``replay``, a queue worker, a Spark task,
``replay --from-history``) refuses a document that is not one the planner could have
made: one without its id, one whose fields have the wrong JSON types (each named), one
writing to L2 or above without deduplicating, one whose output does not fit its rule.
Through the command line: exit 2, one line, and the store byte for byte as it was.
Every job the planners make still reads back as itself."""

from __future__ import annotations

import copy
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from clirunner import assert_one_line_error, run_cli, tree
from conftest import JobQueues
from hypothesis import HealthCheck, given, settings
from planner_catalogs import NOW_MS, Case, cases, live_file, section, snapshot, topic
from worker_scenarios import add_file, make_topics

from compactor.catalog import Catalog, LiveFile
from compactor.fileformat import Record
from compactor.jobqueue.consumer import QueueWorker, WorkerSettings
from compactor.jobqueue.events import EventLog
from compactor.jobqueue.metrics import WorkerMetrics
from compactor.jobqueue.sqs import JobQueue
from compactor.objectstore import LocalStore
from compactor.objectstore.s3 import S3Store
from compactor.planner.config import PlannerConfig
from compactor.planner.job import (
    CLEAN_LEVEL,
    PLANNER_RULES,
    Job,
    JobDocumentError,
    JobInput,
    planner_rule_problem,
)
from compactor.planner.plan import full_plan, plan
from compactor.planner.stcs import stcs_plan
from compactor.spark.task import TaskSettings, run_task
from compactor.worker.compactor import Compactor
from compactor.worker.kernel import KeyBuffer
from compactor.worker.runner import run_job

T = 1_700_000_000_000
H = 3_600_000


def _doc(**changes: Any) -> dict[str, Any]:
    """A valid L0->L1 job document of two inputs, with ``changes`` applied."""
    job = Job(
        (
            JobInput("a" * 32, "data/L0/" + "a" * 32 + ".cf", 100),
            JobInput("b" * 32, "data/L0/b.cf", 7),
        ),
        1,
        False,
        rule="L0->L1",
        reason="a run of 2 contiguous L0 files >= 2",
        numbers=(("level_files", 2), ("ratio", 1.5)),
    )
    doc = job.to_json()
    doc.update(changes)
    return doc


def _job_id(doc: dict[str, Any]) -> str:
    """The id a document's inputs and output give it (what someone editing a document by
    hand can compute as well as ``Job.id`` does)."""
    h = hashlib.sha256()
    for i in doc["inputs"]:
        h.update(i["id"].encode() + b"\0")
    kind = "drop" if doc.get("drop") else f"L{doc['output_level']}:{int(doc['deduplicate'])}"
    h.update(kind.encode())
    return h.hexdigest()[:32]


def _with_own_id(**changes: Any) -> dict[str, Any]:
    doc = _doc(**changes)
    doc["id"] = _job_id(doc)
    return doc


def _refused(doc: Any) -> str:
    with pytest.raises(JobDocumentError) as e:
        Job.loads(json.dumps(doc))
    return str(e.value)


# --- the document alone ---------------------------------------------------------------------


def test_a_valid_document_reads_back_as_its_job() -> None:
    doc = _doc()
    assert Job.loads(json.dumps(doc)).to_json() == doc
    assert _job_id(doc) == doc["id"]  # the tests' own hash is the job's


def test_a_document_without_its_id_is_refused() -> None:
    doc = _doc()
    del doc["id"]
    message = _refused(doc)
    assert message.startswith("malformed job document: no field 'id'")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"inputs": "data/L0/a.cf"}, "field 'inputs' must be a list of objects, not a string"),
        ({"inputs": {"id": "a"}}, "field 'inputs' must be a list of objects, not an object"),
        ({"inputs": ["a"]}, "field 'inputs[0]' must be an object (id, key, size), not a string"),
        ({"inputs": []}, "field 'inputs' lists no input file"),
        ({"id": 7}, "field 'id' must be a string, not an integer"),
        ({"schema_version": "1"}, "field 'schema_version' must be an integer, not a string"),
        ({"schema_version": True}, "field 'schema_version' must be an integer, not a boolean"),
        ({"output_level": "1"}, "field 'output_level' must be an integer, not a string"),
        ({"output_level": 1.0}, "field 'output_level' must be an integer, not a number"),
        ({"output_level": None}, "field 'output_level' must be an integer, not null"),
        ({"deduplicate": "false"}, "field 'deduplicate' must be true or false, not a string"),
        ({"drop": 0}, "field 'drop' must be true or false, not an integer"),
        ({"rule": 5}, "field 'rule' must be a string, not an integer"),
        ({"rule": "nightly"}, "field 'rule' must name a planner rule (L0->L1, L1->L2"),
        ({"reason": None}, "field 'reason' must be a string, not null"),
        ({"numbers": [1]}, "field 'numbers' must be an object of numbers, not a list"),
        ({"numbers": {"n": "2"}}, "field 'numbers.n' must be a number, not a string"),
        ({"numbers": {"n": True}}, "field 'numbers.n' must be a number, not a boolean"),
    ],
)
def test_each_field_of_the_wrong_type_is_named(change: dict[str, Any], message: str) -> None:
    assert _refused(_doc(**change)).startswith(f"malformed job document: {message}")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("id", None, "field 'inputs[1].id' must be a non-empty string, not null"),
        ("id", "", "field 'inputs[1].id' must be a non-empty string, not an empty string"),
        ("key", ["k"], "field 'inputs[1].key' must be a non-empty string, not a list"),
        ("size", "7", "field 'inputs[1].size' must be a non-negative integer, not a string"),
        ("size", 7.0, "field 'inputs[1].size' must be a non-negative integer, not a number"),
        ("size", -7, "field 'inputs[1].size' must be a non-negative integer, not -7"),
        ("size", False, "field 'inputs[1].size' must be a non-negative integer, not a boolean"),
    ],
)
def test_each_input_field_of_the_wrong_type_is_named(field: str, value: Any, message: str) -> None:
    doc = _doc()
    doc["inputs"][1][field] = value
    assert _refused(doc) == f"malformed job document: {message}"


@pytest.mark.parametrize("field", ["schema_version", "inputs", "output_level", "deduplicate"])
def test_each_missing_field_is_named(field: str) -> None:
    doc = _doc()
    del doc[field]
    assert _refused(doc).startswith(f"malformed job document: no field '{field}'")


def test_a_missing_input_field_is_named_and_an_input_twice_is_refused() -> None:
    doc = _doc()
    del doc["inputs"][1]["size"]
    assert _refused(doc) == "malformed job document: no field 'inputs[1].size'"
    doc = _doc()
    doc["inputs"][1] = dict(doc["inputs"][0])
    assert (
        _refused(doc) == f"malformed job document: field 'inputs' lists input file {'a' * 32} twice"
    )


def test_1e400_and_deep_nesting_are_refused_as_documents() -> None:
    doc = _doc()
    text = json.dumps(doc).replace('"size": 7', '"size": 1e400')
    with pytest.raises(
        JobDocumentError, match=r"inputs\[1\]\.size' must be a non-negative integer"
    ):
        Job.loads(text)
    with pytest.raises(JobDocumentError, match="not a job document"):
        Job.loads("[" * 200_000)


def test_optional_fields_may_be_left_out() -> None:
    doc = _doc()
    for name in ("rule", "reason", "numbers"):
        del doc[name]
    job = Job.loads(json.dumps(doc))
    assert (job.rule, job.reason, job.numbers, job.drop) == ("manual", "", (), False)


@pytest.mark.parametrize("level", [2, 3, 4])
def test_no_document_writes_above_l1_without_deduplicating(level: int) -> None:
    """The audit's document: a copy into L4 (or L2, L3) under an id that matches, so the
    id check cannot catch it; the job's own rule does, whatever its rule name."""
    for rule in ("manual", "L0->L1", f"L{level - 1}->L{level}"):
        doc = _with_own_id(output_level=level, deduplicate=False, rule=rule)
        message = _refused(doc)
        assert f"a job writing to L{level} deduplicates ('deduplicate' true)" in message
        assert (
            f"every file at L{CLEAN_LEVEL} and above is written by a deduplicating job" in message
        )
    with pytest.raises(ValueError, match=f"a job writing to L{level} deduplicates"):
        Job((JobInput("a", "k", 1),), level, False)


def test_an_edited_output_under_the_old_id_is_refused_as_before() -> None:
    doc = _doc(output_level=1, deduplicate=True)
    assert _refused(doc).startswith(f"job id {doc['id']} does not match its inputs")


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            {"rule": "L0->L1", "output_level": 3, "deduplicate": True},
            "a 'L0->L1' job writes to L1, without deduplicating; "
            "this one writes to L3, deduplicating",
        ),
        (
            {"rule": "L0->L1", "output_level": 1, "deduplicate": True},
            "a 'L0->L1' job writes to L1, without deduplicating; "
            "this one writes to L1, deduplicating",
        ),
        (
            {"rule": "L2->L3", "output_level": 4, "deduplicate": True},
            "a 'L2->L3' job writes to L3, deduplicating; this one writes to L4, deduplicating",
        ),
        (
            {"rule": "daily", "output_level": 1, "deduplicate": False},
            "a 'daily' job writes to L4, deduplicating; this one writes to L1, without",
        ),
        (
            {"rule": "top-run", "output_level": 2, "deduplicate": True},
            "a 'top-run' job writes to L4, deduplicating",
        ),
        (
            {"rule": "max-lag", "output_level": 1, "deduplicate": True},
            "a 'max-lag' job deduplicates into L2 or above; this one writes to L1",
        ),
        (
            {"rule": "tombstones", "output_level": 1, "deduplicate": False},
            "a 'tombstones' job deduplicates into L2 or above",
        ),
        (
            {"rule": "retention", "output_level": 1, "deduplicate": False},
            "a 'retention' job that is not a drop rewrites one file, not 2",
        ),
        (
            {"rule": "L0->L1", "drop": True, "output_level": 0, "deduplicate": False},
            "only the 'retention' rule drops files unread, not 'L0->L1'",
        ),
    ],
)
def test_a_job_that_does_not_fit_its_rule_is_refused(change: dict[str, Any], why: str) -> None:
    """The rule is not part of the id: a document may carry any, and a 'daily' job
    restarts the daily clock when it commits. Its output must be the one its rule makes."""
    message = _refused(_with_own_id(**change))
    assert message.startswith("malformed job document: no planner makes this job: ")
    assert why in message


def test_a_retention_rewrite_fits_its_rule_at_each_level() -> None:
    one = [_doc()["inputs"][0]]
    for level in range(1, 5):
        ok = _with_own_id(inputs=one, rule="retention", output_level=level, deduplicate=level >= 2)
        assert Job.loads(json.dumps(ok)).output_level == level
    bad = _with_own_id(inputs=one, rule="retention", output_level=1, deduplicate=True)
    assert "a 'retention' rewrite deduplicates at L2 and above only" in _refused(bad)
    drop = _with_own_id(rule="retention", drop=True, output_level=0, deduplicate=False)
    assert Job.loads(json.dumps(drop)).drop


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases())
def test_every_job_a_planner_makes_reads_back_as_itself(case: Case) -> None:
    """Whatever the catalog: plan, compact --full and the simulator's STCS baseline make
    only jobs a reader accepts, under their own rule names."""
    jobs = [
        *plan(case.snap, case.now_ms, case.config, case.busy).jobs,
        *full_plan(case.snap, case.now_ms, case.config, case.busy).jobs,
        *stcs_plan(case.snap, case.now_ms, busy=case.busy).jobs,
    ]
    for job in jobs:
        assert job.rule in PLANNER_RULES
        assert planner_rule_problem(job) is None
        again = Job.loads(job.dumps())
        assert again == job and again.to_json() == job.to_json()


def test_every_time_rule_job_reads_back_as_itself() -> None:
    """The jobs the random catalogs above rarely make: retention drops, rewrites at each
    level (a copy at L0 and L1, deduplicated above), tombstones (hand-built catalogs, as
    in tests/test_planner_time_rules.py)."""
    ret = 3_600_000
    cut = NOW_MS - ret
    topics = [
        topic("logs", {"cleanup.policy": "delete", "retention.ms": str(ret)}, partitions=4),
        topic("keep", {"cleanup.policy": "compact"}, partitions=4),
    ]
    quiet = PlannerConfig(full_compaction_interval_ms=1 << 50, retention_max_delay_ms=0)
    made = NOW_MS - 10 * H

    def expiring(fid: str, level: int) -> LiveFile:
        old = section("logs", 0, min_ts=cut - 1, max_ts=cut - 1, uncompressed=3000)
        return live_file(fid, level, old, section("keep", 1), created_ms=made)

    catalogs = [
        [live_file("gone", 4, section("logs", 0, max_ts=cut - 1, min_ts=cut - 9), created_ms=made)],
        *([expiring(f"l{level}", level)] for level in range(5)),
        [
            live_file("oldest", 4, section("keep", 0), created_ms=made),
            live_file(
                "tomb",
                2,
                section("keep", 0, tombstones=1, min_delete_horizon=NOW_MS - 20 * 60_000),
                created_ms=made,
            ),
        ],
    ]
    shapes = set()
    for files in catalogs:
        for job in plan(snapshot(topics, files), NOW_MS, quiet).jobs:
            assert Job.loads(job.dumps()) == job
            shapes.add((job.rule, job.output_level, job.deduplicate, job.drop))
    assert shapes == {
        ("retention", 0, False, True),
        ("retention", 1, False, False),
        ("retention", 2, True, False),
        ("retention", 3, True, False),
        ("retention", 4, True, False),
        ("tombstones", 4, True, False),
    }


# --- through the command line ---------------------------------------------------------------


@pytest.fixture
def planned(tmp_path: Path) -> tuple[list[str], dict[str, Any]]:
    """The audit's store: a compacted topic with max.compaction.lag.ms 2 h, two L0 files
    of two records of one key; and the L0->L1 job plan --json gives for them."""
    store = ["--store", str(tmp_path / "store"), "--now-ms", str(T)]
    create = ["topic", "create", "o", "--partitions", "1", "--config", "cleanup.policy=compact"]
    r = run_cli(*store, *create, "--config", f"max.compaction.lag.ms={2 * H}")
    assert r.code == 0, r.err
    records = tmp_path / "records.jsonl"
    records.write_text(
        "".join(
            json.dumps({"topic": "o", "partition": 0, "key": "k", "value": f"v{i}", "timestamp": T})
            + "\n"
            for i in range(4)
        )
    )
    r = run_cli(*store, "ingest", str(records), "--max-file-records", "2")
    assert r.code == 0, r.err
    r = run_cli(*store, "plan", "--json", "--set", "level.trigger.files=2")
    assert r.code == 0, r.err
    (job,) = json.loads(r.out)["jobs"]
    assert (job["rule"], job["output_level"], job["deduplicate"]) == ("L0->L1", 1, False)
    return store, job


def _replay_doc(tmp_path: Path, store: list[str], doc: Any, *args: str) -> Any:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(doc))
    return run_cli(*store, "replay", str(path), *args)


def test_the_audits_hand_edited_document_is_refused_and_commits_nothing(
    tmp_path: Path, planned: tuple[list[str], dict[str, Any]]
) -> None:
    """/tmp/auditB/repro/f2_replay_no_id.sh: the id removed, the output moved to L4 without
    deduplication. It used to commit an undeduplicated L4 file that max.compaction.lag.ms
    then never compacted; now it is exit 2 and the store is as it was."""
    store, job = planned
    root = tmp_path / "store"
    before = tree(root)
    edited = {k: v for k, v in job.items() if k != "id"}
    edited.update(output_level=4, deduplicate=False)
    for args in ((), ("--execute",)):
        r = _replay_doc(tmp_path, store, edited, *args)
        assert_one_line_error(r, "compactor: ", "job.json: malformed job document: no field 'id'")
        assert r.err.startswith("compactor: ")
        assert r.code == 2
        assert tree(root) == before
    edited["id"] = _job_id(edited)  # with its id computed by hand: the job's own rule
    r = _replay_doc(tmp_path, store, edited, "--execute")
    assert_one_line_error(r, "job.json: malformed job document: a job writing to L4 deduplicates")
    assert r.err.startswith("compactor: ")
    assert r.code == 2
    assert tree(root) == before
    # the planner's own document still runs, and max-lag then finds the dirty L1 file
    r = _replay_doc(tmp_path, store, job, "--execute")
    assert r.code == 0, r.err
    r = run_cli(*store[:2], "--now-ms", str(T + 4 * H), "plan", "--json")
    assert [j["rule"] for j in json.loads(r.out)["jobs"]] == ["max-lag"]


def test_a_rule_its_output_does_not_fit_is_exit_2(
    tmp_path: Path, planned: tuple[list[str], dict[str, Any]]
) -> None:
    """A 'daily' rule on the L0->L1 job: the id still matches (the rule is not part of
    it), but committing it would restart the daily clock."""
    store, job = planned
    before = tree(tmp_path / "store")
    r = _replay_doc(tmp_path, store, {**job, "rule": "daily"}, "--execute")
    assert_one_line_error(r, "no planner makes this job: a 'daily' job writes to L4")
    assert r.err.startswith("compactor: ") and r.code == 2
    assert tree(tmp_path / "store") == before


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("inputs",), "data/L0/x.cf", "field 'inputs' must be a list of objects, not a string"),
        (("inputs", 0), 3, "field 'inputs[0]' must be an object (id, key, size), not an integer"),
        (("inputs", 0, "size"), "2020", "field 'inputs[0].size' must be a non-negative integer"),
        (("inputs", 1, "key"), None, "field 'inputs[1].key' must be a non-empty string, not null"),
        (("output_level",), "1", "field 'output_level' must be an integer, not a string"),
        (("deduplicate",), 0, "field 'deduplicate' must be true or false, not an integer"),
        (("numbers",), "x", "field 'numbers' must be an object of numbers, not a string"),
        (("id",), ["x"], "field 'id' must be a string, not a list"),
    ],
)
def test_a_field_of_the_wrong_type_is_one_line_naming_it(
    tmp_path: Path,
    planned: tuple[list[str], dict[str, Any]],
    path: tuple[Any, ...],
    value: Any,
    message: str,
) -> None:
    store, job = planned
    doc = copy.deepcopy(job)
    holder: Any = doc
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = value
    before = tree(tmp_path / "store")
    for args in ((), ("--execute",)):
        r = _replay_doc(tmp_path, store, doc, *args)
        assert_one_line_error(r, f"job.json: malformed job document: {message}")
        assert r.err.startswith("compactor: ") and r.code == 2
        assert "string indices" not in r.err
    assert tree(tmp_path / "store") == before


def test_a_commit_recording_a_job_no_planner_makes_cannot_be_replayed(tmp_path: Path) -> None:
    """A store holding a commit of an undeduplicated L4 job, as the audit's document made
    before such documents were refused (made here by forcing the job's field after its
    checks): replay --from-history names it, exit 4, and nothing changes."""
    root = tmp_path / "store"
    store = LocalStore(root)
    catalog = Catalog(store)
    make_topics(catalog, {"t": (1, {"cleanup.policy": "compact"})})
    files = [
        add_file(store, catalog, f"f{i}", {("t", 0): [Record(i, T, b"k", b"v", ())]})
        for i in range(2)
    ]
    job = Job(tuple(JobInput(f.id, f.key, f.size) for f in files), 1, False, rule="L0->L1")
    object.__setattr__(job, "output_level", 4)  # what the bypass let through
    assert run_job(store, catalog, job, KeyBuffer(1 << 16), now_ms=T).committed
    version = catalog.snapshot().version
    assert catalog.entry(version).record.details["job"]["output_level"] == 4
    store.close()
    before = tree(root)
    for args in ((), ("--verify",), ("--execute",)):
        r = run_cli("--store", str(root), "replay", "--from-history", str(version), *args)
        assert_one_line_error(
            r,
            f"commit {version} recorded a job that cannot be replayed: malformed job "
            "document: a job writing to L4 deduplicates",
        )
        assert r.err.startswith("compactor: ") and r.code == 4
    assert tree(root) == before


# --- the other readers: a queue worker and a Spark task ------------------------------------


def _no_id_l4_copy(catalog: Catalog) -> str:
    files = catalog.snapshot().files
    doc = Job(
        tuple(JobInput(f.id, f.key, f.size) for f in files), 1, False, rule="L0->L1"
    ).to_json()
    del doc["id"]
    doc.update(output_level=4, deduplicate=False)
    return json.dumps(doc)


def test_a_queue_worker_treats_the_document_as_poison(
    s3_store: S3Store, job_queues: JobQueues
) -> None:
    catalog = Catalog(s3_store)
    make_topics(catalog, {"t": (2, {"cleanup.policy": "compact"})})
    for i in range(2):
        add_file(s3_store, catalog, f"f{i}", {("t", 0): [Record(i, T, b"k", b"v", ())]})
    body = _no_id_l4_copy(catalog)
    job_queues.client().send_message(QueueUrl=job_queues.url, MessageBody=body)
    before = {info.key: s3_store.get(info.key)[0] for info in s3_store.list("")}
    queue = JobQueue(job_queues.url)
    log = io.StringIO()
    worker = QueueWorker(
        Compactor(s3_store, key_buffer_bytes=1 << 20),
        queue,
        WorkerSettings(visibility_timeout_s=30),
        metrics=WorkerMetrics(),
        log=EventLog("json", log, source="worker"),
        now_ms=lambda: T,
    )
    message = queue.receive(5, 30)
    assert message is not None and message.body == body
    assert worker.handle(message) == "poison"
    (event,) = [json.loads(line) for line in log.getvalue().splitlines()]
    assert event["event"] == "poison_message"
    assert event["error"].startswith("malformed job document: no field 'id'")
    assert {info.key: s3_store.get(info.key)[0] for info in s3_store.list("")} == before
    queue.close()


def test_a_spark_task_refuses_the_document_before_opening_the_store(tmp_path: Path) -> None:
    settings = TaskSettings(str(tmp_path / "nowhere"), None, 1 << 16, T, 60_000).to_json()
    doc = _doc()
    del doc["id"]
    with pytest.raises(JobDocumentError, match="no field 'id'"):
        run_task(settings, json.dumps(doc), 0)
    with pytest.raises(JobDocumentError, match="a job writing to L4 deduplicates"):
        run_task(settings, json.dumps(_with_own_id(output_level=4, deduplicate=False)), 0)
    assert not (tmp_path / "nowhere").exists()
