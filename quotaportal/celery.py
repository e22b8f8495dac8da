import logging
import os

from celery import Celery, Task
from celery.signals import before_task_publish

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "quotaportal.settings")

app = Celery("quotaportal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

HEARTBEAT_TASK = "scheduling.tasks.heartbeat"
logger = logging.getLogger("quotaportal.scheduling")


@before_task_publish.connect
def beat_heartbeat(sender=None, **kwargs) -> None:
    """The beat's sign of life, written by the process that sends the heartbeat task (the beat). A failure
    here is logged, never raised: it must not stop the beat from sending its tasks."""
    if sender != HEARTBEAT_TASK:
        return
    try:
        from django.db import close_old_connections, connection

        from scheduling.models import Heartbeat
        from scheduling.services.heartbeat import heartbeat_record

        if (
            not connection.in_atomic_block
        ):  # the beat lives for days: a connection the database dropped is replaced
            close_old_connections()
        heartbeat_record(component=Heartbeat.Component.BEAT)
    except Exception:
        logger.exception("could not record the beat's heartbeat")


def task_named(name: str) -> Task:
    """The task registered as `name` (`<module>.<function>`), looked up when it is sent.

    A service that enqueues a task finds it here rather than importing its tasks module, which imports the
    services back. A worker imports every app's tasks module when it starts; a web process has not, so its
    first look-up runs the same autodiscovery. The registry holds the task object itself, so a test that
    patches `tasks.<task>.delay` patches what is found here.
    """
    try:
        return app.tasks[name]
    except KeyError:
        app.loader.import_default_modules()
        return app.tasks[name]
