"""The kernel's portable SHA-512/256 build: setup.py without OpenSSL or SIMD lanes, verified
in a subprocess against hashlib (the installed build uses OpenSSL when it is present, and
AVX-512 or AVX2 where the CPU has it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CHECK = textwrap.dedent(
    """
    import hashlib, importlib.util, random, sys
    import pyarrow as pa
    spec = importlib.util.spec_from_file_location("_keybuffer", sys.argv[1])
    kb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kb)
    assert kb.HAVE_OPENSSL is False and kb.HASH_IMPL == "portable", kb.HASH_IMPL
    assert kb.HAVE_AVX512 is False and kb.HAVE_AVX2 is False
    for impl in ("openssl", "avx512", "avx2"):
        try:
            kb._sha512_256(b"", impl)
        except ValueError:
            pass
        else:
            raise AssertionError(f"a portable build must refuse impl={impl!r}")
    rng = random.Random(3)
    lengths = [0, 1, 36, 111, 112, 127, 128, 129, 239, 240, 255, 256, 10_000]
    msgs = [rng.randbytes(n) for n in lengths + [rng.randrange(600) for _ in range(200)]]
    for m in msgs:
        assert kb._sha512_256(m) == hashlib.new("sha512_256", m).digest(), len(m)
    keys = pa.array(msgs, pa.binary())
    assert kb.hash_keys(keys, 2) == b"".join(hashlib.new("sha512_256", m).digest() for m in msgs)
    buf = kb.KeyBuffer(1 << 16)
    buf.reset(0, None)
    small = pa.array([b"a", b"b", b"a"])
    assert buf.insert(small, pa.array([1, 2, 3], pa.int64())) == 3
    assert buf.lookup(b"a") == 3 and buf.hash_impl == "portable"
    print("ok")
    """
)


def _compiler() -> str | None:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc)


@pytest.mark.skipif(_compiler() is None, reason="no C compiler")
def test_portable_build_without_openssl(tmp_path: Path) -> None:
    env = dict(os.environ, COMPACTOR_KERNEL_PORTABLE_SHA="1")
    build = subprocess.run(
        [
            sys.executable,
            "setup.py",
            "-q",
            "build_ext",
            "-b",
            str(tmp_path / "lib"),
            "-t",
            str(tmp_path / "tmp"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    assert "warning" not in build.stderr.lower(), build.stderr
    (so,) = (tmp_path / "lib" / "compactor" / "worker" / "kernel").glob("_keybuffer*")
    check = subprocess.run(
        [sys.executable, "-c", CHECK, str(so)], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0 and check.stdout.strip() == "ok", check.stdout + check.stderr
