"""The Kubernetes "restricted" Pod Security Standard as pure checks, and the job-request guard.

``pod_spec_violations(pod)`` lists every way a pod manifest breaks the restricted profile (which
includes the baseline one). The pod builder (``k8s.manifests.pod_manifest``) must always pass it.

``job_request_violations(data, team_namespace=...)`` is for the REST API and the job form: the portal
decides every security setting itself, so a request that tries to set one (privileged, hostPath,
hostNetwork, hostPID, added capabilities, ...) or a namespace other than its team's is refused with
400, naming the field.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

# Restricted profile: volume types a pod may use.
ALLOWED_VOLUME_TYPES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
ALLOWED_ADDED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
ALLOWED_SECCOMP = frozenset({"RuntimeDefault", "Localhost"})
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
ALLOWED_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})


def _containers(spec: Mapping) -> Iterator[tuple[str, Mapping]]:
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(kind) or []:
            yield f"{kind}[{container.get('name', '?')}]", container


def pod_spec_violations(pod: Mapping, *, namespace: str | None = None) -> list[str]:
    """Every way ``pod`` (a Pod manifest, or just its ``spec``) breaks the restricted profile.

    With ``namespace``, a pod in another namespace is a violation too. An empty list means compliant.
    """
    spec = pod.get("spec", pod) if "spec" in pod else pod
    out: list[str] = []
    if namespace is not None and "metadata" in pod and (pod["metadata"].get("namespace") or "") != namespace:
        out.append(f"namespace {pod['metadata'].get('namespace')!r} is not the team's namespace {namespace!r}")
    out.extend(_pod_level_violations(spec))
    pod_security = spec.get("securityContext") or {}
    pod_non_root = pod_security.get("runAsNonRoot") is True
    pod_seccomp = (pod_security.get("seccompProfile") or {}).get("type")
    for where, container in _containers(spec):
        out.extend(_container_violations(where, container, pod_non_root=pod_non_root, pod_seccomp=pod_seccomp))
    return out


def _pod_level_violations(spec: Mapping) -> list[str]:
    """Host namespaces, volumes, sysctls and the pod's own security context."""
    out = [f"{key} is set" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    out.extend(
        f"volume {volume.get('name')!r} uses {kind}"
        for volume in spec.get("volumes") or []
        for kind in sorted(set(volume) - {"name"} - ALLOWED_VOLUME_TYPES)
    )
    pod_security = spec.get("securityContext") or {}
    out.extend(
        f"sysctl {sysctl.get('name')!r} is not safe"
        for sysctl in pod_security.get("sysctls") or []
        if sysctl.get("name") not in SAFE_SYSCTLS
    )
    pod_seccomp = (pod_security.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in ALLOWED_SECCOMP:
        out.append(f"pod seccompProfile {pod_seccomp}")
    if pod_security.get("runAsUser") == 0:
        out.append("pod runAsUser is 0 (root)")
    selinux = (pod_security.get("seLinuxOptions") or {}).get("type", "")
    if selinux not in ALLOWED_SELINUX_TYPES:
        out.append(f"pod seLinuxOptions type {selinux!r}")
    apparmor = (pod_security.get("appArmorProfile") or {}).get("type")
    if apparmor == "Unconfined":
        out.append("pod appArmorProfile Unconfined")
    return out


def _container_violations(where: str, container: Mapping, *, pod_non_root: bool, pod_seccomp: str | None) -> list[str]:
    """One container's security context and ports; the pod's ``runAsNonRoot`` and seccomp are inherited."""
    out: list[str] = []
    sc = container.get("securityContext") or {}
    if sc.get("privileged"):
        out.append(f"{where} is privileged")
    if sc.get("allowPrivilegeEscalation") is not False:
        out.append(f"{where} allowPrivilegeEscalation is not false")
    capabilities = sc.get("capabilities") or {}
    out.extend(
        f"{where} adds capability {cap}"
        for cap in capabilities.get("add") or []
        if cap not in ALLOWED_ADDED_CAPABILITIES
    )
    if "ALL" not in (capabilities.get("drop") or []):
        out.append(f"{where} does not drop ALL capabilities")
    non_root = sc.get("runAsNonRoot")
    if non_root is False or (non_root is None and not pod_non_root):
        out.append(f"{where} runAsNonRoot is not true")
    if sc.get("runAsUser") == 0:
        out.append(f"{where} runAsUser is 0 (root)")
    seccomp = (sc.get("seccompProfile") or {}).get("type")
    if seccomp is None and pod_seccomp is None:
        out.append(f"{where} has no seccompProfile (RuntimeDefault or Localhost)")
    elif seccomp is not None and seccomp not in ALLOWED_SECCOMP:
        out.append(f"{where} seccompProfile {seccomp}")
    if sc.get("procMount") not in (None, "Default"):
        out.append(f"{where} procMount {sc['procMount']}")
    if (sc.get("seLinuxOptions") or {}).get("type", "") not in ALLOWED_SELINUX_TYPES:
        out.append(f"{where} seLinuxOptions type")
    if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        out.append(f"{where} appArmorProfile Unconfined")
    out.extend(
        f"{where} uses hostPort {port['hostPort']}" for port in container.get("ports") or [] if port.get("hostPort")
    )
    return out


# Request fields (either spelling) that would weaken a pod's isolation. None of them is a Job field.
FORBIDDEN_REQUEST_FIELDS = frozenset(
    {
        "privileged",
        "hostPath",
        "host_path",
        "hostNetwork",
        "host_network",
        "hostPID",
        "host_pid",
        "hostIPC",
        "host_ipc",
        "hostPort",
        "host_port",
        "capabilities",
        "add_capabilities",
        "securityContext",
        "security_context",
        "allowPrivilegeEscalation",
        "allow_privilege_escalation",
        "runAsUser",
        "run_as_user",
        "runAsNonRoot",
        "run_as_non_root",
        "volumes",
        "volumeMounts",
        "volume_mounts",
        "serviceAccountName",
        "service_account_name",
        "nodeName",
        "node_name",
        "schedulerName",
        "scheduler_name",
        "procMount",
        "sysctls",
    }
)
NAMESPACE_FIELDS = frozenset({"namespace", "metadata.namespace"})


def job_request_violations(data: Mapping, *, team_namespace: str | None = None) -> dict[str, str]:
    """Fields of a job request (at any depth) that try to set pod security or another namespace.

    Returns ``{field path: message}``; empty means the request may proceed. ``namespace`` equal to
    ``team_namespace`` is allowed (it changes nothing).
    """
    out: dict[str, str] = {}

    def walk(value: object, path: str) -> None:
        if isinstance(value, Mapping):
            for key, inner in value.items():
                here = f"{path}.{key}" if path else str(key)
                if key in FORBIDDEN_REQUEST_FIELDS:
                    out[here] = (
                        f"{key} cannot be set: the portal runs every pod under the restricted Pod Security Standard"
                    )
                elif key == "namespace":
                    if team_namespace is None or inner != team_namespace:
                        out[here] = f"jobs run only in their team's namespace ({team_namespace or 'fixed'})"
                else:
                    walk(inner, here)
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                walk(inner, f"{path}[{index}]")

    walk(data, "")
    return out
