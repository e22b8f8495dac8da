"""Metric arithmetic: percentiles, GPU-hours, borrowed and lent integrated over time, job counts."""

import random

import pytest

from engine import Strategy
from engine.accounting import share_usage
from simulator import simulate, summarize
from simulator.meter import UsageMeter, bucket_series
from simulator.metrics import percentile

from .builders import LEND, LEND_AND_BORROW, RESERVE, SMALL, T0, config, job, share

MEDIUM = "ml.g5.12xlarge"  # 4 GPUs


def by_share(metrics):
    return {item["share"]: item for item in metrics["shares"]}


def test_percentiles_interpolate_between_closest_ranks():
    values = [1.0, 2.0, 3.0, 4.0]

    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 95) == pytest.approx(3.85)
    assert percentile(values, 100) == 4.0
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None


def test_gpu_hours_count_every_gpu_of_the_instances_a_job_holds():
    setup = config(share("a", RESERVE, limits={MEDIUM: 2}))

    result = simulate(setup, [job(1, "a", 0, 1800, (MEDIUM, 2))], start=T0)
    metrics = summarize(result)

    a = by_share(metrics)["a"]
    assert a["gpu_hours"]["used"] == pytest.approx(4.0)  # 2 instances x 4 GPUs x half an hour
    assert a["limit_gpus"] == 8
    assert a["utilization"]["of_limits"] == pytest.approx(1.0)  # it held all 8 GPUs the whole half hour
    assert metrics["overall"]["utilization"]["of_environment"] == pytest.approx(1.0)


def test_borrowed_and_lent_gpu_hours_are_integrated_over_time():
    setup = config(share("a", LEND_AND_BORROW, small=2), share("b", LEND, small=2))
    jobs = [job(i, "a", 0, 1000) for i in (1, 2, 3, 4)] + [job(i, "b", 100, 1000) for i in (5, 6)]

    metrics = summarize(simulate(setup, jobs, start=T0))

    a, b = by_share(metrics)["a"], by_share(metrics)["b"]
    assert a["gpu_hours"]["borrowed"] == pytest.approx(2 * 120 / 3600)  # 2 GPUs above its limit until reclaim
    assert b["gpu_hours"]["lent"] == pytest.approx(2 * 120 / 3600)
    assert a["gpu_hours"]["used"] == pytest.approx((2 * 1000 + 2 * (120 + 1000)) / 3600)
    assert (a["preemptions"], a["preempted_gpu_hours_lost"]) == (2, pytest.approx(2 * 120 / 3600))
    assert metrics["overall"]["gpu_hours"]["lent"] == metrics["overall"]["gpu_hours"]["borrowed"]


def test_waits_and_job_counts_per_share():
    jobs = [job(1, "a", 0, 10_000), job(2, "a", 10, 100), job(3, "a", 15, 100), job(4, "b", 20, 100)]
    setup = config(share("a", small=1), share("b", small=1))

    metrics = summarize(simulate(setup, jobs, start=T0, end=T0 + 3600))

    a, b = by_share(metrics)["a"], by_share(metrics)["b"]
    assert a["jobs"] == {
        "arrived": 3,
        "rejected": 0,
        "completed": 0,
        "running_at_end": 1,
        "waiting_at_end": 2,
        "never_started": 2,
        "failed_pending_timeout": 0,
        "failed_preemption_retries": 0,
        "cancelled": 0,
    }
    assert (b["jobs"]["completed"], b["wait_seconds"]["p50"]) == (1, 10.0)  # arrived at 20 s, placed at 30 s
    assert metrics["overall"]["wait_seconds"]["placed_jobs"] == 2


def test_usage_series_are_time_weighted_means_per_slice():
    series = [(0.0, (2, 0), (0, 0)), (50.0, (4, 1), (1, 0))]

    times, used, borrowed = bucket_series(series, start=0.0, end=100.0, buckets=4)

    assert times == [12.5, 37.5, 62.5, 87.5]
    assert used == [[2, 2, 4, 4], [0, 0, 1, 1]]
    assert borrowed[0] == [0, 0, 1, 1]


def test_a_lender_with_a_lending_limit_lends_at_most_that_in_the_meter():
    # b borrows 2; c lends nothing (lending limit 0), so both come from a, though both are idle.
    setup = config(
        share("a", LEND, small=2),
        share("b", LEND_AND_BORROW, small=2),
        share("c", LEND, small=2, lending_limits={SMALL: 0}),
    )
    jobs = [job(i, "b", 0, 3600) for i in (1, 2, 3, 4)]

    metrics = summarize(simulate(setup, jobs, start=T0, end=T0 + 3600))

    a, b, c = (by_share(metrics)[name] for name in "abc")
    assert b["gpu_hours"]["borrowed"] == pytest.approx(2 * (3600 - 30) / 3600, rel=0.02)
    assert c["gpu_hours"]["lent"] == 0
    assert a["gpu_hours"]["lent"] == pytest.approx(b["gpu_hours"]["borrowed"])


def test_the_meter_lends_what_share_usage_says_is_lent():
    rng = random.Random(3)
    strategies = (Strategy.RESERVE, Strategy.LEND, Strategy.LEND_AND_BORROW)
    for _ in range(500):
        share_ids = list(range(1, rng.randint(2, 8)))
        limits = {s: ({"t": rng.randint(1, 9)} if rng.random() < 0.8 else {}) for s in share_ids}
        kinds = {s: rng.choice(strategies) for s in share_ids}
        # Some lenders lend only part of their limit (behaviour.md#what-there-is); RESERVE shares take no lending limit.
        lending_limits = {
            s: {"t": rng.randint(0, limits[s]["t"])}
            for s in share_ids
            if "t" in limits[s] and kinds[s] != Strategy.RESERVE and rng.random() < 0.5
        }
        capacity = sum(limit.get("t", 0) for limit in limits.values()) + rng.choice((0, 0, 3))
        held = [rng.randint(0, 12) for _ in share_ids]
        meter = UsageMeter(
            share_ids=share_ids,
            capacity={"t": capacity},
            limits=limits,
            strategies=kinds,
            gpus={},
            start=0.0,
            lending_limits=lending_limits,
        )
        rows, _, _ = share_usage(
            capacity={"t": capacity},
            limits=limits,
            strategies=kinds,
            usage={(s, "t"): n for s, n in zip(share_ids, held, strict=True) if n},
            lending_limits=lending_limits,
        )
        expected = {row.share_id: row.lent for row in rows}
        assert meter._lent("t", held) == tuple(expected.get(s, 0) for s in share_ids)


@pytest.mark.parametrize("window", [{"start": T0, "end": T0 + 3600}, {}])
def test_a_replay_of_no_jobs_is_all_zeros_not_a_failure(window):
    setup = config(share("a", RESERVE, small=2), share("b", LEND, small=2))

    metrics = summarize(simulate(setup, [], **window), buckets=4)

    assert metrics["overall"]["jobs"]["arrived"] == 0
    assert metrics["overall"]["gpu_hours"]["used"] == metrics["overall"]["gpu_hours"]["borrowed"] == 0
    assert all(item["gpu_hours"]["used"] == 0 for item in metrics["shares"])
    assert metrics["series"]["gpus_in_use"] == {"a": [0.0] * 4, "b": [0.0] * 4}
    assert metrics["series"]["gpus_borrowed"] == {"a": [0.0] * 4, "b": [0.0] * 4}


def test_a_replay_in_which_no_job_is_ever_placed_is_all_zeros():
    setup = config(share("a", RESERVE, small=2), share("b", LEND, small=2))
    too_big = job(1, "a", 0, 600, ("ml.g5.xlarge", 5))  # more than the capacity of its only type

    metrics = summarize(simulate(setup, [too_big], start=T0, end=T0 + 3600), buckets=2)

    assert metrics["overall"]["jobs"]["arrived"] == 1
    assert metrics["overall"]["gpu_hours"]["used"] == 0
    assert metrics["series"]["gpus_in_use"] == {"a": [0.0, 0.0], "b": [0.0, 0.0]}


def test_a_meter_that_saw_no_change_has_a_series_of_zeros_for_every_share():
    meter = UsageMeter(
        share_ids=[1, 2], capacity={}, limits={}, strategies={1: RESERVE, 2: LEND}, gpus={}, start=T0
    )
    meter.advance(T0 + 3600)

    times, used, borrowed = bucket_series(meter.series, start=T0, end=T0 + 3600, buckets=3)

    assert meter.series == [(T0, (0, 0), (0, 0))]
    assert len(times) == 3 and used == borrowed == [[0.0] * 3, [0.0] * 3]
    assert meter.on_demand == meter.borrowed == meter.lent == meter.on_plan == [0.0, 0.0]
