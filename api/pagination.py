"""How lists paginate.

Configuration lists (a few dozen rows) answer {count, next, previous, results} by page number, `?page=N`.
Jobs and events, which grow without bound, answer {next, previous, results} by cursor: `next` and `previous`
are links carrying `?cursor=...`, each page one indexed range read whatever its depth, and there is no
`count` (a COUNT(*) over millions of events is itself the slow read). `?page=N` still works on them for the
first MAX_PAGE_ROWS rows; a deeper page is a 400 pointing at the cursor.
"""

from __future__ import annotations

from base64 import b64decode, b64encode
from datetime import UTC
from urllib import parse

from django.db.models import Q
from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination, PageNumberPagination, _reverse_ordering
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from scheduling.models import MAX_ID


class PageNumbers(PageNumberPagination):
    """DRF's page numbers, minus its leniency (`?page=` empty means page 1, `?page=last` the last page): the
    schema says `page` is an integer, so anything else is the same 404 as a page past the end."""

    last_page_strings = ()

    def get_page_number(self, request, paginator):
        raw = request.query_params.get(self.page_query_param)
        if raw is None:
            return 1
        if not (raw.isascii() and raw.isdigit()):
            raise NotFound(self.invalid_page_message.format(page_number=raw, message="not a page number"))
        return raw


class IdCursors(CursorPagination):
    """Keyset pages: newest first by id; or the view's `tail_ordering(request)`, oldest first, by id or by
    (created_at, id). A cursor is the key of the row the page starts after, always unique (the id decides
    ties), so DRF's offsets within equal positions are never needed and never accepted. Page N reads with
    OFFSET, so it stops at MAX_PAGE_ROWS."""

    ordering = ("-id",)
    page_query_param = "page"
    MAX_PAGE_ROWS = 10_000

    def get_ordering(self, request, queryset, view):
        tail = view.tail_ordering(request) if hasattr(view, "tail_ordering") else None
        return tail or self.ordering

    def decode_cursor(self, request):
        """DRF's cursor, refusing a position that is not a key of this ordering (it would reach the database
        as a bad comparison): a 404 like any other cursor that leads nowhere."""
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        try:
            tokens = parse.parse_qs(b64decode(encoded.encode("ascii"), validate=True).decode("ascii"))
        except (ValueError, UnicodeError):
            raise NotFound(self.invalid_cursor_message) from None
        position = tokens.get("p", [None])[0]
        reverse = tokens.get("r", ["0"])[0]
        if reverse not in ("0", "1") or set(tokens) - {"p", "r"}:
            raise NotFound(self.invalid_cursor_message)
        if position is not None and self._key(position) is None:
            raise NotFound(self.invalid_cursor_message)
        return Cursor(offset=0, reverse=reverse == "1", position=position)

    def _key(self, position: str) -> tuple | None:
        """The position as (created_at, id) or (id,), as the ordering keys rows; None if it is not one."""
        by_time = self.ordering[0].lstrip("-") == "created_at"
        *moment, raw_id = position.split(" ") if by_time else [position]
        # A position past the id column's range is no id, and PostgreSQL would refuse to compare with it.
        if not (raw_id.isascii() and raw_id.isdigit() and int(raw_id) <= MAX_ID):
            return None
        if not by_time:
            return (int(raw_id),)
        try:
            created_at = parse_datetime(moment[0]) if len(moment) == 1 else None
            if created_at is None or created_at.tzinfo is None:
                return None
            return (created_at.astimezone(UTC), int(raw_id))
        except (ValueError, OverflowError):  # a well-formed but impossible date, or past year 9999 in UTC
            return None

    def _get_position_from_instance(self, instance, ordering):
        if ordering[0].lstrip("-") == "created_at":
            return f"{instance.created_at.isoformat()} {instance.pk}"
        return str(instance.pk)

    def _after(self, position: str, ordering: tuple[str, ...]) -> Q:
        """Rows after the position in `ordering`, written so that an index on the first key seeks to it."""
        key = self._key(position)
        descending = ordering[0].startswith("-")
        if len(key) == 1:
            return Q(id__lt=key[0]) if descending else Q(id__gt=key[0])
        created_at, id_ = key
        if descending:
            return Q(created_at__lte=created_at) & (Q(created_at__lt=created_at) | Q(id__lt=id_))
        return Q(created_at__gte=created_at) & (Q(created_at__gt=created_at) | Q(id__gt=id_))

    def paginate_queryset(self, queryset, request, view=None):
        """DRF's cursor pagination without its offsets: every position is unique."""
        self.page_number = None
        self.request = request
        self.page_size = self.get_page_size(request)
        self.base_url = request.build_absolute_uri()
        self.ordering = self.get_ordering(request, queryset, view)
        if self.page_query_param in request.query_params:
            return self._paginate_by_number(queryset, request)
        self.cursor = self.decode_cursor(request)
        reverse = self.cursor is not None and self.cursor.reverse
        position = self.cursor.position if self.cursor is not None else None
        ordering = _reverse_ordering(self.ordering) if reverse else self.ordering
        queryset = queryset.order_by(*ordering)
        if position is not None:
            queryset = queryset.filter(self._after(position, ordering))
        results = list(queryset[: self.page_size + 1])
        self.page = results[: self.page_size]
        following = (
            self._get_position_from_instance(results[-1], self.ordering)
            if len(results) > len(self.page)
            else None
        )
        if reverse:
            self.page.reverse()
            self.has_next, self.next_position = position is not None, position
            self.has_previous, self.previous_position = following is not None, following
        else:
            self.has_next, self.next_position = following is not None, following
            self.has_previous, self.previous_position = position is not None, position
        return self.page

    def _paginate_by_number(self, queryset, request):
        """`?page=N` for clients written against page numbers: the same rows as the cursors, read with OFFSET,
        so only the first MAX_PAGE_ROWS of them. Its `next` is a cursor once the next page would be past it."""
        raw = request.query_params[self.page_query_param]
        if not (raw.isascii() and raw.isdigit() and int(raw) >= 1):
            raise NotFound(f"Invalid page {raw!r}: not a page number.")
        number = int(raw)
        last_page = self.MAX_PAGE_ROWS // self.page_size
        if number > last_page:
            raise ValidationError(
                {
                    self.page_query_param: [
                        f"Page numbers stop at {last_page} (the first {self.MAX_PAGE_ROWS} rows): to read "
                        f"further, follow `next` (a cursor) from page {last_page} or any page before it."
                    ]
                }
            )
        offset = (number - 1) * self.page_size
        rows = list(queryset.order_by(*self.ordering)[offset : offset + self.page_size + 1])
        if number > 1 and not rows:
            raise NotFound(f"Invalid page {raw!r}: that page contains no results.")
        self.page_number = number
        self.page = rows[: self.page_size]
        self.has_next = len(rows) > self.page_size
        self.has_previous = number > 1
        self.next_position = (
            self._get_position_from_instance(self.page[-1], self.ordering) if self.page else None
        )
        return self.page

    def get_next_link(self):
        if self.page_number is None:
            return super().get_next_link()
        if not self.has_next:
            return None
        if self.page_number < self.MAX_PAGE_ROWS // self.page_size:
            return replace_query_param(self.base_url, self.page_query_param, self.page_number + 1)
        cursor = Cursor(offset=0, reverse=False, position=self.next_position)
        return self._cursor_url(remove_query_param(self.base_url, self.page_query_param), cursor)

    def get_previous_link(self):
        if self.page_number is None:
            return super().get_previous_link()
        if not self.has_previous:
            return None
        if self.page_number == 2:
            return remove_query_param(self.base_url, self.page_query_param)
        return replace_query_param(self.base_url, self.page_query_param, self.page_number - 1)

    def encode_cursor(self, cursor):
        # A cursor link never carries `page` too: the cursor alone says where the page starts.
        return self._cursor_url(remove_query_param(self.base_url, self.page_query_param), cursor)

    def _cursor_url(self, url: str, cursor: Cursor) -> str:
        tokens = {"p": cursor.position} if cursor.position is not None else {}
        if cursor.reverse:
            tokens["r"] = "1"
        encoded = b64encode(parse.urlencode(tokens).encode("ascii")).decode("ascii")
        return replace_query_param(url, self.cursor_query_param, encoded)

    def get_paginated_response(self, data):
        return Response({"next": self.get_next_link(), "previous": self.get_previous_link(), "results": data})

    def get_schema_operation_parameters(self, view):
        return [
            *super().get_schema_operation_parameters(view),
            {
                "name": self.page_query_param,
                "required": False,
                "in": "query",
                "description": (
                    f"A page number, for the first {self.MAX_PAGE_ROWS} rows only (a deeper page is a 400): "
                    "follow `next` instead, a cursor that reads any depth as fast as the first page."
                ),
                "schema": {"type": "integer", "minimum": 1},
            },
        ]
