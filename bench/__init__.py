"""Benchmarks: a workload generator and a runner comparing the compactor with baselines."""
