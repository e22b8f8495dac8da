from tools.cli import run_command

run_command("tools.bench_estimate.command", "bench_estimate")
