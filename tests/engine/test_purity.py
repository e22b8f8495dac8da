"""The engine is pure Python with no Django, and deterministic."""

import ast
import random
import sys
from dataclasses import replace
from pathlib import Path

import engine
from engine import schedule
from engine.synthetic import build_synthetic_snapshot

ENGINE_DIR = Path(engine.__file__).parent


def imported_modules(source: str) -> set[str]:
    """Top-level names of the absolute imports in `source` (relative imports stay inside the package)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def engine_modules() -> list[Path]:
    return sorted(ENGINE_DIR.rglob("*.py"))


def test_the_import_check_sees_every_form_of_import():
    source = "import django\nfrom django.db import models\nimport os.path as p\nfrom . import types\n"

    assert imported_modules(source) == {"django", "os"}


def test_no_engine_module_imports_django():
    assert len(engine_modules()) >= 5
    for path in engine_modules():
        assert "django" not in imported_modules(path.read_text()), f"{path.name} imports django"


def test_the_engine_imports_only_the_standard_library_and_itself():
    allowed = set(sys.stdlib_module_names) | {"__future__", "engine"}
    for path in engine_modules():
        outside = imported_modules(path.read_text()) - allowed
        assert not outside, f"{path.name} imports {sorted(outside)}"


def test_the_same_snapshot_gives_equal_decisions():
    snap = build_synthetic_snapshot(runnable=600, placed=200, shares=6, types=3, seed=7)

    first, second = schedule(snap), schedule(snap)

    assert first == second
    assert first.admissions and first.pending


def test_the_order_of_jobs_shares_and_plans_in_the_snapshot_does_not_change_the_decisions():
    snap = build_synthetic_snapshot(runnable=600, placed=200, shares=6, types=3, seed=11)
    rng = random.Random(3)
    shuffled = replace(
        snap,
        jobs=tuple(rng.sample(snap.jobs, len(snap.jobs))),
        shares=tuple(rng.sample(snap.shares, len(snap.shares))),
        plans=tuple(rng.sample(snap.plans, len(snap.plans))),
        capacity=dict(reversed(list(snap.capacity.items()))),
    )

    assert schedule(shuffled) == schedule(snap)
