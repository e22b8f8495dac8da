"""The submission path under gunicorn, idle and with concurrent clients: `python -m tools.bench_submit --help`."""

from tools.cli import run_command

run_command("tools.bench_submit.command", "bench_submit", own_services=True)
