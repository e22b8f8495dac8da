"""Job submission is throttled per user (API_SUBMIT_RATE), sign-in per username and address, in the cache."""

from __future__ import annotations

from unittest import mock

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from redis.exceptions import ConnectionError as RedisConnectionError

from quotaportal.env import envrate
from scheduling.models import Job
from tests.api.support import submission
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"


def test_submissions_past_the_rate_are_429_with_retry_after(world, client_for, settings):
    settings.API_SUBMIT_RATE = "3/min"
    client = client_for(world.ana)

    codes = [client.post(JOBS, submission(name=f"j{i}"), format="json").status_code for i in range(4)]

    assert codes == [201, 201, 201, 429]
    refused = client.post(JOBS, submission(name="late"), format="json")
    assert int(refused["Retry-After"]) > 0
    assert "throttled" in refused.json()["detail"]
    assert Job.objects.count() == 3


def test_the_submission_rate_is_per_user_and_leaves_reads_and_other_writes_alone(world, client_for, settings):
    settings.API_SUBMIT_RATE = "1/min"
    ana, ben = client_for(world.ana), client_for(world.ben)

    job = ana.post(JOBS, submission(), format="json").json()

    assert ana.post(JOBS, submission(name="b"), format="json").status_code == 429
    assert ben.post(JOBS, submission(name="c"), format="json").status_code == 201
    assert ana.get(JOBS).status_code == 200
    assert ana.patch(f"{JOBS}{job['id']}/", {"scheduling_priority": 5}, format="json").status_code == 200
    assert ana.post(f"{JOBS}{job['id']}/cancel/", {}, format="json").status_code == 200


def test_submission_throttling_off_lets_everything_through(world, client_for, settings):
    settings.API_SUBMIT_RATE = None
    client = client_for(world.ana)

    assert all(
        client.post(JOBS, submission(name=f"j{i}"), format="json").status_code == 201 for i in range(5)
    )


def test_a_cache_outage_lets_submissions_through(world, client_for, settings):
    settings.API_SUBMIT_RATE = "1/min"
    with mock.patch(
        "django.core.cache.backends.locmem.LocMemCache.get",
        side_effect=RedisConnectionError("Connection refused"),
    ):
        codes = [
            client_for(world.ana).post(JOBS, submission(name=f"j{i}"), format="json").status_code
            for i in range(3)
        ]

    assert codes == [201, 201, 201]


@pytest.mark.parametrize(
    ("raw", "rate"),
    [("600/min", "600/min"), (" 10 / second ", "10/second"), ("off", None), ("0", None), ("", None)],
)
def test_api_submit_rate_reads_rates_and_off(monkeypatch, raw, rate):
    monkeypatch.setenv("API_SUBMIT_RATE", raw)

    assert envrate("API_SUBMIT_RATE", "600/min") == rate


@pytest.mark.parametrize("raw", ["600", "fast", "10/fortnight", "-1/min", "0/min"])
def test_api_submit_rate_refuses_a_bad_value_naming_it(monkeypatch, raw):
    monkeypatch.setenv("API_SUBMIT_RATE", raw)

    with pytest.raises(ImproperlyConfigured, match="API_SUBMIT_RATE"):
        envrate("API_SUBMIT_RATE", "600/min")


# --- sign-in ---------------------------------------------------------------------------------------------

LOGIN = "/accounts/login/"


@pytest.fixture
def dana():
    return UserFactory(username="dana", password="right-password-1")


def sign_in(client: Client, username: str, password: str, url: str = LOGIN, address: str = "10.0.0.1"):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)


def test_sign_in_is_refused_after_the_failure_limit_even_with_the_right_password(dana, settings):
    settings.LOGIN_FAILURE_LIMIT = 3
    client = Client()

    failures = [sign_in(client, "dana", "wrong").status_code for _ in range(3)]
    refused = sign_in(client, "dana", "right-password-1")

    assert failures == [200, 200, 200]  # the form again, with its error
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) == settings.LOGIN_LOCKOUT_SECONDS
    assert "Too many failed sign-in attempts" in refused.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_lockout_is_per_username_and_a_success_clears_the_count(dana, settings):
    settings.LOGIN_FAILURE_LIMIT = 3
    UserFactory(username="erin", password="erin-password-1")
    client = Client()

    sign_in(client, "dana", "wrong")
    sign_in(client, "dana", "wrong")
    assert sign_in(client, "dana", "right-password-1").status_code == 302
    Client().post("/accounts/logout/")
    for _ in range(2):
        assert sign_in(Client(), "dana", "wrong").status_code == 200  # the count started again
    assert sign_in(Client(), "erin", "erin-password-1", address="10.0.0.9").status_code == 302


def test_one_address_spraying_many_usernames_is_locked_out(settings):
    settings.LOGIN_FAILURE_LIMIT = 1  # ten failures per address

    codes = [sign_in(Client(), f"user{i}", "guess", address="192.0.2.7").status_code for i in range(11)]

    assert codes == [200] * 10 + [429]
    assert sign_in(Client(), "someone", "guess", address="192.0.2.8").status_code == 200


def test_the_admin_sign_in_is_throttled_too(settings):
    settings.LOGIN_FAILURE_LIMIT = 2
    UserFactory(username="root", password="root-password-1", is_staff=True)

    codes = [sign_in(Client(), "root", "wrong", url="/admin/login/").status_code for _ in range(3)]

    assert codes == [200, 200, 429]


def test_behind_a_proxy_the_address_is_the_one_the_proxy_appended(settings):
    settings.LOGIN_FAILURE_LIMIT = 1
    settings.BEHIND_PROXY = True

    def spray(i: int, chain: str):
        return (
            Client()
            .post(
                LOGIN,
                {"username": f"u{i}", "password": "x"},
                REMOTE_ADDR="10.0.0.2",
                HTTP_X_FORWARDED_FOR=chain,
            )
            .status_code
        )

    codes = [spray(i, f"203.0.113.{i}, 198.51.100.5") for i in range(11)]

    assert codes == [200] * 10 + [429]  # a forged first hop does not dodge the limit
    assert spray(99, "198.51.100.6") == 200


def test_a_cache_outage_lets_sign_in_through(dana, settings):
    settings.LOGIN_FAILURE_LIMIT = 1
    with mock.patch(
        "django.core.cache.backends.locmem.LocMemCache.get_many",
        side_effect=RedisConnectionError("Connection refused"),
    ):
        codes = [sign_in(Client(), "dana", "wrong").status_code for _ in range(3)]

    assert codes == [200, 200, 200]
    assert sign_in(Client(), "dana", "right-password-1").status_code == 302
