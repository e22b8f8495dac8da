"""People: a user's profile (teams and roles, their API token, a first request to the API) and the teams with
their members, where staff and a team's managers add and remove members through the services the API uses."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from portal.forms.people import MemberForm
from portal.views.common import page, viewer
from scheduling.errors import NotAllowed
from scheduling.selectors import teams as team_selectors
from scheduling.services import configuration as config_services
from scheduling.services import tokens as token_services

# --- the profile --------------------------------------------------------------------------------------------

TOKEN_ACTIONS = {
    "create": token_services.api_token_create,
    "rotate": token_services.api_token_rotate,
}


@page
def profile(request):
    """GET: the profile. POST `action` create or rotate: the same page with the new key, shown this once (never
    stored where it could be shown again); revoke: back to the profile without a token."""
    new_key = None
    if request.method == "POST":
        action = request.POST.get("action", "")
        if action == "revoke":
            gone = token_services.api_token_revoke(user=request.user)
            messages.success(request, "Your API token is revoked." if gone else "You had no API token.")
            return redirect("profile")
        if action not in TOKEN_ACTIONS:
            return _profile_page(request, status=400, problem=f"unknown action {action!r}")
        new_key = TOKEN_ACTIONS[action](user=request.user).key
    return _profile_page(request, new_key=new_key)


def _profile_page(
    request, *, new_key: str | None = None, status: int = 200, problem: str = ""
) -> HttpResponse:
    base = request.build_absolute_uri("/").rstrip("/")
    response = render(
        request,
        "portal/profile.html",
        {
            "memberships": team_selectors.user_memberships(user=request.user),
            "token_created": team_selectors.api_token_created(user=request.user),
            "new_key": new_key,
            "api_base": f"{base}/api/v1",
            "aws_endpoint": f"{base}/aws/batch",
            "portal_url": base,
            "problem": problem,
        },
        status=status,
    )
    response["Cache-Control"] = "no-store"  # a page that may hold a key is never kept by a browser or proxy
    return response


# --- teams --------------------------------------------------------------------------------------------------


@page
def team_list(request):
    return render(
        request, "portal/team_list.html", {"teams": team_selectors.teams_for_viewer(viewer=viewer(request))}
    )


def _team(request, team_id: int):
    found = team_selectors.team_for_viewer(viewer=viewer(request), team_id=team_id)
    if found is None:
        raise Http404("No such team, or you are not in it.")
    return found


@page
def team_detail(request, team_id: int):
    found = _team(request, team_id)
    form = MemberForm(request.POST or None)
    if request.method == "POST":
        if not found.can_manage:
            raise NotAllowed("only staff or a manager of this team may change its members")
        if form.is_valid():
            user, role = form.cleaned_data["username"], form.cleaned_data["role"]
            _membership, created = config_services.team_member_set(
                team=found.team, user=user, role=role, actor=request.user
            )
            messages.success(
                request,
                f"Added {user.get_username()} to {found.team.name} as {role}."
                if created
                else f"{user.get_username()} is now a {role} of {found.team.name}.",
            )
            return redirect("team_detail", team_id=found.team.pk)
    return render(
        request, "portal/team_detail.html", {"found": found, "form": form}, status=400 if form.errors else 200
    )


@require_POST
@page
def team_member_remove(request, team_id: int, user_id: int):
    found = _team(request, team_id)
    if not found.can_manage:
        raise NotAllowed("only staff or a manager of this team may change its members")
    member = next((m for m in found.members if m.user_id == user_id), None)
    if member is not None:
        config_services.team_member_remove(team=found.team, user_id=user_id, actor=request.user)
        messages.success(request, f"Removed {member.user.get_username()} from {found.team.name}.")
    return redirect(reverse("team_detail", args=[found.team.pk]))
