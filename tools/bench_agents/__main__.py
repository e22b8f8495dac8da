from tools.cli import run_command

run_command("tools.bench_agents.command", "bench_agents")
