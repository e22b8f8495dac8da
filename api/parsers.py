"""The API's JSON parser: DRF's, refusing JSON nested deeper than `rules.MAX_JSON_DEPTH` with a 400 (the submit
form refuses it the same way, with the same message)."""

from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError

from scheduling.rules import JSON_TOO_DEEP, MAX_JSON_DEPTH, json_depth


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(JSON_TOO_DEEP) from None
        if json_depth(data) > MAX_JSON_DEPTH:
            raise ParseError(JSON_TOO_DEEP)
        return data
