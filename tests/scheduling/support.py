"""What the pass tests of this package share: the instance types they name and one pass over a queue."""

from __future__ import annotations

from scheduling.models import JobQueue
from scheduling.passes import run as passes
from scheduling.passes.run import PassResult

P5, P4 = "ml.p5.48xlarge", "ml.p4d.24xlarge"


def run_pass(queue: JobQueue) -> PassResult:
    return passes.queue_pass_run(job_queue_id=queue.pk, trigger="test")
