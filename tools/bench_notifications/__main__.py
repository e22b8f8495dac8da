from tools.cli import run_command

run_command("tools.bench_notifications.command", "bench_notifications")
