"""The replay with relocation: a job that fell back to on-demand moves onto its plan once the plan frees,
resumes from its checkpoint there, and the replay counts the move and the GPU-hours it ran on the plan;
the shortcuts still decide exactly what the whole queue decides."""

from __future__ import annotations

import pytest

from simulator import Kind, Status, simulate, summarize
from simulator.config import ConfigurationError, configuration_from_mapping

from .builders import BIG, T0, config, job, plan, share


def fell_back(*, stop_seconds: int = 0, relocate: bool = True, **fields):
    """Job 1 holds plan p (1 instance) until t = 1000; job 2 arrives at 60, falls back to on-demand."""
    setup = config(
        share("a", big=1),
        plans=(plan("p", BIG, 1, -3600, 10 * 3600, "a"),),
        stop_seconds=stop_seconds,
        relocate=relocate,
        **{"relocation_min_runtime_seconds": 600, **fields},
    )
    jobs = [job(1, "a", 0, 1000, (BIG, 1, "p")), job(2, "a", 60, 3000, (BIG, 1, "p"), (BIG, 1))]
    return simulate(setup, jobs, start=T0, check=True, verify_shortcuts=True)


def test_a_job_that_fell_back_moves_onto_the_plan_once_it_frees_and_resumes_there():
    result = fell_back()

    moved = result.outcomes[2]
    assert [(r.kind, r.training_plan) for r in result.records if r.job_id == 2] == [
        (Kind.ADMITTED, None),
        (Kind.RELOCATING, "p"),
        (Kind.ADMITTED, "p"),
    ]
    assert moved.relocations == 1 and moved.preemptions == 0 and moved.lost_gpu_seconds == 0
    # Placed at 60, moved at 1020 (the first pass after job 1 ended): 960 s done, 2040 s left on the plan.
    assert moved.status == Status.SUCCEEDED and moved.finished_at == T0 + 3060
    assert moved.moved_onto_plan_gpu_seconds == pytest.approx(2040 * 8)
    overall = summarize(result)["overall"]
    assert overall["relocations"] == 1 and overall["jobs_relocated"] == 1
    assert overall["gpu_hours_moved_onto_plans"] == pytest.approx(2040 * 8 / 3600)


def test_with_a_stop_delay_the_job_holds_on_demand_while_it_stops_and_the_plan_waits_for_it():
    result = fell_back(stop_seconds=120)

    moved = result.outcomes[2]
    assert moved.relocations == 1 and moved.stopping_gpu_seconds == 120 * 8
    # Moved at 1020, stopped at 1140, placed on the plan by the pass at 1140: 2040 s left.
    assert moved.finished_at == T0 + 1140 + 2040


def test_without_relocation_it_stays_where_it_fell_back():
    result = fell_back(relocate=False)

    assert result.outcomes[2].relocations == 0 and result.outcomes[2].finished_at == T0 + 3060
    assert summarize(result)["overall"]["gpu_hours_moved_onto_plans"] == 0


def test_no_move_before_the_minimum_runtime():
    result = fell_back(relocation_min_runtime_seconds=86_400)

    assert result.outcomes[2].relocations == 0


def test_relocation_settings_are_read_and_bounded():
    data = {"shares": [{"name": "a", "strategy": "RESERVE", "limits": {BIG: 1}}], "relocate": True}
    read = dict(default_name="x", bases={}, where="test")
    config_read = configuration_from_mapping({**data, "relocation_min_runtime_seconds": 30}, **read)
    assert config_read.relocate and config_read.relocation_min_runtime_seconds == 30
    with pytest.raises(ConfigurationError, match="relocation_min_runtime_seconds"):
        configuration_from_mapping({**data, "relocation_min_runtime_seconds": 90_000}, **read)


def test_more_jobs_than_a_pass_moves_move_in_the_passes_after_it_exactly_as_on_the_whole_queue():
    setup = config(
        share("a", big=3),
        plans=(plan("p", BIG, 3, -3600, 10 * 3600, "a"),),
        relocate=True,
        relocation_min_runtime_seconds=0,
        max_relocations_per_pass=1,
    )
    holders = [job(i, "a", 0, 1000, (BIG, 1, "p")) for i in (1, 2, 3)]
    fallen = [job(i, "a", 60, 3000, (BIG, 1, "p"), (BIG, 1)) for i in (4, 5, 6)]

    result = simulate(setup, holders + fallen, start=T0, check=True, verify_shortcuts=True)

    moves = [(r.pass_index, r.job_id) for r in result.records if r.kind == Kind.RELOCATING]
    assert [job_id for _, job_id in moves] == [4, 5, 6]
    assert [index for index, _ in moves] == [moves[0][0], moves[0][0] + 1, moves[0][0] + 2]


def test_jobs_that_opted_in_move_and_the_others_stay_when_the_configuration_lets_nobody():
    setup = config(share("a", big=2), plans=(plan("p", BIG, 2, -3600, 10 * 3600, "a"),))
    holders = [job(i, "a", 0, 1000, (BIG, 1, "p")) for i in (1, 2)]
    fallen = [
        job(3, "a", 60, 3000, (BIG, 1, "p"), (BIG, 1), relocate=True),
        job(4, "a", 60, 3000, (BIG, 1, "p"), (BIG, 1)),
    ]

    result = simulate(setup, holders + fallen, start=T0, check=True, verify_shortcuts=True)

    assert (result.outcomes[3].relocations, result.outcomes[4].relocations) == (1, 0)
