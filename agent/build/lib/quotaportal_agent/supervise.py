"""The first process of every job: runs the job's command and writes its exit status to a file.

The agent starts `python -I supervise.py EXIT_FILE -- ARGV...` as the leader of a new process group. The file
is what makes an exit code known even when the agent was not there to see it (restarted, or killed): a process
the agent adopts after a restart is not its child, so it cannot wait for it. Standard library only, and no
import of the package, because it runs isolated (`-I`) with the job's environment.

SIGTERM and SIGINT reach the whole group, the command included; this process only outlives them to record how
the command ended (a no-op handler, not SIG_IGN, so the command still gets the default dispositions).
"""

import json
import os
import signal
import subprocess
import sys


def exit_code_of(returncode: int) -> int:
    """Shell convention: a command killed by signal N ended with 128 + N."""
    return returncode if returncode >= 0 else 128 - returncode


def write_exit_file(path: str, exit_code: int, error: str = "") -> None:
    partial = path + ".partial"
    with open(partial, "w") as out:
        json.dump({"exit_code": exit_code, "error": error}, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, path)


def main(argv: list[str]) -> int:
    exit_file, separator, command = argv[0], argv[1], argv[2:]
    assert separator == "--" and command, "usage: supervise.py EXIT_FILE -- COMMAND..."
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda *_: None)
    try:
        child = subprocess.Popen(command)
    except OSError as error:
        message = f"quotaportal-agent: cannot run {command[0]!r}: {error.strerror or error}"
        print(message, file=sys.stderr, flush=True)
        write_exit_file(exit_file, 127, message)
        return 127
    while True:
        try:
            returncode = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for old interpreters
            continue
    exit_code = exit_code_of(returncode)
    write_exit_file(exit_file, exit_code)
    return exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
