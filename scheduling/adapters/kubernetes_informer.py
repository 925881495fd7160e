"""The cluster's nodes and pods as caches kept current by LIST and WATCH (one ``Informer`` per kind).

Part of the ``scheduling.adapters.kubernetes*`` family, the only modules that import ``kubernetes``.

1. ``relist`` fills the cache by LIST and records the list's resourceVersion; ``start`` does it once
   (synchronously, so errors surface) and then watches in a daemon thread.
2. A watch streams changes from the last resourceVersion seen. It ends after ``watch_timeout_s``
   (server side) and resumes from there; 410 Gone means the version is too old, so the cache is
   relisted; any other failure is retried with exponential backoff (at most 5 s apart).
3. Every call carries a client-side (connect, read) timeout, watches included, so a silent network
   partition raises instead of hanging the thread.
4. ``ensure_fresh`` relists synchronously a cache whose watch has been out of contact too long (a dead
   thread, an API outage), so a reader never plans from a view that silently stopped updating; a
   watch started before a relist stops applying its events.
5. With an ``index`` (a key per object, None for objects nobody asks about), the cache also keeps its
   objects by key (``indexed``) and, for each subscriber (``subscribe``), the keys whose objects were
   added, changed or deleted since the subscriber last asked (``take_changes``): a relist reports "all",
   since what it replaced is not known. This is client-go's indexer and work queue, so a reader works
   in proportion to what changed instead of walking the whole cache.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from scheduling.adapters.kubernetes_api import NETWORK_ERRORS, ClusterApiError, K8sOptions, call, logger

_INFORMERS = itertools.count()


def _key(obj: Mapping) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


@dataclass(slots=True)
class Changes:
    """What one subscriber has not seen yet: every key (``everything``, after a relist) or these."""

    everything: bool = True  # a new subscriber has seen nothing
    keys: set = field(default_factory=set)


class Informer:
    """A cache of one resource kind: LIST, then WATCH from the resourceVersion, relist on 410 Gone."""

    def __init__(
        self,
        name: str,
        list_fn: Callable[..., Any],
        options: K8sOptions,
        *,
        index: Callable[[Mapping], Hashable | None] | None = None,
        **selectors: str,
    ) -> None:
        self.name = name
        self.list_fn = list_fn
        self.options = options
        self.selectors = {k: v for k, v in selectors.items() if v}
        self._items: dict[str, dict] = {}
        self._index_fn = index
        self._by_key: dict[Hashable | None, dict[str, dict]] = {}  # index key -> {object key: object}
        self._subscribers: dict[str, Changes] = {}
        self._rv: str | None = None
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.relists = 0
        self.watch_errors = 0
        self.last_contact = 0.0  # monotonic time of the last successful list, watch event or watch end
        self._generation = 0  # bumped by every relist; a watch started before it stops applying events
        self.identity = next(_INFORMERS)  # never shared by two informers of one process
        self.changes = 0  # bumped by every relist and every event applied: same count, same cache

    @property
    def resource_version(self) -> str | None:
        return self._rv

    def items(self) -> list[dict]:
        with self._cond:
            return list(self._items.values())

    # -- the index and its subscribers (step 5) ---------------------------------------------------------

    def subscribe(self, name: str) -> None:
        """Start recording changed keys for ``name``; its first ``take_changes`` reports everything."""
        with self._cond:
            self._subscribers.setdefault(name, Changes())

    def take_changes(self, name: str) -> Changes:
        """The keys changed since ``name`` last asked (and forget them): ``everything`` after a relist."""
        with self._cond:
            pending = self._subscribers[name]
            self._subscribers[name] = Changes(everything=False)
            return pending

    def give_back(self, name: str, changes: Changes) -> None:
        """Give ``changes`` back to ``name`` (its pass over them failed: the next one takes them again)."""
        with self._cond:
            pending = self._subscribers[name]
            pending.everything |= changes.everything
            pending.keys |= changes.keys

    def indexed(self, key: Hashable | None) -> list[dict]:
        """The objects whose index key is ``key`` (None: those the index leaves out)."""
        with self._cond:
            return list((self._by_key.get(key) or {}).values())

    def index_keys(self) -> list:
        """Every index key some object has (never None)."""
        with self._cond:
            return [key for key in self._by_key if key is not None]

    def _touch(self, key: Hashable | None) -> None:
        if key is not None:
            for pending in self._subscribers.values():
                pending.keys.add(key)

    def _unindex(self, name: str, key: Hashable | None) -> None:
        bucket = self._by_key.get(key) or {}
        bucket.pop(name, None)
        if not bucket:
            self._by_key.pop(key, None)
        self._touch(key)

    def _put(self, obj: dict) -> None:
        """Store one object, keeping the index and telling the subscribers; the lock is held."""
        name = _key(obj)
        old = self._items.get(name)
        self._items[name] = obj
        if self._index_fn is None:
            return
        key = self._index_fn(obj)
        if old is not None and (old_key := self._index_fn(old)) != key:
            self._unindex(name, old_key)
        self._by_key.setdefault(key, {})[name] = obj
        self._touch(key)

    def _drop(self, obj: Mapping) -> None:
        """Forget one deleted object, as ``_put``."""
        name = _key(obj)
        old = self._items.pop(name, None)
        if self._index_fn is None:
            return
        if old is not None:
            self._unindex(name, self._index_fn(old))
        self._touch(self._index_fn(obj))

    def _reindex(self) -> None:
        """After a relist: rebuild the index; every subscriber must look at everything."""
        self._by_key = {}
        if self._index_fn is None:
            return
        for name, obj in self._items.items():
            self._by_key.setdefault(self._index_fn(obj), {})[name] = obj
        for pending in self._subscribers.values():
            pending.everything = True
            pending.keys.clear()

    def relist(self) -> None:
        """LIST everything now and replace the cache (the first fill, and recovery from 410 Gone)."""
        timeout = (self.options.timeout_s, self.options.timeout_s)
        response = call(
            lambda: self.list_fn(_preload_content=False, _request_timeout=timeout, **self.selectors),
            retries=self.options.retries,
            backoff_s=self.options.backoff_s,
            what=f"list {self.name}",
        )
        body = json.loads(response.data)
        with self._cond:
            self._items = {_key(item): item for item in body.get("items") or []}
            self._reindex()
            self._rv = (body.get("metadata") or {}).get("resourceVersion")
            self._generation += 1
            self.changes += 1
            self.relists += 1
            self.last_contact = time.monotonic()
            self._cond.notify_all()

    def _watch(self) -> None:
        # return_type "object" keeps events as plain dicts (no model deserialization).
        watcher = watch.Watch(return_type="object")
        timeout = (self.options.timeout_s, self.options.watch_timeout_s + self.options.timeout_s)
        generation = self._generation
        for event in watcher.stream(
            self.list_fn,
            resource_version=self._rv,
            timeout_seconds=self.options.watch_timeout_s,
            allow_watch_bookmarks=True,
            _request_timeout=timeout,
            **self.selectors,
        ):
            if not isinstance(event, dict):
                continue
            obj = event["raw_object"]
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            with self._cond:
                if self._generation != generation:
                    # Relisted meanwhile (a cycle found the cache stale): this stream is older than
                    # the cache now; resume from the list's version instead.
                    watcher.stop()
                    break
                if event["type"] in ("ADDED", "MODIFIED"):
                    self._put(obj)
                elif event["type"] == "DELETED":
                    self._drop(obj)
                if rv:
                    self._rv = rv
                self.changes += 1
                self.last_contact = time.monotonic()
                self._cond.notify_all()
            if self._stop.is_set():
                watcher.stop()
                break

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if self._rv is None:
                    self.relist()
                self._watch()
                self.last_contact = time.monotonic()
                failures = 0
                continue
            except ApiException as exc:
                if exc.status == 410:
                    logger.info("kubernetes: %s watch expired (410 Gone); relisting", self.name)
                    with self._cond:
                        self._rv = None
                    continue
                logger.warning("kubernetes: %s watch failed: %s", self.name, exc.status)
            except (ClusterApiError, ValueError, *NETWORK_ERRORS) as exc:
                logger.warning("kubernetes: %s watch failed: %s", self.name, exc)
            failures += 1
            self.watch_errors += 1
            self._stop.wait(min(5.0, self.options.backoff_s * 2 ** min(failures, 6)))

    def start(self) -> None:
        """Fill the cache (synchronously, so errors surface) and start watching in the background."""
        if self._thread is not None and self._thread.is_alive():
            return
        if self._rv is None:
            self.relist()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"k8s-informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def ensure_fresh(self, max_age_s: float) -> bool:
        """Relist synchronously when the watch has not been in contact for ``max_age_s`` (its thread
        died or keeps failing), so a cycle never plans from a view that silently stopped updating.
        Returns whether a relist was needed; raises :class:`ClusterApiError` if the API is down."""
        if time.monotonic() - self.last_contact <= max_age_s and self._thread is not None and self._thread.is_alive():
            return False
        logger.warning("kubernetes: %s cache is stale; relisting", self.name)
        self.relist()
        if self._thread is None or not self._thread.is_alive():
            self.start()
        return True
