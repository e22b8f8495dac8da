from django.contrib import admin

from scheduling.admin import ReadOnlyAdmin
from whatif.models import WhatIfRun


@admin.register(WhatIfRun)
class WhatIfRunAdmin(ReadOnlyAdmin):
    """What-if runs are started and applied on their page (Admin > What-if), where the proposal is checked."""

    list_display = (
        "id",
        "created_at",
        "job_queue",
        "source",
        "window_start",
        "window_end",
        "status",
        "created_by",
        "applied_at",
    )
    list_filter = ("status", "source", "job_queue")
    list_select_related = ("job_queue", "created_by")
    exclude = ("charts",)
