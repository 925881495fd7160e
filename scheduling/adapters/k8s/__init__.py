"""Kubernetes objects as plain dicts, translated to and from engine values. Pure: no I/O.

The Kubernetes backend (``scheduling.adapters.kubernetes``) lists and watches raw JSON (dicts) and
hands them to these modules, which import neither the ``kubernetes`` client nor Django (the client is
used only by the ``scheduling.adapters.kubernetes*`` modules). By what they translate:

1. ``resources``: quantities (``3800m``, ``16Gi``), MIG resources, and what a pod requests.
2. ``nodes``: a Node → :class:`~scheduling.engine.model.GpuNode` (device plugin resources, GPU Feature
   Discovery labels, topology labels, taints, cordon and readiness), and what keeps the portal from
   using a node (``node_problems``).
3. ``pods``: the portal's marks on its pods (labels, annotations, derived names), a job's own labels
   that may join them, and what any pod says of itself (metadata, phase, job attempt).
4. ``usage``: pods the portal did not create (and its own pods of attempts no longer active, e.g. a
   preempted victim still terminating) → :class:`~scheduling.engine.model.ForeignUsage` on their nodes.
5. ``manifests``: what the portal writes: the pod of one replica (restricted Pod Security Standard,
   the portal as ``schedulerName``, the assigned devices in annotations and environment), its Binding
   and its Event.
6. ``observations``: the pods of each active job attempt → job state changes with the cluster's own
   timestamps (gang running, all succeeded, a replica failed, evicted or lost).
"""
