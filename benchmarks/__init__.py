"""Benchmarks: each `bench_*.py` is a script that prints its figures; `run.py` runs them all."""
