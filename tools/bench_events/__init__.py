"""Benchmark the event and job lists at millions of events: `python -m tools.bench_events --help`."""
