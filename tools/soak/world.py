"""The soak's world: its instance types, queues, shares, plan, teams and users, the program its external jobs
run, and the submissions its clients make; set up afresh (and what an earlier soak left removed) on each run."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.utils import timezone
from rest_framework.authtoken.models import Token

from engine import UNLIMITED
from scheduling import rules
from scheduling.models import (
    Event,
    InstanceType,
    Job,
    JobQueue,
    Membership,
    ServiceEnvironment,
    Team,
)
from scheduling.services import configuration as config_services

PREFIX = "soak-"

# Instance types, the simulated queue's capacities, and shares: (name, team, strategy, borrow limit,
# in-share preemption, limits). The limits of each type sum to less than its capacity (a free pool).
TYPES = {"p5": "soak.p5", "p4": "soak.p4", "g5": "soak.g5"}
SIM_CAPACITY = {"p5": 12, "p4": 16, "g5": 24}
SIM_SHARES = [
    ("soak-reserve", "soak-a", "RESERVE", UNLIMITED, False, {"p5": 4, "p4": 4}),
    ("soak-lend", "soak-b", "LEND", UNLIMITED, False, {"p5": 4, "g5": 8}),
    ("soak-borrow", "soak-c", "LEND_AND_BORROW", 100, False, {"p4": 6, "g5": 8}),
    ("soak-greedy", "soak-d", "LEND_AND_BORROW", UNLIMITED, True, {"p5": 2, "p4": 4, "g5": 4}),
]
PLAN = ("soak-plan", "p5", 3, ("soak-reserve", "soak-greedy"))
EXT_CAPACITY = {"g5": 8, "p4": 6}
EXT_SHARES = [
    ("soak-ext-a", "soak-a", "LEND_AND_BORROW", UNLIMITED, False, {"g5": 3}),
    ("soak-ext-c", "soak-c", "LEND", UNLIMITED, False, {"g5": 2, "p4": 4}),
]
SIM_QUEUE, EXT_QUEUE = "soak-sim", "soak-ext"
# The external environment's start deadline: short, so a job placed but not started by all its agents is put
# back within the run (and the check that no capacity is held longer by a job nobody runs means something).
EXT_START_DEADLINE_SECONDS = 30


# An external job's process: it notes when it held which slots (its agent's work dir and GPUs, one per slot) in
# SOAK_SLOTS_LOG, at its start and at its end (also on SIGTERM), sleeps its duration and exits with its code.
SLOT_PROGRAM = """import os, signal, sys, time
def note(what):
    path = os.environ.get("SOAK_SLOTS_LOG")
    if path:
        line = " ".join([f"{{time.time():.3f}}", what, os.environ.get("QUOTAPORTAL_JOB_ID", "?"),
                         os.environ.get("QUOTAPORTAL_ATTEMPT", "?"), os.environ.get("QUOTAPORTAL_TASK", "0"),
                         os.getcwd().rsplit("/jobs/", 1)[0], os.environ.get("CUDA_VISIBLE_DEVICES", "")])
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(descriptor, (line + "\\n").encode())
        os.close(descriptor)
def on_term(number, frame):
    note("end")
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
note("start")
time.sleep({seconds})
note("end")
sys.exit({code})
"""
# The main ports the agents hand out: the soak's jobs bind none (they only sleep), so one range serves all.
AGENT_PORTS = "18250-18299"


def agent_slots(agents: int, *, mixed: bool) -> list[tuple[str, int]]:
    """(type key, slots) per agent, round-robin over the external types. Each holds its type's capacity, or
    (mixed) the first agent of a type all but one slot per other agent of the type and the others one."""
    keys = sorted(EXT_CAPACITY)
    kinds = [keys[i % len(keys)] for i in range(agents)]
    if not mixed:
        return [(key, EXT_CAPACITY[key]) for key in kinds]
    counts = Counter(kinds)
    seen: Counter = Counter()
    slots = []
    for key in kinds:
        slots.append((key, EXT_CAPACITY[key] - (counts[key] - 1) if not seen[key] else 1))
        seen[key] += 1
    return slots


def soak_clean() -> None:
    """Remove what an earlier soak left: its queues with their jobs, shares and plans; types, teams, users."""
    queues = JobQueue.objects.filter(name__startswith=PREFIX)
    Event.objects.filter(job_queue__in=queues).delete()
    Event.objects.filter(job__job_queue__in=queues).delete()
    # Events and jobs keep their team for good (PROTECT), even those whose queue is gone.
    Event.objects.filter(team__slug__startswith=PREFIX).delete()
    Job.objects.filter(job_queue__in=queues).delete()
    Job.objects.filter(team__slug__startswith=PREFIX).delete()
    environments = list(queues.values_list("service_environment_id", flat=True))
    queues.delete()
    ServiceEnvironment.objects.filter(pk__in=environments).delete()
    ServiceEnvironment.objects.filter(name__startswith=PREFIX).delete()
    InstanceType.objects.filter(name__startswith="soak.").delete()
    Team.objects.filter(slug__startswith=PREFIX).delete()
    get_user_model().objects.filter(username__startswith=PREFIX).delete()


def soak_setup(*, clients: int) -> dict:
    """The soak's queues (one `simulated`, one `external`), shares, plan, teams, users and tokens."""
    types = {key: InstanceType.objects.create(name=name, gpu_count=8) for key, name in TYPES.items()}
    teams = {
        slug: Team.objects.create(name=slug, slug=slug) for slug in ("soak-a", "soak-b", "soak-c", "soak-d")
    }
    queues, shares = {}, {}
    for queue_name, executor, capacity, share_specs in (
        (SIM_QUEUE, ServiceEnvironment.Executor.SIMULATED, SIM_CAPACITY, SIM_SHARES),
        (EXT_QUEUE, ServiceEnvironment.Executor.EXTERNAL, EXT_CAPACITY, EXT_SHARES),
    ):
        fields = {"name": f"{queue_name}-env", "executor": executor}
        if executor == ServiceEnvironment.Executor.EXTERNAL:
            fields["start_deadline_seconds"] = EXT_START_DEADLINE_SECONDS
        environment = config_services.service_environment_create(
            fields=fields,
            limits=[rules.LimitInput(types[key], n) for key, n in capacity.items()],
            actor=None,
        )
        queues[queue_name] = config_services.config_object_create(
            model=JobQueue, fields={"name": queue_name, "service_environment": environment}, actor=None
        )
        for name, team, strategy, borrow_limit, preemption, limits in share_specs:
            shares[name] = config_services.quota_share_create(
                fields={
                    "name": name,
                    "job_queue": queues[queue_name],
                    "team": teams[team],
                    "strategy": strategy,
                    "borrow_limit": borrow_limit,
                    "in_share_preemption": preemption,
                },
                limits=[rules.LimitInput(types[key], n) for key, n in limits.items()],
                actor=None,
            )
    plan_name, plan_type, plan_count, plan_shares = PLAN
    now = timezone.now()
    config_services.training_plan_create(
        fields={
            "name": plan_name,
            "job_queue": queues[SIM_QUEUE],
            "instance_type": types[plan_type],
            "instance_count": plan_count,
            "start_time": now - timedelta(hours=1),
            "end_time": now + timedelta(days=2),
        },
        quota_shares=[shares[name] for name in plan_shares],
        actor=None,
    )
    User = get_user_model()
    executor = User.objects.create_user(username=f"{PREFIX}executor")
    executor.user_permissions.add(Permission.objects.get(codename="report_job_status"))
    queues[EXT_QUEUE].service_environment.executor_accounts.add(executor)  # the agents serve the external one
    # Each job asks for at most its share's limit of a type, so every submission could run on its own.
    team_shares: dict[str, list[tuple[str, str, dict]]] = defaultdict(list)
    for queue_name, specs in ((SIM_QUEUE, SIM_SHARES), (EXT_QUEUE, EXT_SHARES)):
        for name, team, *_, limits in specs:
            team_shares[team].append((queue_name, name, limits))
    users = []
    slugs = sorted(teams)
    for i in range(clients):
        slug = slugs[i % len(slugs)]
        user = User.objects.create_user(username=f"{PREFIX}u{i}")
        Membership.objects.create(team=teams[slug], user=user, role=Membership.Role.MEMBER)
        users.append(
            {
                "name": user.username,
                "token": Token.objects.create(user=user).key,
                "shares": team_shares[slug],
                "body_for": {},
            }
        )
    return {
        "queue_ids": [queues[SIM_QUEUE].pk, queues[EXT_QUEUE].pk],
        "clients": users,
        "executor_token": Token.objects.create(user=executor).key,
        "ext_environment_id": queues[EXT_QUEUE].service_environment_id,
    }


def soak_job_body(rng: random.Random, user: dict, name: str) -> dict:
    """A valid submission to a share of the user's team: 1 to 3 entries, small counts, a short duration."""
    # The external queue gets a fifth of a team's submissions: its executor is one thread of HTTP reports, and
    # a queue loaded past what it can finish would never drain.
    external = [entry for entry in user["shares"] if entry[0] == EXT_QUEUE]
    if external and rng.random() < 0.2:
        queue, share, ceilings = rng.choice(external)
    else:
        queue, share, ceilings = rng.choice([entry for entry in user["shares"] if entry[0] == SIM_QUEUE])
    keys = list(ceilings)
    rng.shuffle(keys)
    entries = []
    if queue == SIM_QUEUE and share in PLAN[3] and rng.random() < 0.3:
        entries.append(
            {"instance_type": TYPES[PLAN[1]], "instance_count": rng.randint(1, 2), "training_plan": PLAN[0]}
        )
    for key in keys[: rng.randint(1, 3) - len(entries) or 1]:
        entries.append({"instance_type": TYPES[key], "instance_count": rng.randint(1, min(3, ceilings[key]))})
    body = {
        "name": name,
        "job_queue": queue,
        "quota_share": share,
        "instance_preferences": entries,
        "scheduling_priority": rng.choice([0, 0, 10, 50, 100]),
        "duration_seconds": rng.randint(1, 5 if queue == SIM_QUEUE else 3),
        "retry_attempts": rng.choice([1, 1, 2]),
        "payload": {"soak": True, "n": rng.randint(0, 1000)},
    }
    if queue == EXT_QUEUE:
        # What an agent (--agents) runs: a process for the job's duration; about one in seven exits 3.
        code = 3 if body["payload"]["n"] % 7 == 0 else 0
        program = SLOT_PROGRAM.format(seconds=body["duration_seconds"], code=code)
        body["payload"]["command"] = ["python3", "-c", program]
    if rng.random() < 0.1:
        body["max_pending_seconds"] = rng.randint(5, 30)
    if rng.random() < 0.2:
        body["preemption_retries_before_termination"] = rng.randint(0, 2)
    return body
