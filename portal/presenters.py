"""Presenters: rows turned into the words a person reads. Event kinds as words (their code stays in a tooltip),
jobs by name rather than by id, configuration changes as before -> after, and form errors with the labels the
form shows rather than field names."""

from __future__ import annotations

import re
from typing import Any

from scheduling.models import EventKind
from scheduling.selectors.events import EventRow

# `job #45` as the engine writes another team's job (and `job 45`, as events written before it did).
_JOB_ID = re.compile(r"\bjob #?(\d+)\b")


def kind_words(kind: str) -> str:
    """`PREEMPTED_RECLAIM` -> `preempted by a reclaim` (EventKind's labels)."""
    try:
        return EventKind(kind).label
    except ValueError:
        return kind.replace("_", " ").lower()


# `PREEMPTED_RECLAIM: reclaimed by share nlp` -> the code's words, then the rest as it is.
_REASON_CODE = re.compile(r"^([A-Z][A-Z_]{3,}): ?(.*)$", re.S)
_REASON_WORDS = {
    "TRAINING_PLAN_EXPIRING": "stopped as its training plan ends",
    "PENDING_TIMEOUT": "waited longer than its max pending time",
    "PREEMPTION_RETRIES_EXHAUSTED": "preempted more often than it allows",
    "NOMINATED": "nominated",
    "NOMINATION_LAPSED": "its earmarked capacity lapsed",
    "START_TIMEOUT": "not started in time",
    "ATTEMPT_TIMEOUT": "ran longer than its attempt may",
}
# Reasons for which the scheduler (or a person) stopped the attempt: its process's exit code answers the stop
# signal, and says nothing of how the training went.
_STOPPED_CODES = {
    "PREEMPTED_RECLAIM",
    "PREEMPTED_IN_SHARE",
    "PREEMPTED_LIMIT_REDUCED",
    "TRAINING_PLAN_EXPIRING",
    "PREEMPTION_RETRIES_EXHAUSTED",
    "RELOCATING",
}


def reason_words(reason: str) -> str:
    """A status reason whose code leads (`PREEMPTED_RECLAIM: ...`) as words: `preempted by a reclaim: ...`."""
    match = _REASON_CODE.match(reason or "")
    if match is None:
        return reason
    code, rest = match.groups()
    words = _REASON_WORDS.get(code) or kind_words(code)
    return f"{words}: {rest}" if rest else words


def attempt_exit(attempt) -> str:
    """The exit code column of an attempt: `—` while none, `stopped` when the attempt was stopped for it (the
    code then only answers the stop signal), else the code."""
    if attempt.exit_code is None:
        return "—"
    match = _REASON_CODE.match(attempt.status_reason or "")
    stopped = (match is not None and match.group(1) in _STOPPED_CODES) or (
        attempt.status_reason or ""
    ).startswith("cancelled")
    return "stopped" if stopped else str(attempt.exit_code)


def event_kind_words(event: EventRow) -> str:
    """The event's kind as words; a job's priority change, which the audit log keeps as a configuration change
    (with the values before and after), reads as what it is."""
    if event.kind == EventKind.CONFIG_CHANGED and event.job is not None:
        changed = set((event.changes or {}).get("after") or {})
        if changed == {"scheduling_priority"}:
            return "priority changed"
    return kind_words(event.kind)


def field_words(name: str) -> str:
    """`capacity_limits` -> `capacity limits`, `scheduling_priority` -> `priority`: a field as people say it."""
    return _FIELD_WORDS.get(name, name.replace("_", " "))


_FIELD_WORDS = {"scheduling_priority": "priority", "max_capacity": "capacity"}


def event_text(event: EventRow) -> str:
    """The event's text with the jobs it gives by number named, `nightly-retrain (#45)`, for a viewer who may see
    them (staff); a job of another team stays unnamed."""
    refs = {ref.id: ref for ref in (event.job, event.other_job) if ref is not None}

    def name(match: re.Match) -> str:
        ref = refs.get(int(match.group(1)))
        if ref is None:
            return match.group(0)
        return f"{ref.name} (#{ref.id})" if ref.visible else "a job of another team"

    return _JOB_ID.sub(name, event.text)


def _value(value: Any) -> str:
    if value is None or value == "":
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def change_lines(changes: dict | None) -> list[str]:
    """A configuration change, one line a field, in words: `capacity limits: ml.p5.48xlarge 4 -> 6`,
    `quota shares: added nlp, removed vision`, `strategy: LEND -> LEND_AND_BORROW`. Empty unless changed."""
    if not changes or changes.get("action") != "changed":
        return []
    before, after = changes.get("before") or {}, changes.get("after") or {}
    lines = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if isinstance(old, dict) or isinstance(new, dict):
            old, new = old or {}, new or {}
            parts = [
                f"{name} {_value(old.get(name))} -> {_value(new.get(name))}"
                for name in sorted(set(old) | set(new))
                if old.get(name) != new.get(name)
            ]
            lines.append(f"{field_words(key)}: {', '.join(parts)}")
        elif isinstance(old, list) or isinstance(new, list):
            added = sorted(set(new or []) - set(old or []))
            removed = sorted(set(old or []) - set(new or []))
            parts = ([f"added {', '.join(added)}"] if added else []) + (
                [f"removed {', '.join(removed)}"] if removed else []
            )
            lines.append(f"{field_words(key)}: {'; '.join(parts)}")
        else:
            lines.append(f"{field_words(key)}: {_value(old)} -> {_value(new)}")
    return lines


def with_labels(message: str, labels: dict[str, str]) -> str:
    """A rules message that names fields (`end_time must be after start_time`) with the form's labels
    instead (`End time must be after start time`)."""
    starts_with_field = False
    for name, label in sorted(labels.items(), key=lambda item: -len(item[0])):
        if "_" in name or message.startswith(f"{name} "):
            starts_with_field = starts_with_field or message.startswith(f"{name} ")
            message = re.sub(rf"\b{re.escape(name)}\b", str(label).lower(), message)
    return message[:1].upper() + message[1:] if starts_with_field else message
