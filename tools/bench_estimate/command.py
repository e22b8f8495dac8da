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
from simulator.estimate import Expectations, Runtime, estimate


class Command(BaseCommand):
    help = "Time one estimate run (both forward replays) on a synthetic busy queue."

    def add_arguments(self, parser):
        parser.add_argument("--runnable", type=int, default=10_000)
        parser.add_argument("--placed", type=int, default=2_000)
        parser.add_argument("--shares", type=int, default=20)
        parser.add_argument("--types", type=int, default=5)
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--time-limit", type=float, default=None, help="cap, seconds (default: none)")

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
        started, cpu = time.perf_counter(), time.process_time()
        run = estimate(snapshot, Expectations(learned=learned), time_limit=options["time_limit"])
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        found = sum(1 for e in run.estimates.values() if e.earliest is not None)
        never = sum(1 for e in run.estimates.values() if e.basis.startswith("never"))
        self.stdout.write(
            f"estimate: {options['runnable']:,} RUNNABLE, {options['placed']:,} placed: {wall:.1f} s wall, "
            f"{cpu:.1f} s CPU, {run.passes} engine passes; {found:,} windows, {never:,} never, "
            f"{len(run.estimates) - found - never:,} not reached"
        )
