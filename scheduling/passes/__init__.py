"""The scheduling pass, by step.

- `run`: `queue_pass_run` (lock the queue, then `pass_execute`: load, decide, write, record) and `PassResult`.
- `snapshot`: rows -> engine Snapshot, the one ORM -> engine translation, in a fixed number of queries.
- `write`: the engine's decisions -> rows (jobs, attempts, events, pending reasons, usage samples).
- `bulk`: the bulk SQL the writer uses (COPY on PostgreSQL).
- `requests`: `pass_request`, how a change asks for a pass after commit, coalesced per queue.
- `histogram`: the pass duration histogram a pass records for `/metrics`.
"""
