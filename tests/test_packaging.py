"""The distribution installs one import package, ``compactor``, and nothing generic.

The repository keeps its layers as root folders (worker/, fileformat/, ...); a wheel built
from it must hold them only under ``compactor/``, so that an environment with its own
``cli`` or ``worker`` module (or a Spark executor) imports the right code.
"""

from __future__ import annotations

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
    for compiled in ("compactor/worker/kernel/_keybuffer", "compactor/fileformat/_sections"):
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
