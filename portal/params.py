"""Whole numbers and ids read from query strings and form data: one parser, so that no view meets a "²", a NUL
or a number its column cannot hold.

`str.isdigit()` is true for "²" (which `int()` refuses) and `int()` takes "٣", " 7" and "1_0"; the database
refuses what is out of its column's range, PostgreSQL with an error. Only ASCII digits within range pass here.
"""

from __future__ import annotations

import re

# The ids' column (BigAutoField: PostgreSQL bigint) and the positive integer columns (PostgreSQL integer).
MAX_ID = 9_223_372_036_854_775_807
MAX_STORED_INT = 2_147_483_647

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
