"""The exact shortcuts decide what the engine decides on the whole queue (see simulator.shortcuts).

`verify_shortcuts=True` also runs every pass on the whole snapshot, and every skipped pass that had events,
and raises at the first difference; these replays are busy Philly hours at a tenth of the VC quotas, so queues
are long, borrowing is constant and reclaim and in-share preemption happen.
"""

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import JobStatus, Ordering, Strategy
from engine import schedule as engine_schedule
from simulator import Kind, philly, simulate
from simulator.shortcuts import Reducer, ShortcutDecider
from tests.simulator.builders import BIG, SMALL, T0, config, job, kinds, plan, share

HOURS = 4


def replay(philly_day, *, strategy, ordering=Ordering.BEST_EFFORT_FIFO, mixed=False, **share_fields):
    rows, vcs, mix = philly_day
    config = philly.philly_configuration(
        name="busy", vcs=vcs, mix=mix, capacity_scale=0.1, strategy=strategy, **share_fields
    )
    if mixed:  # the shares in turn as given, RESERVE and LEND
        shares = []
        for i, share in enumerate(config.shares):
            strategy = (share.strategy, Strategy.RESERVE, Strategy.LEND)[i % 3]
            borrow_limit = share.borrow_limit if strategy == Strategy.LEND_AND_BORROW else -1
            shares.append(replace(share, strategy=strategy, borrow_limit=borrow_limit))
        config = replace(config, shares=tuple(shares))
    plans = philly.synthetic_plans(
        count=2,
        shares=config.shares,
        capacity=config.capacity,
        start=rows[0].submitted_at,
        end=rows[0].submitted_at + HOURS * 3600,
        seed=4,
    )
    config = replace(config, ordering=ordering, plans=tuple(plans), plan_drain_seconds=600)
    start = rows[0].submitted_at
    jobs = [
        job for job in philly.philly_jobs(rows, config, seed=2) if job.submitted_at < start + HOURS * 3600
    ]
    return config, jobs, start


@pytest.mark.parametrize(
    ("strategy", "ordering", "mixed", "share_fields"),
    [
        (Strategy.RESERVE, Ordering.BEST_EFFORT_FIFO, False, {}),
        (Strategy.LEND_AND_BORROW, Ordering.BEST_EFFORT_FIFO, False, {}),
        (
            Strategy.LEND_AND_BORROW,
            Ordering.BEST_EFFORT_FIFO,
            True,
            {"borrow_limit": 50, "in_share_preemption": True},
        ),
        (Strategy.LEND_AND_BORROW, Ordering.STRICT_FIFO, True, {"in_share_preemption": True}),
    ],
    ids=["reserve", "lend-and-borrow", "mixed-borrow-limit-in-share", "strict-fifo"],
)
def test_shortcuts_decide_what_the_whole_queue_decides(philly_day, strategy, ordering, mixed, share_fields):
    config, jobs, start = replay(
        philly_day, strategy=strategy, ordering=ordering, mixed=mixed, **share_fields
    )

    result = simulate(config, jobs, start=start, end=start + HOURS * 3600, verify_shortcuts=True, check=True)

    assert result.stats.passes_reduced > 0
    assert sum(r.kind == Kind.ADMITTED for r in result.records) > 200


def test_a_replay_with_shortcuts_records_what_a_replay_without_them_records(philly_day):
    config, jobs, start = replay(
        philly_day, strategy=Strategy.LEND_AND_BORROW, mixed=True, in_share_preemption=True
    )

    fast = simulate(config, jobs, start=start, end=start + HOURS * 3600)
    slow = simulate(config, jobs, start=start, end=start + HOURS * 3600, shortcuts=False)

    assert fast.records == slow.records
    assert {k: (o.status, o.first_placed_at, o.finished_at) for k, o in fast.outcomes.items()} == {
        k: (o.status, o.first_placed_at, o.finished_at) for k, o in slow.outcomes.items()
    }
    kinds = {r.kind for r in fast.records}
    assert {Kind.PREEMPTED_RECLAIM, Kind.PREEMPTED_IN_SHARE} <= kinds
    assert fast.stats.passes_run < slow.stats.passes_run


def scarce_replay(philly_day, hours, *, stop_seconds=0):
    """LEND_AND_BORROW at a twentieth of the VC quotas: lenders reclaim from borrowers all the time."""
    rows, vcs, mix = philly_day
    config = philly.philly_configuration(
        name="scarce", vcs=vcs, mix=mix, capacity_scale=0.05, strategy=Strategy.LEND_AND_BORROW
    )
    config = replace(config, stop_seconds=stop_seconds)
    start = rows[0].submitted_at
    jobs = [
        job for job in philly.philly_jobs(rows, config, seed=2) if job.submitted_at < start + hours * 3600
    ]
    return simulate(config, jobs, start=start, end=start + hours * 3600, verify_shortcuts=True, check=True)


def test_a_pass_that_preempts_is_run_again_for_every_reason_and_decides_the_same(philly_day, monkeypatch):
    monkeypatch.setattr(ShortcutDecider, "carry_preempting_start", False)  # each pass from the most reduced
    result = scarce_replay(philly_day, hours=6)

    assert result.stats.passes_preempting > 20
    assert result.stats.passes_whole == 0
    # a summed holding borrowed in the pass; a stuck group came unstuck; a group cut short may have grown
    assert {"borrowed", "stuck", "groups"} <= set(result.stats.preempting_retries)


def test_a_reclaim_front_too_short_falls_back_to_whole_holdings(philly_day, monkeypatch):
    """With no real job in front of any reclaimed holding, every reclaim names a placeholder for the rest."""
    monkeypatch.setattr(Reducer, "reclaim_reach", lambda self, *args: {})
    monkeypatch.setattr(ShortcutDecider, "carry_preempting_start", False)

    result = scarce_replay(philly_day, hours=4)

    assert result.stats.preempting_retries["cut"] == result.stats.passes_preempting > 20


def test_a_pass_that_preempts_starts_from_the_retries_the_last_one_needed(philly_day, monkeypatch):
    """Carried over (with the holdings that may borrow given as reclaimable from the start), the retries
    happen once instead of on every pass, and every pass decides the same (the replay checks each against the
    whole queue, and both replays record the same)."""
    monkeypatch.setattr(Reducer, "reclaim_reach", lambda self, *args: {})
    carried = scarce_replay(philly_day, hours=4)
    monkeypatch.setattr(ShortcutDecider, "carry_preempting_start", False)
    each_time = scarce_replay(philly_day, hours=4)

    assert carried.stats.passes_preempting == each_time.stats.passes_preempting > 20
    assert carried.stats.preempting_retries["cut"] == 1
    assert sum(carried.stats.preempting_retries.values()) < sum(each_time.stats.preempting_retries.values())
    assert carried.records == each_time.records


def test_under_strict_fifo_a_drained_job_waits_behind_its_shares_held_head_in_the_replay_too():
    """Job 3 heads share a's queue (priority 9) and cannot be placed: a holds its one BIG instance. When
    plan p drains job 1 back into the queue, STRICT_FIFO keeps it behind job 3; the shortcuts used to
    leave the held group out, and job 1 was placed on demand (`verify_shortcuts` raised)."""
    setup = replace(
        config(share("a", small=1, big=1), plans=(plan("p", SMALL, 1, 0, 3600),)),
        ordering=Ordering.STRICT_FIFO,
    )
    jobs = [
        job(1, "a", 0, 5000, (SMALL, 1, "p"), (SMALL, 1)),
        job(2, "a", 0, 10_000, (BIG, 1)),
        job(3, "a", 10, None, (BIG, 1), priority=9),
    ]

    result = simulate(setup, jobs, start=T0, end=T0 + 3000, verify_shortcuts=True, check=True)

    assert [(kind, job_id) for _, kind, job_id in kinds(result)] == [
        (Kind.ADMITTED, 1),
        (Kind.ADMITTED, 2),
        (Kind.PLAN_EXPIRING, 1),
    ]


def test_the_groups_found_unstuck_are_those_not_stuck_judged_one_by_one(philly_day, monkeypatch):
    """`Reducer.unstuck_groups` finds the groups from an index of their entries, and keeps what each entry
    of it lets through until something it depends on changes; at every pass of a busy replay (in-share
    preemption, borrow limits, RESERVE and LEND shares, plans) it finds exactly the groups of enabled shares
    whose head `stuck` does not hold for, whichever way the pass itself finds them."""
    config, jobs, start = replay(
        philly_day, strategy=Strategy.LEND_AND_BORROW, mixed=True, borrow_limit=50, in_share_preemption=True
    )
    reduced = Reducer.jobs
    checked = []

    def reducing(self, **given):
        placed, groups, unfinished = given["placed"], given["groups"], given["unfinished"]
        room = self.room_in(placed)
        unstuck = list(self.unstuck_groups(placed=placed, groups=groups, room=room))
        one_by_one = [
            group
            for group in groups.all()
            if self.shares[group.key[0]].enabled
            and not self.stuck(unfinished[group.members[0][1]], room, placed)
        ]
        assert len(unstuck) == len({id(g) for g in unstuck}) == len(one_by_one)
        assert {id(g) for g in unstuck} == {id(g) for g in one_by_one}
        checked.append(len(one_by_one) < len(groups.groups))
        return reduced(self, **given)

    monkeypatch.setattr(Reducer, "jobs", reducing)
    simulate(config, jobs, start=start, end=start + HOURS * 3600)

    assert len(checked) > 50 and sum(checked) > 25  # passes, and passes where some group was stuck


def given_to_the_engine(setup, jobs, end):
    """Replay without checks, and per pass (by its time) the ids of the RUNNABLE jobs the engine was given at
    its first try; then replay again checking every pass against the whole queue (and the invariants)."""
    given: dict[float, list[int]] = {}

    def recording(snapshot, **options):
        moment = snapshot.now.timestamp() - T0
        given.setdefault(moment, sorted(j.id for j in snapshot.jobs if j.status == JobStatus.RUNNABLE))
        return engine_schedule(snapshot, **options)

    result = simulate(setup, jobs, start=T0, end=T0 + end, schedule_function=recording)
    checked = simulate(setup, jobs, start=T0, end=T0 + end, verify_shortcuts=True, check=True)
    assert checked.records == result.records
    return result, given


def test_a_job_only_a_plan_can_take_is_left_out_while_the_plan_takes_no_entries():
    """Job 2 names only plan p, which starts at 600 s; job 4 names only plan q, whose drain window (600 s)
    opened before it arrived. A pass before p starts is not given job 2 (it could neither fit nor wait nor
    preempt on a plan), the pass at p's start is and places it; job 4 is never given."""
    setup = config(
        share("a", small=1),
        share("b", small=2),
        plans=(plan("p", SMALL, 1, 600, 7200), plan("q", SMALL, 1, 0, 1500)),
        plan_drain_seconds=600,
    )
    jobs = [
        job(1, "a", 0, 5000),
        job(2, "a", 0, 1000, (SMALL, 1, "p")),
        job(3, "b", 300, 100),
        job(4, "b", 1000, 100, (SMALL, 1, "q")),
        job(5, "b", 1000, 100),
    ]

    result, given = given_to_the_engine(setup, jobs, end=3000)

    assert given[0] == [1]
    assert given[300] == [3]
    assert given[600] == [2]
    assert given[1020] == [5]
    admitted = {r.job_id: r.time - T0 for r in result.records if r.kind == Kind.ADMITTED}
    assert admitted == {1: 0, 3: 300, 2: 600, 5: 1020}


def test_an_in_share_group_is_given_only_while_its_share_holds_a_job_of_lower_priority_on_its_type():
    """Share a (in-share preemption) holds both SMALL instances with jobs of priority 5. Job 3 (priority 5)
    can preempt neither, nor be placed, so it is left out; job 4 (priority 9, the same preference list) is
    given in the same pass (at its first try: the pass preempts, and is tried again as point 3 says) and
    preempts one of them. The groups differ only in priority, so each is judged on its own."""
    setup = config(share("a", small=2, in_share_preemption=True))
    jobs = [
        job(1, "a", 0, 5000, priority=5),
        job(2, "a", 0, 5000, priority=5),
        job(3, "a", 30, 100, priority=5),
        job(4, "a", 60, 100, priority=9),
    ]

    result, given = given_to_the_engine(setup, jobs, end=1000)

    assert given[0] == [1, 2]
    assert 3 not in given.get(30, [])
    assert given[60] == [4]
    assert [(r.kind, r.job_id, r.time - T0) for r in result.records if r.kind != Kind.ADMITTED][:1] == [
        (Kind.PREEMPTED_IN_SHARE, 2, 60)
    ]


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6))
def test_the_replay_of_random_configurations_decides_every_pass_as_the_whole_queue_would(philly_day, seed):
    """Random per-share strategies, borrow and lending limits, in-share preemption, disabled shares, plans
    and drain windows, stop delays, priorities and timeouts, both orderings, holdings of shares with
    in-share preemption given summed or real (`Reducer.real_in_share`): `verify_shortcuts` checks each pass
    against the whole queue and `check` the invariants. HYPOTHESIS_PROFILE=fuzz searches more."""
    rows, vcs, mix = philly_day
    rng = random.Random(seed)
    setup = philly.philly_configuration(
        name="random",
        vcs=vcs,
        mix=mix,
        capacity_scale=rng.choice([0.03, 0.05, 0.1, 0.2]),
        strategy=rng.choice(list(Strategy)),
        borrow_limit=rng.choice([-1, 0, 20, 100]),
    )
    shares = []
    for one in setup.shares:
        strategy = rng.choice(list(Strategy)) if rng.random() < 0.5 else one.strategy
        lending = {
            name: rng.randint(0, limit)
            for name, limit in one.limits.items()
            if strategy != Strategy.RESERVE and rng.random() < 0.3
        }
        shares.append(
            replace(
                one,
                strategy=strategy,
                borrow_limit=one.borrow_limit if strategy == Strategy.LEND_AND_BORROW else -1,
                in_share_preemption=rng.random() < 0.3,
                enabled=rng.random() < 0.95,
                lending_limits=lending,
            )
        )
    setup = replace(setup, shares=tuple(shares))
    hours = rng.choice([1, 2])
    start = rows[0].submitted_at + rng.choice([0, 3 * 3600])
    plans = philly.synthetic_plans(
        count=rng.randint(0, 3),
        shares=setup.shares,
        capacity=setup.capacity,
        start=start,
        end=start + hours * 3600,
        seed=seed,
    )
    setup = replace(
        setup,
        ordering=rng.choice([Ordering.BEST_EFFORT_FIFO, Ordering.STRICT_FIFO]),
        plans=tuple(plans),
        plan_drain_seconds=rng.choice([0, 600]),
        stop_seconds=rng.choice([0, 0, 0, 120]),
    )
    jobs = [
        replace(
            one,
            priority=rng.choice([0, 0, 5, 9]),
            max_pending_seconds=rng.choice([None, None, 600, 3600]),
        )
        for one in philly.philly_jobs(rows, setup, seed=seed)
        if start <= one.submitted_at < start + hours * 3600
    ]

    with pytest.MonkeyPatch.context() as patch:  # as the estimator's replay gives them, or summed
        patch.setattr(Reducer, "real_in_share", rng.random() < 0.5)
        simulate(setup, jobs, start=start, end=start + hours * 3600, verify_shortcuts=True, check=True)
