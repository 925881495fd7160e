"""The two-tenant isolation check, generated from the URL conf (and, for the API, its schema).

Every route the resolver knows is turned into concrete URLs that name the *other* team's objects
(its job, its team slug, its cluster queue, its owner's token, this month's invoice) and requested
by a member of the first team with every method, over the browser session and with an API token.
No answer may carry the other team's private data (marker strings planted in its job, queue, labels
and token) and nothing of the other team may change. A new route is checked the moment it is added;
a route whose parameters this module cannot fill fails loudly, naming the parameter to teach it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.test import Client
from django.urls import get_resolver
from django.urls.resolvers import URLPattern, URLResolver
from django.utils import timezone
from rest_framework.test import APIClient

from portal.jobs.models import ClusterQueue, Job, LocalQueue
from portal.tokens.models import ApiToken
from portal.tokens.services import api_token_create
from tests.factories import World

MARKER = "zq-secret"
METHODS = ("GET", "POST", "PATCH", "PUT", "DELETE")
GROUP = re.compile(r"\(\?P<(?P<name>\w+)>(?P<body>[^)]*)\)")
CONVERTER = re.compile(r"<(?:(?P<converter>\w+):)?(?P<name>\w+)>")


def routes(urlconf: str | None = None) -> list[str]:
    """Every route of the URL conf, as the concatenation of its patterns (route or regex syntax)."""

    def walk(patterns, prefix: str) -> Iterator[str]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                yield prefix + str(pattern.pattern)

    return list(walk(get_resolver(urlconf).url_patterns, ""))


@dataclass
class Victim:
    """The other team's objects, planted with markers."""

    job: Job
    token: ApiToken
    queue: LocalQueue
    before: dict[str, object] = field(default_factory=dict)

    @classmethod
    def plant(cls, world: World) -> Victim:
        queue = LocalQueue.objects.create(
            name=f"{MARKER}-queue", team=world.teams["vision"], cluster_queue=world.cluster_queues["vision"]
        )
        job = world.submit(
            "vision", name=f"{MARKER}-job", image=f"registry.example.com/{MARKER}-image:1", local_queue=queue,
            labels=(("project", f"{MARKER}-label"),), command=("python", f"{MARKER}-arg"),
        )  # fmt: skip
        token, _ = api_token_create(user=world.users["alice"], name=f"{MARKER}-token")
        victim = cls(job=job, token=token, queue=queue)
        victim.before = victim.state()
        return victim

    def state(self) -> dict[str, object]:
        cq = ClusterQueue.objects.get(pk=self.queue.cluster_queue_id)
        return {
            "job": Job.objects.filter(pk=self.job.pk).values_list("state", "name", "image").first(),
            "token": ApiToken.objects.filter(pk=self.token.pk).values_list("revoked_at", "name").first(),
            "queue": LocalQueue.objects.filter(pk=self.queue.pk).values_list("name", "weight").first(),
            "cq": (cq.cpu_quota_milli, cq.memory_quota_mib, sorted(cq.flavors.values_list("nominal_gpus", flat=True))),
        }


class UnfilledParameter(LookupError):
    pass


def filler(route: str, name: str, victim: Victim) -> str:
    """The value that makes ``route``'s parameter ``name`` point at the victim's object."""
    now = timezone.now()
    if name in ("pk", "id", "object_id"):
        return str(victim.token.pk if route.startswith("account/tokens") else victim.job.pk)
    values = {
        "slug": "vision",
        "year": str(now.year),
        "month": str(now.month),
        "format": "json",
        "app_label": "jobs",
        "content_type_id": "1",
        "url": f"jobs/job/{victim.job.pk}/change/",  # the admin's catch-all
    }
    if name in values:
        return values[name]
    if name == "name":
        for prefix, value in (("api/v1/^gpu-models", "A100-80GB"), ("api/v1/^priority-classes", "default")):
            if route.startswith(prefix):
                return value
        return "cq-vision"
    raise UnfilledParameter(f"route {route!r}: teach tests/hardening/isolation.py to fill parameter {name!r}")


def concrete(route: str, victim: Victim) -> str:
    """A URL path for ``route`` with every parameter filled (route syntax or regex syntax)."""
    path = CONVERTER.sub(lambda m: filler(route, m["name"], victim), route)
    path = GROUP.sub(lambda m: filler(route, m["name"], victim), path)
    path = path.replace("^", "").replace("$", "").replace("\\.", ".").replace("/?", "/")
    return "/" + path


@dataclass
class Sweep:
    routes: list[str] = field(default_factory=list)
    requests: int = 0
    problems: list[str] = field(default_factory=list)


def isolation_sweep(world: World, *, urlconf: str | None = None) -> Sweep:
    """Request every route as bob (team nlp) aimed at vision's objects; report every leak or change."""
    victim = Victim.plant(world)
    bob = world.users["bob"]
    browser = Client()
    browser.force_login(bob)
    api = APIClient()
    _, key = api_token_create(user=bob, name="isolation")
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    sweep = Sweep()
    for route in routes(urlconf):
        sweep.routes.append(route)
        path = concrete(route, victim)
        for client in (browser, api):
            for method in METHODS:
                response = client.generic(method, path, data=b"{}", content_type="application/json")
                sweep.requests += 1
                body = b"".join(response.streaming_content) if response.streaming else response.content  # type: ignore[attr-defined]
                if response.status_code >= 500:
                    sweep.problems.append(f"{method} {path}: server error {response.status_code}")
                if MARKER.encode() in body:
                    sweep.problems.append(f"{method} {path}: answer shows team vision's data")
                if route == "accounts/logout/":
                    browser.force_login(bob)
    if (after := victim.state()) != victim.before:
        sweep.problems.append(f"team vision's objects changed: {victim.before} -> {after}")
    return sweep
