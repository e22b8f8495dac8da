"""A real HTTP receiver on 127.0.0.1 for the webhooks, and a small organisation whose jobs fail."""

from __future__ import annotations

import pytest

from notifications.models import Channel, Subscription
from notifications.services import SubscriptionInput, subscription_create
from tests.notifications.receiver import http_receiver
from tests.pages.conftest import build_world


@pytest.fixture
def receiver():
    with http_receiver() as state:
        yield state


@pytest.fixture
def world(db, settings):
    settings.NOTIFY_ALLOW_PRIVATE_WEBHOOKS = True
    settings.PORTAL_URL = "https://portal.example.org"
    return build_world()


@pytest.fixture
def subscribe():
    def make(owner, *, triggers, channel=Channel.WEBHOOK, target="", **fields) -> Subscription:
        return subscription_create(
            owner=owner,
            data=SubscriptionInput(
                name=fields.pop("name", "on-call"),
                channel=channel,
                target=target,
                triggers=triggers,
                **fields,
            ),
        )

    return make
