"""``compactor simulate``: time-stepped replay of agents writing L0 files, through the
real planner, with a cost model of the worker instead of I/O."""
