from tools.cli import run_command

run_command("tools.bench_events.command", "bench_events")
