"""botocore's rest-json for `batch`, server side: members read with their AWS paths, paging tokens, times.

boto3 checks required members, types and unknown names; everything else (enums, ranges, lengths, JSON inside
strings) arrives unchecked, so every reader here checks it and names the member path when it refuses.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.core import signing
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError

from awsapi.errors import invalid

MAX_RESULTS = 100
# What PostgreSQL cannot store in text or jsonb: NUL and unpaired surrogates.
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_MISSING = object()


def epoch_ms(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


def compact(body: Mapping[str, Any]) -> dict[str, Any]:
    """A response body without its absent (None) members, as AWS leaves them out."""
    return {name: value for name, value in body.items() if value is not None}


class Members:
    """A JSON object of the request, read member by member; each refusal names `path.member`."""

    def __init__(self, data: object, path: str = ""):
        if not isinstance(data, Mapping):
            raise invalid(path or "body", "must be a JSON object")
        self.data, self.path = data, path

    def at(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def only(self, *names: str) -> None:
        """Refuse members this operation does not model (boto3 would refuse them client-side)."""
        unknown = sorted(set(self.data) - set(names))
        if unknown:
            raise invalid(self.at(unknown[0]), f"unknown member; this takes {', '.join(names)}")

    def refuse(self, name: str, why: str) -> None:
        """A member AWS has and quotaportal does not support: refused by name, never silently dropped."""
        value = self.data.get(name)
        if value not in (None, [], {}):
            raise invalid(self.at(name), f"not supported by quotaportal: {why}")

    def get(self, name: str, default: Any = _MISSING) -> Any:
        if name not in self.data or self.data[name] is None:
            if default is _MISSING:
                raise invalid(self.at(name), "is required")
            return default
        return self.data[name]

    def string(
        self, name: str, default: Any = _MISSING, *, min_len: int = 1, max_len: int = 256, choices=None
    ) -> Any:
        value = self.get(name, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, str):
            raise invalid(self.at(name), "must be a string")
        if choices is not None and value not in choices:
            raise invalid(self.at(name), f"must be one of {', '.join(choices)}, got {value!r}")
        if not min_len <= len(value) <= max_len:
            raise invalid(self.at(name), f"must be {min_len} to {max_len} characters, got {len(value)}")
        if UNSTORABLE.search(value):
            raise invalid(self.at(name), "must be valid Unicode text without NUL characters")
        return value

    def integer(self, name: str, default: Any = _MISSING, *, low: int, high: int) -> Any:
        value = self.get(name, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(self.at(name), "must be an integer")
        if not low <= value <= high:
            raise invalid(self.at(name), f"must be between {low} and {high}, got {value}")
        return value

    def boolean(self, name: str, default: Any = _MISSING) -> Any:
        value = self.get(name, default)
        if value is not default and not isinstance(value, bool):
            raise invalid(self.at(name), "must be true or false")
        return value

    def obj(self, name: str, default: Any = _MISSING) -> Any:
        value = self.get(name, default)
        if value is default and default is not _MISSING:
            return value
        return Members(value, self.at(name))

    def items(self, name: str, default: Any = _MISSING, *, low: int = 0, high: int = 100) -> Any:
        value = self.get(name, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, list):
            raise invalid(self.at(name), "must be a list")
        if not low <= len(value) <= high:
            raise invalid(self.at(name), f"must have {low} to {high} entries, got {len(value)}")
        return [(f"{self.at(name)}[{i}]", item) for i, item in enumerate(value)]

    def tags(self, name: str = "tags") -> dict[str, str] | None:
        value = self.get(name, None)
        if value is None:
            return None
        return tags_check(value, self.at(name))


def tags_check(value: object, path: str) -> dict[str, str]:
    """AWS's tag map: 1 to 50 entries, keys of 1 to 128 characters, values up to 256, no `aws:` keys."""
    if not isinstance(value, Mapping):
        raise invalid(path, "must be a map of tag keys to values")
    if not 1 <= len(value) <= 50:
        raise invalid(path, f"must have 1 to 50 tags, got {len(value)}")
    for key, text in value.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 128 or UNSTORABLE.search(key):
            raise invalid(f"{path}.{key!r}", "a tag key must be 1 to 128 characters of valid Unicode")
        if key.lower().startswith("aws:"):
            raise invalid(f"{path}.{key}", "tag keys starting with aws: are reserved")
        if not isinstance(text, str) or len(text) > 256 or UNSTORABLE.search(text):
            raise invalid(f"{path}.{key}", "a tag value must be valid Unicode text of at most 256 characters")
    return dict(value)


def max_results(members: Members) -> int:
    return members.integer("maxResults", MAX_RESULTS, low=1, high=MAX_RESULTS)


def _query_key(operation: str, query: object) -> str:
    return hashlib.sha256(json.dumps([operation, query], sort_keys=True, default=str).encode()).hexdigest()[
        :16
    ]


def page_token(*, operation: str, query: object, position: int) -> str:
    """An opaque, signed nextToken: where the next page starts, bound to the operation and its filters."""
    return signing.dumps(
        {"q": _query_key(operation, query), "p": position}, salt="awsapi.paging", compress=True
    )


def page_position(members: Members, *, operation: str, query: object) -> int | None:
    """The position a nextToken carries (None: the first page); a forged or mismatched token is refused."""
    token = members.string("nextToken", None, max_len=2048)
    if token is None:
        return None
    try:
        data = signing.loads(token, salt="awsapi.paging")
    except signing.BadSignature:
        raise invalid(members.at("nextToken"), "not a token this API issued") from None
    if data.get("q") != _query_key(operation, query) or not isinstance(data.get("p"), int):
        raise invalid(members.at("nextToken"), "was issued for another request; repeat the same filters")
    return data["p"]


def validation_message(exc: ValidationError, paths: Mapping[str, str], default_path: str = "") -> str:
    """quotaportal's field errors with its field names rewritten to AWS member paths (longest prefix first)."""
    if not hasattr(exc, "error_dict"):
        return "; ".join(exc.messages)
    parts = []
    for field, messages in exc.message_dict.items():
        parts.append(f"{_aws_path(field, paths, default_path)}: {' '.join(messages)}")
    return "; ".join(parts)


def _aws_path(field: str, paths: Mapping[str, str], default_path: str) -> str:
    if field == NON_FIELD_ERRORS:
        return default_path or "request"
    for prefix in sorted(paths, key=len, reverse=True):
        if field == prefix or field.startswith((prefix + "[", prefix + ".")):
            rest = field[len(prefix) :]
            for ours, theirs in paths.items():
                rest = rest.replace(f".{ours}", f".{theirs}")
            return paths[prefix] + rest
    return paths.get(field, field)


def first(iterable: Iterable, default=None):
    return next(iter(iterable), default)
