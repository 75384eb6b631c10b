"""Declares the compiled parts; everything else is in pyproject.toml.

``compactor.fileformat._sections`` (a shared block's per-section figures),
``compactor.objectstore._filemap`` (read-only maps of a local file's byte ranges) and
``compactor.fileformat._rows`` (rows picked out of a column's chunks) are plain C against
the CPython API, as is the key-buffer kernel below.

``compactor.fileformat._encoder`` (a writer's batches encoded on a thread without the GIL)
is C++ against the Arrow C++ library that pyarrow ships, its headers and its
``libarrow.so.<ABI>``, as pyarrow documents for extensions: pyarrow must be installed when
this is built (``--no-build-isolation``, or the pin in ``[build-system]``). Where libzstd's
header and library are found (a test compile and link), it compresses zstd with one
context kept per stream writer, not Arrow's context per buffer
(``_encoder.KEPT_ZSTD_CONTEXT``); its frames are those Arrow's codec writes as long as the
two zstd libraries write the same level-1 frames (``tests/test_compiled_encoder.py``).
With libzstd found, ``_sections`` also decompresses a zstd batch message with one context
kept per thread before Arrow reads it (``_sections.KEPT_ZSTD_CONTEXT``; Arrow's reader
makes a context per buffer).

``compactor.fileformat._walk`` (a version-3 file's frames walked and checked in one pass,
docs/COMPILED_PATH.md) is plain C; it computes frame CRCs with ISA-L's ``libisal`` where
its header and library are found (a test compile and link), else with zlib's.

``compactor.worker.kernel._keybuffer`` is plain C against the CPython API: it needs a C compiler
and the Python headers, nothing else. SHA-512/256 uses OpenSSL's libcrypto when its
headers and library are found at build time (a test compile and link), else the bundled
portable C implementation; on x86-64 it also has SIMD paths that hash short keys several
at once: eight where the CPU has AVX-512F, else four where it has AVX2 (decided at
import). ``COMPACTOR_KERNEL_PORTABLE_SHA=1`` forces the portable one and leaves both SIMD
paths out.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from setuptools import Extension, setup  # type: ignore[import-untyped]
from setuptools.command.build_ext import build_ext  # type: ignore[import-untyped]

FORCE_PORTABLE_ENV = "COMPACTOR_KERNEL_PORTABLE_SHA"
KERNEL = "compactor.worker.kernel._keybuffer"
ENCODER = "compactor.fileformat._encoder"
SECTIONS = "compactor.fileformat._sections"
WALK = "compactor.fileformat._walk"
C_FLAGS = ["-O3", "-std=gnu11", "-Wall", "-Wextra"]

_OPENSSL_PROBE = """
#define OPENSSL_API_COMPAT 10101
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>
int main(void) {
    SHA512_CTX c;
    unsigned char block[128] = {0};
    SHA512_Init(&c);
    SHA512_Transform(&c, block);
    return (int)(c.h[0] & 1);
}
"""


def _arrow_encoder() -> Extension:
    """``_encoder``, linked to pyarrow's libarrow by its file name (pyarrow ships no
    unversioned ``libarrow.so`` to link with) and found beside pyarrow at run time (where
    importing pyarrow, as ``fileformat.ipc`` does first, has loaded it anyway)."""
    import pyarrow as pa

    found = [p for d in pa.get_library_dirs() for p in Path(d).glob("libarrow.so.*")]
    if not found:
        raise SystemExit(f"setup.py: no libarrow.so.* in {pa.get_library_dirs()} (pyarrow's)")
    lib = min(found, key=lambda p: len(p.name))
    libdir = lib.parent
    # The build-time directory, for an editable install (the module stays in the source
    # tree); not an isolated build's, which is deleted after the build.
    here = [] if libdir.is_relative_to(tempfile.gettempdir()) else [f"-Wl,-rpath,{libdir}"]
    return Extension(
        ENCODER,
        sources=["fileformat/_encoder.cpp"],
        language="c++",
        include_dirs=[pa.get_include()],
        extra_compile_args=[
            "-O2",
            "-std=c++20",
            "-Wall",
            "-Wextra",
            "-Wno-missing-field-initializers",
        ],
        # pyarrow's directory where the wheel puts this module (site-packages/compactor/
        # fileformat), and where it was found at build time (an editable install).
        extra_link_args=[
            f"-l:{lib.name}",
            f"-L{libdir}",
            "-Wl,-rpath,$ORIGIN/../../pyarrow",
            *here,
        ],
    )


_ZSTD_PROBE = """
#include <zstd.h>
int main(void) {
    ZSTD_CCtx *c = ZSTD_createCCtx();
    char out[64];
    size_t n = ZSTD_compressCCtx(c, out, sizeof out, "x", 1, 1);
    ZSTD_freeCCtx(c);
    return ZSTD_isError(n) ? 1 : 0;
}
"""


_ISAL_PROBE = """
#include <isa-l/crc.h>
int main(void) {
    return crc32_gzip_refl(0, (const unsigned char *)"x", 1) == 0x8cdc1683u ? 0 : 1;
}
"""


def _links(compiler: Any, probe: str, library: str) -> bool:
    """True if ``probe`` compiles and links against ``-l<library>`` into a shared object,
    as an extension links (a static-only library built without -fPIC links into a
    program, not into one)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "probe.c")
        src.write_text(probe)
        try:
            objects = compiler.compile([str(src)], output_dir=tmp, extra_preargs=["-fPIC"])
            compiler.link_shared_object(objects, "probe.so", output_dir=tmp, libraries=[library])
        except Exception:  # CompileError, LinkError: no usable library
            return False
    return True


class BuildExt(build_ext):  # type: ignore[misc]
    def build_extensions(self) -> None:
        portable = os.environ.get(FORCE_PORTABLE_ENV, "") not in ("", "0")
        use_openssl = not portable and _links(self.compiler, _OPENSSL_PROBE, "crypto")
        kept_zstd = _links(self.compiler, _ZSTD_PROBE, "zstd")
        isal_crc = _links(self.compiler, _ISAL_PROBE, "isal")
        for ext in self.extensions:
            if use_openssl and ext.name == KERNEL:
                ext.define_macros.append(("KB_HAVE_OPENSSL", "1"))
                ext.libraries.append("crypto")
            if portable and ext.name == KERNEL:
                ext.define_macros.append(("KB_NO_X8", "1"))
            if ext.name == WALK:
                if isal_crc:
                    ext.define_macros.append(("COMPACTOR_ISAL_CRC", "1"))
                ext.libraries.append("isal" if isal_crc else "z")
            if kept_zstd and ext.name in (ENCODER, SECTIONS):
                ext.define_macros.append(("COMPACTOR_KEPT_ZSTD", "1"))
                ext.libraries.append("zstd")
        self.announce(
            "compactor.worker.kernel: SHA-512/256 via "
            + ("OpenSSL" if use_openssl else "portable C")
            + ("" if portable else ", several keys at once on CPUs with AVX-512 or AVX2"),
            level=2,
        )
        self.announce(
            "compactor.fileformat._encoder and _sections: zstd "
            + ("with kept contexts (libzstd)" if kept_zstd else "by Arrow's codec (no libzstd)"),
            level=2,
        )
        self.announce(
            "compactor.fileformat._walk: frame CRCs by "
            + ("ISA-L (libisal)" if isal_crc else "zlib (no libisal)"),
            level=2,
        )
        super().build_extensions()


setup(
    ext_modules=[
        Extension(
            KERNEL,
            sources=["worker/kernel/_keybuffer.c"],
            depends=["worker/kernel/sha512_256.h", "fileformat/arrow_c_abi.h"],
            extra_compile_args=C_FLAGS,
            libraries=["pthread"],
        ),
        Extension(
            SECTIONS,
            sources=["fileformat/_sections.c"],
            depends=["fileformat/arrow_c_abi.h"],
            extra_compile_args=C_FLAGS,
        ),
        Extension(
            WALK,
            sources=["fileformat/_walk.c"],
            extra_compile_args=C_FLAGS,
        ),
        Extension(
            "compactor.fileformat._rows",
            sources=["fileformat/_rows.c"],
            extra_compile_args=C_FLAGS,
        ),
        _arrow_encoder(),
        Extension(
            "compactor.objectstore._filemap",
            sources=["objectstore/_filemap.c"],
            extra_compile_args=C_FLAGS,
        ),
    ],
    cmdclass={"build_ext": BuildExt},
)
