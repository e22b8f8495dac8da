"""quotaportal's replay and what-if simulator: pure Python, no Django, driving `engine.schedule`.

`simulate(configuration, jobs, pass_times=[...])` replays a job stream against a share configuration in
virtual time and returns every decision it applied (`Result.records`), what became of each job
(`Result.outcomes`) and usage integrated over time; `summarize(result)` turns that into the metrics the
`replay` command prints. Configurations come from files (`load_configurations`), the database (the command) or
the Philly trace (`philly`); jobs from the trace (`trace`, `philly`) or the database (the command).
"""

from .config import Configuration, ConfigurationError, PlanConfig, ShareConfig, load_configurations
from .invariants import InvariantViolation
from .metrics import summarize
from .simulation import JobOutcome, Kind, Record, Result, SimJob, Status, simulate

__all__ = [
    "Configuration",
    "ConfigurationError",
    "InvariantViolation",
    "JobOutcome",
    "Kind",
    "PlanConfig",
    "Record",
    "Result",
    "ShareConfig",
    "SimJob",
    "Status",
    "load_configurations",
    "simulate",
    "summarize",
]
