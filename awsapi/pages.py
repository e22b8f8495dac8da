"""/profile/access-keys/: a user's access keys; a new key's secret is shown on the answer to its creation only."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from awsapi import keys
from scheduling.errors import DomainError


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def access_keys(request: HttpRequest) -> HttpResponse:
    created = secret = error = None
    if request.method == "POST":
        try:
            if request.POST.get("action") == "revoke":
                keys.access_key_revoke(
                    access_key_id=request.POST.get("access_key_id", ""), actor=request.user
                )
                return redirect("access-keys")
            created, secret = keys.access_key_create(
                user=request.user, description=request.POST.get("description", "")
            )
        except DomainError as exc:
            error = exc.message
        except ValidationError as exc:
            error = "; ".join(exc.messages)
    context = {
        "keys": keys.access_keys_of(user=request.user),
        "created": created,
        "secret": secret,
        "error": error,
        "endpoint": request.build_absolute_uri("/aws/batch"),
    }
    return render(request, "awsapi/access_keys.html", context, status=400 if error else 200)
