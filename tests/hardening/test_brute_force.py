"""Item 6: repeated wrong passwords lock the login out (django-axes), and the API throttles per user,
per address and failed token logins per address, each with 429 and Retry-After."""

from __future__ import annotations

import secrets

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def test_wrong_passwords_lock_the_login_out_even_for_the_right_password(client, world, axes_on, settings):
    for _ in range(30):
        wrong = client.post("/accounts/login/", {"username": "alice", "password": "guess"})
        assert wrong.status_code in (200, 429)
    right = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice"})
    assert right.status_code == 429
    assert int(right["Retry-After"]) == settings.AXES_COOLOFF_S
    assert "_auth_user_id" not in client.session
    # Another user from the same address is not locked out by alice's failures.
    assert client.post("/accounts/login/", {"username": "bob", "password": "pw-bob"}).status_code == 302


def test_a_few_wrong_passwords_do_not_lock_anyone_out(client, world, axes_on, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        client.post("/accounts/login/", {"username": "alice", "password": "guess"})
    assert client.post("/accounts/login/", {"username": "alice", "password": "pw-alice"}).status_code == 302


def test_the_admin_login_is_locked_out_too(client, world, axes_on, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT + 1):
        client.post("/admin/login/", {"username": "admin", "password": "guess"})
    assert client.post("/admin/login/", {"username": "admin", "password": "pw-admin"}).status_code == 429


def test_guessing_api_tokens_is_throttled_with_429_and_retry_after(world):
    client = APIClient()
    statuses = []
    for _ in range(60):
        client.credentials(HTTP_AUTHORIZATION=f"Token gpt_{secrets.token_urlsafe(32)}")
        response = client.get("/api/v1/jobs/")
        statuses.append(response.status_code)
    assert set(statuses) == {401, 429}
    assert statuses.index(429) == 20  # API_THROTTLE_AUTH_FAILURES = 20/min
    assert int(response["Retry-After"]) > 0


def test_one_user_is_throttled_per_user(api, world, settings):
    settings.API_THROTTLE_USER = "5/min"
    alice = api("alice")
    statuses = [alice.get("/api/v1/teams/").status_code for _ in range(7)]
    assert statuses == [200] * 5 + [429] * 2
    throttled = alice.get("/api/v1/teams/")
    assert int(throttled["Retry-After"]) > 0
    assert api("bob").get("/api/v1/teams/").status_code == 200  # bob has his own budget


def test_one_address_is_throttled_whoever_is_logged_in(api, world, settings):
    settings.API_THROTTLE_IP = "6/min"
    statuses = [api(user).get("/api/v1/teams/").status_code for user in ("alice", "bob", "carol") * 3]
    assert statuses.count(429) == 3
    other = api("alice").get("/api/v1/teams/", REMOTE_ADDR="10.0.0.9")
    assert other.status_code == 200


def test_anonymous_requests_to_public_endpoints_are_counted_per_address(world, settings):
    settings.API_THROTTLE_ANON = "3/min"
    settings.API_DOCS = "public"
    client = APIClient()
    statuses = [client.get("/api/schema/").status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]


def test_the_user_and_the_address_are_throttled_each_on_its_own_log(api, world, settings, redis_cache):
    """One round trip per request for both (``ApiThrottle``), judged as DRF judges two throttles: a
    request one refuses still counts for the other, and the answer waits for the longer."""
    settings.API_THROTTLE_USER = "2/min"
    settings.API_THROTTLE_IP = "5/min"
    alice, bob = api("alice"), api("bob")
    # alice: 2 served, 2 refused by her own log, all 4 logged for the address.
    assert [alice.get("/api/v1/teams/").status_code for _ in range(4)] == [200, 200, 429, 429]
    # bob: his first fills the address's log (5), the next is refused by it.
    assert [bob.get("/api/v1/teams/").status_code for _ in range(2)] == [200, 429]
    refused = alice.get("/api/v1/teams/")
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 60
    assert api("carol").get("/api/v1/teams/", REMOTE_ADDR="10.0.0.9").status_code == 200


def _counted_steps(monkeypatch) -> list[list[str]]:
    """The keys of each round trip the throttles make to Redis."""
    from portal.api import throttling

    steps: list[list[str]] = []
    real = throttling._log_steps

    def counted(redis, entries, *, now):
        steps.append([entry.key.split("_")[1] for entry in entries])
        return real(redis, entries, now=now)

    monkeypatch.setattr(throttling, "_log_steps", counted)
    return steps


def test_a_token_request_costs_one_redis_round_trip(api, world, redis_cache, monkeypatch):
    """The address's failed logins, the user's and the address's requests: one step (the API's views
    let any authenticated user through to the throttle)."""
    alice = api("alice")
    steps = _counted_steps(monkeypatch)
    assert alice.get("/api/v1/teams/").status_code == 200
    assert alice.get("/api/v1/jobs/").status_code == 200
    assert steps == [["authfail", "user", "ip"]] * 2


def test_a_view_with_its_own_permissions_is_throttled_after_them(api, world, settings, redis_cache, monkeypatch):
    """Its permission check may refuse the request before the throttle: the throttle's logs are taken
    only then, in a round trip of their own (a refused request is not counted, as DRF counts it)."""
    settings.API_DOCS = "off"  # its permission answers 404
    settings.API_THROTTLE_USER = "2/min"
    alice = api("alice")
    steps = _counted_steps(monkeypatch)
    assert [alice.get("/api/schema/").status_code for _ in range(3)] == [404] * 3
    assert steps == [["authfail"]] * 3  # refused by the permission: never counted
    assert [alice.get("/api/v1/teams/").status_code for _ in range(3)] == [200, 200, 429]


def test_past_the_failed_logins_limit_a_valid_key_gets_429_too_and_is_not_counted(api, world, settings, redis_cache):
    settings.API_THROTTLE_AUTH_FAILURES = "3/min"
    settings.API_THROTTLE_USER = "2/min"
    alice = api("alice")
    guesser = APIClient()
    guesser.credentials(HTTP_AUTHORIZATION="Token gpt_wrong")
    assert [guesser.get("/api/v1/teams/").status_code for _ in range(4)] == [401, 401, 401, 429]
    refused = alice.get("/api/v1/teams/")  # the same address
    assert refused.status_code == 429
    assert refused.json()["detail"] == guesser.get("/api/v1/teams/").json()["detail"]
    assert int(refused["Retry-After"]) > 0
    # From another address her key works, her own log untouched by the refused requests.
    assert [alice.get("/api/v1/teams/", REMOTE_ADDR="10.0.0.9").status_code for _ in range(3)] == [200, 200, 429]
