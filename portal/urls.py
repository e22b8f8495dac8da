"""The pages' URLs (pages.md). The API lives under /api/v1/ (api/urls.py)."""

from django.urls import path

from portal.views import events, jobs, manage, overview, people, shares

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("shares/<int:share_id>/", shares.share_detail, name="share_detail"),
    path("jobs/", jobs.job_list, name="job_list"),
    path("jobs/new/", jobs.job_new, name="job_new"),
    path("jobs/new/rows/", jobs.job_new_rows, name="job_new_rows"),
    path("jobs/new/validate/", jobs.job_new_validate, name="job_new_validate"),
    path("jobs/<int:job_id>/", jobs.job_detail, name="job_detail"),
    path("jobs/<int:job_id>/cancel/", jobs.job_cancel, name="job_cancel"),
    path("jobs/<int:job_id>/priority/", jobs.job_priority, name="job_priority"),
    path("events/", events.event_log, name="event_log"),
    path("profile/", people.profile, name="profile"),
    path("teams/", people.team_list, name="team_list"),
    path("teams/<int:team_id>/", people.team_detail, name="team_detail"),
    path(
        "teams/<int:team_id>/members/<int:user_id>/remove/",
        people.team_member_remove,
        name="team_member_remove",
    ),
    path("manage/queues/", manage.queue_list, name="manage_queues"),
    path("manage/queues/new/", manage.queue_edit, name="manage_queue_new"),
    path("manage/queues/<int:queue_id>/", manage.queue_edit, name="manage_queue_edit"),
    path("manage/environments/", manage.environment_list, name="manage_environments"),
    path("manage/environments/new/", manage.environment_edit, name="manage_environment_new"),
    path(
        "manage/environments/<int:environment_id>/", manage.environment_edit, name="manage_environment_edit"
    ),
    path("manage/shares/", manage.share_list, name="manage_shares"),
    path("manage/shares/new/", manage.share_edit, name="manage_share_new"),
    path("manage/shares/check/", manage.share_limits_check, name="manage_share_check"),
    path("manage/shares/<int:share_id>/", manage.share_edit, name="manage_share_edit"),
    path("manage/shares/<int:share_id>/check/", manage.share_limits_check, name="manage_share_edit_check"),
    path("manage/plans/", manage.plan_timeline, name="manage_plans"),
    path("manage/plans/new/", manage.plan_edit, name="manage_plan_new"),
    path("manage/plans/<int:plan_id>/", manage.plan_edit, name="manage_plan_edit"),
]
