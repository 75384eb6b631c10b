#!/bin/bash
# A copy of this checkout's committed code (HEAD) with a job's Python glue compiled by
# mypyc: the modules a job's two processes spend their interpreted time in (the reader,
# the framing and decoding, the writer; the merge, gathering and windows). For measuring
# against this checkout, not for use:
#
#   bench/mypyc_copy.sh /tmp/compiled
#   .venv/bin/python -m bench.phase_cpu --store bench/out/shape-ingest-64p/store . /tmp/compiled
#   .venv/bin/python -m bench.ab --workdir bench/out/shape-ingest-64p --against /tmp/compiled
#   MYPYC_MODULES="worker/merge fileformat/reader" bench/mypyc_copy.sh /tmp/some
#
# The copy first takes bench/mypyc_copy.patch, what compiling needs of the code: a
# mapping source found by its read_mapped rather than a runtime-checkable protocol (which
# mypyc makes a class), and the keep-set, window and young keys that cross from phase 1's
# process pickled through __reduce__ (mypyc's classes do not pickle as Python's do).
# The copy takes this checkout's built C and C++ modules as they are (build them first:
# make setup). mypyc comes with mypy, which the lock file pins. bench/README.md, "The
# job's Python compiled by mypyc", says what it measured. Not a test.
set -euo pipefail
dest=$1
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
modules=(
    fileformat/framing fileformat/reader fileformat/ipc fileformat/block fileformat/batches
    fileformat/picked fileformat/second_read fileformat/section fileformat/writer
    fileformat/field_decode fileformat/read_frames
    worker/gather worker/merge worker/partition
)
if [ -n "${MYPYC_MODULES:-}" ]; then  # another list, to find which module does what
    read -r -a modules <<<"$MYPYC_MODULES"
fi
rm -rf "$dest"
mkdir -p "$dest"
git -C "$root" archive HEAD | tar -x -C "$dest"
(cd "$dest" && git apply "$root/bench/mypyc_copy.patch")
for so in "$root"/fileformat/*.so "$root"/objectstore/*.so "$root"/worker/kernel/*.so; do
    rel=${so#"$root"/}
    cp "$so" "$dest/$rel"
done
cd "$dest"
files=()
for m in "${modules[@]}"; do files+=("compactor/$m.py"); done
"$python" -m mypyc "${files[@]}" >"$dest/mypyc.log" 2>&1 || {
    tail -20 "$dest/mypyc.log" >&2
    echo "mypyc_copy: mypyc failed (the whole log: $dest/mypyc.log)" >&2
    exit 1
}
rm -rf build
echo "$dest: ${#modules[@]} modules compiled by mypyc ($("$python" -m mypy --version))"
