"""Job submission is throttled per user (API_SUBMIT_RATE) in the cache; sign-in is locked out per account and
address by django-axes, in the database."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from axes.models import AccessAttempt
from django.core.exceptions import ImproperlyConfigured
from django.db.models import F
from django.test import Client
from redis.exceptions import ConnectionError as RedisConnectionError
from rest_framework.authtoken.models import Token

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


# --- sign-in (django-axes, configured in quotaportal.accounts) -------------------------------------------

LOGIN = "/accounts/login/"
ADMIN_LOGIN = "/admin/login/"
FULL_WIDTH_DANA = "\uff44\uff41\uff4e\uff41"  # ｄａｎａ: NFKC makes it "dana"


@pytest.fixture
def dana():
    return UserFactory(username="dana", password="right-password-1")


def sign_in(client: Client, username: str, password: str, url: str = LOGIN, address: str = "10.0.0.1"):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_sign_in_is_refused_after_the_failure_limit_even_with_the_right_password(dana, settings):
    settings.LOGIN_FAILURE_LIMIT = 3
    client = Client()

    failures = [sign_in(client, "dana", "wrong").status_code for _ in range(3)]
    refused = sign_in(client, "dana", "right-password-1")

    assert failures == [200, 200, 429]  # the form again with its error, then the failure that locks
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) == settings.LOGIN_LOCKOUT_SECONDS
    assert "Too many failed sign-in attempts" in refused.content.decode()
    assert not signed_in(client)


def test_the_full_width_spelling_of_a_locked_username_is_refused_too(dana, settings):
    client = Client()
    for _ in range(settings.LOGIN_FAILURE_LIMIT):
        sign_in(client, "dana", "wrong")

    refused = sign_in(client, FULL_WIDTH_DANA, "right-password-1", address="10.0.0.2")

    assert refused.status_code == 429
    assert not signed_in(client)


@pytest.mark.parametrize("spelling", [FULL_WIDTH_DANA, "DANA", " Dana "])
def test_failures_under_any_spelling_count_against_one_account(dana, settings, spelling):
    settings.LOGIN_FAILURE_LIMIT = 2

    sign_in(Client(), spelling, "wrong", address="10.0.0.3")
    sign_in(Client(), "dana", "wrong", address="10.0.0.4")

    assert sign_in(Client(), "dana", "right-password-1", address="10.0.0.5").status_code == 429


def test_the_admin_sign_in_is_locked_out_too_under_any_spelling(settings):
    settings.LOGIN_FAILURE_LIMIT = 2
    UserFactory(username="root", password="root-password-1", is_staff=True)

    codes = [sign_in(Client(), "root", "wrong", url=ADMIN_LOGIN).status_code for _ in range(2)]
    client = Client()
    refused = sign_in(client, "\uff52\uff4f\uff4f\uff54", "root-password-1", url=ADMIN_LOGIN)  # ｒｏｏｔ

    assert codes == [200, 429]
    assert refused.status_code == 429
    assert not signed_in(client)


def test_failures_on_the_admin_sign_in_lock_the_login_page_and_back(dana, settings):
    settings.LOGIN_FAILURE_LIMIT = 2

    sign_in(Client(), "dana", "wrong", url=ADMIN_LOGIN)
    sign_in(Client(), "dana", "wrong")

    assert sign_in(Client(), "dana", "right-password-1").status_code == 429
    assert sign_in(Client(), "dana", "right-password-1", url=ADMIN_LOGIN).status_code == 429


def test_the_lockout_is_per_username_and_a_success_clears_the_count(dana, settings):
    settings.LOGIN_FAILURE_LIMIT = 3
    UserFactory(username="erin", password="erin-password-1")
    client = Client()

    sign_in(client, "dana", "wrong")
    sign_in(client, "dana", "wrong")
    assert sign_in(client, "dana", "right-password-1").status_code == 302
    client.post("/accounts/logout/")
    for _ in range(2):
        assert sign_in(Client(), "dana", "wrong").status_code == 200  # the count started again
    assert sign_in(Client(), "erin", "erin-password-1", address="10.0.0.9").status_code == 302


def test_the_lockout_ends_lockout_seconds_after_the_last_attempt(dana, settings):
    settings.LOGIN_FAILURE_LIMIT = 2
    for _ in range(2):
        sign_in(Client(), "dana", "wrong")
    assert sign_in(Client(), "dana", "right-password-1").status_code == 429

    AccessAttempt.objects.update(
        attempt_time=F("attempt_time") - timedelta(seconds=settings.LOGIN_LOCKOUT_SECONDS + 1)
    )

    assert sign_in(Client(), "dana", "right-password-1").status_code == 302


def test_one_address_spraying_many_usernames_is_locked_out(settings):
    settings.LOGIN_FAILURE_LIMIT = 2  # twenty failures per address

    codes = [sign_in(Client(), f"user{i}", "guess", address="192.0.2.7").status_code for i in range(21)]

    assert codes == [200] * 19 + [429, 429]
    assert sign_in(Client(), "someone", "guess", address="192.0.2.8").status_code == 200


def test_a_sprayer_signing_in_to_its_own_account_does_not_clear_the_address_count(dana, settings):
    settings.LOGIN_FAILURE_LIMIT = 2

    for i in range(15):
        sign_in(Client(), f"user{i}", "guess", address="192.0.2.7")
    assert sign_in(Client(), "dana", "right-password-1", address="192.0.2.7").status_code == 302
    codes = [sign_in(Client(), f"other{i}", "guess", address="192.0.2.7").status_code for i in range(5)]

    assert codes == [200] * 4 + [429]


def test_behind_a_proxy_the_address_is_the_one_the_proxy_appended(settings):
    settings.LOGIN_FAILURE_LIMIT = 2
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

    codes = [spray(i, f"203.0.113.{i}, 198.51.100.5") for i in range(20)]

    assert codes == [200] * 19 + [429]  # a forged first hop does not dodge the limit
    assert spray(99, "198.51.100.6") == 200


def test_a_locked_out_account_keeps_its_api_token_and_its_signed_in_sessions(world, settings):
    settings.LOGIN_FAILURE_LIMIT = 2
    token = Token.objects.create(user=world.ana)
    signed_in_before = Client()
    signed_in_before.force_login(world.ana)
    for _ in range(2):
        sign_in(Client(), "ana", "wrong")

    by_token = Client().get(JOBS, HTTP_AUTHORIZATION=f"Token {token.key}")

    assert sign_in(Client(), "ana", "pw-for-tests-1").status_code == 429
    assert by_token.status_code == 200
    assert signed_in_before.get(JOBS).status_code == 200
    assert signed_in_before.get("/").status_code == 200
