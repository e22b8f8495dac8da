"""What `make lint` and the test settings promise about the tree as a whole."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
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
