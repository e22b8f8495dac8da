"""Replay a job stream through the unchanged scheduling engine in virtual time, and compare share policies.

Jobs come from the Microsoft Philly trace (`--trace`) or from the job history of a queue (`--history`); share
configurations from the live queue (`--config live --queue NAME`) or YAML/JSON files (`--config FILE`,
repeatable). `--philly-comparison` is the built-in study: the Philly window 2017-10-09 .. 2017-10-23 with
every share RESERVE, LEND or LEND_AND_BORROW. The simulation itself is `simulator` (pure Python);
this command only reads the database and the files, and prints and writes what it measured. See README,
"Replay and what-if simulation".
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from engine import BudgetPeriod, BudgetScope
from engine.budgets import period_end, period_start
from scheduling.models import JobQueue, SchedulingPass
from simulator import (
    Configuration,
    ConfigurationError,
    InvariantViolation,
    load_configurations,
)
from simulator import philly as philly_mapping
from simulator.backtest import NOISE_SIGMA, backtest, backtest_table
from simulator.budget_study import budget_study, budget_study_tables, compare, write_budget_study
from simulator.report import (
    COMPARISON_HEADER,
    SETTINGS_HEADER,
    SHARE_HEADER,
    comparison_rows,
    settings_rows,
    share_rows,
    speed_line,
    table,
)
from simulator.runner import ProgressBar, replay_configurations, write_charts, write_json
from simulator.trace import PHILLY_CREDIT, TraceError, read_philly, read_philly_vcs
from whatif.sources import DEFAULT_TRACE, history_jobs, live_configuration

PHILLY_WINDOW = (datetime(2017, 10, 9, tzinfo=UTC), 14)
BUDGET_STUDY_WINDOW = (datetime(2017, 10, 1, tzinfo=UTC), 31)
SCALING_WEEKS = (1, 2, 4)


class Command(BaseCommand):
    help = "Replay a trace or the job history through the scheduling engine and compare share configurations."

    def add_arguments(self, parser):
        source = parser.add_argument_group("jobs")
        source.add_argument(
            "--trace", type=Path, help=f"Philly CSV (default {DEFAULT_TRACE} unless --history)"
        )
        source.add_argument("--vc-file", type=Path, help="philly_vc.csv (default: next to the trace)")
        source.add_argument("--history", action="store_true", help="replay the job history of --queue")
        source.add_argument("--start", help="window start, ISO date or time in UTC (Philly: 2017-10-09)")
        source.add_argument("--days", type=float, help="window length in days (Philly: 14)")
        source.add_argument("--seed", type=int, default=1, help="seed of the synthetic parts of the mapping")
        configs = parser.add_argument_group("configurations")
        configs.add_argument(
            "--config",
            action="append",
            default=[],
            help="`live` (the queue's shares in the database) or a YAML/JSON file; repeatable",
        )
        configs.add_argument("--queue", help="the job queue for --config live and --history")
        configs.add_argument(
            "--philly-comparison",
            action="store_true",
            help="all RESERVE vs all LEND vs all LEND_AND_BORROW, one share per Philly VC",
        )
        configs.add_argument(
            "--variants",
            action="store_true",
            help="with --philly-comparison: all LEND_AND_BORROW under FAIR_SHARE, with a 10 and a 30 minute "
            "protection from early preemption, and lending half of every limit",
        )
        configs.add_argument(
            "--budget-study",
            action="store_true",
            help="GPU-hour budgets on Philly: each share's monthly budget at its median month over the whole "
            "trace, then --start (default 2017-10-01) for --days (default 31) under all LEND_AND_BORROW with "
            "and without them; --budget-scope ALL (default) or BORROWED",
        )
        configs.add_argument(
            "--budget-scope",
            choices=["ALL", "BORROWED"],
            default="ALL",
            help="with --budget-study: what the budgets count (default %(default)s)",
        )
        configs.add_argument(
            "--capacity-scale",
            type=float,
            default=philly_mapping.DEFAULT_CAPACITY_SCALE,
            help="Philly shares: GPUs = nodes x 8 x this (default %(default)s)",
        )
        configs.add_argument(
            "--plans",
            type=int,
            default=2,
            help="synthetic training plans in --philly-comparison (default %(default)s)",
        )
        run = parser.add_argument_group("simulation")
        run.add_argument(
            "--pass-interval", type=float, default=30.0, help="seconds between passes (default 30)"
        )
        run.add_argument(
            "--live-passes",
            action="store_true",
            help="with --history: pass exactly when the queue's recorded passes ran",
        )
        run.add_argument(
            "--startup-seconds",
            type=float,
            default=0.0,
            help="delay between placement and run (default 0: SCHEDULED -> RUNNING at once)",
        )
        run.add_argument("--check", action="store_true", help="verify the capacity rules after every pass")
        run.add_argument(
            "--verify-shortcuts",
            action="store_true",
            help="also run every pass on the whole snapshot and stop at any difference (slow)",
        )
        run.add_argument(
            "--no-shortcuts", action="store_true", help="give the engine the whole snapshot always"
        )
        run.add_argument(
            "--repeat", type=int, default=1, help="with --scaling: runs per window, fastest counts"
        )
        run.add_argument(
            "--scaling",
            action="store_true",
            help="time 1, 2 and 4 weeks from --start and print seconds per 1,000 jobs",
        )
        estimates = parser.add_argument_group("estimated start times (backtest)")
        estimates.add_argument(
            "--estimates",
            action="store_true",
            help="backtest the estimated start times: estimate from snapshots of each replay and compare",
        )
        estimates.add_argument(
            "--estimate-every", type=float, default=6.0, help="hours between snapshots (default 6)"
        )
        estimates.add_argument(
            "--estimate-noise",
            type=float,
            default=NOISE_SIGMA,
            help="lognormal sigma of the noise on the runtimes the estimator is told (default %(default)s)",
        )
        out = parser.add_argument_group("output")
        out.add_argument("--json", type=Path, help="write the metrics as JSON")
        out.add_argument("--charts", type=Path, help="write SVG charts into this directory")
        out.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
        out.add_argument(
            "--progress",
            action="store_true",
            default=None,
            help="show the progress bar even when stderr is not a terminal",
        )
        out.add_argument("--no-progress", action="store_false", dest="progress")

    def handle(self, *args, **options):
        started = time.perf_counter()
        try:
            self.run(options)
        except (ConfigurationError, TraceError, InvariantViolation, ValueError) as error:
            raise CommandError(str(error)) from error
        self.stdout.write(f"total wall time {time.perf_counter() - started:.1f} s")

    # --- the pieces ----------------------------------------------------------------------------------

    def run(self, options) -> None:
        if options["history"] and options["trace"]:
            raise CommandError("give --trace or --history, not both")
        if options["history"] and not options["queue"]:
            raise CommandError("--history replays the job history of a queue: give --queue NAME")
        if options["budget_study"]:
            self.budget_study(options)
            return
        if not options["config"] and not options["philly_comparison"]:
            if not options["queue"]:
                raise CommandError("give --config (live or a file, repeatable), or --philly-comparison")
            options["config"] = ["live"]
        if options["live_passes"] and not options["history"]:
            raise CommandError("--live-passes replays recorded passes: it needs --history")
        if options["scaling"]:
            if options["history"]:
                raise CommandError("--scaling times the Philly trace; it cannot be used with --history")
            self.scaling(options)
            return
        start, end = self.window(options)
        configs, jobs_for, credit = self.inputs(options, start, end)
        if options["estimates"]:
            self.backtest_estimates(configs, jobs_for, start, end, options)
            return
        replays = self.replay(configs, jobs_for, start, end, options)
        self.print_report(replays, options, start, end)
        # The files by name and content, never by where they lay: the JSON is committed, and is the same on
        # every machine that replays the same trace.
        meta = {
            "command": portable_command(sys.argv) if sys.argv[0].endswith("manage.py") else None,
            "source": "job history of queue " + options["queue"] if options["history"] else "Philly trace",
            "trace": None if options["history"] else file_identity(self.trace_path(options)),
            "vc_file": None if options["history"] else file_identity(self.vc_path(options)),
            "credit": credit,
            "window": {
                "start": start.isoformat() if start else None,
                "end": end.isoformat() if end else None,
            },
            "seed": options["seed"],
            "pass_interval_seconds": options["pass_interval"],
            "synthetic": None if options["history"] else philly_mapping.__doc__,
        }
        if options["json"]:
            write_json(options["json"], replays, meta=meta)
            self.stdout.write(f"wrote {options['json']}")
        if options["charts"]:
            for path in write_charts(options["charts"], replays, credit=credit):
                self.stdout.write(f"wrote {path}")

    def budget_study(self, options) -> None:
        """Budgets at each share's median month, and one month with and without them (`simulator.budget_study`)."""
        if options["history"]:
            raise CommandError("--budget-study replays the Philly trace; it cannot be used with --history")
        start = parse_moment(options["start"]) if options["start"] else BUDGET_STUDY_WINDOW[0]
        end = start + timedelta(days=options["days"] if options["days"] else BUDGET_STUDY_WINDOW[1])
        trace, vc_file = self.trace_path(options), self.vc_path(options)
        for path, what in ((trace, "trace"), (vc_file, "VC file")):
            if not path.exists():
                raise CommandError(f"no {what} at {path}: give --trace PATH (and --vc-file PATH)")
        rows = read_philly(trace)
        vcs = read_philly_vcs(vc_file)
        configs = philly_mapping.comparison_configurations(
            vcs=vcs,
            mix=philly_mapping.type_mix(rows),
            capacity_scale=options["capacity_scale"],
            start=start.timestamp(),
            end=end.timestamp(),
            seed=options["seed"],
            plans=options["plans"],
        )
        config = next(config for config in configs if config.name == "all-LEND_AND_BORROW")
        jobs = philly_mapping.philly_jobs(rows, config, seed=options["seed"])
        month = [job for job in jobs if start.timestamp() <= job.submitted_at < end.timestamp()]
        first, last = min(row.submitted_at for row in rows), max(row.submitted_at for row in rows)
        trace_start = period_start(BudgetPeriod.MONTH, datetime.fromtimestamp(first, UTC))
        trace_end = period_end(BudgetPeriod.MONTH, datetime.fromtimestamp(last, UTC))
        self.stdout.write(
            f"budgets from each share's median month of {len(jobs):,} Philly jobs replayed "
            f"{trace_start:%Y-%m-%d} .. {trace_end:%Y-%m-%d}; {len(month):,} jobs submitted "
            f"{start:%Y-%m-%d} .. {end:%Y-%m-%d} replayed with and without them. {PHILLY_CREDIT}"
        )
        medians, free, budgeted = budget_study(
            config,
            trace_jobs=jobs,
            trace_start=trace_start.timestamp(),
            trace_end=trace_end.timestamp(),
            month_jobs=month,
            month_start=start.timestamp(),
            month_end=end.timestamp(),
            scope=BudgetScope(options["budget_scope"]),
            pass_interval=options["pass_interval"],
            check=options["check"],
            verify_shortcuts=options["verify_shortcuts"],
        )
        effects, borrowers, others = compare(free, budgeted)
        self.stdout.write(
            budget_study_tables(medians, effects, borrowers, others, markdown=options["markdown"])
        )
        if options["json"]:
            write_budget_study(
                options["json"], medians, effects, borrowers, others, command=portable_command(sys.argv)
            )
            self.stdout.write(f"wrote {options['json']}")

    def backtest_estimates(self, configs, jobs_for, start, end, options) -> None:
        if start is None or end is None:
            raise CommandError("--estimates needs a window: give --start and --days")
        results = [
            backtest(
                config,
                jobs_for(config),
                start=start.timestamp(),
                end=end.timestamp(),
                every=options["estimate_every"] * 3600,
                sigma=options["estimate_noise"],
                seed=options["seed"],
                pass_interval=options["pass_interval"],
            )
            for config in configs
        ]
        self.stdout.write(
            f"estimated start times from a snapshot every {options['estimate_every']:g} h; runtimes told to the "
            f"estimator with lognormal noise sigma {options['estimate_noise']:g} (seed {options['seed']}); "
            f"errors over the wait for jobs that waited > 10 min"
        )
        self.stdout.write(backtest_table(results))

    def window(self, options) -> tuple[datetime | None, datetime | None]:
        if options["history"]:
            start = parse_moment(options["start"]) if options["start"] else None
            end = start + timedelta(days=options["days"]) if start and options["days"] else None
            return start, end
        default_start, default_days = PHILLY_WINDOW
        start = parse_moment(options["start"]) if options["start"] else default_start
        return start, start + timedelta(days=options["days"] if options["days"] else default_days)

    def trace_path(self, options) -> Path:
        return options["trace"] or DEFAULT_TRACE

    def vc_path(self, options) -> Path:
        return options["vc_file"] or self.trace_path(options).with_name("philly_vc.csv")

    def inputs(self, options, start, end):
        """(configurations, configuration -> jobs, credit line)."""
        if options["history"]:
            queue = find_queue(options["queue"])
            configs = self.configurations(options, queue=queue, philly=None, start=start, end=end)
            jobs = history_jobs(queue=queue, start=start, end=end)
            self.stdout.write(f"{len(jobs):,} jobs from the history of queue {queue.name}")
            return configs, lambda config: jobs, ""
        trace = self.trace_path(options)
        if not trace.exists():
            raise CommandError(f"no trace at {trace}: give --trace PATH")
        vc_file = self.vc_path(options)
        if not vc_file.exists():
            raise CommandError(f"no VC file at {vc_file}: give --vc-file PATH")
        rows = read_philly(trace)
        window = [row for row in rows if start.timestamp() <= row.submitted_at < end.timestamp()]
        context = PhillyContext(vcs=read_philly_vcs(vc_file), mix=philly_mapping.type_mix(rows))
        self.stdout.write(
            f"{len(window):,} Philly jobs submitted {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC "
            f"(of {len(rows):,} in {trace.name}). {PHILLY_CREDIT}"
        )
        queue = find_queue(options["queue"]) if options["queue"] else None
        configs = self.configurations(options, queue=queue, philly=context, start=start, end=end)
        seed = options["seed"]
        return configs, lambda config: philly_mapping.philly_jobs(window, config, seed=seed), PHILLY_CREDIT

    def configurations(self, options, *, queue, philly, start, end) -> list[Configuration]:
        configs: list[Configuration] = []
        if options["philly_comparison"]:
            if philly is None:
                raise CommandError("--philly-comparison needs the Philly trace, not --history")
            configs += philly_mapping.comparison_configurations(
                vcs=philly.vcs,
                mix=philly.mix,
                capacity_scale=options["capacity_scale"],
                start=start.timestamp(),
                end=end.timestamp(),
                seed=options["seed"],
                plans=options["plans"],
            )
            if options["variants"]:
                configs += philly_mapping.setting_variants(configs)
        bases = {}
        if philly is not None:
            bases["philly"] = philly_mapping.philly_base(
                vcs=philly.vcs,
                mix=philly.mix,
                capacity_scale=options["capacity_scale"],
                start=start.timestamp(),
                end=end.timestamp(),
                seed=options["seed"],
            )
        for source in options["config"]:
            if source == "live":
                if queue is None:
                    raise CommandError("--config live reads a queue's shares: give --queue NAME")
                configs.append(live_configuration(queue))
            else:
                path = Path(source)
                if not path.exists():
                    raise CommandError(f"no configuration file {path}")
                configs += load_configurations(path, bases=bases)
        names = [config.name for config in configs]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise CommandError(
                f"two configurations are named {', '.join(repeated)}: give them distinct names"
            )
        return configs

    def replay(self, configs, jobs_for, start, end, options):
        show = options["progress"] if options["progress"] is not None else sys.stderr.isatty()
        return replay_configurations(
            configs,
            jobs_for,
            start=start.timestamp() if start else None,
            end=end.timestamp() if end else None,
            progress=(lambda name: ProgressBar(f"replaying {name}")) if show else None,
            pass_interval=options["pass_interval"],
            pass_times=self.live_pass_times(options, start, end) if options["live_passes"] else None,
            check=options["check"],
            startup_seconds=options["startup_seconds"],
            shortcuts=not options["no_shortcuts"],
            verify_shortcuts=options["verify_shortcuts"],
        )

    def live_pass_times(self, options, start, end) -> list[float]:
        passes = SchedulingPass.objects.filter(job_queue__name=options["queue"])
        if start:
            passes = passes.filter(started_at__gte=start)
        if end:
            passes = passes.filter(started_at__lt=end)
        return [
            moment.timestamp()
            for moment in passes.order_by("started_at").values_list("started_at", flat=True)
        ]

    def print_report(self, replays, options, start, end) -> None:
        markdown = options["markdown"]
        for replay in replays:
            config = replay.metrics["configuration"]
            self.stdout.write("")
            self.stdout.write(f"{config['name']}: {config['description'] or ''}".rstrip(": "))
            self.stdout.write(table(SHARE_HEADER, share_rows(replay.metrics), markdown=markdown))
        if len(replays) > 1:
            self.stdout.write("")
            self.stdout.write(
                table(COMPARISON_HEADER, comparison_rows([r.metrics for r in replays]), markdown=markdown)
            )
            self.stdout.write("")
            self.stdout.write(
                table(SETTINGS_HEADER, settings_rows([r.metrics for r in replays]), markdown=markdown)
            )
        self.stdout.write("")
        for replay in replays:
            self.stdout.write(speed_line(replay.metrics))
        if options["check"]:
            self.stdout.write("--check: the capacity rules held after every pass of every configuration")

    def scaling(self, options) -> None:
        """Seconds per 1,000 jobs for 1, 2 and 4 weeks from --start: flat when a replay's cost is per job.

        Each window runs --repeat times and the fastest run counts (the least disturbed by other processes).
        Passes and decisions (placements, preemptions, drains, timeouts) per job say how much work the window
        itself asks for, whatever the replay's speed: a pass runs only at a tick after something happened.
        """
        start = parse_moment(options["start"]) if options["start"] else PHILLY_WINDOW[0]
        best: dict[tuple[str, int], tuple] = {}
        for weeks in SCALING_WEEKS:
            options_for = {**options, "days": 7 * weeks}
            end = start + timedelta(days=7 * weeks)
            configs, jobs_for, _ = self.inputs(options_for, start, end)
            for _ in range(options["repeat"]):
                for replay in self.replay(configs, jobs_for, start, end, options_for):
                    stats = replay.result.stats
                    key = (replay.result.configuration.name, weeks)
                    run = (
                        replay.result.jobs,
                        stats.passes_run,
                        stats.wall_seconds,
                        stats.cpu_seconds,
                        len(replay.result.records),
                        stats,
                    )
                    if key not in best or run[2] < best[key][2]:
                        best[key] = run
        rows = [
            [
                name,
                str(weeks),
                f"{jobs:,}",
                f"{passes:,}",
                f"{wall:.1f}",
                f"{jobs / wall:,.0f}",
                f"{1000 * wall / jobs:.3f}",
                f"{1000 * cpu / jobs:.3f}",
                f"{1000 * cpu / passes:.2f}",
                f"{passes / jobs:.2f}",
                f"{decisions / jobs:.2f}",
            ]
            for (name, weeks), (jobs, passes, wall, cpu, decisions, _) in sorted(best.items())
        ]
        header = (
            "configuration",
            "weeks",
            "jobs",
            "passes",
            "wall s",
            "jobs/s",
            "wall s per 1,000 jobs",
            "CPU s per 1,000 jobs",
            "CPU ms per pass",
            "passes per job",
            "decisions per job",
        )
        self.stdout.write("")
        self.stdout.write(f"fastest of {options['repeat']} run(s) per window")
        self.stdout.write(table(header, rows, markdown=options["markdown"]))
        self.stdout.write("")
        self.stdout.write("where the time goes, in the same runs (ms of wall time)")
        self.stdout.write(
            table(
                (
                    "configuration",
                    "weeks",
                    "reduced passes",
                    "ms each",
                    "ms per job",
                    "preempting passes",
                    "per 1,000 jobs",
                    "ms each",
                    "ms per job",
                    "whole passes",
                    "the rest, ms per job",
                ),
                [
                    self.time_split(name, weeks, jobs, wall, stats)
                    for (name, weeks), (jobs, _, wall, _, _, stats) in sorted(best.items())
                ],
                markdown=options["markdown"],
            )
        )

    @staticmethod
    def time_split(name: str, weeks: int, jobs: int, wall: float, stats) -> list[str]:
        """A window's wall time split into passes decided on a reduced snapshot, passes that preempt, whole
        passes, and the rest (events, usage metering, keeping the reduction's state)."""
        seconds = stats.seconds_by_pass
        reduced, preempting = seconds.get("reduced", 0.0), seconds.get("preempting", 0.0)
        rest = wall - sum(seconds.values())
        return [
            name,
            str(weeks),
            f"{stats.passes_reduced:,}",
            f"{1000 * reduced / stats.passes_reduced:.2f}" if stats.passes_reduced else "-",
            f"{1000 * reduced / jobs:.3f}",
            f"{stats.passes_preempting:,}",
            f"{1000 * stats.passes_preempting / jobs:.0f}",
            f"{1000 * preempting / stats.passes_preempting:.2f}" if stats.passes_preempting else "-",
            f"{1000 * preempting / jobs:.3f}",
            f"{stats.passes_whole:,}",
            f"{1000 * rest / jobs:.3f}",
        ]


@dataclass(frozen=True)
class PhillyContext:
    vcs: dict[str, int]  # VC -> nodes, from philly_vc.csv
    mix: dict[str, dict[str, float]]  # VC -> instance type -> share of its GPU time, over the whole trace


def file_identity(path: Path) -> dict[str, str]:
    """A file by its name and the sha256 of its content."""
    with path.open("rb") as file:
        return {"name": path.name, "sha256": hashlib.file_digest(file, "sha256").hexdigest()}


def portable_command(argv: list[str]) -> str:
    """`python manage.py ...` as run, each absolute path made relative to the working directory when below it,
    else cut to its file name (`file_identity` says which file it was)."""

    def portable(arg: str) -> str:
        option, equals, value = arg.partition("=") if arg.startswith("--") and "=" in arg else ("", "", arg)
        if not os.path.isabs(value):
            return arg
        relative = os.path.relpath(value)
        return option + equals + (Path(value).name if relative.startswith("..") else relative)

    return " ".join(["python", "manage.py", *(portable(arg) for arg in argv[1:])])


def parse_moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CommandError(f"--start {text!r} is not an ISO date or time (e.g. 2017-10-09)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def find_queue(name: str) -> JobQueue:
    queue = JobQueue.objects.select_related("service_environment").filter(name=name).first()
    if queue is None:
        known = ", ".join(JobQueue.objects.values_list("name", flat=True)) or "none"
        raise CommandError(f"no job queue named {name!r} (queues: {known})")
    return queue
