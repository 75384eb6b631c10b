"""The ``compactor`` command line."""

from compactor.worker.memory import prefer_lean_pool

prefer_lean_pool()  # must run before anything imports pyarrow: see worker.memory
