"""``replay --from-history N --verify`` while garbage collection deletes the commit's
inputs (their grace period ran out): the same exit 4 and the same line as a verify that
finds them gone before it starts, never exit 5 with the store's "object not found"; and
nothing of the verify's own left behind. /tmp/auditA/s9_replay_verify_gc.sh did it with
two processes against moto's S3; here the deletion lands between the verify's up-front
check and its first read, deterministically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clirunner import assert_one_line_error, run_cli, tree, two_l0_files

from compactor.catalog import Catalog, CatalogError
from compactor.catalog.garbage import SCRATCH_PREFIX, collect_garbage
from compactor.objectstore import LocalStore, ObjectNotFound, ObjectStore, ObjectStream
from compactor.replay import verify
from compactor.replay.verify import verify_commit

NOW = "1700000000000"


def _compacted(root: Path) -> tuple[int, list[str]]:
    """A local store where ``compact --full`` replaced two L0 files: its commit's version
    and the keys of its inputs (kept for the grace period)."""
    two_l0_files(root, NOW)
    r = run_cli("--store", str(root), "--now-ms", NOW, "compact", "--full")
    assert r.code == 0, r.err
    r = run_cli("--store", str(root), "history", "--json")
    assert r.code == 0, r.err
    (commit,) = [e for e in json.loads(r.out) if e["kind"] == "compaction"]
    return int(commit["version"]), [i["key"] for i in commit["job"]["inputs"]]


def _gone_line(version: int, key: str) -> str:
    return (
        f"compactor: commit {version} cannot be re-run: its input {key} was deleted (replaced "
        "files are kept only for the grace period after the commit)\n"
    )


def test_inputs_collected_while_the_verify_runs_give_its_exit_4_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real garbage collector (grace 0) runs after the verify checked its inputs and
    before it reads them: exit 4 and the very line a verify after the collection prints."""
    root = tmp_path / "store"
    version, inputs = _compacted(root)
    real = verify.write_outputs
    after_gc: dict[str, bytes] = {}

    def collected_first(store: ObjectStore, *args: Any, **kwargs: Any) -> Any:
        catalog = Catalog(store)
        deleted = collect_garbage(catalog, catalog.clock(), grace_ms=0)
        assert sorted(deleted) == sorted(inputs)
        after_gc.update(tree(root))
        return real(store, *args, **kwargs)

    monkeypatch.setattr(verify, "write_outputs", collected_first)
    during = run_cli("--store", str(root), "replay", "--from-history", str(version), "--verify")
    assert_one_line_error(during)
    assert during.code == 4, during.err
    assert during.err == _gone_line(version, inputs[0])
    assert after_gc and tree(root) == after_gc  # the verify left nothing of its own
    assert not any(k.startswith(SCRATCH_PREFIX) for k in tree(root))

    monkeypatch.undo()
    again = run_cli("--store", str(root), "replay", "--from-history", str(version), "--verify")
    assert again.code == 4 and again.out == ""
    assert again.err == during.err
    assert tree(root) == after_gc


class _DeletedOnOpen(LocalStore):
    """A real local store whose first GET stream of ``key`` finds it deleted (as another
    process's garbage collection would leave it), or, with ``delete=False``, an object
    that is there but answers not found once (a not-found that is not an input's)."""

    def __init__(self, root: Path, key: str, *, delete: bool = True) -> None:
        super().__init__(root)
        self.key, self.delete_it, self.opened = key, delete, 0

    def open_stream(
        self, key: str, start: int = 0, *, buffer_size: int | None = None
    ) -> ObjectStream:
        if key == self.key:
            self.opened += 1
            if self.opened == 1:
                if not self.delete_it:
                    raise ObjectNotFound(f"object not found: {key} (the test's)")
                self.delete(key)
        return super().open_stream(key, start, buffer_size=buffer_size)


@pytest.mark.parametrize("which", [0, 1])
def test_an_input_deleted_at_its_first_read_is_the_catalog_error(
    tmp_path: Path, which: int
) -> None:
    root = tmp_path / "store"
    version, inputs = _compacted(root)
    store = _DeletedOnOpen(root, inputs[which])
    before = tree(root)
    with pytest.raises(CatalogError) as e:
        verify_commit(Catalog(store), version)
    assert store.opened == 1
    assert f"{e.value}\n" == _gone_line(version, inputs[which]).removeprefix("compactor: ")
    del before[inputs[which]]
    assert tree(root) == before  # no scratch object, no pending upload


def test_a_not_found_that_is_no_input_s_stays_the_store_s_error(tmp_path: Path) -> None:
    """Every input still there: the re-check finds nothing to blame on the grace period,
    and the store's own error goes on (exit 5 on the command line)."""
    root = tmp_path / "store"
    version, inputs = _compacted(root)
    store = _DeletedOnOpen(root, inputs[0], delete=False)
    before = tree(root)
    with pytest.raises(ObjectNotFound, match="the test's"):
        verify_commit(Catalog(store), version)
    assert tree(root) == before


def test_an_honest_verify_still_passes(tmp_path: Path) -> None:
    root = tmp_path / "store"
    version, _ = _compacted(root)
    before = tree(root)
    r = run_cli("--store", str(root), "replay", "--from-history", str(version), "--verify")
    assert r.code == 0, r.err
    assert r.out.startswith(f"OK: commit {version} ")
    assert tree(root) == before
