"""Soak quotaportal end to end on PostgreSQL and Redis: `python -m tools.soak --help`."""
