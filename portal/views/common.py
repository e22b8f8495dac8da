"""What every page view shares: sign-in, staff-only pages, domain errors mapped to responses in one place,
and choosing the fragment an htmx request asked for."""

from __future__ import annotations

from functools import wraps
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render, resolve_url
from django_htmx.http import HttpResponseClientRedirect

from scheduling.errors import DomainError, NotFound
from scheduling.selectors import visibility


def page(view):
    """Sign-in required; a DomainError the view does not handle becomes a page with its status and message.

    A live region polling after the session ended gets the whole tab sent to sign-in (HX-Redirect), not the
    login form swapped into the region.
    """

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request.user.is_authenticated:
            if request.htmx:
                current = urlsplit(request.htmx.current_url or "/")
                back = current.path + (f"?{current.query}" if current.query else "")
                return HttpResponseClientRedirect(
                    redirect_to_login(back, resolve_url(settings.LOGIN_URL))["Location"]
                )
            return redirect_to_login(request.get_full_path(), resolve_url(settings.LOGIN_URL))
        try:
            return view(request, *args, **kwargs)
        except NotFound as exc:
            raise Http404(exc.message) from None
        except DomainError as exc:
            return render(request, "portal/error.html", {"message": exc.message}, status=exc.status_code)

    return wrapper


def staff_page(view):
    """A page of the administration: staff only (others get 403)."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("the administration pages are for staff")
        return view(request, *args, **kwargs)

    return page(wrapper)


def viewer(request: HttpRequest) -> visibility.Viewer:
    """The request's viewer, read once per request."""
    if not hasattr(request, "_quotaportal_viewer"):
        request._quotaportal_viewer = visibility.viewer_for(user=request.user)
    return request._quotaportal_viewer


def htmx_target(request: HttpRequest, allowed: tuple[str, ...]) -> str | None:
    """The live region an htmx request asked for, if it is one of the page's; None for a whole page."""
    if not request.htmx:
        return None
    target = request.htmx.target
    return target if target in allowed else None


def refresh_seconds() -> int:
    return settings.PAGE_REFRESH_SECONDS
