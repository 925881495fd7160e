"""Read-side questions of platform operations, by what they answer: the cluster's GPUs (``cluster``),
queues and fairness (``queues``), quota warnings (``governance``). Every one is scoped to what the
user may see: another team's job is counted, never named."""

from portal.ops.selectors.cluster import cluster_view, node_view, snapshot_now, visible_team_slugs
from portal.ops.selectors.governance import quota_warnings
from portal.ops.selectors.queues import queue_overview, queue_standings_now

__all__ = [
    "cluster_view",
    "node_view",
    "queue_overview",
    "queue_standings_now",
    "quota_warnings",
    "snapshot_now",
    "visible_team_slugs",
]
