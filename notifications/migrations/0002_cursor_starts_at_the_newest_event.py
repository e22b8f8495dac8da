from django.db import migrations
from django.db.models import Max


def start_at_the_newest_event(apps, schema_editor):
    """Subscriptions hear what happens from now on: the events written before notifications existed are
    behind the cursor from the start."""
    Event = apps.get_model("scheduling", "Event")
    EventCursor = apps.get_model("notifications", "EventCursor")
    top = Event.objects.aggregate(top=Max("id"))["top"] or 0
    EventCursor.objects.update_or_create(name="events", defaults={"last_event_id": top})


class Migration(migrations.Migration):
    dependencies = [("notifications", "0001_initial"), ("scheduling", "0016_executor_offer")]

    operations = [migrations.RunPython(start_at_the_newest_event, migrations.RunPython.noop)]
