"""Jobs: the list, the submit form with its in-place preference rows and inline validation (the API's rules),
and a job's page with its reason, position, attempts, events and actions."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from scheduling.models import EnvironmentCapacity, Event, EventKind, InstanceType, Job, JobStatus
from scheduling.services.executor import job_report
from scheduling.services.jobs import job_cancel
from tests.factories import JobQueueFactory, ServiceEnvironmentFactory, job_in
from tests.pages.conftest import G5, P4, P5, htmx_headers

pytestmark = pytest.mark.django_db


def form_data(world, rows, **fields):
    """A submit form's POST body: `rows` are (type name, count, plan or None) or blank ("", "1", None)."""
    types = {t.name: t.pk for t in InstanceType.objects.all()}
    data = {
        "name": "pretrain",
        "quota_share": world.nlp.pk,
        "scheduling_priority": 0,
        "retry_attempts": 1,
        "payload": '{"command": ["python3", "train.py"]}',
        "client_token": "token-1",
        "pref-TOTAL_FORMS": len(rows),
        "pref-INITIAL_FORMS": 0,
        "pref-MIN_NUM_FORMS": 1,
        "pref-MAX_NUM_FORMS": 5,
    }
    for i, (type_name, count, plan) in enumerate(rows):
        data[f"pref-{i}-instance_type"] = types.get(type_name, "")
        data[f"pref-{i}-instance_count"] = count
        data[f"pref-{i}-training_plan"] = plan.pk if plan else ""
    data.update(fields)
    return data


# --- the list -----------------------------------------------------------------------------------------------


def test_job_list_shows_a_member_only_their_teams_jobs(world, client_for):
    job_in(world.nlp, [(P5, 1)], name="nlp-job")
    job_in(world.vision, [(G5, 1)], name="vision-job")
    html = client_for(world.ana).get(reverse("job_list"), {"whose": "all"}).content.decode()
    assert "nlp-job" in html and "vision-job" not in html and "1 job of your teams" in html
    staff = client_for(world.admin).get(reverse("job_list")).content.decode()
    assert "nlp-job" in staff and "vision-job" in staff


def test_job_list_filters_by_status_queue_share_and_team(world, client_for):
    job_in(world.nlp, [(P5, 1)], name="placed-one")
    world.run_pass()
    job_in(world.nlp, [(P5, 1)], name="waiting-one")
    job_in(world.vision, [(G5, 1)], name="vision-one")
    client = client_for(world.admin)
    runnable = client.get(
        reverse("job_list"), {"status": "RUNNABLE", "quota_share": world.nlp.pk}
    ).content.decode()
    assert "waiting-one" in runnable and "placed-one" not in runnable and "vision-one" not in runnable
    by_team = client.get(
        reverse("job_list"), {"team": world.team_vision.pk, "job_queue": world.queue.pk}
    ).content.decode()
    assert "vision-one" in by_team and "waiting-one" not in by_team


def test_job_list_paginates_and_answers_htmx_with_the_table(world, client_for, settings):
    settings.PAGE_LIST_SIZE = 2
    for i in range(5):
        job_in(world.nlp, [(P5, 1)], name=f"job-{i}", user=world.ana)
    client = client_for(world.ana)
    first = client.get(reverse("job_list")).content.decode()
    assert "Page 1 of 3" in first and 'href="?page=2"' in first and 'hx-get="?page=2"' in first
    table = client.get(reverse("job_list"), {"page": 3}, headers=htmx_headers("job-table")).content.decode()
    assert "<html" not in table and "job-0" in table and "job-4" not in table


def test_job_list_finds_a_job_by_part_of_its_name_or_exactly_by_its_id(world, client_for):
    pretrain = job_in(world.nlp, [(P5, 1)], name="Pretrain-large")
    job_in(world.nlp, [(P5, 1)], name="finetune-small")
    numbered = job_in(world.nlp, [(P5, 1)], name=f"eval-{pretrain.pk}{pretrain.pk}")
    client = client_for(world.ana)

    by_name = client.get(reverse("job_list"), {"q": "pretrain"}).content.decode()
    by_id = client.get(reverse("job_list"), {"q": f"#{pretrain.pk}"}).content.decode()
    huge = client.get(reverse("job_list"), {"q": "9" * 40})

    assert "Pretrain-large" in by_name and "finetune-small" not in by_name
    assert "Pretrain-large" in by_id and "finetune-small" not in by_id
    assert numbered.name not in by_id  # an id matches exactly, not as part of another number
    assert huge.status_code == 200 and "No jobs match." in huge.content.decode()


def test_job_list_says_briefly_why_each_job_waits_with_the_whole_reason_in_its_title(world, client_for):
    job_in(world.nlp, [(P5, 4)], name="nlp-full")
    waits = job_in(world.nlp, [(P5, 1), (P4, 9)], name="nlp-waits")
    world.run_pass()
    reason = Job.objects.select_related("pending").get(pk=waits.pk).current_reason
    assert len(reason) > 90

    html = client_for(world.ana).get(reverse("job_list"), {"whose": "all"}).content.decode()

    assert "<th>Why</th>" in html
    assert f'title="{reason}"' in html.replace("&#x27;", "'")
    assert reason[:80] in html


def test_job_list_names_the_training_plan_a_job_runs_on(world, client_for):
    job_in(world.nlp, [(P5, 2, world.plan)], name="on-the-plan")
    world.run_pass()
    html = client_for(world.ana).get(reverse("job_list"), {"whose": "all"}).content.decode()
    assert "ml.p5.48xlarge x2, plan nlp-p5-december" in html


# --- submitting ---------------------------------------------------------------------------------------------


def test_submit_form_offers_a_member_only_their_teams_shares(world, client_for):
    html = client_for(world.ana).get(reverse("job_new")).content.decode()
    assert "training / nlp (NLP)" in html and "training / vision" not in html
    assert 'name="pref-TOTAL_FORMS" value="1"' in html and 'name="client_token"' in html


def test_submitting_three_preferences_creates_the_job_and_shows_it(world, client_for):
    data = form_data(world, [(P5, 2, world.plan), (P5, 2, None), (P4, 2, None)])
    response = client_for(world.ana).post(reverse("job_new"), data)
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("job_detail", args=[job.pk])
    entries = [
        (e.instance_type.name, e.instance_count, e.training_plan_id)
        for e in job.instance_preferences.order_by("position")
    ]
    assert entries == [(P5, 2, world.plan.pk), (P5, 2, None), (P4, 2, None)]
    assert job.submitted_by == world.ana and job.status == JobStatus.RUNNABLE
    assert Event.objects.filter(kind=EventKind.SUBMITTED, job=job).exists()


def test_submitting_twice_with_the_same_form_creates_one_job(world, client_for):
    client = client_for(world.ana)
    data = form_data(world, [(P5, 1, None)])
    client.post(reverse("job_new"), data)
    client.post(reverse("job_new"), data)
    assert Job.objects.count() == 1


def test_blank_rows_are_ignored_and_errors_land_on_the_row_they_came_from(world, client_for):
    # Row 1 is blank; the rules see rows 0 and 2 as entries 0 and 1, and the error of entry 1 is row 2's.
    data = form_data(world, [(P5, 1, None), ("", "1", None), (P4, 99, None)])
    response = client_for(world.ana).post(reverse("job_new"), data)
    assert response.status_code == 400 and not Job.objects.exists()
    html = response.content.decode()
    slot = html[html.index('id="errors-pref-2-instance_count"') :]
    assert "ml.p4d.24xlarge x99 can never run: the environment has 16" in slot[:300]


def test_validate_endpoint_fills_error_slots_with_the_rules_messages_and_creates_nothing(world, client_for):
    data = form_data(world, [(P5, 1, None), (G5, 2, None), (P5, 5, world.plan)])
    response = client_for(world.ana).post(reverse("job_new_validate"), data, headers=htmx_headers())
    html = response.content.decode()
    assert response.status_code == 200 and not Job.objects.exists()
    # nlp has no G5 limit and RESERVE never borrows: entry 1 can never run; entry 2 asks more than the plan.
    g5_slot = html[
        html.index('id="errors-pref-1-instance_count"') : html.index(
            "</ul>", html.index('id="errors-pref-1-instance_count"')
        )
    ]
    assert "can never run: share nlp may hold at most 0" in g5_slot
    plan_slot = html[html.index('id="errors-pref-2-instance_count"') :]
    assert "which reserves 4" in plan_slot[:300]
    assert 'id="errors-name" hx-swap-oob="true"></ul>' in html  # a valid field's slot is emptied


def test_validate_endpoint_names_repeated_entries_and_bad_fields_in_one_round(world, client_for):
    data = form_data(world, [(P5, 1, None), (P5, 2, None)], name="bad name!", payload="[1]")
    html = (
        client_for(world.ana).post(reverse("job_new_validate"), data, headers=htmx_headers()).content.decode()
    )
    assert "Use 1 to 128 letters" in html
    # The field rules and the cross-row ones answer together: the repeat is named at once.
    row = html[html.index('id="errors-pref-1"') :]
    assert "repeats entry 0" in row[:300]
    payload_slot = html[html.index('id="errors-payload"') :]
    assert "JSON object" in payload_slot[:300] and "payload.command" not in payload_slot[:300]


def test_submitting_with_a_bad_field_names_every_fault_in_one_round(world, client_for):
    data = form_data(world, [(P5, 1, None), (P5, 2, None)], name="bad name!", payload="{}")
    response = client_for(world.ana).post(reverse("job_new"), data)
    html = response.content.decode()
    assert response.status_code == 400 and not Job.objects.exists()
    assert (
        "Use 1 to 128 letters" in html and "repeats entry 0" in html and "payload.command is required" in html
    )


def test_an_external_environment_refuses_a_payload_without_a_command_and_places_nothing(world, client_for):
    response = client_for(world.ana).post(reverse("job_new"), form_data(world, [(P5, 1, None)], payload="{}"))
    html = response.content.decode()
    assert response.status_code == 400 and not Job.objects.exists()
    slot = html[html.index('id="errors-payload"') :][:600]
    assert "payload.command is required: environment gpu-fleet runs jobs with an external executor" in slot


def test_the_form_says_what_the_payload_needs_on_the_chosen_shares_environment(world, client_for):
    client = client_for(world.ana)
    html = client.get(reverse("job_new")).content.decode()
    needs = html[html.index('id="payload-needs"') :][:800]
    assert "Environment gpu-fleet runs jobs as real processes: the payload needs payload.command" in needs
    data = form_data(world, [(P5, 1, None)], action="refresh")
    rows = client.post(reverse("job_new_rows"), data, headers=htmx_headers("preferences")).content.decode()
    assert 'id="payload-needs" class="payload-needs" hx-swap-oob="true"' in rows
    assert "gpu-fleet runs jobs as real processes" in rows


def test_preference_rows_offer_only_the_chosen_queues_instance_types(world, client_for):
    other = ServiceEnvironmentFactory(name="elsewhere")
    EnvironmentCapacity.objects.create(
        service_environment=other,
        instance_type=InstanceType.objects.create(name="ml.trn1.32xlarge"),
        max_capacity=2,
    )
    JobQueueFactory(name="other-queue", service_environment=other)
    client = client_for(world.ana)
    rows = client.post(
        reverse("job_new_rows"), form_data(world, [(P5, 1, None)], action="refresh"), headers=htmx_headers()
    ).content.decode()
    assert P5 in rows and "ml.trn1.32xlarge" not in rows


def test_a_member_cannot_submit_to_another_teams_share(world, client_for):
    data = form_data(world, [(G5, 1, None)], quota_share=world.vision.pk)
    response = client_for(world.ana).post(reverse("job_new"), data)
    assert response.status_code == 400 and not Job.objects.exists()
    assert "Select a valid choice" in response.content.decode()


def test_rows_are_added_and_removed_in_place_keeping_what_was_typed(world, client_for):
    client = client_for(world.ana)
    data = form_data(world, [(P5, 3, None), (P4, 2, None)], action="add")
    added = client.post(reverse("job_new_rows"), data, headers=htmx_headers("preferences")).content.decode()
    assert "<html" not in added and added.lstrip().startswith('<fieldset id="preferences"')
    assert 'name="pref-TOTAL_FORMS" value="3"' in added and 'name="pref-2-instance_type"' in added
    assert 'name="pref-0-instance_count" value="3"' in added
    data = form_data(world, [(P5, 3, None), (P4, 2, None), (G5, 7, None)], action="remove-0")
    removed = client.post(reverse("job_new_rows"), data, headers=htmx_headers("preferences")).content.decode()
    assert 'name="pref-TOTAL_FORMS" value="2"' in removed
    assert (
        'name="pref-0-instance_count" value="2"' in removed
        and 'name="pref-1-instance_count" value="7"' in removed
    )
    # nothing validated while rows change: every error slot is empty
    assert "errors-pref" in removed and not re.search(r'id="errors-[^"]*">\s*<li>', removed)


def test_rows_stop_at_five_and_work_without_javascript(world, client_for):
    client = client_for(world.ana)
    data = form_data(
        world, [(P5, 1, None), (P4, 1, None), (G5, 1, None), ("", "1", None), ("", "1", None)], action="add"
    )
    html = client.post(reverse("job_new"), data).content.decode()  # a plain POST: the whole page comes back
    assert "<html" in html and 'name="pref-TOTAL_FORMS" value="5"' in html
    assert "Five entries is the most a job may list." in html and 'value="add"' not in html
    assert not Job.objects.exists()


# --- one job ------------------------------------------------------------------------------------------------


def test_job_page_shows_why_it_waits_its_position_attempts_and_events(world, client_for):
    job_in(world.nlp, [(P5, 4)], name="first", user=world.ana)
    waiting = job_in(world.nlp, [(P5, 2)], name="second", user=world.ana)
    world.run_pass()
    waiting.refresh_from_db()
    html = client_for(world.ana).get(reverse("job_detail", args=[waiting.pk])).content.decode()
    assert "Why pending" in html and waiting.current_reason in html
    assert "position 1</strong> in share nlp" in html
    assert "ml.p5.48xlarge x2 on-demand" in html and "Not placed yet." in html


def test_job_page_of_another_team_is_a_404_for_a_member(world, client_for):
    job = job_in(world.vision, [(G5, 1)], name="vision-secret")
    assert client_for(world.ana).get(reverse("job_detail", args=[job.pk])).status_code == 404
    assert client_for(world.admin).get(reverse("job_detail", args=[job.pk])).status_code == 200
    assert client_for(world.ana).post(reverse("job_cancel", args=[job.pk])).status_code == 404


def test_job_live_fragment_comes_alone_to_htmx_with_actions_attempts_and_events(world, client_for):
    job = job_in(world.nlp, [(P5, 1)], name="j", user=world.ana)
    world.run_pass()
    html = (
        client_for(world.ana)
        .get(reverse("job_detail", args=[job.pk]), headers=htmx_headers("job-live"))
        .content.decode()
    )
    assert "<html" not in html and "SCHEDULED" in html and "Change priority" in html
    assert 'id="job-attempts" hx-swap-oob="innerHTML"' in html and "Why it ended" in html
    assert 'id="job-events" hx-swap-oob="innerHTML"' in html and "data-poll" in html


def test_a_finished_job_shows_no_actions_and_stops_polling(world, client_for):
    job = job_in(world.nlp, [(P5, 1)], name="done", user=world.ana)
    world.run_pass()
    job_report(job_id=job.pk, status=JobStatus.RUNNING)
    job_report(job_id=job.pk, status=JobStatus.SUCCEEDED, reason="exit 0")
    html = (
        client_for(world.ana)
        .get(reverse("job_detail", args=[job.pk]), headers=htmx_headers("job-live"))
        .content.decode()
    )
    assert "SUCCEEDED" in html and "Change priority" not in html and "Cancel job" not in html
    assert "data-poll" not in html and "hx-trigger" not in html and "Not placed yet" not in html


def test_an_action_the_job_has_moved_past_is_refused_in_place_with_409(world, client_for):
    job = job_in(world.nlp, [(P5, 1)], name="gone", user=world.ana)
    client = client_for(world.ana)
    job_cancel(job_id=job.pk, actor=world.ben)
    response = client.post(reverse("job_priority", args=[job.pk]), {"scheduling_priority": 9})
    html = response.content.decode()
    assert response.status_code == 409 and 'class="refusal" role="alert"' in html
    assert "gone has already ended (CANCELLED), so it can no longer change priority" in html
    assert "<h1>gone" in html and "Change priority" not in html
    response = client.post(reverse("job_cancel", args=[job.pk]), {"reason": "late"})
    assert response.status_code == 409 and "can no longer be cancelled" in response.content.decode()
    assert client.get(reverse("job_cancel", args=[job.pk])).status_code == 409


def test_cancelling_asks_for_confirmation_first(world, client_for):
    job = job_in(world.nlp, [(P5, 1)], name="mine", user=world.ana)
    client = client_for(world.ana)
    page = client.get(reverse("job_detail", args=[job.pk])).content.decode()
    # a real button, first among the actions
    assert f'action="{reverse("job_cancel", args=[job.pk])}"' in page
    assert page.index('class="danger cancel-button">Cancel job…</button>') < page.index("Change priority")
    confirm = client.get(reverse("job_cancel", args=[job.pk])).content.decode()
    assert "Cancel mine?" in confirm and "Yes, cancel mine" in confirm and "No, keep it" in confirm
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNABLE


def test_the_submitter_changes_priority_and_cancels(world, client_for):
    job = job_in(world.nlp, [(P5, 1)], name="mine", user=world.ana)
    client = client_for(world.ana)
    page = client.get(reverse("job_detail", args=[job.pk])).content.decode()
    assert "Change priority" in page and "Cancel job" in page
    client.post(reverse("job_priority", args=[job.pk]), {"scheduling_priority": 77})
    job.refresh_from_db()
    assert job.scheduling_priority == 77
    assert Event.objects.filter(kind=EventKind.CONFIG_CHANGED, job=job).exists()
    response = client.post(reverse("job_cancel", args=[job.pk]), {"reason": "wrong image"}, follow=True)
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED and "cancelled by ana: wrong image" in job.status_reason
    assert "Cancelled mine." in response.content.decode()


def test_a_teammate_who_is_not_a_manager_sees_no_actions_and_is_refused(world, client_for):
    job = job_in(world.nlp, [(P5, 1)], name="bens", user=world.ben)
    client = client_for(world.ana)
    assert "Cancel job" not in client.get(reverse("job_detail", args=[job.pk])).content.decode()
    response = client.post(reverse("job_cancel", args=[job.pk]))
    assert response.status_code == 403 and b"only the submitter" in response.content
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNABLE
    assert (
        client_for(world.ben)
        .post(reverse("job_priority", args=[job.pk]), {"scheduling_priority": 5})
        .status_code
        == 302
    )


def test_a_bad_priority_is_refused_with_a_message(world, client_for):
    job = job_in(world.nlp, [(P5, 1)], name="mine", user=world.ana)
    response = client_for(world.ana).post(
        reverse("job_priority", args=[job.pk]), {"scheduling_priority": 10000}, follow=True
    )
    assert "less than or equal to 9999" in response.content.decode()


# --- budgets ------------------------------------------------------------------------------------------------


def test_job_pages_keep_their_query_budgets(world, client_for, django_assert_max_num_queries):
    for i in range(30):
        job_in(world.nlp, [(P5, 1), (P4, 1)], name=f"j{i}", user=world.ana)
    world.run_pass()
    job = Job.objects.filter(status=JobStatus.SCHEDULED).first()
    client = client_for(world.ana)
    # session + user, viewer, count, page, and the filter form's choices (queues, shares, teams); and the words
    # of the clauses of the page's reasons, when this process has not read them all before
    with django_assert_max_num_queries(9):
        assert client.get(reverse("job_list")).status_code == 200
    with django_assert_max_num_queries(6):
        assert client.get(reverse("job_list"), headers=htmx_headers("job-table")).status_code == 200
    with django_assert_max_num_queries(6):  # a search is one more condition on the same two reads
        assert (
            client.get(reverse("job_list"), {"q": "j1"}, headers=htmx_headers("job-table")).status_code == 200
        )
    # session + user, viewer, job, preferences, attempts, their tasks, events, and for a job placed but not taken the
    # executors' last offers
    with django_assert_max_num_queries(9):
        assert client.get(reverse("job_detail", args=[job.pk])).status_code == 200
    with django_assert_max_num_queries(9):  # the live region carries the actions, attempts and events too
        assert (
            client.get(reverse("job_detail", args=[job.pk]), headers=htmx_headers("job-live")).status_code
            == 200
        )
    # session + user, the choices (shares, instance types, plans), and the queues on offer, for what their
    # environments need in a payload
    with django_assert_max_num_queries(6):
        assert client.get(reverse("job_new")).status_code == 200
    data = form_data(world, [(P5, 1, None), (P4, 1, None), (G5, 1, None)])
    with django_assert_max_num_queries(
        15
    ):  # the chosen rows' lookups, then the rules' reads for the whole list
        assert client.post(reverse("job_new_validate"), data, headers=htmx_headers()).status_code == 200
    with django_assert_max_num_queries(
        8
    ):  # the chosen share, and its queue's choices read once for every row
        assert (
            client.post(
                reverse("job_new_rows"), {**data, "action": "add"}, headers=htmx_headers("preferences")
            ).status_code
            == 200
        )


def test_numbers_too_large_to_store_are_refused_on_the_field(world, client_for):
    data = form_data(world, [(P5, 1, None)], duration_seconds=2**31, max_pending_seconds=-1)
    response = client_for(world.ana).post(reverse("job_new_validate"), data, headers=htmx_headers())
    html = response.content.decode()
    duration = html[html.index('id="errors-duration_seconds"') :]
    assert "less than or equal to 2147483647" in duration[:200]
    pending = html[html.index('id="errors-max_pending_seconds"') :]
    assert "greater than or equal to 1" in pending[:200]
    assert not Job.objects.exists()
