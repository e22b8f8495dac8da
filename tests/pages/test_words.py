"""The pages speak words: configuration changes as before -> after, event kinds as words with their code in a
tooltip, jobs by name, codes spelt one way, and the admin's names of things in plain English."""

from __future__ import annotations

from dataclasses import replace

from django.contrib import admin
from django.urls import reverse

from portal.presenters import change_lines, event_text, kind_words, with_labels
from scheduling.models import EnvironmentCapacity, InstanceType, JobQueue, QuotaShare, SchedulingPass
from scheduling.rules import LimitInput
from scheduling.selectors.events import EventRow
from scheduling.selectors.visibility import JobRef
from scheduling.services.configuration import quota_share_update
from tests.pages.conftest import G5, P4


def test_a_capacity_change_shows_before_and_after_on_the_event_log(world, client_for):
    p4, g5 = InstanceType.objects.get(name=P4), InstanceType.objects.get(name=G5)
    quota_share_update(
        share=world.vision,
        changes={"borrow_limit": 50},
        limits=[LimitInput(p4, 4), LimitInput(g5, 8)],
        actor=world.admin,
    )
    html = client_for(world.admin).get(reverse("event_log")).content.decode()
    assert f"capacity limits: {P4} 6 -&gt; 4" in html and "capacity_limits" not in html
    assert "borrow limit: 100 -&gt; 50" in html
    assert 'title="CONFIG_CHANGED">configuration changed</span>' in html


def test_change_lines_name_added_and_removed_entries():
    changes = {
        "action": "changed",
        "before": {"capacity_limits": {"a": 4}, "quota_shares": ["nlp"], "in_share_preemption": False},
        "after": {
            "capacity_limits": {"a": 6, "b": 2},
            "quota_shares": ["vision"],
            "in_share_preemption": True,
        },
    }
    assert change_lines(changes) == [
        "capacity limits: a 4 -> 6, b none -> 2",
        "in share preemption: no -> yes",
        "quota shares: added vision; removed nlp",
    ]
    assert change_lines({"action": "created", "before": None, "after": {"x": 1}}) == []


def test_events_name_jobs_by_name_and_hide_other_teams_jobs():
    row = EventRow(
        id=1,
        kind="PREEMPTED_RECLAIM",
        created_at=None,
        job_queue_id=1,
        share_id=1,
        share_name="vision",
        other_share_id=2,
        other_share_name="speech",
        job=JobRef(id=42, name="vision-train", share_name="vision"),
        other_job=JobRef(id=45, name=None, share_name="speech"),
        instance_type=P4,
        instances=2,
        actor=None,
        text="vision-train (#42) of share vision preempted by job #45 of share speech",
    )
    assert (
        event_text(row)
        == "vision-train (#42) of share vision preempted by a job of another team of share speech"
    )
    seen_by_staff = replace(row, other_job=JobRef(id=45, name="speech-eval", share_name="speech"))
    assert event_text(seen_by_staff) == (
        "vision-train (#42) of share vision preempted by speech-eval (#45) of share speech"
    )
    written_before_names = replace(row, text="job 42 of share vision preempted by job 45 of share speech")
    assert event_text(written_before_names) == (
        "vision-train (#42) of share vision preempted by a job of another team of share speech"
    )
    assert kind_words("PREEMPTED_RECLAIM") == "preempted by a reclaim"


def test_rule_messages_use_the_forms_labels():
    labels = {"end_time": "End time", "start_time": "Start time", "name": "Name"}
    assert with_labels("end_time must be after start_time", labels) == "End time must be after start time"
    assert with_labels("ml.p4d.24xlarge x9 can never run", labels) == "ml.p4d.24xlarge x9 can never run"


def test_strategies_and_orderings_are_spelt_as_codes_everywhere(world, client_for):
    assert QuotaShare.Strategy.LEND_AND_BORROW.label == "LEND_AND_BORROW"
    assert JobQueue.Ordering.BEST_EFFORT_FIFO.label == "BEST_EFFORT_FIFO"
    html = client_for(world.admin).get(reverse("manage_share_edit", args=[world.vision.pk])).content.decode()
    assert ">LEND_AND_BORROW</option>" in html and "Lend And Borrow" not in html


def test_the_admin_names_things_in_plain_english():
    assert SchedulingPass._meta.verbose_name_plural == "scheduling passes"
    assert EnvironmentCapacity._meta.verbose_name_plural == "environment capacities"
    assert all(not model._meta.verbose_name_plural.endswith("ss") for model in admin.site._registry)


def test_a_priority_change_reads_as_one_and_the_admin_says_fifo_as_the_product_does(world, client_for):
    from scheduling.services.jobs import job_set_priority
    from tests.factories import job_in
    from tests.pages.conftest import P5

    job = job_in(world.nlp, [(P5, 1)], name="reprioritised", user=world.ana)
    job_set_priority(job_id=job.pk, priority=7, actor=world.ana)
    html = client_for(world.ana).get(reverse("job_detail", args=[job.pk])).content.decode()
    assert 'title="CONFIG_CHANGED">priority changed</span>' in html and "priority: 0 -&gt; 7" in html
    world.admin.is_superuser = True
    world.admin.save()
    admin_html = client_for(world.admin).get(
        reverse("admin:scheduling_jobqueue_change", args=[world.queue.pk])
    )
    text = admin_html.content.decode()
    assert ">FIFO</option>" in text and "Fifo" not in text and "Fair Share" not in text


def test_a_configuration_change_message_names_fields_in_words(world, client_for):
    p4, g5 = InstanceType.objects.get(name=P4), InstanceType.objects.get(name=G5)
    quota_share_update(
        share=world.vision,
        changes={"borrow_limit": 50},
        limits=[LimitInput(p4, 4), LimitInput(g5, 8)],
        actor=world.admin,
    )
    world.admin.is_superuser = True
    world.admin.save()
    admin_html = client_for(world.admin).get(reverse("admin:scheduling_event_changelist")).content.decode()
    assert "capacity limits" in admin_html and "capacity_limits" not in admin_html


def test_dates_read_in_one_style_and_relative_times_carry_it_in_their_title(world, client_for):
    import re as re_

    from tests.factories import job_in
    from tests.pages.conftest import P5

    job = job_in(world.nlp, [(P5, 1)], name="dated", user=world.ana)
    world.run_pass()
    html = client_for(world.ana).get(reverse("job_detail", args=[job.pk])).content.decode()
    shown = re_.findall(r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{1,2}\b", html)
    assert shown == []  # no "Dec 5 ..." beside "2026-12-05 ..."
    assert re_.search(r">\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}<", html)  # the attempt's and events' times
    assert re_.search(r'title="\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC">\d+ s ago</time>', html)
