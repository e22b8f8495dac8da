"""Python's cyclic garbage collector held off around work that makes and drops many short-lived objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector off for the block; it is left as it was found after.

    A pass over a busy queue, or an estimate's forward replays, build hundreds of thousands of short-lived
    objects and make next to no reference cycles. The collector would stop them again and again to scan the
    young ones and now and then walk the whole heap (in a worker, Django's and every module's objects too),
    finding next to nothing to free. Reference counting frees the objects as the work drops them; whatever
    cycles are left wait for the collector's next run.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
