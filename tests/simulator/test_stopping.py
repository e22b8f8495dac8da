"""The replay with a stop delay (`stop_seconds`, the environment's stop_grace_seconds): a preempted, drained or
cancelled running job holds its capacity STOPPING, its preemptor is nominated and placed once it is gone, and
the shortcuts still decide exactly what the whole queue decides."""

from dataclasses import replace

import pytest

from engine import Strategy
from simulator import ConfigurationError, Kind, Status, simulate, summarize
from simulator.config import configuration_from_mapping

from .builders import LEND_AND_BORROW, T0, config, job, kinds, plan, share
from .test_shortcuts import HOURS, replay, scarce_replay

ADMITTED, RECLAIM, NOMINATED = Kind.ADMITTED, Kind.PREEMPTED_RECLAIM, Kind.NOMINATED


def burst(stop_seconds: int):
    """Share a borrows b's idle GPUs at 0; b's jobs arrive at 100 s and reclaim them."""
    two_shares = config(
        share("a", LEND_AND_BORROW, small=2), share("b", LEND_AND_BORROW, small=2), stop_seconds=stop_seconds
    )
    jobs = [job(i, "a", 0, 1000) for i in (1, 2, 3, 4)] + [job(i, "b", 100, 1000) for i in (5, 6)]
    return simulate(two_shares, jobs, start=T0, check=True)


def test_without_a_stop_delay_the_preemptor_is_placed_in_the_pass_that_preempts():
    result = burst(0)

    assert kinds(result)[4:8] == [(4, RECLAIM, 4), (4, RECLAIM, 3), (4, ADMITTED, 5), (4, ADMITTED, 6)]
    assert all(o.stopping_gpu_seconds == 0 for o in result.outcomes.values())


def test_with_a_stop_delay_victims_hold_their_capacity_and_preemptors_are_placed_once_they_are_gone():
    result = burst(120)

    # Pass 4 (t = 120) reclaims and nominates; the victims stop until t = 240, pass 8 places 5 and 6 first.
    assert kinds(result)[4:10] == [
        (4, RECLAIM, 4),
        (4, RECLAIM, 3),
        (4, NOMINATED, 5),
        (4, NOMINATED, 6),
        (8, ADMITTED, 5),
        (8, ADMITTED, 6),
    ]
    victim = result.outcomes[3]
    assert victim.preemptions == 1 and victim.lost_gpu_seconds == 120
    assert victim.stopping_gpu_seconds == 120  # one 1-GPU instance for 120 s
    assert result.outcomes[5].first_placed_at == T0 + 240
    assert summarize(result)["overall"]["stopping_gpu_hours"] == pytest.approx(240 / 3600)


def test_a_cancelled_running_job_holds_its_capacity_for_the_stop_delay():
    jobs = [job(1, "a", 0, None, cancelled_at=T0 + 500), job(2, "a", 0, 60)]

    result = simulate(config(share("a", small=1), stop_seconds=120), jobs, start=T0, check=True)

    assert result.outcomes[1].status == Status.CANCELLED
    assert result.outcomes[1].finished_at == T0 + 620
    assert result.outcomes[2].first_placed_at == T0 + 630  # the first pass after it stopped


def test_a_drained_job_stops_gracefully_and_falls_back_once_stopped():
    configuration = config(
        share("a", small=2),
        plans=(plan("p", "ml.g5.xlarge", 1, 0, 4000, "a"),),
        plan_drain_seconds=1800,
        stop_seconds=120,
    )
    jobs = [job(1, "a", 0, 5000, ("ml.g5.xlarge", 1, "p"), ("ml.g5.xlarge", 1))]

    result = simulate(configuration, jobs, start=T0, check=True)

    drains = [r for r in result.records if r.kind == Kind.PLAN_EXPIRING]
    [again] = [r for r in result.records if r.kind == ADMITTED and r.time > drains[0].time]
    assert again.time == drains[0].time + 120 and again.training_plan is None


def test_stop_seconds_is_read_and_validated_from_a_configuration_file():
    data = {
        "shares": [{"name": "a", "strategy": "RESERVE", "limits": {"ml.g5.xlarge": 1}}],
        "stop_seconds": 90,
    }
    assert configuration_from_mapping(data, default_name="x", bases={}, where="f").stop_seconds == 90
    with pytest.raises(ConfigurationError, match="stop_seconds cannot be negative"):
        configuration_from_mapping({**data, "stop_seconds": -1}, default_name="x", bases={}, where="f")


@pytest.mark.parametrize("in_share", [False, True], ids=["reclaim", "reclaim-and-in-share"])
def test_shortcuts_decide_what_the_whole_queue_decides_with_a_stop_delay(philly_day, in_share):
    config, jobs, start = replay(
        philly_day, strategy=Strategy.LEND_AND_BORROW, mixed=in_share, in_share_preemption=in_share
    )
    config = replace(config, stop_seconds=120)

    result = simulate(config, jobs, start=start, end=start + HOURS * 3600, verify_shortcuts=True, check=True)

    assert sum(r.kind == NOMINATED for r in result.records) > 10
    assert result.stats.passes_reduced > 0


def test_a_scarce_replay_with_a_stop_delay_records_what_the_whole_queue_records(philly_day):
    result = scarce_replay(philly_day, hours=3, stop_seconds=120)

    assert sum(r.kind == NOMINATED for r in result.records) > 10
    assert sum(o.stopping_gpu_seconds for o in result.outcomes.values()) > 0
