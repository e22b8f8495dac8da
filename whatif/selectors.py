"""What the what-if pages read: the editor's shares, past runs, and a finished run's result as rows to show
side by side."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F, OuterRef, Subquery

from scheduling.models import EnvironmentCapacity, InstanceType, Job, JobQueue, QuotaShare
from simulator.report import duration, number, percent
from whatif import sources as replay_sources
from whatif.models import WhatIfRun
from whatif.services import QueueProposal, ShareProposal


def whatif_queue(*, job_queue_id: int | None) -> JobQueue | None:
    """The queue (when `job_queue_id` is None, the one whose jobs were submitted last, so the editor opens on
    a queue with history rather than an idle one; then the first by name) with `first_job_at` and
    `last_job_at`: when its recorded jobs begin and end, for the default window. 1 query."""
    jobs = Job.objects.filter(job_queue=OuterRef("pk"))
    queues = JobQueue.objects.annotate(
        first_job_at=Subquery(jobs.order_by("created_at").values("created_at")[:1]),
        last_job_at=Subquery(jobs.order_by("-created_at").values("created_at")[:1]),
    )
    if job_queue_id is None:
        return queues.order_by(F("last_job_at").desc(nulls_last=True), "name").first()
    return queues.filter(pk=job_queue_id).first()


HISTORY_DAYS_BY_DEFAULT = 7


def history_window(
    *, first_job_at: datetime | None, last_job_at: datetime | None, now: datetime
) -> tuple[datetime, float]:
    """The default window of recorded history: (start, days) holding up to the last week of jobs before the
    newest, from the hour of the first of them, and long enough to reach now. A fresh install with an hour of
    history gets that hour, not an empty last week."""
    week = timedelta(days=HISTORY_DAYS_BY_DEFAULT)
    if last_job_at is None:
        start = now - week
    else:
        start = max(first_job_at or last_job_at, last_job_at - week)
    start = start.replace(minute=0, second=0, microsecond=0)
    # Whole hours, one more than needed so the newest job falls inside; at most the week.
    hours = math.ceil((now - start).total_seconds() / 3600) + 1
    return start, min(HISTORY_DAYS_BY_DEFAULT * 24, hours) / 24


def whatif_editor(*, job_queue: JobQueue) -> tuple[list[QuotaShare], list[InstanceType], dict[int, int]]:
    """The queue's shares (team, limits) in the order a replay lists them, the environment's instance types,
    and its capacity by type id. 3 queries."""
    shares = list(
        QuotaShare.objects.filter(job_queue=job_queue)
        .select_related("team")
        .prefetch_related("capacity_limits")
        .order_by("id")
    )
    capacity = {
        row.instance_type_id: row.max_capacity
        for row in EnvironmentCapacity.objects.filter(service_environment_id=job_queue.service_environment_id)
        .select_related("instance_type")
        .order_by("instance_type__name")
    }
    types = list(InstanceType.objects.filter(pk__in=capacity).order_by("name"))
    return shares, types, capacity


def whatif_runs(*, limit: int = 20) -> list[WhatIfRun]:
    """The latest runs, without their configurations, results or charts. 1 query."""
    return list(
        WhatIfRun.objects.select_related("job_queue", "created_by")
        .defer("baseline", "proposal", "queue_proposal", "result", "charts")
        .order_by("-created_at", "-id")[:limit]
    )


def whatif_run(*, run_id: int) -> WhatIfRun | None:
    """1 query."""
    return (
        WhatIfRun.objects.select_related("job_queue__service_environment", "created_by", "applied_by")
        .filter(pk=run_id)
        .first()
    )


def whatif_changes_since(*, run: WhatIfRun) -> list[str]:
    """What changed in the run's queue since it started (a stale run cannot be applied). 7 queries."""
    return replay_sources.changes_since(run.job_queue, run.baseline)


@dataclass(frozen=True)
class ProposalField:
    label: str
    current: str
    proposed: str

    @property
    def changed(self) -> bool:
        return self.current != self.proposed


@dataclass(frozen=True)
class ShareProposalRow:
    name: str
    team: str
    fields: list[ProposalField]

    @property
    def changed(self) -> bool:
        return any(field_.changed for field_ in self.fields)


def _limits_text(limits: dict[str, int]) -> str:
    return ", ".join(f"{name} × {count}" for name, count in sorted(limits.items())) or "none"


def _borrow_text(value: int) -> str:
    return "unlimited" if value == -1 else f"{value}%"


def _lending_text(limits: dict[str, int]) -> str:
    return ", ".join(f"{name} × {count}" for name, count in sorted(limits.items())) or "all"


def whatif_proposal_rows(*, run: WhatIfRun, teams: dict[str, str]) -> list[ShareProposalRow]:
    """Per share: its limits, lending limits, strategy, borrow limit, in-share preemption, fair-share
    weight and GPU-hour budget as they were and as proposed."""
    proposed = {item["name"]: item for item in run.proposal}
    rows = []
    for mapping in run.baseline["shares"]:
        share = ShareProposal.from_mapping(mapping)
        new = ShareProposal.from_mapping({**mapping, **proposed.get(mapping["name"], {})})
        rows.append(
            ShareProposalRow(
                name=share.name,
                team=teams.get(share.name, ""),
                fields=[
                    ProposalField("Limits", _limits_text(share.limits), _limits_text(new.limits)),
                    ProposalField(
                        "Lends at most",
                        _lending_text(share.lending_limits),
                        _lending_text(new.lending_limits),
                    ),
                    ProposalField("Strategy", share.strategy, new.strategy),
                    ProposalField(
                        "Borrow limit", _borrow_text(share.borrow_limit), _borrow_text(new.borrow_limit)
                    ),
                    ProposalField(
                        "In-share preemption",
                        "on" if share.in_share_preemption else "off",
                        "on" if new.in_share_preemption else "off",
                    ),
                    ProposalField(
                        "Fair-share weight",
                        format(share.fair_share_weight.normalize(), "f"),
                        format(new.fair_share_weight.normalize(), "f"),
                    ),
                    ProposalField("GPU-hour budget", _budget_text(share), _budget_text(new)),
                ],
            )
        )
    return rows


def _budget_text(share: ShareProposal) -> str:
    """`5000 a MONTH` / `500 a DAY, borrowed only` / `none`."""
    if share.budget_gpu_hours is None:
        return "none"
    text = f"{format(share.budget_gpu_hours.normalize(), 'f')} a {share.budget_period}"
    return text + (", borrowed only" if share.budget_scope == "BORROWED" else "")


def _protection_text(seconds: int) -> str:
    return "none" if not seconds else f"{seconds} s ({duration(seconds)})"


def whatif_queue_proposal(*, run: WhatIfRun) -> list[ProposalField]:
    """The queue's idle-capacity assignment and protection from early preemption, as they were and as
    proposed (a run asked for before the what-if proposed them kept the queue's)."""
    before = QueueProposal.from_mapping(run.baseline)
    after = QueueProposal.from_mapping(run.queue_proposal) if run.queue_proposal else before
    return [
        ProposalField(
            "Idle capacity to borrowers",
            str(before.idle_capacity_assignment),
            str(after.idle_capacity_assignment),
        ),
        ProposalField(
            "Protection from early preemption",
            _protection_text(before.preemption_min_runtime_seconds),
            _protection_text(after.preemption_min_runtime_seconds),
        ),
    ]


def whatif_teams(*, run: WhatIfRun) -> dict[str, str]:
    """Share name -> team name for the run's queue. 1 query."""
    return dict(QuotaShare.objects.filter(job_queue_id=run.job_queue_id).values_list("name", "team__name"))


def _gpu_hours(value: float) -> str:
    return f"{value:,.1f}" if abs(value) < 100 else number(value)


# (label, value of a share's or the overall metrics, which way is better (+1 more, -1 less, 0 neither),
# format, format of a difference)
_WHATIF_METRICS = (
    ("Jobs completed", lambda m, overall: m["jobs"]["completed"], 1, number, lambda d: f"{d:+,.0f}"),
    ("Never started", lambda m, overall: m["jobs"]["never_started"], -1, number, lambda d: f"{d:+,.0f}"),
    ("GPU-h used", lambda m, overall: m["gpu_hours"]["used"], 1, _gpu_hours, lambda d: f"{d:+,.1f}"),
    (
        "Utilization",
        lambda m, overall: m["utilization"]["of_environment" if overall else "of_limits_with_borrowing"],
        1,
        percent,
        lambda d: f"{100 * d:+.0f} pts",
    ),
    ("GPU-h borrowed", lambda m, overall: m["gpu_hours"]["borrowed"], 0, _gpu_hours, lambda d: f"{d:+,.1f}"),
    ("GPU-h lent", lambda m, overall: m["gpu_hours"]["lent"], 0, _gpu_hours, lambda d: f"{d:+,.1f}"),
    (
        "Wait p50",
        lambda m, overall: m["wait_seconds"]["p50"],
        -1,
        duration,
        lambda d: ("+" if d > 0 else "−") + duration(abs(d)),
    ),
    (
        "Wait p95",
        lambda m, overall: m["wait_seconds"]["p95"],
        -1,
        duration,
        lambda d: ("+" if d > 0 else "−") + duration(abs(d)),
    ),
    ("Preemptions", lambda m, overall: m["preemptions"], -1, number, lambda d: f"{d:+,.0f}"),
)


@dataclass(frozen=True)
class MetricRow:
    label: str
    current: str
    proposed: str
    change: str  # the difference, "" when none
    verdict: str  # better, worse, changed (neither better nor worse) or same


@dataclass(frozen=True)
class ShareComparison:
    name: str  # the share, or "All shares"
    team: str
    policy_current: str
    policy_proposed: str
    rows: list[MetricRow]


def _metric_row(label, value, better, shown, delta, current, proposed, overall: bool) -> MetricRow:
    before, after = value(current, overall), value(proposed, overall)
    text_before = shown(before) if before is not None else "-"
    text_after = shown(after) if after is not None else "-"
    if text_before == text_after:
        return MetricRow(label, text_before, text_after, "", "same")
    if before is None or after is None:
        return MetricRow(label, text_before, text_after, "", "changed")
    verdict = "changed" if better == 0 else ("better" if (after - before) * better > 0 else "worse")
    return MetricRow(label, text_before, text_after, delta(after - before), verdict)


def _policy(share: dict) -> str:
    text = share["strategy"]
    if share["strategy"] == "LEND_AND_BORROW":
        text += f" ({_borrow_text(share['borrow_limit'])})"
    return text


def whatif_comparison(*, run: WhatIfRun, teams: dict[str, str]) -> list[ShareComparison]:
    """A DONE run's metrics side by side: all shares first, then each share in the queue's order."""
    current, proposed = run.result["current"], run.result["proposed"]
    cards = [
        ShareComparison(
            "All shares",
            "",
            "",
            "",
            [
                _metric_row(*metric, current["overall"], proposed["overall"], True)
                for metric in _WHATIF_METRICS
            ],
        )
    ]
    policies = {share["name"]: share for share in run.baseline["shares"]}
    new_policies = {**policies}
    for item in run.proposal:
        new_policies[item["name"]] = {**policies.get(item["name"], {}), **item}
    proposed_by_name = {item["share"]: item for item in proposed["shares"]}
    for item in current["shares"]:
        name = item["share"]
        cards.append(
            ShareComparison(
                name,
                teams.get(name, ""),
                _policy(policies[name]),
                _policy(new_policies[name]),
                [_metric_row(*metric, item, proposed_by_name[name], False) for metric in _WHATIF_METRICS],
            )
        )
    return cards
