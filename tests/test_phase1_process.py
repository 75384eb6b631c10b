"""Phase 1 in a process of its own (``worker.phase1_process``): the helper is kept
between jobs, still makes one GET stream per input, and a helper that dies, or whose
worker dies, loses nothing and leaves nothing behind."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import S3Url
from worker_scenarios import add_file, make_topics

from compactor.catalog import Catalog
from compactor.catalog.config import TopicConfig
from compactor.cli.commands import command_of
from compactor.fileformat import FormatError, Record
from compactor.objectstore import LocalStore, ObjectStore
from compactor.objectstore.s3 import S3Store
from compactor.objectstore.throttle import ReadThrottle
from compactor.planner.job import Job, JobInput
from compactor.worker import helper_pool
from compactor.worker.errors import WorkerError
from compactor.worker.group import Group
from compactor.worker.kernel import KeyBuffer
from compactor.worker.partition import KeepSet
from compactor.worker.phase1_process import store_recipe
from compactor.worker.pipeline import Phase1Mode
from compactor.worker.policy import Partition, PartitionPolicy
from compactor.worker.runner import run_job

NOW = 1_700_000_000_000


def _job_over_files(store: ObjectStore, files: int = 3, partitions: int = 4) -> tuple[Catalog, Job]:
    catalog = Catalog(store)
    make_topics(catalog, {"t": (partitions, {"cleanup.policy": "compact"})})
    for i in range(files):
        sections = {
            ("t", p): [Record(i * 100 + j, NOW, b"k%d" % (j % 7), b"v%d" % i) for j in range(50)]
            for p in range(partitions)
        }
        add_file(store, catalog, f"f{i}", sections)
    live = catalog.snapshot().files
    return catalog, Job(tuple(JobInput(f.id, f.key, f.size) for f in live), 2, True)


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_the_helper_serves_job_after_job_and_counts_its_gets(local_store: LocalStore) -> None:
    helper_pool.warm_up()
    helper = helper_pool.idle_pids()[-1]
    catalog, job = _job_over_files(local_store)
    first = run_job(local_store, catalog, job, KeyBuffer(1 << 16), now_ms=NOW, phase1="process")
    assert first.committed and first.phase1 == "process"
    assert [f.gets for f in first.inputs] == [2, 2, 2]  # one of them the helper's
    assert first.phase1_peak_rss_kib > 0 and first.peak_rss_kib > 0
    assert helper in helper_pool.idle_pids()  # handed back, not started again
    more = add_file(local_store, catalog, "g", {("t", 0): [Record(900, NOW, b"k1", b"new")]})
    live = catalog.snapshot().files
    second_job = Job(tuple(JobInput(f.id, f.key, f.size) for f in live), 2, True)
    second = run_job(
        local_store, catalog, second_job, KeyBuffer(1 << 16), now_ms=NOW, phase1="process"
    )
    assert second.committed and more.key in [i.key for i in second.inputs]
    assert [f.gets for f in second.inputs] == [2] * len(live)
    assert helper in helper_pool.idle_pids()
    assert second.stats.records_out == 4 * 7  # every partition's 7 keys, once each


def test_a_group_crosses_the_pipe_as_itself() -> None:
    """A ``Group`` pickles its partitions as columns (``Group.__reduce__``): every field
    of every partition arrives in its place, partitions of one policy share it after the
    trip, and the rest of the group is unchanged."""
    policy = PartitionPolicy.for_partition(
        TopicConfig(), deduplicate=True, now_ms=7, includes_oldest=True, includes_newest=False
    )
    other = PartitionPolicy.for_partition(
        TopicConfig(), deduplicate=True, now_ms=7, includes_oldest=False, includes_newest=True
    )
    parts = (
        Partition("t-one", 3, policy, "compacted"),
        Partition("t-one", 5, other, "compacted"),
        Partition("t-two", 4, policy, "plain"),
    )
    keys = ((b"t-one", 3), (b"t-one", 5), (b"t-two", 4))
    group = Group(parts, (2, 0, 9), keys, KeepSet(pa.array([0, 4, 10], pa.int64())), 0.25)
    again = pickle.loads(pickle.dumps(group, protocol=pickle.HIGHEST_PROTOCOL))
    assert again.parts == parts and all(type(p) is Partition for p in again.parts)
    assert [(p.topic, p.partition, p.group) for p in again.parts] == [
        ("t-one", 3, "compacted"),
        ("t-one", 5, "compacted"),
        ("t-two", 4, "plain"),
    ]
    assert again.parts[0].policy is again.parts[2].policy
    assert again.parts[1].policy == other
    assert (again.counts, again.keys, again.utilization) == ((2, 0, 9), keys, 0.25)
    assert again.keep.winners.to_pylist() == [0, 4, 10]


def test_a_store_that_cannot_travel_keeps_phase_1_here(tmp_path: Path) -> None:
    class Local(LocalStore):
        """A subclass: its own behaviour would be lost in another process."""

    store = Local(tmp_path / "store")
    assert store.portable() is None
    catalog, job = _job_over_files(store)
    with pytest.raises(ValueError, match="cannot run in a process of its own"):
        run_job(store, catalog, job, KeyBuffer(1 << 16), now_ms=NOW, phase1="process")
    report = run_job(store, catalog, job, KeyBuffer(1 << 16), now_ms=NOW)
    assert report.committed and report.phase1 in ("inline", "thread")


@pytest.mark.parametrize(
    ("asked", "runs"), [(None, "process"), ("process", "process"), ("inline", "inline")]
)
def test_under_a_meter_phase_1_has_its_process_and_both_pointers_bytes_are_metered(
    tmp_path: Path, asked: Phase1Mode | None, runs: Phase1Mode
) -> None:
    """A throttle without a rate (a queue worker's meter of bytes read) lets phase 1 have
    its process, by default and when asked, and meters the helper's bytes as its own:
    the same count as with phase 1 in the job's process, both pointers reading every
    input byte (a local store reads each stream front to back once). A throttle with a
    rate keeps phase 1 in the job's process."""
    store = LocalStore(tmp_path / "store")
    catalog, job = _job_over_files(store)
    meter = ReadThrottle(None)
    report = run_job(store, catalog, job, KeyBuffer(1 << 16), now_ms=NOW, phase1=asked, cpus=2,
                     read_throttle=meter)  # fmt: skip
    assert report.committed and report.phase1 == runs
    assert meter.bytes_total == 2 * job.input_bytes
    assert [f.gets for f in report.inputs] == [2] * len(job.inputs)


def test_a_failing_metered_helper_reports_what_it_read(tmp_path: Path) -> None:
    """A byte of the last input's footer flipped: phase 1's helper, the only pointer that
    reads footers through, fails the job at the end of its reads. Its report comes before
    its failure, so the meter holds its bytes (about every input byte) besides phase 2's:
    more than the inputs' bytes, which no one pointer reads more of."""
    store = LocalStore(tmp_path / "store")
    catalog, job = _job_over_files(store, files=3, partitions=40)
    last = tmp_path / "store" / job.inputs[-1].key
    raw = bytearray(last.read_bytes())
    raw[-40] ^= 0xFF
    last.write_bytes(bytes(raw))
    meter = ReadThrottle(None)
    with pytest.raises(FormatError):
        run_job(store, catalog, job, KeyBuffer(1 << 12), now_ms=NOW, phase1="process",
                read_throttle=meter)  # fmt: skip
    assert meter.bytes_total > job.input_bytes


def test_only_a_throttle_with_a_rate_keeps_phase_1_here(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    catalog, job = _job_over_files(store)
    assert store_recipe(store, KeyBuffer(1 << 16), ReadThrottle(None)) is not None
    assert store_recipe(store, KeyBuffer(1 << 16), ReadThrottle(10**9)) is None
    with pytest.raises(ValueError, match="no throttle with a rate"):
        run_job(store, catalog, job, KeyBuffer(1 << 16), now_ms=NOW, phase1="process",
                read_throttle=ReadThrottle(10**9))  # fmt: skip


def test_a_helper_killed_mid_job_fails_the_job_and_loses_nothing(
    local_store: LocalStore,
) -> None:
    catalog, job = _job_over_files(local_store, files=4, partitions=40)
    helper_pool.warm_up()
    helper = helper_pool.idle_pids()[-1]
    before = catalog.snapshot()
    objects = sorted(o.key for o in local_store.list(""))

    def kill(_: object) -> None:
        if not _gone(helper):
            os.kill(helper, signal.SIGKILL)
            while not _gone(helper):
                time.sleep(0.01)

    with pytest.raises(WorkerError, match="phase 1's process ended without a word"):
        run_job(
            local_store,
            catalog,
            job,
            KeyBuffer(1 << 10),  # a few entries a window: phase 1 waits on phase 2
            now_ms=NOW,
            phase1="process",
            on_progress=kill,
            progress_interval_s=0,
        )
    assert catalog.snapshot() == before
    assert sorted(o.key for o in local_store.list("")) == objects
    assert list(local_store.pending_uploads()) == []
    again = run_job(local_store, catalog, job, KeyBuffer(1 << 10), now_ms=NOW, phase1="process")
    assert again.committed  # a new helper


def test_a_helper_whose_worker_dies_exits(tmp_path: Path) -> None:
    script = (
        "from compactor.worker import helper_pool as p\n"
        "p.warm_up()\n"
        "print(p.idle_pids()[-1], flush=True)\n"
        "import time; time.sleep(60)\n"
    )
    worker = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert worker.stdout is not None
    helper = int(worker.stdout.readline())
    assert not _gone(helper)
    worker.kill()
    worker.wait()
    deadline = time.monotonic() + 30
    while not _gone(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(helper)


_FORK_SCRIPT = """
import json, os, sys, threading, time
import compactor.cli  # the entry point's memory settings, before pyarrow loads
import compactor.worker.phase1_process
from compactor.catalog import Catalog
from compactor.objectstore import LocalStore
from compactor.worker import helper_pool, helper_process
from compactor.worker.kernel import KeyBuffer
from compactor.worker.runner import run_job

def cmdline(pid):
    # Popen returns once the child's exec has closed its error pipe, which the kernel does
    # before it sets up the new arguments: until then /proc shows an empty command line.
    deadline = time.monotonic() + 10
    while True:
        args = open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\\0")
        if args != [""] or time.monotonic() > deadline:
            return args
        time.sleep(0.01)

def described(helper):
    pid = helper.process.pid
    fds = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    return {"pid": pid, "forked": isinstance(helper.process, helper_process.ForkedProcess),
            "cmdline": cmdline(pid), "fds": fds}

out = {"threads": len(os.listdir("/proc/self/task"))}
held = open(os.path.dirname(sys.argv[1]) + "/held", "w")  # not for the forked helper
helper_pool.warm_up()
first = helper_pool._idle[-1]
store = LocalStore(sys.argv[1])
job = __import__("pickle").loads(bytes.fromhex(sys.argv[2]))
report = run_job(store, Catalog(store), job, KeyBuffer(1 << 16), now_ms=int(sys.argv[3]),
                 phase1="process")
out["first"] = described(first)  # after a job: past its start, whatever it opened is shut
out["report"] = [report.committed, report.phase1, [f.gets for f in report.inputs],
                 report.stats.records_out]
out["first_back"] = out["first"]["pid"] in helper_pool.idle_pids()
stop = threading.Event()
threading.Thread(target=stop.wait).start()
out["second"] = described(helper_pool.Helper())  # a thread runs: spawned
stop.set()
print(json.dumps(out), flush=True)
sys.stdin.readline()  # until the test kills this worker
"""


def test_a_helper_is_forked_from_one_thread_and_spawned_beside_others(tmp_path: Path) -> None:
    """A worker running one thread with the helper's modules loaded forks its helper: the
    child is this interpreter (the same command line), keeps only its pipes and the three
    standard descriptors, runs a job as a spawned helper does (one of two GETs per input),
    and exits once its worker has gone. With a second thread running, a helper is
    spawned (``python -m compactor.worker.phase1_process``)."""
    store = LocalStore(tmp_path / "store")
    catalog, job = _job_over_files(store)
    worker = subprocess.Popen(
        [sys.executable, "-c", _FORK_SCRIPT, str(tmp_path / "store"), pickle.dumps(job).hex()]
        + [str(NOW)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdin is not None and worker.stdout is not None
    out = json.loads(worker.stdout.readline())
    first, second = out["first"], out["second"]
    assert out["threads"] == 1
    assert first["forked"] and first["cmdline"][:2] == [sys.executable, "-c"]
    assert first["fds"][:1] == ["/dev/null"] and len(first["fds"]) == 5  # and 1, 2, 2 pipes
    worker_fds = [
        os.readlink(f"/proc/{worker.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{worker.pid}/fd")
    ]
    assert str(tmp_path / "held") in worker_fds and len(worker_fds) > 5
    assert out["report"] == [True, "process", [2, 2, 2], 4 * 7]
    assert out["first_back"]
    assert not second["forked"] and "compactor.worker.phase1_process" in second["cmdline"]
    worker.kill()
    worker.wait()
    deadline = time.monotonic() + 30
    while not (_gone(first["pid"]) and _gone(second["pid"])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(first["pid"]) and _gone(second["pid"])


def test_with_jemalloc_chosen_its_thread_runs_and_the_helper_is_spawned() -> None:
    """An operator's ``ARROW_DEFAULT_MEMORY_POOL=jemalloc`` keeps jemalloc's purging
    thread, so the process never runs one thread and its helper is spawned; by default
    the thread is off and the helper forked."""
    script = (
        "import os, sys\n"
        "from compactor.cli.commands import command_of\n"
        "from compactor.worker import helper_pool, helper_process\n"
        "helper_pool.start_for_command(command_of(['--store', '/tmp/s', 'compact', '--full']))\n"
        "import pyarrow\n"
        "kinds = [isinstance(h.process, helper_process.ForkedProcess) for h in helper_pool._idle]\n"
        "threads = len(os.listdir('/proc/self/task'))\n"
        "print(os.environ.get('JE_ARROW_MALLOC_CONF'), threads, kinds)\n"
    )
    runs = {}
    for pool in ("", "jemalloc"):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ARROW_", "JE_"))}
        env |= {"ARROW_DEFAULT_MEMORY_POOL": pool} if pool else {}
        done = subprocess.run(
            [sys.executable, "-c", "import compactor.cli\n" + script],
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        runs[pool] = done.stdout.split(maxsplit=2)
    if helper_pool.usable_cpus() < 2:
        return  # no helper to start: the rest does not apply
    assert runs[""] == ["background_thread:false", "1", "[True]\n"]
    assert runs["jemalloc"] == ["None", "2", "[False]\n"]


def test_a_forked_helper_reaped_by_another_counts_as_gone() -> None:
    """With SIGCHLD ignored the kernel reaps a child at once, so waiting for it fails
    (ECHILD): the helper is gone, and killing it again is no error. (Before, a wait with a
    timeout on the live helper times out.)"""
    script = (
        "import os, signal, time\n"
        "import compactor.cli\n"
        "from compactor.worker import helper_pool\n"
        "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
        "import subprocess\n"
        "helper = helper_pool.Helper(forked=True)\n"
        "try:\n"
        "    helper.process.wait(0.05)\n"
        "except subprocess.TimeoutExpired:\n"
        "    print('waited', flush=True)\n"
        "os.kill(helper.process.pid, signal.SIGKILL)\n"
        "while os.path.exists(f'/proc/{helper.process.pid}'):\n"
        "    time.sleep(0.01)\n"
        "print(helper.alive(), flush=True)\n"
        "helper.kill()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "waited\nFalse\n", "")


def test_a_command_that_compacts_starts_its_helper_first() -> None:
    """``compactor compact`` (the script's ``cli.launch``) starts a helper before it
    imports the command line; a command that runs no job does not."""
    helper_pool._stop_idle()
    helper_pool.start_for_command(command_of(["--store", "/tmp/s", "topic", "create", "t"]))
    assert helper_pool.idle_pids() == []
    helper_pool.start_for_command(command_of(["--store", "compact", "stats"]))  # a store's name
    assert helper_pool.idle_pids() == []
    helper_pool.start_for_command(command_of(["--store", "/tmp/s", "compact", "--full"]))
    started = helper_pool.idle_pids()
    if helper_pool.usable_cpus() >= 2:
        assert len(started) == 1 and not _gone(started[0])
    else:
        assert started == []  # one CPU: phase 1 stays in the worker's process
    helper_pool.start_for_command(command_of(["worker", "--queue-url", "http://q"]))
    assert helper_pool.idle_pids() == started  # one idle helper is enough


def test_a_helper_that_read_s3_exits_without_a_word(s3_url: S3Url, s3_store: S3Store) -> None:
    """A helper closes its stores when its worker has gone (here: ``os._exit``, so no
    exit handler kills it and the helper reads the end of its pipe): its interpreter's
    teardown finds no S3 session open and writes nothing on the stderr it shares with
    the worker. The worker's own stderr is the command line's one line."""
    catalog, job = _job_over_files(s3_store)
    script = (
        "import os, pickle, sys\n"
        "from compactor.catalog import Catalog\n"
        "from compactor.objectstore.url import open_store\n"
        "from compactor.worker.kernel import KeyBuffer\n"
        "from compactor.worker.runner import run_job\n"
        f"store = open_store({s3_url.url!r}, endpoint_url={s3_url.endpoint_url!r})\n"
        "job = pickle.loads(bytes.fromhex(sys.argv[1]))\n"
        f"report = run_job(store, Catalog(store), job, KeyBuffer(1 << 16), now_ms={NOW},"
        " phase1='process')\n"
        "print(report.phase1, [f.gets for f in report.inputs], flush=True)\n"
        "os._exit(0)\n"
    )
    worker = subprocess.run(
        [sys.executable, "-c", script, pickle.dumps(job).hex()],
        env={**os.environ, **s3_url.env},
        capture_output=True,
        text=True,
        timeout=120,
    )  # returns once every writer of its pipes, the helper too, has closed them
    assert worker.returncode == 0, worker.stderr
    assert worker.stdout == "process [2, 2, 2]\n"
    assert worker.stderr == ""


def test_a_window_of_100000_winners_fits_in_the_pipe_from_the_helper() -> None:
    """The helper hands over a keep-set without waiting for phase 2 to read it: the pipe
    from a helper holds ``OUTBOX_PIPE_BYTES`` (Linux's default, 64 KiB, blocked the
    helper from about 8,000 winners on, until phase 2 had finished the window before)."""
    import fcntl

    limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    wanted = min(helper_pool.OUTBOX_PIPE_BYTES, limit)
    helper = helper_pool.Helper()
    try:
        assert fcntl.fcntl(helper.outbox.fileno(), fcntl.F_GETPIPE_SZ) >= wanted
    finally:
        helper.kill()
    keep = KeepSet(pa.array(range(0, 200_000, 2), pa.int64()))
    message = pickle.dumps(keep, protocol=pickle.HIGHEST_PROTOCOL)
    assert 64 << 10 < len(message) <= wanted
    r, w = os.pipe()
    try:
        assert helper_pool.widen_pipe(w) >= wanted
        os.set_blocking(w, False)
        assert os.write(w, message) == len(message)  # all of it, with nobody reading
        assert pickle.loads(os.read(r, len(message) + 1)).bits(pa.array([2, 3], pa.int64())) == 1
    finally:
        os.close(r)
        os.close(w)
