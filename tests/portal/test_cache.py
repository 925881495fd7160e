"""The default cache on Redis keeps one client per connection pool (``portal.cache``)."""

from __future__ import annotations

from django.core.cache import cache, caches

from portal.cache import RedisCache


def test_the_redis_cache_reuses_its_client_and_still_reads_what_it_wrote(redis_cache):
    backend = caches["default"]
    assert isinstance(backend, RedisCache)
    assert backend._cache.get_client(write=True) is backend._cache.get_client(write=True)
    cache.set("key", {"a": 1}, 5)
    assert cache.get("key") == {"a": 1}
    assert cache.add("key", 2, 5) is False
    cache.delete("key")
    assert cache.get("key") is None
