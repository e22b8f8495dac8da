"""The synthetic snapshot the benchmark and simulator use is one a real pass could have produced."""

from engine import PLACED_STATUSES, JobStatus, schedule
from engine.synthetic import build_synthetic_snapshot

from .builders import apply_decisions
from .oracle import invariant_violations, most_allowed, on_demand_usage


def share_rule_violations(snap) -> list[str]:
    usage = on_demand_usage(snap)
    problems = []
    for share in snap.shares:
        for instance_type in snap.capacity:
            ceiling = most_allowed(share, instance_type)
            if ceiling is not None and usage[share.id, instance_type] > ceiling:
                problems.append(f"{share.name} holds {usage[share.id, instance_type]} of {instance_type}")
    return problems


def test_the_synthetic_snapshot_has_the_requested_shape():
    snap = build_synthetic_snapshot(runnable=500, placed=120, shares=7, types=4, seed=1)

    assert sum(job.status == JobStatus.RUNNABLE for job in snap.jobs) == 500
    assert sum(job.status in PLACED_STATUSES for job in snap.jobs) == 120
    assert (len(snap.shares), len(snap.capacity)) == (7, 4)
    assert len({job.id for job in snap.jobs}) == 620
    assert all(1 <= len(job.entries) <= 5 for job in snap.jobs)
    assert {share.strategy for share in snap.shares} == {"RESERVE", "LEND", "LEND_AND_BORROW"}
    assert any(job.placement and job.placement.training_plan for job in snap.jobs)


def test_the_synthetic_snapshot_is_the_same_for_the_same_seed_and_differs_for_another():
    build = dict(runnable=200, placed=50, shares=5, types=3)

    assert build_synthetic_snapshot(**build, seed=4) == build_synthetic_snapshot(**build, seed=4)
    assert build_synthetic_snapshot(**build, seed=4) != build_synthetic_snapshot(**build, seed=5)


def test_the_synthetic_snapshot_satisfies_the_invariants():
    snap = build_synthetic_snapshot(runnable=10000, placed=2000, shares=20, types=5, seed=1)

    assert invariant_violations(snap) == []
    assert share_rule_violations(snap) == []
    for instance_type, capacity in snap.capacity.items():
        assert sum(share.limits.get(instance_type, 0) for share in snap.shares) <= capacity


def test_a_pass_over_the_synthetic_snapshot_keeps_the_invariants():
    snap = build_synthetic_snapshot(runnable=3000, placed=600, shares=20, types=5, seed=2)

    decisions = schedule(snap)
    after = apply_decisions(snap, decisions)

    assert decisions.admissions
    assert invariant_violations(after) == []
    assert share_rule_violations(after) == []
