"""The node and pod caches: LIST, then WATCH; relisted after 410 Gone, a failing watch, or a dead thread."""

from __future__ import annotations

import time

from tests.scheduling.adapters.conftest import settle


def test_an_expired_watch_410_relists_and_misses_nothing(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    settle(backend, kube)
    relists = backend.node_informer.relists
    kube.compact()
    kube.add_node("a100-1", gpus=8)
    deadline = time.monotonic() + 10
    while backend.node_informer.relists == relists and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backend.node_informer.relists > relists
    assert {n.name for n in backend.nodes()} == {"a100-0", "a100-1"}


def test_watch_errors_reconnect_with_backoff(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    settle(backend, kube)
    # More failures than one LIST retries (FAST.retries == 3), so the informer's loop sees an error
    # whichever request meets them first: usually the watch's reconnects, but when a reconnect was
    # already in flight as the faults were set, it gets the 410 and the relist meets them instead.
    kube.fail("GET", r"^/api/v1/nodes$", status=500, times=4)
    kube.compact()  # ends the open watch; its reconnects fail, then relist after a 410
    kube.add_node("a100-1", gpus=8)
    deadline = time.monotonic() + 10
    while len(backend.nodes()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert {n.name for n in backend.nodes()} == {"a100-0", "a100-1"}
    assert backend.node_informer.watch_errors >= 1


def test_a_cache_whose_watch_died_is_relisted_before_it_is_read(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    settle(backend, kube)
    backend.node_informer.stop()
    deadline = time.monotonic() + 10
    while backend.node_informer._thread.is_alive():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    kube.add_node("a100-1", gpus=8)  # no watch is running to see it
    relists = backend.node_informer.relists
    backend.sync()
    assert backend.node_informer.relists == relists + 1
    assert {n.name for n in backend.nodes()} == {"a100-0", "a100-1"}
    assert backend.node_informer._thread.is_alive()  # watching again


def test_a_process_that_reads_only_nodes_never_lists_or_watches_pods(kworld, kube, backend):
    # A web process reads nodes (a submission's "never fits" test); the pods' events of every job the
    # scheduler starts would otherwise cost it CPU for nothing.
    kube.add_node("a100-0", gpus=8)
    assert [n.name for n in backend.nodes()] == ["a100-0"]
    backend.nodes_version()
    assert [path for _, path in kube.requests if path.startswith("/api/v1/pods")] == []
    settle(backend, kube)  # a cycle's sync starts the pod cache too
    assert [path for _, path in kube.requests if path.startswith("/api/v1/pods")] != []
    assert backend.raw_pods() == []
