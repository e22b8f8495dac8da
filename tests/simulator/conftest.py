from pathlib import Path

import pytest

from simulator import philly
from simulator.trace import read_philly, read_philly_vcs

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def philly_day():
    """(rows, vcs, mix) of the busy half day 2017-10-17 00:00-12:00 UTC."""
    rows = read_philly(DATA / "philly-day.csv")
    return rows, read_philly_vcs(DATA / "philly_vc.csv"), philly.type_mix(rows)
