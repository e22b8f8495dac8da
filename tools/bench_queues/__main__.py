"""Many queues, the beat and Celery workers: `python -m tools.bench_queues --help`."""

from tools.cli import run_command

run_command("tools.bench_queues.command", "bench_queues", own_services=True)
