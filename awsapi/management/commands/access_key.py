"""`manage.py access_key create USERNAME` prints a new key as two lines of an AWS credentials file;
`manage.py access_key revoke KEY_ID` revokes one; `manage.py access_key list USERNAME` lists a user's keys."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from awsapi import keys
from scheduling.errors import DomainError


class Command(BaseCommand):
    help = "Create, list or revoke access keys of the AWS-compatible API."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="create a key for USERNAME and print it (the secret once)")
        create.add_argument("username")
        create.add_argument("--description", default="")
        revoke = actions.add_parser("revoke", help="revoke the key KEY_ID at once")
        revoke.add_argument("key_id")
        listing = actions.add_parser("list", help="list USERNAME's keys (never their secrets)")
        listing.add_argument("username")

    def handle(self, *args, **options):
        try:
            getattr(self, f"_{options['action']}")(options)
        except DomainError as exc:
            raise CommandError(exc.message) from None
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None

    def _user(self, username: str):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username}")
        return user

    def _create(self, options):
        key, secret = keys.access_key_create(
            user=self._user(options["username"]), description=options["description"]
        )
        self.stdout.write(f"aws_access_key_id = {key.access_key_id}")
        self.stdout.write(f"aws_secret_access_key = {secret}")

    def _revoke(self, options):
        key = keys.access_key_revoke(access_key_id=options["key_id"], actor=None)
        self.stdout.write(f"revoked {key.access_key_id} of {key.user.get_username()}")

    def _list(self, options):
        for key in keys.access_keys_of(user=self._user(options["username"])):
            state = "active" if key.active else f"revoked {key.revoked_at:%Y-%m-%d %H:%M}"
            used = f"{key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never"
            self.stdout.write(f"{key.access_key_id}  {state}  last used {used}  {key.description}")
