from tools.cli import run_command

run_command("tools.soak.command", "soak", own_services=True)
