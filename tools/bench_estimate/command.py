"""Benchmark one estimate run (SPEC 3.5) on a seeded busy queue. Prints figures; asserts nothing about time.

The queue is `engine.synthetic`'s (the one `bench_pass` writes), read straight into a snapshot, so the figure
is the estimator's own (the task's reads and bulk write are `bench_pass`-sized on top). Runtimes are learned
quantile tables, seeded lognormal per share and type, as `scheduling.selectors.estimates` would hand them.
"""

from __future__ import annotations

import random
import time

from django.core.management.base import BaseCommand

from engine import synthetic
from simulator.estimate import RESOLUTION, Expectations, Runtime, estimate


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
            "--compare",
            action="store_true",
            help="also run the replay as first written (lean=False) and print the ratio of CPU seconds",
        )

    def handle(self, *args, **options):
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
