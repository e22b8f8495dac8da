import os

from celery import Celery, Task

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "quotaportal.settings")

app = Celery("quotaportal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


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
