"""What several forms share (the job forms, the administration's, the what-if form)."""

from __future__ import annotations

from django import forms

# The largest value the job's positive integer columns hold on every database (PostgreSQL's integer).
MAX_STORED_INT = 2_147_483_647


class DateTimeInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, **kwargs):
        super().__init__(format="%Y-%m-%dT%H:%M", **kwargs)
