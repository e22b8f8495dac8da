"""Every write quotaportal makes, by subject: keyword-only, typed, `<entity>_<verb>`.

Callers import the subject's module (`from scheduling.services import jobs`); this package exports nothing.

- `locks`: `queue_lock`, the queue's row lock every change to a queue's jobs takes first.
- `audit`: the CONFIG_CHANGED record (before and after) and a job's lifecycle events; they only record.
- `jobs`: submit, validate a submission, cancel, change priority; who may manage a job.
- `executor`: executor reports (attempts, leases), taking work, the simulated executor, the legal lifecycle
  moves; `job_stop`, `job_stop_request` (STOPPING) and `job_stopped`.
- `configuration`: queues, environments, shares, plans, instance types, teams and their members.
- `history`: pruning what passes leave behind.

Each service that changes what a pass would decide asks for that pass itself (`scheduling.passes.requests`),
sent after commit. The pass itself lives in `scheduling.passes`.
"""
