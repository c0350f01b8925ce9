"""Benchmarks: each figure measured beside its ceiling in the same run."""
