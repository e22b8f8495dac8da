"""Logging filters the settings' LOGGING names."""

from __future__ import annotations

import logging


class RefusalsWithoutTraceback(logging.Filter):
    """A 403 is a refusal the code meant, not a fault: django.request logs it in one line, with no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) == 403:
            record.exc_info = None
            record.exc_text = None
        return True
