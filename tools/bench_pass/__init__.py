"""Benchmark one scheduling pass on the configured database: `python -m tools.bench_pass --help`."""
