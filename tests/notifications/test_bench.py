"""`python -m tools.bench_notifications` times scans over a storm of events, and deletes what it wrote."""

import re
from io import StringIO

from django.core.management import call_command

from notifications.models import Delivery, Subscription
from scheduling.models import Event, Team
from tools.bench_notifications.command import Command


def test_the_scan_is_timed_over_the_events_and_everything_is_deleted_after(db, settings):
    settings.NOTIFY_SCAN_BATCH = 100
    out = StringIO()
    call_command(
        Command(), "--events", "502", "--subscriptions", "3", "--members", "2", "--jobs", "10", stdout=out
    )
    found = re.match(
        r"notification scan on \w+: 502 events \(200 that notify\), 3 subscriptions -> (\d+) deliveries in "
        r"(\d+) scans of at most 100 events: [\d.]+ s in all",
        out.getvalue(),
    )
    assert found, out.getvalue()
    assert int(found[1]) == 600 and int(found[2]) == 2  # 200 notifying events read 100 a scan
    assert not Subscription.objects.exists() and not Delivery.objects.exists()
    assert not Event.objects.exists() and not Team.objects.exists()
