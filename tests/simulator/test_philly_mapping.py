"""How Philly rows become shares and jobs: VC quotas, GPUs -> instance types, the seeded synthetic parts."""

from dataclasses import replace

from engine import Entry, Strategy
from simulator import philly
from simulator.philly import LARGE, MEDIUM, SMALL
from simulator.trace import TraceRow

from .builders import T0


def row(line: int, gpus: int = 1, vc: str = "a", at: float = 0, duration: float = 600) -> TraceRow:
    return TraceRow(line=line, submitted_at=T0 + at, duration=duration, num_gpus=gpus, vc=vc)


def test_gpus_map_to_an_instance_type_and_count():
    assert philly.instance_request(1) == (SMALL, 1)
    assert philly.instance_request(2) == (MEDIUM, 1)
    assert philly.instance_request(4) == (MEDIUM, 1)
    assert philly.instance_request(8) == (LARGE, 1)
    assert philly.instance_request(12) == (LARGE, 2)
    assert philly.instance_request(16) == (LARGE, 2)
    assert philly.fallback_request(1) == (MEDIUM, 1)
    assert philly.fallback_request(16) == (MEDIUM, 4)


def test_the_type_mix_weighs_instance_gpu_seconds_per_vc():
    mix = philly.type_mix([row(1, gpus=1, duration=100), row(2, gpus=2, duration=100), row(3, vc="b")])

    assert mix["a"] == {MEDIUM: 0.8, SMALL: 0.2}  # a 2-GPU job holds a whole 4-GPU instance
    assert mix["b"] == {SMALL: 1.0}


def test_shares_are_sized_from_vc_nodes_and_their_type_mix():
    config = philly.philly_configuration(
        name="x",
        vcs={"a": 4, "b": 2},
        mix={"a": {SMALL: 0.5, LARGE: 0.5}, "b": {MEDIUM: 0.995, SMALL: 0.005}},
        capacity_scale=0.5,
        strategy=Strategy.LEND_AND_BORROW,
        borrow_limit=50,
    )

    a, b = config.shares
    assert a.limits == {SMALL: 8, LARGE: 1}  # 4 nodes x 8 GPUs x 0.5 = 16 GPUs, half on each type
    assert b.limits == {MEDIUM: 2}  # a type under 1% of the VC's GPU time gets no limit
    assert config.capacity == {SMALL: 8, MEDIUM: 2, LARGE: 1}  # no free pool
    assert (a.strategy, a.borrow_limit) == (Strategy.LEND_AND_BORROW, 50)


def test_a_vc_without_jobs_gets_small_instances():
    config = philly.philly_configuration(name="x", vcs={"quiet": 1}, mix={}, capacity_scale=1)

    assert config.shares[0].limits == {SMALL: 8}


def test_synthetic_draws_belong_to_the_trace_line_not_the_window():
    config = philly.philly_configuration(name="x", vcs={"a": 16}, mix={"a": {SMALL: 0.5, MEDIUM: 0.5}})
    rows = [row(line, gpus=1 + line % 3, at=line) for line in range(2, 200)]

    everything = {job.id: job for job in philly.philly_jobs(rows, config, seed=7)}
    later_half = philly.philly_jobs(rows[100:], config, seed=7)
    other_seed = philly.philly_jobs(rows, config, seed=8)

    assert all(job == everything[job.id] for job in later_half)
    assert [j.priority for j in other_seed] != [everything[j.id].priority for j in other_seed]
    assert {job.priority for job in everything.values()} == {0, 10, 100}
    assert any(len(job.entries) == 2 for job in everything.values())


def test_entries_the_share_could_never_run_are_left_out():
    config = philly.philly_configuration(
        name="x", vcs={"a": 2}, mix={"a": {SMALL: 0.5, LARGE: 0.5}}, capacity_scale=1
    )  # 8 SMALL, 1 LARGE
    jobs = philly.philly_jobs([row(line, gpus=16) for line in range(2, 40)], config, seed=1)

    # LARGE x2 is more than the RESERVE share may ever hold and there is no MEDIUM: kept, to be rejected
    assert {job.entries for job in jobs} == {(Entry(LARGE, 2),)}


def test_jobs_name_a_usable_plan_first_about_half_of_the_time():
    base = philly.philly_configuration(
        name="x", vcs={"a": 8, "b": 8}, mix={"a": {LARGE: 1.0}, "b": {LARGE: 1.0}}
    )
    plans = philly.synthetic_plans(
        count=1, shares=base.shares, capacity=base.capacity, start=T0, end=T0 + 7 * 86400, seed=3
    )
    config = replace(base, plans=tuple(plans))
    [the_plan] = plans
    during = (the_plan.start + the_plan.end) / 2 - T0
    jobs = philly.philly_jobs(
        [row(line, gpus=8, vc="a", at=during) for line in range(2, 202)], config, seed=1
    )

    on_plan = [job for job in jobs if job.entries[0].training_plan == the_plan.name]
    assert 60 < len(on_plan) < 140
    assert all(job.entries[1] == Entry(LARGE, 1) for job in on_plan)
    assert the_plan.shares == ("a", "b") and the_plan.instance_type == LARGE
