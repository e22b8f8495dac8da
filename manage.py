#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "quotaportal.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    # A bad environment variable is named in one line, not at the end of a traceback through Django.
    try:
        settings.INSTALLED_APPS  # noqa: B018 (reading a setting loads them all)
    except ImproperlyConfigured as exc:
        sys.stderr.write(f"quotaportal: configuration error: {exc}\n")
        sys.exit(2)
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
