"""The printed tables (plain text or Markdown) and the JSON document of a replay."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def duration(seconds: float | None) -> str:
    """45s, 12m, 3.4h, 2.1d."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def number(value: float) -> str:
    return f"{value:,.0f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, markdown: bool = False) -> str:
    """Columns right-aligned except the first; Markdown pipes when asked."""
    if markdown:
        lines = [
            "| " + " | ".join(header) + " |",
            "| " + " | ".join(["---"] + ["---:"] * (len(header) - 1)) + " |",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        first, *rest = cells
        return "  ".join(
            [first.ljust(widths[0])] + [c.rjust(w) for c, w in zip(rest, widths[1:], strict=True)]
        )

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(row) for row in rows])


SHARE_HEADER = (
    "share",
    "strategy",
    "limit GPUs",
    "done",
    "never started",
    "GPU-h used",
    "of limits",
    "GPU-h lent",
    "GPU-h borrowed",
    "wait p50",
    "p95",
    "p99",
    "preempted",
    "GPU-h lost",
)


def share_rows(metrics: dict[str, Any]) -> list[list[str]]:
    rows = []
    for item in [*metrics["shares"], {"share": "all", "strategy": "", **metrics["overall"]}]:
        waits = item["wait_seconds"]
        hours = item["gpu_hours"]
        utilization = item["utilization"]["of_limits"]
        rows.append(
            [
                item["share"],
                item["strategy"],
                number(item["limit_gpus"]),
                number(item["jobs"]["completed"]),
                number(item["jobs"]["never_started"]),
                number(hours["used"]),
                percent(utilization),
                number(hours["lent"]),
                number(hours["borrowed"]),
                duration(waits["p50"]),
                duration(waits["p95"]),
                duration(waits["p99"]),
                number(item["preemptions"]),
                number(item["preempted_gpu_hours_lost"]),
            ]
        )
    return rows


COMPARISON_HEADER = (
    "configuration",
    "jobs done",
    "never started",
    "rejected",
    "GPU utilization",
    "GPU-h lent",
    "GPU-h borrowed",
    "wait p50",
    "wait p95",
    "wait p99",
    "preemptions",
    "GPU-h lost",
)


def comparison_rows(all_metrics: Sequence[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for metrics in all_metrics:
        overall = metrics["overall"]
        waits = overall["wait_seconds"]
        rows.append(
            [
                metrics["configuration"]["name"],
                number(overall["jobs"]["completed"]),
                number(overall["jobs"]["never_started"]),
                number(overall["jobs"]["rejected"]),
                percent(overall["utilization"]["of_environment"]),
                number(overall["gpu_hours"]["lent"]),
                number(overall["gpu_hours"]["borrowed"]),
                duration(waits["p50"]),
                duration(waits["p95"]),
                duration(waits["p99"]),
                number(overall["preemptions"]),
                number(overall["preempted_gpu_hours_lost"]),
            ]
        )
    return rows


SETTINGS_HEADER = (
    "configuration",
    "GPU utilization",
    "GPU-h used",
    "wait p50",
    "wait p95",
    "borrowing fairness (Jain)",
    "preemptions",
    "GPU-h lost",
    "reclaim delay p50",
    "reclaim delay p95",
)


def settings_rows(all_metrics: Sequence[dict[str, Any]]) -> list[list[str]]:
    """Issue 17's figures: fairness of borrowing, work lost to preemption and the lender's reclaim delay."""
    rows = []
    for metrics in all_metrics:
        overall = metrics["overall"]
        fairness = overall.get("borrowing_fairness")
        delay = overall.get("reclaim_delay_seconds") or {}
        rows.append(
            [
                metrics["configuration"]["name"],
                percent(overall["utilization"]["of_environment"]),
                number(overall["gpu_hours"]["used"]),
                duration(overall["wait_seconds"]["p50"]),
                duration(overall["wait_seconds"]["p95"]),
                "-" if fairness is None else f"{fairness:.3f}",
                number(overall["preemptions"]),
                number(overall["preempted_gpu_hours_lost"]),
                duration(delay.get("p50")),
                duration(delay.get("p95")),
            ]
        )
    return rows


def speed_line(metrics: dict[str, Any]) -> str:
    replay = metrics["replay"]
    rate = replay["jobs_per_second"]
    return (
        f"{metrics['configuration']['name']}: {replay['jobs']:,} jobs in {replay['wall_seconds']:.1f} s wall "
        f"({rate:,.0f} jobs/s; {replay['cpu_seconds']:.1f} s CPU, engine {replay['engine_seconds']:.1f} s); "
        f"passes: {replay['passes_run']:,} run of {replay['passes_on_clock']:,} on the clock "
        f"({replay['passes_reduced']:,} reduced, {replay['passes_preempting']:,} preempting, "
        f"{replay['passes_whole']:,} whole)"
    )
