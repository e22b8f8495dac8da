"""Lists paginate as {count, next, previous, results}, `?page=N` with N a page number and nothing else."""

from __future__ import annotations

from rest_framework.exceptions import NotFound
from rest_framework.pagination import PageNumberPagination


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
