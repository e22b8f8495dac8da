"""Whole numbers and ids read from query strings and form data: one parser, so that no view meets a "²", a NUL
or a number its column cannot hold.

`str.isdigit()` is true for "²" (which `int()` refuses) and `int()` takes "٣", " 7" and "1_0"; the database
refuses what is out of its column's range, PostgreSQL with an error. Only ASCII digits within range pass here.
"""

from __future__ import annotations

import re

from scheduling.models import MAX_ID, MAX_STORED_INT

__all__ = ["MAX_ID", "MAX_STORED_INT", "int_param"]

_WHOLE_NUMBER = re.compile(r"-?[0-9]+")


def int_param(raw: object, *, minimum: int = 0, maximum: int = MAX_ID) -> int | None:
    """`raw` as an int if it is ASCII digits `[0-9]+` (a leading "-" only when `minimum` is negative) within
    [minimum, maximum]; None for anything else, blank and missing included."""
    if not isinstance(raw, str) or len(raw) > len(str(maximum)) + 1 or not _WHOLE_NUMBER.fullmatch(raw):
        return None
    if raw.startswith("-") and minimum >= 0:
        return None
    value = int(raw)
    return value if minimum <= value <= maximum else None
