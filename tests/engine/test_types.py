"""`job_loaded`, the snapshot loaders' quicker way to build a Job, builds the very Job the constructor does."""

import dataclasses
import inspect

from engine.synthetic import build_synthetic_snapshot
from engine.types import Job, Nomination, job_loaded


def given(job: Job) -> dict:
    return {field.name: getattr(job, field.name) for field in dataclasses.fields(Job) if field.init}


def test_job_loaded_takes_every_field_the_constructor_takes_and_no_default():
    taken = inspect.signature(job_loaded).parameters
    assert list(taken) == [field.name for field in dataclasses.fields(Job) if field.init]
    assert all(parameter.default is inspect.Parameter.empty for parameter in taken.values())


def test_job_loaded_builds_the_job_the_constructor_builds():
    snap = build_synthetic_snapshot(runnable=200, placed=80, shares=5, types=3, seed=3)
    jobs = list(snap.jobs)
    jobs.append(dataclasses.replace(jobs[0], nomination=Nomination(1, frozenset({4, 5})), relocate=True))
    jobs.append(dataclasses.replace(jobs[-1], taken=True, name="nightly", team_id=None, priority=-3))
    for job in jobs:
        fields = given(job)
        built, loaded = Job(**fields), job_loaded(**fields)
        assert loaded == built and hash(loaded) == hash(built) and repr(loaded) == repr(built)
        assert loaded.queue_key == built.queue_key == (-job.priority, job.submitted_at, job.id)
        assert all(getattr(loaded, name) is getattr(built, name) for name in fields)
        try:
            loaded.priority = 1  # type: ignore[misc]
        except dataclasses.FrozenInstanceError:
            pass
        else:
            raise AssertionError("a loaded Job is as frozen as any")
