"""Small presentation helpers for the pages: bar segments, compact numbers, and the presenters (words for events
and changes) as filters."""

from __future__ import annotations

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from portal import presenters
from portal.charts import stacked_bar, svg_problem

register = template.Library()


class Bar(list):
    """A bar's segments, and the same numbers in words for its accessible label."""

    def __init__(self, segments, words: str):
        super().__init__(segments)
        self.words = words


@register.filter
def type_segments(usage):
    """A queue's capacity bar for one instance type: owned use, borrowed use, idle, free."""
    in_use = usage.owned + usage.borrowed
    return Bar(
        stacked_bar(
            [
                ("owned", usage.owned),
                ("borrowed", usage.borrowed),
                ("idle", usage.idle),
                ("free", usage.free),
            ],
            usage.capacity,
        ),
        f"{in_use} of {usage.capacity} in use, {usage.borrowed} borrowed; {usage.idle} idle, {usage.free} free",
    )


@register.filter
def share_segments(row):
    """A share's bar for one instance type, scaled to its limit (or its usage when it borrows above it)."""
    return Bar(
        stacked_bar(
            [
                ("owned", row.usage - row.borrowed),
                ("borrowed", row.borrowed),
                ("lent", row.lent),
                ("idle", row.idle - row.kept),
                ("kept", row.kept),
            ],
            max(row.limit, row.usage),
        ),
        f"{row.usage} of a limit of {row.limit} in use, {row.borrowed} borrowed; {row.lent} lent to other "
        f"shares, {row.idle} idle ({row.kept} kept)",
    )


@register.filter
def limit_x(row) -> float:
    """Where a share's limit falls on its bar, in percent."""
    scale = max(row.limit, row.usage, 1)
    return round(100 * row.limit / scale, 3)


@register.filter
def short_type(name: str) -> str:
    """`ml.p5.48xlarge` -> `p5.48xlarge`: the family people say, with its size."""
    return name[3:] if name.startswith("ml.") else name


@register.filter
def kind_words(kind: str) -> str:
    return presenters.kind_words(kind)


@register.filter
def reason_words(reason: str) -> str:
    return presenters.reason_words(reason)


@register.filter
def attempt_exit(attempt) -> str:
    return presenters.attempt_exit(attempt)


@register.filter
def event_kind_words(event) -> str:
    return presenters.event_kind_words(event)


@register.filter
def event_text(event) -> str:
    return presenters.event_text(event)


@register.filter
def change_lines(event) -> list[str]:
    return presenters.change_lines(event.changes)


@register.filter
def error_slot(name: str) -> str:
    """The id of the element that holds a field's errors, so htmx can fill it in place."""
    return f"errors-{name}"


@register.simple_tag
def field_widget(field, quiet: bool = False):
    """A field's input, described by its help, and while its errors are shown (a `quiet` form shows none) marked
    `aria-invalid` and described by its error slot too. The slot is always on the page: htmx refills it in place
    as the form is checked, and `static/portal/app.js` moves both attributes with it."""
    described_by = [f"{field.auto_id}_helptext"] if field.help_text else []
    if field.errors and not quiet:
        described_by.append(error_slot(field.html_name))
    attrs = {"aria-describedby": " ".join(described_by)} if described_by else {}
    html = field.as_widget(attrs=attrs)
    return mark_safe(html.replace(' aria-invalid="true"', "")) if quiet else html


@register.filter
def ago(moment, now=None) -> str:
    """How long ago, compactly: `12 s`, `4 min`, `3 h 5 min`, `2 d 4 h` (timesince says "0 minutes")."""
    if moment is None:
        return ""
    seconds = max(0, int(((now or timezone.now()) - moment).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


@register.filter
def inline_svg(svg: str | None):
    """A chart the replay drew, put in the page as it is once it proves to be plain SVG (no script, no event
    handler); anything else becomes a note instead."""
    problem = svg_problem(svg or "")
    if problem:
        return format_html('<p class="muted">This chart cannot be shown: {}.</p>', problem)
    return mark_safe(svg)  # checked by svg_problem just above


@register.filter
def plans_of(usage, instance_type: str) -> list[dict]:
    """The queue's active (or still held) training plans of one instance type, for its capacity row."""
    return usage.plan_types.get(instance_type, [])
