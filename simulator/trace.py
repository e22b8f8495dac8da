"""Reading the Microsoft Philly trace (Jeon et al., USENIX ATC 2019; CC-BY-4.0 by Microsoft).

`philly.csv` has one row per job: `timestamp` (submission, UTC, `YYYY-MM-DD HH:MM:SS`), `duration` (run time
in seconds, summed over attempts, queueing excluded), `num_gpus`, `gpu_time` and `cluster` (the virtual
cluster, VC). Rows are NOT sorted by time: the reader sorts them (by time, then file order).
`philly_vc.csv` gives the nodes each VC was entitled to. See the traces folder's README (../shared/traces/
beside the project).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

PHILLY_CREDIT = (
    'Trace: Microsoft Philly (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN '
    "Training "
    'Workloads", USENIX ATC 2019), CC-BY-4.0 by Microsoft.'
)
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


class TraceError(ValueError):
    """A trace file that cannot be read as documented, named by file and line."""


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One job of the trace. `line` is its line in the file (2: the first data row): a stable identity."""

    line: int
    submitted_at: float  # POSIX seconds, UTC
    duration: float
    num_gpus: int
    vc: str


def _bound(moment: datetime | None) -> str | None:
    """The window bound as the trace's own text: the format sorts like time, so rows are filtered unparsed."""
    if moment is None:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime(_TIME_FORMAT)


def read_philly(
    path: str | Path, *, start: datetime | None = None, end: datetime | None = None
) -> list[TraceRow]:
    """The jobs submitted in [start, end) (each bound optional), sorted by submission time then file line."""
    low, high = _bound(start), _bound(end)
    rows: list[TraceRow] = []
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise TraceError(f"{path}: empty file")
        try:
            columns = [header.index(name) for name in ("timestamp", "duration", "num_gpus", "cluster")]
        except ValueError:
            raise TraceError(
                f"{path}: expected the columns timestamp, duration, num_gpus, cluster; "
                f"got {', '.join(header)}"
            ) from None
        at_time, at_duration, at_gpus, at_vc = columns
        for line, record in enumerate(reader, start=2):
            if not record:
                continue
            stamp = record[at_time]
            if (low is not None and stamp < low) or (high is not None and stamp >= high):
                continue
            try:
                submitted = datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()
                duration = float(record[at_duration])
                gpus = int(float(record[at_gpus]))
            except (ValueError, IndexError) as error:
                raise TraceError(f"{path}:{line}: {error}") from None
            if duration < 0 or gpus < 1:
                raise TraceError(f"{path}:{line}: duration must be >= 0 and num_gpus >= 1")
            rows.append(TraceRow(line, submitted, duration, gpus, record[at_vc]))
    rows.sort(key=lambda row: (row.submitted_at, row.line))
    return rows


def read_philly_vcs(path: str | Path) -> dict[str, int]:
    """VC name -> nodes it was entitled to, in file order."""
    vcs: dict[str, int] = {}
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        next(reader, None)
        for line, record in enumerate(reader, start=2):
            if not record:
                continue
            try:
                vcs[record[0].strip()] = int(record[1])
            except (ValueError, IndexError):
                raise TraceError(f"{path}:{line}: expected `vc,node num`") from None
    return vcs
