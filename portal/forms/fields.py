"""What several forms share (the job forms, the administration's, the what-if form)."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput

from portal.params import int_param
from scheduling import rules


class DateTimeInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, **kwargs):
        super().__init__(format="%Y-%m-%dT%H:%M", **kwargs)


class IdChoiceField(forms.ModelChoiceField):
    """A choice of a row by its id: anything but an id (a NUL, "²", a number beyond the column) is the same
    "Select a valid choice" as an id that is not offered, without asking the database."""

    def to_python(self, value):
        if value in self.empty_values or isinstance(value, self.queryset.model):
            return super().to_python(value)
        pk = value if isinstance(value, int) and not isinstance(value, bool) else int_param(value, minimum=1)
        if pk is None:
            raise ValidationError(self.error_messages["invalid_choice"], code="invalid_choice")
        return super().to_python(pk)


class ShallowJSONField(forms.JSONField):
    """JSON typed into a form, refused past `rules.MAX_JSON_DEPTH` with the API's message: Django's field would
    decode 1,000 nested brackets into a RecursionError, and again when it shows the form with its errors."""

    def to_python(self, value):
        try:
            decoded = super().to_python(value)
        except RecursionError:
            decoded = None
        else:
            if rules.json_depth(decoded) <= rules.MAX_JSON_DEPTH:
                return decoded
        raise ValidationError(rules.JSON_TOO_DEEP, code="too_deep")

    def bound_data(self, data, initial):
        try:
            decoded = super().bound_data(data, initial)
        except RecursionError:
            return InvalidJSONInput(data)
        # Shown again as typed: encoding it anew could overflow the stack just as decoding it did.
        return decoded if rules.json_depth(decoded) <= rules.MAX_JSON_DEPTH else InvalidJSONInput(data)
