"""The simulator is pure Python like the engine: no Django import, so it runs without a database."""

from pathlib import Path

import simulator
from tests.engine.test_purity import imported_modules

SIMULATOR_DIR = Path(simulator.__file__).parent


def test_no_simulator_module_imports_django():
    modules = sorted(SIMULATOR_DIR.rglob("*.py"))
    assert len(modules) >= 8
    for path in modules:
        assert "django" not in imported_modules(path.read_text()), f"{path.name} imports django"
