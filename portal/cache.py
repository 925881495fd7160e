"""The default cache on Redis, with one client per connection pool instead of one per call.

Django's ``RedisCacheClient.get_client`` builds a new ``redis.Redis`` for every cache call (each
copies ~170 response callbacks: about a millisecond of CPU on a loaded machine, more than the round
trip). A ``redis.Redis`` is safe to share between threads (its connections come from the pool), so
the client of each pool is built once. Everything else is Django's ``RedisCache``.
"""

from __future__ import annotations

from typing import Any

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient as DjangoRedisCacheClient


class RedisCacheClient(DjangoRedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, tuple[Any, Any]] = {}  # id(pool) -> (pool, client)

    def get_client(self, key=None, *, write=False):
        pool = self._get_connection_pool(write)
        kept = self._clients.get(id(pool))
        if kept is None or kept[0] is not pool:
            kept = self._clients[id(pool)] = (pool, self._client(connection_pool=pool))
        return kept[1]


class RedisCache(DjangoRedisCache):
    def __init__(self, server, params) -> None:
        super().__init__(server, params)
        self._class = RedisCacheClient
