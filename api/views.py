"""The API's views (api.md): validate with a serializer, call one service or selector, answer.

Domain errors are not caught here: `api.exceptions.api_exception_handler` maps them to HTTP.
Every list reads a constant number of queries whatever its page size (tests/api/test_query_budget.py).
"""

from __future__ import annotations

import time
from functools import cached_property

from django.db.models import Prefetch, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from api import serializers as s
from api.filters import EventFilter, JobFilter, QuotaShareFilter, TrainingPlanFilter
from api.pagination import IdCursors
from api.permissions import (
    CanReportJobStatus,
    IsStaff,
    IsStaffOrReadOnly,
    IsStaffOrTeamManager,
    api_viewer,
    sees_all_jobs,
)
from api.schema import ApiAutoSchema
from api.throttling import SubmissionRateThrottle
from scheduling.models import (
    HOLDING_STATUSES,
    EnvironmentCapacity,
    Event,
    InstanceType,
    Job,
    JobQueue,
    Membership,
    QuotaShare,
    ServiceEnvironment,
    ShareCapacityLimit,
    Team,
    TrainingPlan,
    pending_words_load,
)
from scheduling.passes import run as passes
from scheduling.passes.work import work_version, work_wait
from scheduling.selectors.events import events_visible_to
from scheduling.selectors.jobs import jobs_for_user, jobs_in_full
from scheduling.selectors.queue import QueueSnapshot, queue_snapshot
from scheduling.selectors.visibility import Viewer
from scheduling.services import configuration as config_services
from scheduling.services import executor as executor_services
from scheduling.services import gangs
from scheduling.services import jobs as job_services

SNAPSHOT_JOBS = 100


class ApiViewSet(viewsets.GenericViewSet):
    schema = ApiAutoSchema()
    # Any id segment reaches the view, so `/jobs/1.5/` is the API's JSON 404, not the site's HTML one.
    lookup_value_regex = "[^/]+"
    # PATCH changes what it names; there is no PUT.
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    conflict_actions: tuple[str, ...] = ()


# --- configuration ---------------------------------------------------------------------------------------


class ConfigViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    ApiViewSet,
):
    """Read: any signed-in user. Write: staff, through a service that records the CONFIG_CHANGED event."""

    permission_classes = [IsAuthenticated, IsStaffOrReadOnly]

    def perform_create(self, serializer):
        obj = self.create_object(dict(serializer.validated_data))
        serializer.instance = self.get_queryset().get(pk=obj.pk)

    def perform_update(self, serializer):
        obj = self.update_object(serializer.instance, dict(serializer.validated_data))
        serializer.instance = self.get_queryset().get(pk=obj.pk)

    def perform_destroy(self, instance):
        config_services.config_object_delete(obj=instance, actor=self.request.user)

    def create_object(self, data: dict):
        return config_services.config_object_create(
            model=self.queryset.model, fields=data, actor=self.request.user
        )

    def update_object(self, obj, data: dict):
        return config_services.config_object_update(obj=obj, changes=data, actor=self.request.user)


_limits = Prefetch("capacity_limits", queryset=EnvironmentCapacity.objects.select_related("instance_type"))
_share_limits = Prefetch(
    "capacity_limits", queryset=ShareCapacityLimit.objects.select_related("instance_type")
)


class InstanceTypeViewSet(ConfigViewSet):
    queryset = InstanceType.objects.all()
    serializer_class = s.InstanceTypeSerializer


class TeamViewSet(ConfigViewSet):
    queryset = Team.objects.prefetch_related(
        Prefetch("memberships", queryset=Membership.objects.select_related("user").order_by("user__username"))
    )
    serializer_class = s.TeamSerializer

    def perform_destroy(self, instance):
        config_services.team_delete(team=instance, actor=self.request.user)

    @extend_schema(
        request=s.TeamMemberSerializer,
        responses={
            201: s.MemberSerializer,
            200: OpenApiResponse(s.MemberSerializer, "the user's role changed"),
        },
        summary="Add a member to the team, or change a member's role (staff, or a manager of the team)",
    )
    @action(
        detail=True,
        methods=["post"],
        serializer_class=s.TeamMemberSerializer,
        permission_classes=[IsAuthenticated, IsStaffOrTeamManager],
    )
    def members(self, request, pk=None):
        team = self.get_object()
        serializer = s.TeamMemberSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        membership, created = config_services.team_member_set(
            team=team,
            user=serializer.validated_data["username"],
            role=serializer.validated_data["role"],
            actor=request.user,
        )
        return Response(
            s.MemberSerializer(membership).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class ServiceEnvironmentViewSet(ConfigViewSet):
    queryset = ServiceEnvironment.objects.prefetch_related(_limits)
    serializer_class = s.ServiceEnvironmentSerializer

    def get_queryset(self):
        queryset = super().get_queryset()
        # Only staff are shown the executor accounts (the serializer leaves the field out for others).
        return queryset.prefetch_related("executor_accounts") if self.request.user.is_staff else queryset

    def create_object(self, data: dict):
        limits = s.limit_inputs(data.pop("capacity_limits"))
        accounts = data.pop("executor_accounts", [])
        return config_services.service_environment_create(
            fields=data, limits=limits, actor=self.request.user, executor_accounts=accounts
        )

    def update_object(self, obj, data: dict):
        limits = s.limit_inputs(data.pop("capacity_limits", None))
        accounts = data.pop("executor_accounts", None)
        return config_services.service_environment_update(
            environment=obj, changes=data, limits=limits, actor=self.request.user, executor_accounts=accounts
        )

    @extend_schema(
        parameters=[s.WorkQuerySerializer],
        responses={200: s.WorkSerializer, 409: OpenApiResponse(s.ErrorSerializer, "a simulated environment")},
        summary="An external executor takes work: jobs to start (taken by this answer) and jobs to stop",
        description=(
            "Each job in `start` is claimed for the caller: no other executor gets it, and its lease runs "
            "from now (report at least every `lease_seconds`, naming `attempt`). Each job in `stop` must be "
            "sent SIGTERM, killed at `deadline`, then reported STOPPED. With `wait=N` the request is held up "
            "to N seconds until there is some work, and answers with empty lists otherwise. With `free_slots=N` "
            "only jobs whose instances fit in N are handed out. With `gang=true` (and `free_slots`) the executor "
            "takes tasks: it may claim part of a job of several instances, and the answer is "
            "`{start, go, stop}` (GangWork): start nothing until the task's roster is out (in its start entry, "
            "or later in `go`)."
        ),
    )
    @action(
        detail=True,
        methods=["get"],
        serializer_class=s.WorkSerializer,
        permission_classes=[IsAuthenticated, CanReportJobStatus],
        filter_backends=[],
        pagination_class=None,
    )
    def work(self, request, pk=None):
        environment = self.get_object()
        executor_services.executor_serves_check(actor=request.user, environment=environment)
        query = s.WorkQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        until = time.monotonic() + params["wait"]
        executor = executor_services.executor_seen(
            environment=environment,
            name=params["executor"] or request.user.get_username(),
            host=params["host"],
            now=timezone.now(),
            instance_type=params.get("instance_type") or "",
            free_slots=params["free_slots"],
            gang_capable=params["gang"],
            total_slots=params["slots"],
            address=params["address"] or request.META.get("REMOTE_ADDR", ""),
            ports=params["ports"],
        )
        if params["gang"]:
            return self._gang_work(environment, executor, params, until)
        while True:
            seen = work_version(environment.pk)  # before the read: a change after it ends the wait
            work = executor_services.executor_work_take(
                environment=environment,
                executor=executor,
                instance_type=params.get("instance_type"),
                free_slots=params["free_slots"],
            )
            if work.start or work.stop or time.monotonic() >= until:
                return Response(s.WorkSerializer({"start": work.start, "stop": work.stop}).data)
            work_wait(environment_id=environment.pk, seen=seen, until=until)

    def _gang_work(self, environment, executor, params, until):
        """The poll of an executor that takes tasks: claims, rosters out (`go`) and stops; a slot it frees
        meanwhile (POST .../offer/) is claimed with in the same wait."""
        free_slots = params["free_slots"]
        while True:
            seen = work_version(environment.pk)
            work = gangs.gang_work_take(
                environment=environment,
                executor=executor,
                instance_type=params.get("instance_type"),
                free_slots=free_slots,
            )
            if work.start or work.go or work.stop or time.monotonic() >= until:
                body = {"start": work.start, "go": work.go, "stop": work.stop}
                return Response(s.GangWorkSerializer(body).data)
            work_wait(environment_id=environment.pk, seen=seen, until=until)
            free_slots = gangs.offered_slots(executor=executor)

    @extend_schema(
        request=s.OfferSerializer,
        responses={204: None},
        summary="An executor that takes tasks says its free slots changed (its waiting poll claims with them)",
    )
    @action(
        detail=True,
        methods=["post"],
        serializer_class=s.OfferSerializer,
        permission_classes=[IsAuthenticated, CanReportJobStatus],
        filter_backends=[],
        pagination_class=None,
    )
    def offer(self, request, pk=None):
        environment = self.get_object()
        executor_services.executor_serves_check(actor=request.user, environment=environment)
        body = s.OfferSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        gangs.offer_update(
            environment=environment,
            name=body.validated_data["executor"],
            free_slots=body.validated_data["free_slots"],
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class JobQueueViewSet(ConfigViewSet):
    queryset = JobQueue.objects.select_related("service_environment")
    serializer_class = s.JobQueueSerializer

    def update_object(self, obj, data: dict):
        return config_services.job_queue_update(job_queue=obj, changes=data, actor=self.request.user)

    def perform_destroy(self, instance):
        config_services.job_queue_delete(job_queue=instance, actor=self.request.user)

    @extend_schema(
        request=None,
        responses=s.ScheduleResultSerializer,
        summary="Run one scheduling pass over the queue now, synchronously (staff)",
    )
    @action(
        detail=True,
        methods=["post"],
        serializer_class=s.ScheduleResultSerializer,
        permission_classes=[IsAuthenticated, IsStaff],
    )
    def schedule(self, request, pk=None):
        job_queue = self.get_object()
        result = passes.queue_pass_run(job_queue_id=job_queue.pk, trigger="api")
        body = {"admitted": result.admitted, "preempted": result.preempted, "duration_ms": result.duration_ms}
        return Response(s.ScheduleResultSerializer(body).data)

    @extend_schema(
        responses=s.QueueSnapshotSerializer,
        summary="RUNNABLE jobs in order, and per share and type: limit, usage, borrowed, lent",
    )
    @action(detail=True, methods=["get"], serializer_class=s.QueueSnapshotSerializer)
    def snapshot(self, request, pk=None):
        snapshot = queue_snapshot(job_queue=self.get_object(), now=timezone.now(), job_limit=SNAPSHOT_JOBS)
        # Other teams' jobs in aggregate only: their place in the order, never their names or reasons.
        body = s.QueueSnapshotSerializer(
            _snapshot_body(snapshot), context={"viewer": api_viewer(request.user)}
        )
        return Response(body.data)


def _snapshot_body(snapshot: QueueSnapshot) -> dict:
    shares = [
        {
            "id": share.id,
            "name": share.name,
            "team": snapshot.team_slugs[share.team_id],
            "strategy": share.strategy,
            "state": share.state,
            "borrow_limit": share.borrow_limit,
            "in_share_preemption": share.in_share_preemption,
            "pending": share.pending,
            "limit": share.limit,
            "usage": share.usage,
            "borrowed": share.borrowed,
            "lent": share.lent,
            "instance_types": share.rows,
            "borrows_from": [
                {"share": lender, "instance_type": type_, "instances": n}
                for lender, type_, n in share.borrows_from
            ],
            "lends_to": [
                {"share": borrower, "instance_type": type_, "instances": n}
                for borrower, type_, n in share.lends_to
            ],
        }
        for share in snapshot.usage.shares
    ]
    return {
        "job_queue": snapshot.job_queue.name,
        "state": snapshot.job_queue.state,
        "taken_at": snapshot.taken_at,
        "idle_capacity_assignment": snapshot.job_queue.idle_capacity_assignment,
        "runnable_count": snapshot.runnable_count,
        "jobs": snapshot.jobs,
        "shares": shares,
        "instance_types": snapshot.usage.types,
        "plans": snapshot.usage.plans,
    }


@extend_schema_view(list=extend_schema(summary="Quota shares; ?job_queue=NAME for one queue's"))
class QuotaShareViewSet(ConfigViewSet):
    queryset = QuotaShare.objects.select_related("job_queue", "team").prefetch_related(_share_limits)
    serializer_class = s.QuotaShareSerializer
    filterset_class = QuotaShareFilter

    def create_object(self, data: dict):
        limits = s.limit_inputs(data.pop("capacity_limits"))
        return config_services.quota_share_create(fields=data, limits=limits, actor=self.request.user)

    def update_object(self, obj, data: dict):
        limits = s.limit_inputs(data.pop("capacity_limits", None))
        return config_services.quota_share_update(
            share=obj, changes=data, limits=limits, actor=self.request.user
        )

    @extend_schema(summary="Delete a DISABLED share; its unfinished jobs are cancelled")
    def destroy(self, request, *args, **kwargs):
        return super().destroy(request, *args, **kwargs)

    def perform_destroy(self, instance):
        config_services.quota_share_delete(share=instance, actor=self.request.user)


class TrainingPlanViewSet(ConfigViewSet):
    queryset = (
        TrainingPlan.objects.select_related("job_queue", "instance_type")
        .prefetch_related("quota_shares")
        .annotate(
            in_use_instance_count=Coalesce(
                Sum("jobs__selected_instance_count", filter=Q(jobs__status__in=HOLDING_STATUSES)), 0
            )
        )
        .order_by("start_time", "name")
    )
    serializer_class = s.TrainingPlanSerializer
    filterset_class = TrainingPlanFilter

    def create_object(self, data: dict):
        quota_shares = data.pop("quota_shares", [])
        return config_services.training_plan_create(
            fields=data, quota_shares=quota_shares, actor=self.request.user
        )

    def update_object(self, obj, data: dict):
        quota_shares = data.pop("quota_shares", None)
        return config_services.training_plan_update(
            plan=obj, changes=data, quota_shares=quota_shares, actor=self.request.user
        )


# --- jobs ------------------------------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(summary="Jobs of your teams (staff and executor accounts: all jobs)"),
    retrieve=extend_schema(summary="A job of one of your teams"),
)
class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ApiViewSet):
    """A member sees and touches only their teams' jobs: another team's job is a 404, never a 403."""

    serializer_class = s.JobSerializer
    filterset_class = JobFilter
    pagination_class = IdCursors  # newest first
    permission_classes = [IsAuthenticated]
    conflict_actions = ("partial_update", "cancel", "report")
    throttled_actions = ("create",)
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_throttles(self):
        if self.action in self.throttled_actions:
            return [SubmissionRateThrottle()]
        return super().get_throttles()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no user
            return Job.objects.none()
        return jobs_for_user(user=self.request.user, sees_all=sees_all_jobs(self.request.user))

    def paginate_queryset(self, queryset):
        page = super().paginate_queryset(queryset)
        if page is not None:
            pending_words_load(page)  # the page's reasons, worded in one query
        return page

    def _job_body(self, job_id: int) -> dict:
        return s.JobSerializer(jobs_in_full().get(pk=job_id), context=self.get_serializer_context()).data

    @extend_schema(
        request=s.JobSerializer,
        responses={
            201: s.JobSerializer,
            200: OpenApiResponse(s.JobSerializer, "a repeated client_token: the job it submitted"),
        },
        summary="Submit a job to a quota share of one of your teams",
    )
    def create(self, request):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        job, created = job_services.job_submit(user=request.user, submission=serializer.to_submission())
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(self._job_body(job.pk), status=code)

    @extend_schema(
        request=s.JobPriorityUpdateSerializer,
        responses=s.JobSerializer,
        summary="Change scheduling_priority (the submitter, team managers, staff)",
    )
    def partial_update(self, request, pk=None):
        job = self.get_object()
        serializer = s.JobPriorityUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        job_services.job_set_priority(
            job_id=job.pk, priority=serializer.validated_data["scheduling_priority"], actor=request.user
        )
        return Response(self._job_body(job.pk))

    @extend_schema(
        request=s.JobCancelSerializer,
        responses=s.JobSerializer,
        summary="Cancel an unfinished job (the submitter, team managers, staff)",
    )
    @action(detail=True, methods=["post"], serializer_class=s.JobCancelSerializer)
    def cancel(self, request, pk=None):
        job = self.get_object()
        serializer = s.JobCancelSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        job_services.job_cancel(job_id=job.pk, actor=request.user, reason=serializer.validated_data["reason"])
        return Response(self._job_body(job.pk))

    @extend_schema(
        request=s.JobReportSerializer,
        responses={
            200: s.JobSerializer,
            409: OpenApiResponse(s.ErrorSerializer, "a stale attempt, or a move the job's status forbids"),
        },
        summary="An executor reports on one attempt of a job (staff, report_job_status)",
        description=(
            "Every report renews the job's lease. Repeating a report, or the report that ended the attempt, "
            "is harmless (200, nothing changes). A report naming an earlier attempt is refused (409) and "
            "never touches the current one."
        ),
    )
    @action(
        detail=True,
        methods=["post"],
        serializer_class=s.JobReportSerializer,
        permission_classes=[IsAuthenticated, CanReportJobStatus],
    )
    def report(self, request, pk=None):
        job = self.get_object()
        serializer = s.JobReportSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        executor_services.job_report(job_id=job.pk, actor=request.user, **serializer.validated_data)
        return Response(self._job_body(job.pk))


# --- events ----------------------------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(
        summary="Events, newest first; with since or since_id, the ones after it, oldest first (for tailing)"
    )
)
class EventViewSet(mixins.ListModelMixin, ApiViewSet):
    """A member reads their teams' events and the configuration's (api.md), decided by each event's team; a job
    inside an event is a summary, never its payload, and another team's job has no name."""

    serializer_class = s.EventSerializer
    filterset_class = EventFilter
    pagination_class = IdCursors  # newest first by id; tails oldest first
    permission_classes = [IsAuthenticated]

    @cached_property
    def viewer(self) -> Viewer:
        return api_viewer(self.request.user)

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if not getattr(self, "swagger_fake_view", False):  # the schema generator has no user
            context["viewer"] = self.viewer
        return context

    def tail_ordering(self, request) -> tuple[str, ...] | None:
        """With `since_id` or `since` the list is a tail, oldest first: by id after an id, by time after a time
        (an order the created_at indexes read from any point; ids and times need not agree)."""
        if request.query_params.get("since_id"):
            return ("id",)
        if request.query_params.get("since"):
            return ("created_at", "id")
        return None

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Event.objects.none()
        events = (
            Event.objects.filter(events_visible_to(self.viewer))
            .select_related(
                "job_queue",
                "job__team",
                "quota_share",
                "other_job__team",
                "other_share",
                "instance_type",
                "actor",
            )
            .defer("job__payload", "other_job__payload")
        )
        # The pagination orders by id (IdCursors), the one order every page can seek to by index.
        return events.order_by("-id")
