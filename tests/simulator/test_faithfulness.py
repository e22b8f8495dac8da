"""The replay is faithful: one job stream through the live system and through the simulator, same decisions.

Live: the database, `queue_pass_run` at fixed instants (the clock patched), an `external` executor
whose SUCCEEDED reports arrive when each job's run time is up. Replay: `simulator.simulate` with the same
configuration, jobs and pass instants. Every placement and preemption must match: pass, job, kind, type, count.
"""

from __future__ import annotations

import random
from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from engine import Entry, Strategy
from scheduling.models import Event, EventKind, Job, JobStatus, QuotaShare
from scheduling.passes import run as passes
from scheduling.services import executor as executor_services
from simulator import Configuration, ShareConfig, SimJob, simulate
from tests.factories import JobQueueFactory, environment_with, job_in, share_with

pytestmark = pytest.mark.django_db

P5, P4 = "ml.p5.48xlarge", "ml.p4d.24xlarge"
CAPACITY = {P5: 8, P4: 6}
SHARES = [
    # name, strategy, limits, borrow_limit, in_share_preemption
    ("nlp", Strategy.LEND, {P5: 4, P4: 2}, -1, False),
    ("vision", Strategy.LEND_AND_BORROW, {P5: 2, P4: 2}, 100, True),
    ("speech", Strategy.RESERVE, {P5: 2, P4: 2}, -1, False),
]
PASS_EVERY = 30
PASSES = 40
KINDS = {EventKind.ADMITTED, EventKind.PREEMPTED_RECLAIM, EventKind.PREEMPTED_IN_SHARE}


# The most each share could ever hold of a type (submission refuses more): its limit, or for vision its limit
# plus 100% borrowing, within what RESERVE shares leave.
CEILING = {"nlp": {P5: 4, P4: 2}, "speech": {P5: 2, P4: 2}, "vision": {P5: 4, P4: 4}}


def job_stream(seed: int) -> list[dict]:
    """A seeded, busy stream of valid submissions: borrowing, reclaim and in-share preemption all happen."""
    rng = random.Random(seed)
    jobs = []
    for i in range(36):
        share = rng.choice([s[0] for s in SHARES])
        first_type = rng.choice([P5, P4])
        second_type = P4 if first_type == P5 else P5
        first = (first_type, min(rng.choice([1, 2, 3]), CEILING[share][first_type]))
        second = (second_type, min(rng.choice([1, 2]), CEILING[share][second_type]))
        entries = [first, second] if rng.random() < 0.5 else [first]
        jobs.append(
            {
                "name": f"j{i}",
                "share": share,
                "at": rng.randrange(0, PASS_EVERY * PASSES // 2),
                "entries": entries,
                "priority": rng.choice([0, 0, 10, 50]),
                "duration": rng.randrange(40, 400),
            }
        )
    return sorted(jobs, key=lambda job: (job["at"], job["name"]))


def run_live(stream: list[dict], base) -> tuple[list[tuple], dict[str, int], dict[str, int]]:
    queue = JobQueueFactory(name="faithful")
    environment_with(queue, CAPACITY)
    shares = {
        name: share_with(
            queue,
            name,
            limits,
            strategy=QuotaShare.Strategy(strategy.value),
            borrow_limit=borrow,
            in_share_preemption=in_share,
        )
        for name, strategy, limits, borrow, in_share in SHARES
    }
    ids: dict[str, int] = {}
    durations: dict[int, int] = {}
    pending = list(stream)
    for index in range(PASSES):
        now = base + timedelta(seconds=index * PASS_EVERY)
        # Run-time over: the external executor reports success before the pass at `now` looks.
        for job in Job.objects.filter(job_queue=queue, status=JobStatus.SCHEDULED).order_by("id"):
            if job.scheduled_at + timedelta(seconds=durations[job.pk]) <= now:
                with mock.patch("scheduling.services.executor.timezone.now", return_value=now):
                    executor_services.job_report(job_id=job.pk, status="SUCCEEDED")
        while pending and base + timedelta(seconds=pending[0]["at"]) <= now:
            spec = pending.pop(0)
            submitted = base + timedelta(seconds=spec["at"])
            job = job_in(
                shares[spec["share"]],
                spec["entries"],
                name=spec["name"],
                scheduling_priority=spec["priority"],
                created_at=submitted,
                runnable_since=submitted,
            )
            ids[spec["name"]] = job.pk
            durations[job.pk] = spec["duration"]
        with mock.patch("scheduling.passes.run.timezone.now", return_value=now):
            passes.queue_pass_run(job_queue_id=queue.pk, trigger="faithful")
    decisions = []
    for event in Event.objects.filter(job_queue=queue, kind__in=KINDS).select_related("instance_type"):
        pass_index = round((event.created_at - base).total_seconds() / PASS_EVERY)
        kind = "ADMITTED" if event.kind == EventKind.ADMITTED else event.kind
        decisions.append((pass_index, kind, event.job_id, event.instance_type.name, event.instances))
    return sorted(decisions), ids, {name: share.pk for name, share in shares.items()}


def run_replay(stream: list[dict], ids: dict[str, int], share_ids: dict[str, int]) -> list[tuple]:
    configuration = Configuration(
        name="faithful",
        capacity=CAPACITY,
        shares=tuple(
            ShareConfig(
                name=name, strategy=strategy, limits=limits, borrow_limit=borrow, in_share_preemption=in_share
            )
            for name, strategy, limits, borrow, in_share in SHARES
        ),
        share_ids=share_ids,
    )
    jobs = [
        SimJob(
            id=ids[spec["name"]],
            share=spec["share"],
            submitted_at=float(spec["at"]),
            entries=tuple(Entry(t, n) for t, n in spec["entries"]),
            duration=float(spec["duration"]),
            priority=spec["priority"],
        )
        for spec in stream
    ]
    result = simulate(
        configuration, jobs, pass_times=[float(i * PASS_EVERY) for i in range(PASSES)], check=True
    )
    return sorted(
        (record.pass_index, record.kind, record.job_id, record.instance_type, record.instance_count)
        for record in result.records
        if record.kind in {k.value for k in KINDS}
    )


@pytest.mark.parametrize("seed", [3, 11])
def test_replay_makes_the_live_systems_placements_and_preemptions(seed):
    stream = job_stream(seed)
    base = timezone.now().replace(microsecond=0) + timedelta(days=1)
    live, ids, share_ids = run_live(stream, base)
    replay = run_replay(stream, ids, share_ids)
    kinds = {decision[1] for decision in live}
    assert "ADMITTED" in kinds and kinds & {"PREEMPTED_RECLAIM", "PREEMPTED_IN_SHARE"}, kinds
    assert replay == live
