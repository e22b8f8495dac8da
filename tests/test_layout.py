"""What `make lint` and the test settings promise about the tree as a whole."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_contracts_hold():
    """The arrows of STYLE.md (pyproject.toml [tool.importlinter]); lint-imports takes well under a second."""
    lint_imports = Path(sys.executable).with_name("lint-imports")
    if not lint_imports.exists():
        lint_imports = shutil.which("lint-imports")
    if lint_imports is None:
        pytest.fail("lint-imports is not installed: it is pinned in requirements.txt")
    result = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, (
        result.stdout.partition("Broken contracts")[2] or result.stdout + result.stderr
    )


def test_property_tests_draw_the_same_examples_on_every_run():
    current = hypothesis_settings.default
    assert current.derandomize and current.database is None and current.print_blob


def test_no_committed_file_names_a_path_of_one_machine():
    files = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    # `{id}/work/` is the executor protocol's URL, not a machine's path.
    machine_path = re.compile("(?<![\\w.}])/(" + "|".join(["work", "root", "home", "Users"]) + ")/")
    found = []
    for name in filter(None, files):
        try:
            text = (ROOT / name).read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue  # a picture, or a file deleted in the work tree
        found += [
            f"{name}:{n}: {line.strip()}"
            for n, line in enumerate(text.splitlines(), 1)
            if machine_path.search(line)
        ]
    assert found == []


def test_ctrl_c_ends_make_run_without_an_error_and_the_agent_stops_its_demo_jobs(tmp_path):
    """`make run`'s last recipe line, with honcho replaced by a program that exits 130 on SIGINT as honcho does:
    Ctrl-C (SIGINT to the whole foreground group) leaves make without "Error 130" or "Interrupt"."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"\n\t(trap : INT;[^\n]*\\\n[^\n]*honcho start -f Procfile[^\n]*)", makefile).group(1)
    ready = tmp_path / "ready"
    exits_130_on_sigint = (
        "import signal,sys,time; signal.signal(2, lambda *a: sys.exit(130)); "
        f'open("{ready}", "w").close(); time.sleep(30)'
    )
    fake_honcho = f"{sys.executable} -c '{exits_130_on_sigint}'"
    line = re.sub(r"\$\(BIN\)/honcho start -f Procfile", fake_honcho, recipe.replace("\\\n", " "))
    line = line.replace("$(CURDIR)", str(tmp_path)).replace("$(BIN)", "bin").replace("$(HOST)", "h")
    line = line.replace("$(PORT)", "1")
    (tmp_path / "Makefile").write_text(f"run:\n\t{line}\n")
    make = subprocess.Popen(
        ["make", "--no-print-directory", "run"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        for _ in range(200):  # until the fake honcho handles SIGINT
            if ready.exists():
                break
            time.sleep(0.05)
        os.killpg(make.pid, signal.SIGINT)
        _, stderr = make.communicate(timeout=20)
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
    assert "Error" not in stderr and "Interrupt" not in stderr, stderr
    assert "--stop-jobs-on-exit" in (ROOT / "Procfile").read_text()
