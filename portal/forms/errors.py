"""Errors from `scheduling.rules` and the services, put back on the form field at fault: keys like
`instance_preferences[1].instance_count` name a field of a row of the preference formset."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from django import forms
from django.core.exceptions import ValidationError

from portal.presenters import with_labels

if TYPE_CHECKING:
    from portal.forms.jobs import JobForm, PreferenceFormSet

_PREFERENCE_KEY = re.compile(r"^instance_preferences(?:\[(\d+)\](?:\.(\w+))?)?$")


def error_dict(exc: ValidationError) -> dict[str, list[str]]:
    if hasattr(exc, "error_dict"):
        return exc.message_dict
    return {"__all__": list(exc.messages)}


def _labels(form: forms.Form) -> dict[str, str]:
    return {name: field.label or name.replace("_", " ") for name, field in form.fields.items()}


def add_errors(form: forms.Form, exc: ValidationError) -> None:
    """Put a rules/services ValidationError on the form's fields, in the form's words (labels, not field
    names). A key naming a group of fields the form shows together (`capacity_limits`) goes to
    `form.group_errors`; any other unknown key is a form error."""
    groups = getattr(form, "error_groups", ())
    labels = _labels(form)
    field_for_error = getattr(form, "field_for_error", None)
    for key, messages in error_dict(exc).items():
        if field_for_error is not None:
            key = field_for_error(key)
        messages = [with_labels(message, labels) for message in messages]
        if key in groups:
            form.group_errors.setdefault(key, []).extend(messages)
            continue
        for message in messages:
            form.add_error(key if key in form.fields else None, message)


def add_submission_errors(
    form: JobForm, formset: PreferenceFormSet, exc: ValidationError, entry_rows: list[int]
) -> None:
    """Map a submission's errors: `instance_preferences[i].field` -> row `entry_rows[i]` of the formset.

    A field the form already found at fault keeps its own error (the rules saw a stand-in for it), and
    while the preference rows are not all valid, the list's own checks wait for them."""
    labels = _labels(form) | (_labels(formset.forms[0]) if formset.forms else {})
    rows_ok = formset.is_valid()
    for key, messages in error_dict(exc).items():
        messages = [with_labels(message, labels) for message in messages]
        match = _PREFERENCE_KEY.match(key)
        if match is None:
            key = key.split(".", 1)[0]  # payload.command: the payload field, whose message names the key
            if key in form.errors:
                continue
            target = key if key in form.fields else None
            for message in messages:
                form.add_error(target, message)
            continue
        if not rows_ok:
            continue
        index, field_name = match.groups()
        for message in messages:
            if index is None:
                formset.add_non_form_error(message)
                continue
            position = int(index)
            row = formset.forms[entry_rows[position]] if position < len(entry_rows) else None
            if row is None:
                formset.add_non_form_error(message)
            else:
                row.add_error(field_name if field_name in row.fields else None, message)
