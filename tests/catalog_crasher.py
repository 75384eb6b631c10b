"""Run one catalog operation and SIGKILL this process right before its N-th object
write: ``python tests/catalog_crasher.py STORE MODE N`` (MODE: ingest, upgrade).

The kill comes from the test harness (a store that counts its writes), not from the
code under test, so every write the code makes is a real one up to the kill."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from compactor.catalog import Catalog
from compactor.ingest.agent import L0Ingest
from compactor.ingest.jsonl import parse_line
from compactor.objectstore import LocalStore


class KillingStore(LocalStore):
    def __init__(self, root: str, writes_left: int) -> None:
        super().__init__(root)
        self.writes_left = writes_left

    def put(self, key: str, data: bytes, **kw: Any) -> str:
        if self.writes_left == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        self.writes_left -= 1
        return super().put(key, data, **kw)


def main() -> None:
    root, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = KillingStore(root, n)
    catalog = Catalog(store, checkpoint_interval=2)
    if mode == "ingest":
        ingest = L0Ingest(store, catalog, now_ms=1_700_000_000_000, max_file_records=2)
        for i in range(4):
            ingest.add(parse_line(f'{{"topic":"t","partition":{i % 2},"key":"k{i}","value":"v"}}'))
        ingest.commit()
    elif mode == "upgrade":
        catalog.upgrade()
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
