"""Screenshots of the real pages with the demo data, for the README and docs/

    .venv/bin/python tools/screenshots.py [--out docs] [--minutes 60] [--all] [--only whatif ...]
    .venv/bin/python tools/screenshots.py --all --viewport 390x844 --out /tmp/phone   # as on a phone

Builds a throw-away database in a temporary folder: the demo organisation (`seed_demo`), then `--minutes` of
simulated history, one scheduling pass and simulated-executor tick every 30 s of simulated time with new
submissions along the way (so the charts have a past, and there is borrowing, reclaiming and pending). Then it
starts the web server on that database and photographs the overview, a share page and the submit form in
Debian's Chromium (never a downloaded browser). The what-if page shows a run over that history in which nlp
lends its idle capacity and speech borrows too. Nothing outside the temporary folder and `--out` is touched.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from urllib.request import urlopen

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402  (the project is on the path from here)

STEP = timedelta(seconds=30)


def demo_subscription():
    """A webhook subscription of the signed-in admin, for its page and its Change form."""
    from django.contrib.auth import get_user_model

    from notifications.models import Subscription, Trigger
    from notifications.services import SubscriptionInput, subscription_create

    admin = get_user_model().objects.get(username="admin")
    found = Subscription.objects.filter(owner=admin).first()
    return found or subscription_create(
        owner=admin,
        data=SubscriptionInput(
            name="on-call pager",
            channel="WEBHOOK",
            target="https://hooks.example.org/quotaportal",
            triggers=[Trigger.JOB_FAILED, Trigger.JOB_EXECUTOR_LOST, Trigger.EXECUTOR_SILENT],
        ),
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=str(ROOT / "docs"), help="folder for the PNG files (default docs/)")
    parser.add_argument("--minutes", type=int, default=60, help="simulated history before now (default 60)")
    parser.add_argument(
        "--all",
        action="store_true",
        help="also the job page, event log, share form, plan timeline, what-if form, login and a phone-sized "
        "overview",
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="photograph only this page (overview, share, submit, whatif, ...; repeatable)",
    )
    parser.add_argument(
        "--viewport",
        default="1360x900",
        metavar="WxH",
        help="the window the pages are photographed in (default 1360x900; 390x844 is a phone)",
    )
    args = parser.parse_args()
    width, height = (int(n) for n in args.viewport.lower().split("x"))
    if not Path(CHROMIUM).exists():
        print(f"{CHROMIUM} not found: install Debian's chromium package", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="quotaportal-screenshots-") as folder:
        env = {
            **os.environ,
            "DEBUG": "1",
            "QUOTAPORTAL_VAR_DIR": folder,
            "QUOTAPORTAL_AUTOPASS": "0",
            "DATABASE_URL": f"sqlite:///{folder}/demo.sqlite3",
            "CELERY_BROKER_URL": "memory://",
            "SAMPLE_INTERVAL_SECONDS": "30",
        }
        os.environ.update(env)
        build_history(minutes=args.minutes)
        whatif_id = whatif_demo(minutes=args.minutes)
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(f"http://127.0.0.1:{port}/accounts/login/")
            photograph(
                f"http://127.0.0.1:{port}",
                Path(args.out),
                everything=args.all,
                only=args.only,
                whatif_id=whatif_id,
                viewport=(width, height),
            )
        finally:
            server.terminate()
            server.wait(timeout=10)
    return 0


def build_history(*, minutes: int) -> None:
    """Seed the demo `minutes` ago and replay the time since, a pass and an executor tick per 30 s."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "quotaportal.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.utils import timezone

    real_now = timezone.now
    clock = {"now": real_now() - timedelta(minutes=minutes)}
    timezone.now = lambda: clock["now"]  # every service reads the time through timezone.now()
    try:
        call_command("migrate", verbosity=0)
        call_command("seed_demo", jobs=36, verbosity=0)
        replay(clock=clock, until=real_now())
    finally:
        timezone.now = real_now
    from scheduling.models import JobQueue
    from scheduling.passes import run as passes
    from scheduling.services import executor as executor_services

    for queue in JobQueue.objects.all():
        executor_services.simulated_executor_tick(job_queue_id=queue.pk)
        passes.queue_pass_run(job_queue_id=queue.pk, trigger="screenshots")


def replay(*, clock: dict, until) -> None:
    from scheduling import rules
    from scheduling.management.commands.seed_demo import JOB_NAMES, PREFERENCE_LISTS
    from scheduling.models import InstanceType, JobQueue, QuotaShare, TrainingPlan
    from scheduling.passes import run as passes
    from scheduling.services import demo
    from scheduling.services import executor as executor_services
    from scheduling.services import jobs as job_services

    rng = random.Random(7)
    queue = JobQueue.objects.get(name="training")
    shares = {
        share.name: share for share in QuotaShare.objects.filter(job_queue=queue).select_related("team")
    }
    types = {t.name: t for t in InstanceType.objects.all()}
    plans = {p.name: p for p in TrainingPlan.objects.all()}
    number = 100

    def submit(share_name: str, entries, priority: int) -> None:
        nonlocal number
        number += 1
        share = shares[share_name]
        submitter = share.team.memberships.order_by("user__username").first().user
        job_services.job_submit(
            user=submitter,
            submission=job_services.JobSubmission(
                name=f"{share_name}-{rng.choice(JOB_NAMES)}-{number}",
                job_queue=queue,
                quota_share=share,
                instance_preferences=[
                    rules.PreferenceInput(types[t], n, plans[p] if p else None) for t, n, p in entries
                ],
                scheduling_priority=priority,
                retry_attempts=2,
                duration_seconds=rng.randint(900, 2400),
            ),
        )

    steps = int((until - clock["now"]) / STEP)
    arrive = int(timedelta(seconds=demo.LENDERS_ARRIVE_AFTER_SECONDS) / STEP)
    for step in range(steps):
        if step == arrive:  # what the worker does after `make run`: the demo's lender comes back
            demo.demo_lender_jobs_submit(job_queue_id=queue.pk)
        if rng.random() < 0.45:  # the pool stays contended: borrowers fill idle capacity, owners reclaim it
            share_name = rng.choice(sorted(shares))
            submit(share_name, rng.choice(PREFERENCE_LISTS[share_name]), rng.choice([0, 0, 10, 50, 100]))
        if (
            step == steps - 4
        ):  # owners come back for what they lent, and a research job jumps its share's queue
            submit("speech", [("ml.g5.12xlarge", 4, None)], 50)
            submit("research", [("ml.g5.12xlarge", 3, None)], 900)
        executor_services.simulated_executor_tick(job_queue_id=queue.pk)
        passes.queue_pass_run(job_queue_id=queue.pk, trigger="replay")
        clock["now"] += STEP


def whatif_demo(*, minutes: int) -> int:
    """A finished what-if over the demo's history: nlp lends, speech borrows too. Returns its id."""
    from django.utils import timezone

    from scheduling.models import JobQueue, QuotaShare
    from whatif import services

    queue = JobQueue.objects.get(name="training")
    proposal = []
    shares = QuotaShare.objects.filter(job_queue=queue).prefetch_related("capacity_limits__instance_type")
    for share in shares:
        proposal.append(
            services.ShareProposal(
                name=share.name,
                limits={
                    limit.instance_type.name: limit.max_capacity for limit in share.capacity_limits.all()
                },
                strategy={"nlp": "LEND", "speech": "LEND_AND_BORROW"}.get(share.name, share.strategy),
                borrow_limit=share.borrow_limit,
                in_share_preemption=share.in_share_preemption,
            )
        )
    run = services.whatif_run_start(
        job_queue=queue,
        proposal=proposal,
        source="HISTORY",
        start=timezone.now() - timedelta(minutes=minutes + 1),
        days=(minutes + 1) / 1440,
        actor=None,
    )
    services.whatif_run_execute(run_id=run.pk)
    return run.pk


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def photograph(
    base: str,
    out: Path,
    *,
    everything: bool = False,
    only: list[str] | None = None,
    whatif_id: int,
    viewport: tuple[int, int] = (1360, 900),
) -> None:
    from playwright.sync_api import sync_playwright

    from scheduling.models import Job, QuotaShare
    from scheduling.passes import run as passes
    from scheduling.services.estimates import queue_estimates_refresh
    from scheduling.services.heartbeat import heartbeat_record

    out.mkdir(parents=True, exist_ok=True)
    vision = QuotaShare.objects.get(name="vision", job_queue__name="training")  # `local` has one too
    # Playwright's event loop makes this thread look async to Django; the passes below are plain sync calls.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    names: list[str] = []

    def wanted(name: str) -> bool:
        return not only or name in only

    def beat() -> None:
        """What the beat would have done by now: the pages then show a pass seconds old, as in production, and
        the estimate run that follows a pass, so pending jobs show their likely start."""
        passes.queue_pass_run(job_queue_id=vision.job_queue_id, trigger="screenshots")
        queue_estimates_refresh(job_queue_id=vision.job_queue_id)
        # This tool plays the beat and the worker: their heartbeats, or the overview says they are silent.
        heartbeat_record(component="beat")
        heartbeat_record(component="worker", detail="screenshots")

    def shoot(page, name: str, **options) -> None:
        page.screenshot(path=str(out / f"{name}.png"), full_page=True, **options)
        names.append(name)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]}, device_scale_factor=1)
        page.goto(f"{base}/accounts/login/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", "quotaportal-admin")
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/")
        if wanted("overview"):
            beat()
            page.reload()
            shoot(page, "overview")
        if wanted("share"):
            page.goto(f"{base}/shares/{vision.pk}/")
            shoot(page, "share")
        if wanted("submit"):
            page.goto(f"{base}/jobs/new/")
            page.fill("#id_name", "llm-finetune")
            with page.expect_response(lambda response: "/rows/" in response.url):  # the queue's types
                page.select_option("#id_quota_share", label="training / vision (Vision)")
            for row in (1, 2):  # the page's CSP forbids eval, so wait on elements, not on script predicates
                page.click("button[value=add]")
                page.locator(f"#id_pref-{row}-instance_type").wait_for()
            page.select_option("#id_pref-0-instance_type", label="ml.p5.48xlarge")
            page.fill("#id_pref-0-instance_count", "2")
            page.select_option("#id_pref-1-instance_type", label="ml.p4d.24xlarge")
            page.fill("#id_pref-1-instance_count", "4")
            page.select_option("#id_pref-2-instance_type", label="ml.g5.12xlarge")
            page.fill("#id_pref-2-instance_count", "8")
            page.locator("#id_pref-2-instance_count").blur()
            page.wait_for_selector("#errors-pref-0-instance_count li")
            shoot(page, "submit")
        if wanted("whatif"):
            page.goto(f"{base}/manage/whatif/{whatif_id}/")
            shoot(page, "whatif")
        if everything:
            waiting = (
                Job.objects.filter(status="RUNNABLE", pending__queue_position=1).order_by("id").first()
                if wanted("job")
                else None
            )
            extra = {
                "job": f"/jobs/{waiting.pk}/" if waiting else "/jobs/",
                "jobs": "/jobs/",
                "events": "/events/",
                "share-form": f"/manage/shares/{vision.pk}/",
                "plans": "/manage/plans/",
                "whatif-form": "/manage/whatif/",
                "profile": "/profile/",
                "access-keys": "/profile/access-keys/",
                "teams": "/teams/",
                "notifications": "/notifications/",
            }
            if wanted("subscription") or wanted("subscription-edit"):
                subscription = demo_subscription()
                extra["subscription"] = f"/notifications/{subscription.pk}/"
                extra["subscription-edit"] = f"/notifications/{subscription.pk}/edit/"
            for name, path in extra.items():
                if not wanted(name):
                    continue
                beat()
                page.goto(base + path)
                shoot(page, name)
            if wanted("login") or wanted("overview-phone"):
                phone = browser.new_page(viewport={"width": 390, "height": 844})
                phone.goto(f"{base}/accounts/login/")
                phone.screenshot(path=str(out / "login.png"))
                phone.fill("#id_username", "ana")
                phone.fill("#id_password", "quotaportal-demo")
                phone.click("button[type=submit]")
                phone.wait_for_url(f"{base}/")
                beat()
                phone.reload()
                phone.screenshot(path=str(out / "overview-phone.png"), full_page=True)
                names += ["login", "overview-phone"]
        browser.close()
    for name in names:
        print(out / f"{name}.png")


if __name__ == "__main__":
    sys.exit(main())
