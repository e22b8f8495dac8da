"""The what-if pages' forms: field-level checks; the proposal's rules come from `whatif.services`."""

from __future__ import annotations

import re

from django import forms
from django.core.exceptions import ValidationError

from portal.forms.errors import error_dict
from portal.forms.fields import DateTimeInput, IdChoiceField
from portal.params import MAX_STORED_INT
from scheduling.models import InstanceType, JobQueue, QuotaShare
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


class WhatIfForm(forms.Form):
    """A what-if proposal for one queue: every share's values, prefilled with the live ones, and the window.

    Each share has `s<id>-strategy`, `s<id>-borrow_limit`, `s<id>-in_share_preemption` and one
    `s<id>-limit_<type id>` per instance type of the environment (blank: no limit for that type).
    """

    job_queue = IdChoiceField(queryset=JobQueue.objects.all(), widget=forms.HiddenInput)
    source = forms.ChoiceField(choices=WhatIfRun.Source.choices, widget=forms.RadioSelect, label="Source")
    start = forms.DateTimeField(widget=DateTimeInput(), label="Window start", help_text="UTC")
    days = forms.FloatField(
        min_value=services.WHATIF_MIN_DAYS,
        max_value=services.WHATIF_MAX_DAYS,
        widget=forms.NumberInput(attrs={"step": "any"}),
        label="Days",
        help_text=f"1 hour ({services.WHATIF_MIN_DAYS:.2f}) to {services.WHATIF_MAX_DAYS:g} days.",
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
        kwargs.setdefault("initial", {}).setdefault("job_queue", job_queue.pk)
        super().__init__(*args, **kwargs)
        self.job_queue = job_queue
        self.shares = shares
        self.instance_types = instance_types
        self.capacity = capacity
        self.source_run = base.pk if base is not None else None
        proposed = {item["name"]: item for item in base.proposal} if base is not None else {}
        self.share_errors: dict[int, list[str]] = {share.pk: [] for share in shares}
        for share in shares:
            values = {
                "strategy": share.strategy,
                "borrow_limit": share.borrow_limit,
                "in_share_preemption": share.in_share_preemption,
                "limits": {
                    limit.instance_type_id: limit.max_capacity for limit in share.capacity_limits.all()
                },
            }
            if share.name in proposed:
                item = proposed[share.name]
                values.update({key: item[key] for key in ("strategy", "borrow_limit", "in_share_preemption")})
                values["limits"] = {
                    t.pk: item["limits"][t.name] for t in instance_types if t.name in item["limits"]
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
            for type_ in instance_types:
                self.fields[f"{prefix}limit_{type_.pk}"] = forms.IntegerField(
                    required=False,
                    min_value=1,
                    max_value=MAX_STORED_INT,
                    initial=values["limits"].get(type_.pk),
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
                    "limits": [self[f"{prefix}limit_{type_.pk}"] for type_ in self.instance_types],
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
                )
            )
        return proposals

    def add_service_errors(self, exc: ValidationError) -> None:
        """`shares[<name>].<field>` goes to that share's field (or, for its limits, to its row); the rest to
        the form's own fields."""
        by_name = {share.name: share for share in self.shares}
        for key, messages in error_dict(exc).items():
            match = _WHATIF_SHARE_KEY.match(key)
            if match is None:
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
