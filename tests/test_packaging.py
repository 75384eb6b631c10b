"""The distribution installs one import package, ``compactor``, and nothing generic.

The repository keeps its layers as root folders (worker/, fileformat/, ...); a wheel built
from it must hold them only under ``compactor/``, so that an environment with its own
``cli`` or ``worker`` module (or a Spark executor) imports the right code.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = (
    "catalog",
    "cli",
    "fileformat",
    "ingest",
    "jobqueue",
    "objectstore",
    "planner",
    "replay",
    "spark",
    "worker",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from the working tree the way `pip install .` builds one."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("compactor-*.whl")
    return built


def test_wheel_holds_one_top_level_package(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"compactor"}
    for layer in LAYERS:
        assert f"compactor/{layer}/__init__.py" in names
    assert "compactor/fileformat/FORMAT.md" in names
    for compiled in (
        "compactor/worker/kernel/_keybuffer",
        "compactor/fileformat/_sections",
        "compactor/fileformat/_encoder",
        "compactor/objectstore/_filemap",
    ):
        assert any(n.startswith(compiled) and n.endswith(".so") for n in names), compiled
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "compactor = compactor.cli.launch:main" in scripts


def test_installed_wheel_imports_from_its_own_site_packages(wheel: Path, tmp_path: Path) -> None:
    """Install the wheel into an empty target and import it with a bare interpreter.

    The dependencies come from this environment's site-packages, added as a plain path
    entry (its .pth files, among them the editable install's finder, are not processed),
    so only the installed copy of ``compactor`` can satisfy the import.
    """
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target)]
        + [str(wheel)],
        check=True,
        capture_output=True,
    )
    assert not {p.name for p in target.iterdir()} & set(LAYERS)
    probe = (
        "import compactor.worker, compactor.fileformat, compactor.worker.kernel as k; "
        "import compactor.fileformat._sections as s; "
        "print(k.__file__); print(s.__file__)"
    )
    deps = sysconfig.get_paths()["purelib"]
    done = subprocess.run(
        [getattr(sys, "_base_executable", sys.executable), "-I", "-c", _with_path(probe)],
        cwd=tmp_path,
        env={"COMPACTOR_TEST_PATH": f"{target}:{deps}"},
        check=True,
        capture_output=True,
        text=True,
    )
    kernel, sections = done.stdout.split()
    assert Path(kernel).is_relative_to(target)
    assert Path(sections).is_relative_to(target)


def _with_path(code: str) -> str:
    # -I ignores PYTHONPATH and the user site, so the path is set from inside.
    return f"import os, sys; sys.path[:0] = os.environ['COMPACTOR_TEST_PATH'].split(':'); {code}"


def test_the_base_command_line_does_not_import_pyspark() -> None:
    """pyspark loads only when a `spark` command runs (or read_topic is called)."""
    probe = (
        "import sys, compactor.cli.main, compactor.spark, compactor.spark.task; "
        "from compactor.cli.main import build_parser; build_parser(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_each_command_is_registered_by_the_module_the_table_names() -> None:
    from compactor.cli.commands import COMMANDS
    from compactor.cli.main import build_parser

    def names(parser: argparse.ArgumentParser) -> list[str]:
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return list(sub.choices)

    assert names(build_parser([])) == list(COMMANDS)  # every command, in --help's order
    for command, module in COMMANDS.items():
        registered = names(build_parser([command]))
        assert registered == [c for c, m in COMMANDS.items() if m == module], command


@pytest.mark.parametrize(
    ("argv", "modules"),
    [
        (["compact", "--full"], ["compact"]),
        (["--store", "compact", "--now-ms", "5", "topic", "create"], ["topic"]),
        (["--debug", "--endpoint-url", "http://x", "replay", "j"], ["replay_cmd"]),
        (["catalog", "upgrade"], ["history_cmd"]),
        (["--help"], None),
        (["bogus", "compact"], None),
        ([], None),
    ],
)
def test_a_command_line_imports_only_its_commands_module(
    argv: list[str], modules: list[str] | None
) -> None:
    from compactor.cli.commands import COMMANDS
    from compactor.cli.main import command_modules

    every = list(dict.fromkeys(COMMANDS.values()))
    assert command_modules(argv) == (every if modules is None else modules)


def test_compact_starts_without_the_other_commands_modules() -> None:
    probe = (
        "import sys; from compactor.cli.main import build_parser; "
        "build_parser(['--store', '/tmp/x', 'compact', '--full']); "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('compactor.cli.', "
        "'prometheus_client', 'compactor.planner.simulation')))))"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", f"import json; {probe}"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert "compactor.cli.compact" in loaded
    others = {f"compactor.cli.{m}" for m in ("replay_cmd", "simulate", "demo", "spark_cmd")}
    assert not loaded & others, loaded & others
    assert not any(
        m.startswith(("prometheus_client", "compactor.planner.simulation")) for m in loaded
    )
