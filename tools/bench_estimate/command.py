"""Benchmark one estimate run (behaviour.md#why-pending-and-when-it-will-start) on a seeded busy queue. Prints figures;
asserts nothing about time.

The queue is `engine.synthetic`'s (the one `bench_pass` writes), read straight into a snapshot, so the figure
is the estimator's own. Runtimes are learned quantile tables, seeded lognormal per share and type, as
`scheduling.selectors.estimates` would hand them. `--database` times the task itself instead, on the
configured database: the queue written as rows (`bench_pass`'s writer, under its `bench-` prefix), one pass
committed, then the task's reads, its estimate and its write, taking turns `--repeat` times; the queue is
deleted again after.
"""

from __future__ import annotations

import logging
import random
import statistics
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.utils import timezone

from engine import synthetic
from scheduling.passes.run import queue_pass_run
from scheduling.services.estimates import estimates_write, queue_estimates_compute
from simulator.estimate import RESOLUTION, Expectations, Runtime, estimate
from tools.bench_pass.command import bench_cleanup, materialize
from tools.cli import log_quieted
from tools.guard import require_scratch_database


class Command(BaseCommand):
    help = "Time one estimate run (both forward replays) on a synthetic busy queue; --compare: against lean=False."

    def add_arguments(self, parser):
        parser.add_argument("--runnable", type=int, default=10_000)
        parser.add_argument("--placed", type=int, default=2_000)
        parser.add_argument("--shares", type=int, default=20)
        parser.add_argument("--types", type=int, default=5)
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--time-limit", type=float, default=None, help="cap, seconds (default: none)")
        parser.add_argument(
            "--resolution", type=float, default=RESOLUTION, help="the pass clock's (default: the estimator's)"
        )
        parser.add_argument(
            "--database",
            action="store_true",
            help="time the estimate task on the configured database: reads, estimate, write (a scratch database)",
        )
        parser.add_argument("--repeat", type=int, default=3, help="with --database: runs (default 3)")
        parser.add_argument(
            "--compare",
            action="store_true",
            help="also run the replay as first written (lean=False) and print the ratio of CPU seconds",
        )

    def handle(self, *args, **options):
        if options["repeat"] < 1:
            raise CommandError("need --repeat >= 1")
        if options["database"]:
            self.task(options)
            return
        snapshot = synthetic.build_synthetic_snapshot(
            runnable=options["runnable"],
            placed=options["placed"],
            shares=options["shares"],
            types=options["types"],
            seed=options["seed"],
        )
        rng = random.Random(options["seed"])
        learned = {
            (share.id, type_name): Runtime.of([rng.lognormvariate(8.0, 1.0) for _ in range(50)])
            for share in snapshot.shares
            for type_name in snapshot.capacity
        }
        expectations = Expectations(learned=learned)
        lean = self.timed(snapshot, expectations, options, lean=True, label="estimate")
        if options["compare"]:
            plain = self.timed(snapshot, expectations, options, lean=False, label="as first written")
            same = "the same" if plain[0].estimates == lean[0].estimates else "DIFFERENT"
            self.stdout.write(
                f"lean / as first written: {lean[1] / plain[1]:.2f} of the CPU seconds "
                f"({plain[1] / lean[1]:.1f}x less), {lean[2] / plain[2]:.2f} of the wall seconds; "
                f"{same} estimates"
            )

    def timed(self, snapshot, expectations, options, *, lean: bool, label: str):
        started, cpu = time.perf_counter(), time.process_time()
        run = estimate(
            snapshot,
            expectations,
            time_limit=options["time_limit"],
            resolution=options["resolution"],
            lean=lean,
        )
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        found = sum(1 for e in run.estimates.values() if e.earliest is not None)
        never = sum(1 for e in run.estimates.values() if e.basis.startswith("never"))
        beyond = sum(1 for e in run.estimates.values() if e.basis.endswith("beyond the estimate's horizon"))
        cut = sum(1 for e in run.estimates.values() if e.basis.endswith("the estimate stopped there"))
        replays = "; ".join(
            f"{name} replay {stats.cpu_seconds:.1f} s CPU, {stats.wall_seconds:.1f} s wall, "
            f"{stats.passes_run} passes"
            for name, stats in zip(("earliest", "latest"), run.replays, strict=False)
        )
        self.stdout.write(
            f"{label}: {options['runnable']:,} RUNNABLE, {options['placed']:,} placed: {cpu:.1f} s CPU, "
            f"{wall:.1f} s wall, {run.passes} engine passes ({replays}); {found:,} windows, {never:,} never, "
            f"{beyond:,} beyond the horizon, {cut:,} cut by the time limit"
        )
        return run, cpu, wall

    def task(self, options) -> None:
        """The estimate task on rows: `queue_estimates_compute` (reads and estimator) and `estimates_write`."""
        require_scratch_database()
        bench_cleanup()
        # a line per decision would bury the figures
        with log_quieted("quotaportal.scheduling", logging.WARNING):
            try:
                queue = materialize(
                    synthetic.build_synthetic_snapshot(
                        runnable=options["runnable"],
                        placed=options["placed"],
                        shares=options["shares"],
                        types=options["types"],
                        seed=options["seed"],
                    )
                )
                queue_pass_run(job_queue_id=queue.pk, trigger="bench")
                reads, estimates, writes, totals = [], [], [], []
                for _ in range(options["repeat"]):
                    now = timezone.now()
                    started = time.perf_counter()
                    run = queue_estimates_compute(job_queue=queue, now=now)
                    computed = time.perf_counter()
                    written = estimates_write(run.estimates, now=now)
                    ended = time.perf_counter()
                    reads.append(computed - started - run.seconds)
                    estimates.append(run.seconds)
                    writes.append(ended - computed)
                    totals.append(ended - started)
            finally:
                bench_cleanup()
        self.stdout.write(
            f"estimate task on {connection.vendor}: {options['runnable']:,} RUNNABLE, {options['placed']:,} "
            f"placed, one pass committed, then {written:,} pending rows estimated; median of "
            f"{len(totals)}, wall seconds: {statistics.median(totals):.2f} s in all = reads "
            f"{statistics.median(reads):.2f} + estimate {statistics.median(estimates):.2f} + write "
            f"{statistics.median(writes):.2f} ({run.passes} engine passes)"
        )
