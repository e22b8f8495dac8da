"""The API tests' world (queue `training`, shares nlp and vision, users per role) for the operations tests."""

from tests.api.conftest import client_for, world  # noqa: F401  (fixtures)
