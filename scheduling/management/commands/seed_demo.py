"""A realistic demo organisation, safe to run again (it converges to the same configuration).

Its accounts' passwords are published (README, `make run`), so with DEBUG off it refuses to run; `--force`
runs it anyway and gives the accounts it creates random passwords, printed once.
"""

from __future__ import annotations

import random
import secrets
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token

from scheduling import rules
from scheduling.models import (
    EnvironmentCapacity,
    InstanceType,
    JobQueue,
    Membership,
    QuotaShare,
    ServiceEnvironment,
    ShareCapacityLimit,
    Team,
    TrainingPlan,
)
from scheduling.services import demo
from scheduling.services import jobs as job_services

ADMIN = ("admin", "quotaportal-admin")
DEMO_PASSWORD = "quotaportal-demo"

INSTANCE_TYPES = [
    # name, GPUs, on-demand $/hour
    ("ml.p5.48xlarge", 8, Decimal("98.3200")),
    ("ml.p4d.24xlarge", 8, Decimal("37.6880")),
    ("ml.g5.12xlarge", 4, Decimal("7.0900")),
    ("ml.m5.xlarge", 0, Decimal("0.2300")),
]
CAPACITY = {"ml.p5.48xlarge": 8, "ml.p4d.24xlarge": 16, "ml.g5.12xlarge": 24}

TEAMS = {
    # slug: (name, [(username, role)])
    "nlp": ("NLP", [("ana", "member"), ("ben", "manager")]),
    "vision": ("Vision", [("chen", "member"), ("dana", "manager")]),
    "speech": ("Speech", [("eli", "member"), ("fatima", "manager")]),
    "research": ("Research", [("gus", "member"), ("ana", "member"), ("hana", "manager")]),
}

SHARES = [
    # name, team, strategy, borrow_limit, in_share_preemption, limits
    ("nlp", "nlp", "RESERVE", -1, False, {"ml.p5.48xlarge": 4, "ml.p4d.24xlarge": 4}),
    ("vision", "vision", "LEND_AND_BORROW", 100, False, {"ml.p4d.24xlarge": 6, "ml.g5.12xlarge": 8}),
    ("speech", "speech", "LEND", -1, False, {"ml.p4d.24xlarge": 4, "ml.g5.12xlarge": 8}),
    ("research", "research", "LEND_AND_BORROW", -1, True, {"ml.p5.48xlarge": 2, "ml.g5.12xlarge": 4}),
]

# Preference lists the demo jobs draw from: (type, count, plan) entries in order.
PREFERENCE_LISTS = {
    "nlp": [
        [("ml.p5.48xlarge", 2, "nlp-p5-december"), ("ml.p5.48xlarge", 2, None), ("ml.p4d.24xlarge", 2, None)],
        [("ml.p4d.24xlarge", 1, None), ("ml.p5.48xlarge", 1, None)],
        [("ml.p5.48xlarge", 1, None)],
    ],
    "vision": [
        [("ml.p4d.24xlarge", 2, None), ("ml.g5.12xlarge", 4, None)],
        [("ml.g5.12xlarge", 2, None)],
        [("ml.g5.12xlarge", 6, None), ("ml.p4d.24xlarge", 3, None)],
    ],
    "speech": [
        [("ml.g5.12xlarge", 2, None), ("ml.p4d.24xlarge", 1, None)],
        [("ml.p4d.24xlarge", 2, None)],
    ],
    "research": [
        [("ml.p5.48xlarge", 1, "nlp-p5-december"), ("ml.g5.12xlarge", 2, None)],
        [("ml.g5.12xlarge", 1, None)],
        [("ml.g5.12xlarge", 3, None), ("ml.p5.48xlarge", 1, None)],
    ],
}
JOB_NAMES = ["pretrain", "finetune", "eval-sweep", "distill", "ablation", "nightly-retrain", "hparam-search"]


class Command(BaseCommand):
    help = "Create (or bring back) the demo organisation: teams, a queue with shares of every strategy, a plan, jobs."

    def add_arguments(self, parser):
        parser.add_argument("--jobs", type=int, default=36, help="demo jobs to submit (default 36)")
        parser.add_argument(
            "--force",
            action="store_true",
            help="run with DEBUG off: the accounts it creates get random passwords, shown once",
        )

    @transaction.atomic
    def handle(self, *args, jobs: int, force: bool = False, **options):
        if not settings.DEBUG and not force:
            raise CommandError(
                f"seed_demo creates a superuser {ADMIN[0]!r} and team members whose passwords are published, "
                "and DEBUG is off: this looks like a production server. Run it with DEBUG=1 on a development "
                "machine, or with --force to create the accounts with random passwords, printed once."
            )
        published = settings.DEBUG
        admin_password = ADMIN[1] if published else secrets.token_urlsafe(16)
        member_password = DEMO_PASSWORD if published else secrets.token_urlsafe(16)
        User = get_user_model()
        admin, created = User.objects.get_or_create(
            username=ADMIN[0], defaults={"email": "admin@example.com"}
        )
        admin.is_staff = admin.is_superuser = True
        if created:
            admin.set_password(admin_password)
        admin.save()
        made_users = [ADMIN[0]] if created else []

        types = {}
        for name, gpus, price in INSTANCE_TYPES:
            types[name], _ = InstanceType.objects.update_or_create(
                name=name, defaults={"gpu_count": gpus, "hourly_price": price}
            )

        environment, _ = ServiceEnvironment.objects.get_or_create(name="gpu-fleet")
        for name, maximum in CAPACITY.items():
            EnvironmentCapacity.objects.update_or_create(
                service_environment=environment, instance_type=types[name], defaults={"max_capacity": maximum}
            )
        queue, _ = JobQueue.objects.get_or_create(
            name="training", defaults={"service_environment": environment, "priority": 500}
        )

        teams = {}
        for slug, (name, members) in TEAMS.items():
            teams[slug], _ = Team.objects.get_or_create(slug=slug, defaults={"name": name})
            for username, role in members:
                user, made = User.objects.get_or_create(
                    username=username,
                    defaults={"email": f"{username}@example.com", "first_name": username.title()},
                )
                if made:
                    user.set_password(member_password)
                    user.save()
                    made_users.append(username)
                Membership.objects.update_or_create(team=teams[slug], user=user, defaults={"role": role})

        shares = {}
        for name, team, strategy, borrow_limit, in_share, limits in SHARES:
            existing = QuotaShare.objects.filter(job_queue=queue, name=name).first()
            rules.validate_quota_share(
                share=existing,
                job_queue=queue,
                name=name,
                strategy=strategy,
                borrow_limit=borrow_limit,
                limits=[rules.LimitInput(types[t], n) for t, n in limits.items()],
            )
            shares[name], _ = QuotaShare.objects.update_or_create(
                job_queue=queue,
                name=name,
                defaults={
                    "team": teams[team],
                    "strategy": strategy,
                    "borrow_limit": borrow_limit,
                    "in_share_preemption": in_share,
                },
            )
            for type_name, maximum in limits.items():
                ShareCapacityLimit.objects.update_or_create(
                    quota_share=shares[name],
                    instance_type=types[type_name],
                    defaults={"max_capacity": maximum},
                )

        now = timezone.now()
        plan, made = TrainingPlan.objects.get_or_create(
            name="nlp-p5-december",
            defaults={
                "job_queue": queue,
                "instance_type": types["ml.p5.48xlarge"],
                "instance_count": 4,
                "start_time": now - timedelta(days=1),
                "end_time": now + timedelta(days=30),
            },
        )
        if made:
            plan.quota_shares.set([shares["nlp"], shares["research"]])
        if plan.end_time < now + timedelta(days=2):
            # Keep the demo's plan active on a machine seeded long ago.
            plan.start_time, plan.end_time = now - timedelta(days=1), now + timedelta(days=30)
            plan.save(update_fields=["start_time", "end_time"])

        # The reclaim's borrower first, so the first pass places its long jobs before the others'.
        submitted = demo.demo_borrower_jobs_submit(job_queue=queue)
        submitted += self._submit_jobs(
            queue=queue, shares=shares, types=types, plans={plan.name: plan}, count=jobs
        )
        local_queue, token_file = self._local(teams=teams)
        submitted += demo.demo_local_jobs_submit(job_queue=local_queue)
        summary = (
            f"demo ready: queue {queue.name} with {len(shares)} shares, plan {plan.name}, "
            f"{submitted} new job(s); speech's jobs arrive in {demo.LENDERS_ARRIVE_AFTER_SECONDS} s and reclaim "
            f"what vision borrowed; on environment {demo.LOCAL_QUEUE}, the agent (token in {token_file}) runs "
            f"real processes, and nlp reclaims from vision in {demo.LOCAL_LENDERS_ARRIVE_AFTER_SECONDS} s"
        )
        if published:
            self.stdout.write(
                self.style.SUCCESS(f"{summary}; sign in as {ADMIN[0]} / {ADMIN[1]}, or ana / {DEMO_PASSWORD}")
            )
            return
        self.stdout.write(self.style.SUCCESS(summary))
        if ADMIN[0] in made_users:
            self.stdout.write(f"superuser {ADMIN[0]}, password (shown only now): {admin_password}")
        members = [name for name in made_users if name != ADMIN[0]]
        if members:
            self.stdout.write(f"{', '.join(members)}, password (shown only now): {member_password}")
        if not made_users:
            self.stdout.write("no account was created: existing passwords are unchanged")

    def _local(self, *, teams) -> tuple[JobQueue, str]:
        """The `local` environment (external executor, a few slots of this machine), its queue and shares, and
        the agent's account; its token is written to DEMO_AGENT_TOKEN_FILE for the Procfile's agent."""
        slot, _ = InstanceType.objects.update_or_create(
            name=demo.LOCAL_TYPE, defaults={"gpu_count": 0, "hourly_price": None}
        )
        environment, _ = ServiceEnvironment.objects.update_or_create(
            name=demo.LOCAL_QUEUE,
            defaults={
                "executor": ServiceEnvironment.Executor.EXTERNAL,
                "stop_grace_seconds": demo.LOCAL_STOP_GRACE_SECONDS,
                "lease_seconds": demo.LOCAL_LEASE_SECONDS,
            },
        )
        EnvironmentCapacity.objects.update_or_create(
            service_environment=environment, instance_type=slot, defaults={"max_capacity": demo.LOCAL_SLOTS}
        )
        queue, _ = JobQueue.objects.get_or_create(
            name=demo.LOCAL_QUEUE, defaults={"service_environment": environment, "priority": 500}
        )
        half = demo.LOCAL_SLOTS // 2
        for name, strategy in (("nlp", "LEND"), ("vision", "LEND_AND_BORROW")):
            existing = QuotaShare.objects.filter(job_queue=queue, name=name).first()
            rules.validate_quota_share(
                share=existing,
                job_queue=queue,
                name=name,
                strategy=strategy,
                borrow_limit=-1,
                limits=[rules.LimitInput(slot, half)],
            )
            share, _ = QuotaShare.objects.update_or_create(
                job_queue=queue,
                name=name,
                defaults={"team": teams[name], "strategy": strategy, "borrow_limit": -1},
            )
            ShareCapacityLimit.objects.update_or_create(
                quota_share=share, instance_type=slot, defaults={"max_capacity": half}
            )
        agent, made = get_user_model().objects.get_or_create(
            username="local-agent", defaults={"first_name": "Local agent"}
        )
        if made:
            agent.set_unusable_password()
            agent.save()
        agent.user_permissions.add(Permission.objects.get(codename="report_job_status"))
        queue.service_environment.executor_accounts.add(agent)  # it serves `local`, and only that
        token, _ = Token.objects.get_or_create(user=agent)
        path = Path(settings.DEMO_AGENT_TOKEN_FILE)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text(token.key + "\n")
        return queue, str(path)

    def _submit_jobs(self, *, queue, shares, types, plans, count) -> int:
        rng = random.Random(20171009)
        share_names = sorted(shares)
        made = 0
        for number in range(count):
            share_name = share_names[number % len(share_names)]
            share = shares[share_name]
            submitter = share.team.memberships.order_by("user__username").first().user
            entries = rng.choice(PREFERENCE_LISTS[share_name])
            submission = job_services.JobSubmission(
                name=f"{share_name}-{rng.choice(JOB_NAMES)}-{number + 1:02d}",
                job_queue=queue,
                quota_share=share,
                instance_preferences=[
                    rules.PreferenceInput(types[t], n, plans[p] if p else None) for t, n, p in entries
                ],
                scheduling_priority=rng.choice([0, 0, 10, 50, 100]),
                retry_attempts=2,
                duration_seconds=rng.randint(45, 600),
                payload={
                    "image": f"registry.example.com/{share_name}/trainer:2026.11",
                    "epochs": rng.randint(1, 20),
                },
                client_token=f"demo-{number + 1:03d}",
            )
            _, created = job_services.job_submit(user=submitter, submission=submission)
            made += created
        return made
