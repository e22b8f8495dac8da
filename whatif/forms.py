"""The what-if pages' forms: field-level checks; the proposal's rules come from `whatif.services`."""

from __future__ import annotations

import math
import re
from decimal import Decimal

from django import forms
from django.core.exceptions import ValidationError

from portal.forms.errors import error_dict
from portal.forms.fields import DateTimeInput, IdChoiceField
from portal.params import MAX_STORED_INT
from scheduling.models import (
    BUDGET_HELP,
    FAIR_SHARE_WEIGHT_HELP,
    IDLE_CAPACITY_ASSIGNMENT_HELP,
    MAX_BUDGET_GPU_HOURS,
    PREEMPTION_MIN_RUNTIME_HELP,
    BudgetPeriod,
    BudgetScope,
    IdleCapacityAssignment,
    InstanceType,
    JobQueue,
    QuotaShare,
)
from whatif import services
from whatif.models import WhatIfRun

# The strategies as the spec, the API and the result page name them.
STRATEGY_CHOICES = [(value, value) for value in QuotaShare.Strategy.values]


class WhatIfQueueForm(forms.Form):
    """Which queue the what-if editor shows (a GET form: choosing a queue changes nothing)."""

    job_queue = IdChoiceField(queryset=JobQueue.objects.order_by("name"), empty_label=None, label="Queue")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Read the queues once: the select's `required` check would otherwise read them a second time.
        self.fields["job_queue"].choices = list(iter(self.fields["job_queue"].choices))


WHATIF_MIN_HOURS = round(services.WHATIF_MIN_DAYS * 24)
WHATIF_MAX_HOURS = round(services.WHATIF_MAX_DAYS * 24)


def window_hours(days: float) -> int:
    """A window's length in whole hours, rounded up (so it still holds what `days` held)."""
    return max(WHATIF_MIN_HOURS, min(WHATIF_MAX_HOURS, math.ceil(round(days * 24, 6))))


class WhatIfForm(forms.Form):
    """A what-if proposal for one queue: every share's values, prefilled with the live ones, and the window.

    Each share has `s<id>-strategy`, `s<id>-borrow_limit`, `s<id>-in_share_preemption`,
    `s<id>-fair_share_weight` (blank: as it is), `s<id>-budget_gpu_hours` (blank: no budget),
    `s<id>-budget_period`, `s<id>-budget_scope` (blank: as they are) and per instance type of the environment one
    `s<id>-limit_<type id>` (blank: 0, none of that type) and one `s<id>-lending_<type id>` (blank: lends
    all of it). The queue's `idle_capacity_assignment` and `preemption_min_runtime_seconds` are blank: as
    they are.
    """

    job_queue = IdChoiceField(queryset=JobQueue.objects.all(), widget=forms.HiddenInput)
    source = forms.ChoiceField(choices=WhatIfRun.Source.choices, widget=forms.RadioSelect, label="Source")
    start = forms.DateTimeField(widget=DateTimeInput(), label="Window start", help_text="UTC")
    # In whole hours: a window of days reads as "0.05" for the hour a fresh install has.
    hours = forms.IntegerField(
        min_value=WHATIF_MIN_HOURS,
        max_value=WHATIF_MAX_HOURS,
        label="Length (hours)",
        help_text=f"1 hour to {WHATIF_MAX_HOURS} ({services.WHATIF_MAX_DAYS:g} days).",
    )
    idle_capacity_assignment = forms.ChoiceField(
        required=False,
        choices=[(value, value) for value in IdleCapacityAssignment.values],
        label="Idle capacity to borrowers",
        help_text=IDLE_CAPACITY_ASSIGNMENT_HELP,
    )
    preemption_min_runtime_seconds = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_STORED_INT,
        label="Protection from early preemption (seconds)",
        help_text=PREEMPTION_MIN_RUNTIME_HELP,
    )
    error_groups = ("capacity_limits",)

    def __init__(
        self,
        *args,
        job_queue: JobQueue,
        shares: list[QuotaShare],
        instance_types: list[InstanceType],
        capacity: dict[int, int],
        base: WhatIfRun | None = None,
        **kwargs,
    ):
        """`base`: a run of this queue whose proposal prefills the shares it names (to edit and run again)."""
        initial = kwargs.setdefault("initial", {})
        initial.setdefault("job_queue", job_queue.pk)
        if "days" in initial and "hours" not in initial:
            initial["hours"] = window_hours(initial["days"])
        super().__init__(*args, **kwargs)
        self.job_queue = job_queue
        self.shares = shares
        self.instance_types = instance_types
        self.capacity = capacity
        self.source_run = base.pk if base is not None else None
        proposed = {item["name"]: item for item in base.proposal} if base is not None else {}
        queue_values = services.QueueProposal.from_mapping(
            base.queue_proposal
            if base is not None and base.queue_proposal
            else {name: getattr(job_queue, name) for name in services.WHATIF_QUEUE_FIELDS}
        )
        for name in services.WHATIF_QUEUE_FIELDS:
            self.fields[name].initial = getattr(queue_values, name)
        self.share_errors: dict[int, list[str]] = {share.pk: [] for share in shares}
        for share in shares:
            values = {
                "strategy": share.strategy,
                "borrow_limit": share.borrow_limit,
                "in_share_preemption": share.in_share_preemption,
                "fair_share_weight": share.fair_share_weight,
                "budget_gpu_hours": share.budget_gpu_hours,
                "budget_period": share.budget_period,
                "budget_scope": share.budget_scope,
                "limits": {
                    limit.instance_type_id: limit.max_capacity for limit in share.capacity_limits.all()
                },
                "lending": {
                    limit.instance_type_id: limit.lending_limit for limit in share.capacity_limits.all()
                },
            }
            if share.name in proposed:
                item = services.ShareProposal.from_mapping(proposed[share.name])
                values.update({key: getattr(item, key) for key in services.WHATIF_SHARE_FIELDS})
                values["limits"] = {
                    t.pk: item.limits[t.name] for t in instance_types if t.name in item.limits
                }
                values["lending"] = {
                    t.pk: item.lending_limits[t.name] for t in instance_types if t.name in item.lending_limits
                }
            prefix = self.share_prefix(share)
            self.fields[f"{prefix}strategy"] = forms.ChoiceField(
                choices=STRATEGY_CHOICES, initial=values["strategy"], label="Strategy"
            )
            self.fields[f"{prefix}borrow_limit"] = forms.IntegerField(
                min_value=-1,
                max_value=MAX_STORED_INT,
                initial=values["borrow_limit"],
                label="Borrow limit %",
                help_text="-1: unlimited",
            )
            self.fields[f"{prefix}in_share_preemption"] = forms.BooleanField(
                required=False, initial=values["in_share_preemption"], label="In-share preemption"
            )
            self.fields[f"{prefix}fair_share_weight"] = forms.DecimalField(
                required=False,
                initial=values["fair_share_weight"],
                label="Fair-share weight",
                help_text=FAIR_SHARE_WEIGHT_HELP,
            )
            self.fields[f"{prefix}budget_gpu_hours"] = forms.DecimalField(
                required=False,
                min_value=Decimal("0.001"),
                max_value=MAX_BUDGET_GPU_HOURS,
                decimal_places=3,
                initial=values["budget_gpu_hours"],
                label="Budget (GPU-hours)",
                help_text=BUDGET_HELP,
            )
            self.fields[f"{prefix}budget_period"] = forms.ChoiceField(
                required=False,
                choices=BudgetPeriod.choices,
                initial=values["budget_period"],
                label="Budget period",
            )
            self.fields[f"{prefix}budget_scope"] = forms.ChoiceField(
                required=False,
                choices=BudgetScope.choices,
                initial=values["budget_scope"],
                label="Budget counts",
            )
            for type_ in instance_types:
                self.fields[f"{prefix}limit_{type_.pk}"] = forms.IntegerField(
                    required=False,
                    min_value=1,
                    max_value=MAX_STORED_INT,
                    initial=values["limits"].get(type_.pk),
                    label=type_.name,
                )
                self.fields[f"{prefix}lending_{type_.pk}"] = forms.IntegerField(
                    required=False,
                    min_value=0,
                    max_value=MAX_STORED_INT,
                    initial=values["lending"].get(type_.pk),
                    label=type_.name,
                )

    def capacity_columns(self) -> list[tuple[int, InstanceType]]:
        """(capacity, instance type) per column of the limits, for the table's footer."""
        return [(self.capacity.get(type_.pk, 0), type_) for type_ in self.instance_types]

    @staticmethod
    def share_prefix(share: QuotaShare) -> str:
        return f"s{share.pk}-"

    def share_rows(self) -> list[dict]:
        """Per share, what the table shows: its bound fields, and errors about the share as a whole."""
        rows = []
        for share in self.shares:
            prefix = self.share_prefix(share)
            rows.append(
                {
                    "share": share,
                    "strategy": self[f"{prefix}strategy"],
                    "borrow_limit": self[f"{prefix}borrow_limit"],
                    "in_share_preemption": self[f"{prefix}in_share_preemption"],
                    "fair_share_weight": self[f"{prefix}fair_share_weight"],
                    "budget": (
                        self[f"{prefix}budget_gpu_hours"],
                        self[f"{prefix}budget_period"],
                        self[f"{prefix}budget_scope"],
                    ),
                    "limits": [
                        (self[f"{prefix}limit_{type_.pk}"], self[f"{prefix}lending_{type_.pk}"])
                        for type_ in self.instance_types
                    ],
                    "errors": self.share_errors[share.pk],
                }
            )
        return rows

    def proposal(self) -> list[services.ShareProposal]:
        data = self.cleaned_data
        proposals = []
        for share in self.shares:
            prefix = self.share_prefix(share)
            proposals.append(
                services.ShareProposal(
                    name=share.name,
                    limits={
                        type_.name: data[f"{prefix}limit_{type_.pk}"]
                        for type_ in self.instance_types
                        if data.get(f"{prefix}limit_{type_.pk}") is not None
                    },
                    strategy=data[f"{prefix}strategy"],
                    borrow_limit=data[f"{prefix}borrow_limit"],
                    in_share_preemption=data[f"{prefix}in_share_preemption"],
                    lending_limits={
                        type_.name: data[f"{prefix}lending_{type_.pk}"]
                        for type_ in self.instance_types
                        if data.get(f"{prefix}lending_{type_.pk}") is not None
                    },
                    fair_share_weight=(
                        share.fair_share_weight
                        if data.get(f"{prefix}fair_share_weight") is None
                        else data[f"{prefix}fair_share_weight"]
                    ),
                    budget_gpu_hours=data.get(f"{prefix}budget_gpu_hours"),
                    budget_period=data.get(f"{prefix}budget_period") or share.budget_period,
                    budget_scope=data.get(f"{prefix}budget_scope") or share.budget_scope,
                )
            )
        return proposals

    def queue_proposal(self) -> services.QueueProposal:
        """The queue's proposed settings; a blank one stays as it is."""
        values = {name: self.cleaned_data.get(name) for name in services.WHATIF_QUEUE_FIELDS}
        return services.QueueProposal(
            **{
                name: getattr(self.job_queue, name) if value in (None, "") else value
                for name, value in values.items()
            }
        )

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("hours") is not None:
            cleaned["days"] = cleaned["hours"] / 24
        return cleaned

    def add_service_errors(self, exc: ValidationError) -> None:
        """`shares[<name>].<field>` goes to that share's field (or, for its limits, to its row); the rest to
        the form's own fields."""
        by_name = {share.name: share for share in self.shares}
        for key, messages in error_dict(exc).items():
            match = _WHATIF_SHARE_KEY.match(key)
            if match is None:
                key = "hours" if key == "days" else key
                for message in messages:
                    self.add_error(key if key in self.fields else None, message)
                continue
            share = by_name.get(match.group(1))
            name = f"{self.share_prefix(share)}{match.group(2)}" if share else None
            for message in messages:
                if name in self.fields:
                    self.add_error(name, message)
                elif share is not None:
                    self.share_errors[share.pk].append(message)
                else:
                    self.add_error(None, message)


_WHATIF_SHARE_KEY = re.compile(r"^shares\[([^\]]+)\]\.(\w+)$")


class WhatIfApplyForm(forms.Form):
    confirm = forms.BooleanField(
        label="I have read what changes; apply it to the live queue",
        error_messages={"required": "Tick the box to confirm: applying changes the live shares at once."},
    )
