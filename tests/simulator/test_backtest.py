"""The estimate backtest in its short form: a Philly slice, snapshots every two hours, scored against the
replay's own starts (the full figures are in docs/replay.md, "Estimated start times, backtested")."""

from io import StringIO
from pathlib import Path

from django.core.management import call_command

DATA = Path(__file__).parent / "data"


def test_estimates_beat_the_naive_baseline_on_a_philly_slice():
    out = StringIO()
    call_command(
        "replay",
        "--trace",
        str(DATA / "philly-day.csv"),
        "--start",
        "2017-10-17",
        "--days",
        "0.5",
        "--philly-comparison",
        "--estimates",
        "--estimate-every",
        "2",
        "--no-progress",
        stdout=out,
    )
    rows = {}
    for line in out.getvalue().splitlines():
        fields = line.split()
        if len(fields) == 8 and fields[1] in ("estimate", "baseline"):
            rows[(fields[0], fields[1])] = fields
    assert ("all-RESERVE", "estimate") in rows
    for (config, method), fields in rows.items():
        if method != "estimate":
            continue
        baseline = rows[(config, "baseline")]
        assert int(fields[2]) > 0
        assert float(fields[3]) < float(baseline[3]) / 2  # median error
        assert int(fields[7].rstrip("%")) > int(baseline[7].rstrip("%"))  # band coverage
