from tools.cli import run_command

run_command("tools.bench_pass.command", "bench_pass")
