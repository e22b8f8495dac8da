"""The error pages (403, 404, 500): the site's layout, a sentence of why, and a way back."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseServerError
from django.shortcuts import render
from django.template import loader


def _message(exception: Exception | None) -> str:
    """The sentence the code gave when it refused (PermissionDenied("..."), Http404("...")), if any."""
    message = exception.args[0] if exception is not None and exception.args else ""
    return message if isinstance(message, str) else ""


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return render(request, "403.html", {"reason": _message(exception)}, status=403)


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return render(request, "404.html", {"reason": _message(exception), "path": request.path}, status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    """Standalone: rendered without the request's context, so nothing that failed can fail again here."""
    return HttpResponseServerError(loader.get_template("500.html").render())
