"""Exact shortcuts: cheaper passes that decide exactly what the engine decides on the whole queue.

The engine's pass costs time for every job in the snapshot: each placed job when it builds its working state,
each RUNNABLE job when it orders, tries and explains it. A two-week Philly replay makes some 20,000 passes
over hundreds of placed and up to thousands of waiting jobs, so the replay gives the unchanged engine a
smaller snapshot that provably leads to the same admissions, preemptions, drains and timeouts, and falls back
to the whole snapshot whenever it cannot prove it. `simulate(..., verify_shortcuts=True)` runs the whole
snapshot as well after every pass and raises on any difference; the tests do that on real trace slices.

Each shortcut is stated with its proof in the module that takes it (the code refers to them by number):

- `quiet`: a pass that preempts nobody, given the placed jobs summed (point 1) and the first few jobs of
  each group of waiting jobs (point 2);
- `preempting`: a pass that preempts, run again with the real jobs its victims may be (point 3);
- `rooms`: what room a share has in a pass, the groups that are stuck or held at their ceiling (point 2's
  judgments, read by both kinds of pass), and the shares folded into capacity (point 5);
- `decider`: `ShortcutDecider`, which tries them in turn and falls back to the whole queue, with what no
  proof covers (graceful stops, point 6), budgets (point 7) and the configurations the proofs hold for
  (`shortcuts_cover`);
- `groups` and `holdings`: the waiting jobs grouped and the placed jobs summed, kept as jobs come and go.

Point 4 is taken by `simulation`'s event loop:

4. **Passes that cannot decide anything are skipped** (see `simulation`): after a pass that decided nothing,
   a new job whose group (share, preference list, priority) was waiting then fails just as that group did; a
   capacity release on a type matters only to groups with an entry on it that are not held at their share's
   own limit (a RESERVE or LEND share without in-share preemption at its limit can neither fit nor preempt).

What a pass starts from is kept as jobs come and go, not recomputed per pass: the usage of each holding,
invariant B's sum per type, which shares are over a limit (`PlacedJobs`), and which groups are held at their
share's ceiling (recomputed for a share only when its usage or its groups change), how many jobs of a group
point 2 gives (`Reducer.bound`, kept while the share's usage and invariant B's sum on the group's types stay
as they were), and each holding's jobs in reclaim order. Not under STRICT_FIFO, the groups are also indexed by
their entries' type, plan and count (and, with in-share preemption, priority: `RunnableGroups.by_entry`), so a
pass over many more groups than there are entries in that index finds those not stuck from a few numbers per share
and type (`Reducer.unstuck_groups`) rather than judging thousands of groups one by one.
"""

from .decider import Reducer, ShortcutDecider, WholeQueue, same_decisions, shortcuts_cover
from .groups import Group, GroupKey, RunnableGroups, saturation_key
from .holdings import PlacedJobs
from .preempting import PreemptingSnapshot, Verdict
from .quiet import ReducedSnapshotJobs
from .rooms import ReducedSnapshot

__all__ = [
    "Group",
    "GroupKey",
    "PlacedJobs",
    "PreemptingSnapshot",
    "ReducedSnapshot",
    "ReducedSnapshotJobs",
    "Reducer",
    "RunnableGroups",
    "ShortcutDecider",
    "Verdict",
    "WholeQueue",
    "same_decisions",
    "saturation_key",
    "shortcuts_cover",
]
