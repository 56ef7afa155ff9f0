"""Pure: a deployment rendered as Kubernetes manifests (`pdctl deploy k8s`).

Objects, in apply order:
- per group, a StatefulSet (replicas = count) and a headless Service of the same name, or a
  LeaderWorkerSet (leaderworkerset.x-k8s.io/v1, size = `placement.nodes_per_instance`) when
  one instance spans nodes (controller/manifests/k8s_engine.py);
- the proxy (`pdctl proxy`): a Deployment of one pod (its registry, hold queue and metrics
  are per process) and a ClusterIP Service; for MoRIIO, a NetworkPolicy that lets only this
  deployment's engine pods reach its registry port;
- a PodMonitor (monitoring.coreos.com/v1) scraping /metrics of every engine and the proxy.

How the proxy reaches each instance: NIXL's proxy (and a colocated one) is given every
instance's URL, so each instance needs a name of its own. A StatefulSet's pods have stable
names and, with a headless Service of the same name, stable DNS names `<set>-<i>.<set>`
(LeaderWorkerSet names its leaders the same way, under the headless Service it makes). A
Deployment behind a Service would not do: the proxy would get one load-balanced URL, and a
prefill's KV would be handed to one decode while the request streams from another. MoRIIO
instances register themselves; their `proxy_ip` is the proxy Service's name, and each
advertises its pod IP (`host_ip`, in the --kv-transfer-config JSON, as $(POD_IP)).

What differs from `pdctl serve`'s rendering, and why:
- every instance of a group shares one pod template, so they share one set of ports (each
  pod has its own address): a group of several instances with ports given is refused;
- engines bind their pod IP (as on a cluster node, its address; so `kubectl port-forward`,
  which dials the pod's loopback, reaches the proxy but not an engine) and the proxy
  0.0.0.0 (its Service reaches it on its pod IP);
- pod IPs are not known when rendering, so the proxy cannot be told the exact registrations
  to accept (`pdctl serve` hands it PDCTL_REGISTRY_EXPECTED): it takes registrations from the
  pod networks (`--registry-allow`, `K8sSettings.pod_networks`) and the NetworkPolicy keeps
  other pods out (where the network plugin enforces NetworkPolicy);
- the proxy's /admin token comes from the optional Secret `<deployment>-proxy-admin` (key
  `token`); without one the proxy writes a generated token to /run/pdctl in its pod;
- KV over RDMA needs the NICs in the pod, which is the cluster's own business (an RDMA device
  plugin's resource, or host networking): add it to the engine pods; they get IPC_LOCK to pin
  buffers;
- a render tier (role `render`) is a StatefulSet of GPU-less pods running `vllm launch render`
  (no GPU request, no added capabilities): the proxy reaches each at its stable DNS name, as
  the engines, and a render tier scales as any CPU web service (`replicas`).

Refused, each naming the field: ExampleConnector (its KV directory is per pod), Ray node
ids, node addresses and Ray resources as node selectors (only labels mean something to the
Kubernetes scheduler), fractional GPU counts, GPUs that do not split evenly over an
instance's nodes, a stand-in across nodes, multi-node flags in extra_args, object names over
47 characters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller.launch.placement import PROXY, Addresses, planned
from controller.launch.ports import AllocatedPorts, InstancePorts
from controller.launch.render import LaunchSettings, instance_launch, proxy_launch
from controller.manifests.compose import to_yaml
from controller.manifests.k8s_engine import group_objects, scheduling
from controller.manifests.k8s_meta import (
    POD_IP_PLACEHOLDER,
    ROLE_LABEL,
    NotOnKubernetes,
    common_labels,
    instance_host,
    literal,
    proxy_object_name,
    proxy_selector,
)
from controller.manifests.secret_refs import secret_name
from controller.spec.deployment import DeploymentSpec, Role

# RFC 1918 and unique-local IPv6: where pod networks are, whatever the cluster's CIDR.
PRIVATE_NETWORKS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fd00::/8")
PDCTL_IMAGE = "pdctl:latest"  # deploy/Dockerfile, pushed where the cluster pulls from
RUNTIME_DIR = "/run/pdctl"
SCRAPE_INTERVAL = "5s"

__all__ = ["K8sSettings", "NotOnKubernetes", "manifests_yaml", "render_k8s"]


@dataclass(frozen=True, slots=True)
class K8sSettings:
    image: str | None = None  # vLLM's image; None: ROCm's or CUDA's, by the spec's GPUs
    pdctl_image: str = PDCTL_IMAGE  # the proxy, and the stand-in engine
    pod_networks: tuple[str, ...] = PRIVATE_NETWORKS  # may register with a MoRIIO proxy


def render_k8s(
    spec: DeploymentSpec, ports: AllocatedPorts, settings: K8sSettings | None = None
) -> list[dict[str, Any]]:
    """Every object for `spec` with its allocated `ports`; NotOnKubernetes naming the field
    when the spec asks for what Kubernetes cannot give."""
    settings = settings or K8sSettings()
    kv = spec.kv_backend
    if kv is not None and kv.shared_filesystem:
        raise NotOnKubernetes(
            ("connector",),
            f"{spec.connector} hands KV over a directory both instances see, and pods share "
            "none: use a connector that moves KV over the network (NixlConnector, ...)",
        )
    ports = _shared_ports(spec, ports)
    registers = _registers(spec)
    registry_allow = [a for net in settings.pod_networks for a in ("--registry-allow", net)]
    launching = LaunchSettings(
        pdctl_command=("pdctl",),
        host=POD_IP_PLACEHOLDER,
        bind_host="0.0.0.0",
        proxy_extra_args=tuple(registry_allow) if registers else (),
    )
    instances = planned(spec)
    # Inside an engine pod: itself at its pod IP, the proxy at its Service's name.
    inside = Addresses(
        POD_IP_PLACEHOLDER,
        {**{i.name: POD_IP_PLACEHOLDER for i in instances}, PROXY: proxy_object_name(spec)},
    )
    docs: list[dict[str, Any]] = []
    for gi, group in enumerate(spec.groups):
        launch = instance_launch(spec, group, 0, ports, launching, inside)  # the whole group's
        docs += group_objects(spec, gi, launch, settings.image, settings.pdctl_image)
    # From the proxy's pod: each instance at its stable DNS name.
    seen = Addresses("", {i.name: instance_host(spec, i.group_index, i.index) for i in instances})
    proxy = proxy_launch(spec, ports, launching, seen)
    docs += [_proxy_deployment(spec, proxy.argv, ports, settings), _proxy_service(spec, ports)]
    if registers:
        docs.append(_registry_policy(spec, ports))
    docs.append(_pod_monitor(spec))
    return docs


def manifests_yaml(docs: list[dict[str, Any]], spec: DeploymentSpec) -> str:
    header = (
        f"Deployment {spec.name}, rendered by `pdctl deploy k8s` "
        "(controller/manifests/k8s.py); edit the spec, not this file.\n"
        "Apply: kubectl apply -f FILE (LeaderWorkerSet and PodMonitor "
        "need the LWS and Prometheus Operator CRDs)."
    )
    keys = sorted(_secret_keys(docs))
    if keys:
        header += (
            f"\nSecrets are read from the Secret {secret_name(spec.name)}, never written here: "
            "kubectl create secret generic "
            f"{secret_name(spec.name)} " + " ".join(f"--from-literal={k}=..." for k in keys)
        )
    return "---\n".join(to_yaml(doc, header if i == 0 else "") for i, doc in enumerate(docs))


def _secret_keys(node: Any) -> set[str]:
    """The keys of every secretKeyRef in `node`, at any depth."""
    if isinstance(node, dict):
        ref = node.get("secretKeyRef")
        own = {ref["key"]} if isinstance(ref, dict) and not ref.get("optional") else set()
        return own.union(*(_secret_keys(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_secret_keys(v) for v in node))
    return set()


def _shared_ports(spec: DeploymentSpec, ports: AllocatedPorts) -> AllocatedPorts:
    """Instance 0's ports for every instance of its group: one pod template per group."""
    instances: dict[str, InstancePorts] = {}
    for gi, group in enumerate(spec.groups):
        if group.ports and group.count > 1:
            raise NotOnKubernetes(
                ("groups", gi, "ports"),
                "on Kubernetes the instances of a group share one pod template and so one set "
                "of ports (each pod has its own address): leave ports out of a group of "
                f"{group.count} instances",
            )
        first = ports.instances[f"{group.name}-0"]
        instances |= {f"{group.name}-{i}": first for i in range(group.count)}
    return AllocatedPorts(ports.proxy, ports.registry, instances)


def _proxy_deployment(
    spec: DeploymentSpec, argv: list[str], ports: AllocatedPorts, settings: K8sSettings
) -> dict[str, Any]:
    name = proxy_object_name(spec)
    labels = common_labels(spec, "proxy", "pdctl-proxy")
    token = {"name": f"{name}-admin", "key": "token", "optional": True}
    container: dict[str, Any] = {
        "name": "proxy",
        "image": settings.pdctl_image,
        "command": ["pdctl"],
        "args": [literal(a) for a in argv[1:]],
        "env": [
            {"name": "PDCTL_RUNTIME_DIR", "value": RUNTIME_DIR},
            {"name": "PDCTL_ADMIN_TOKEN", "valueFrom": {"secretKeyRef": token}},
        ],
        "ports": _proxy_ports(spec, ports),
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5},
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
        "volumeMounts": [{"name": "runtime", "mountPath": RUNTIME_DIR}],
    }
    pod: dict[str, Any] = {
        "enableServiceLinks": False,
        **scheduling([(("proxy", "node"), spec.proxy.node)] if spec.proxy.node else []),
        "containers": [container],
        "volumes": [{"name": "runtime", "emptyDir": {}}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # never two proxies, each with half the registry
            "selector": {"matchLabels": proxy_selector(spec)},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def _proxy_ports(spec: DeploymentSpec, ports: AllocatedPorts) -> list[dict[str, Any]]:
    out = [{"name": "http", "containerPort": ports.proxy}]
    if _registers(spec):
        out.append({"name": "registry", "containerPort": ports.registry})
    return out


def _registers(spec: DeploymentSpec) -> bool:
    """Its engines register with the proxy's ZMQ registry (MoRIIO's)."""
    kv = spec.kv_backend
    return kv is not None and kv.registers


def _proxy_service(spec: DeploymentSpec, ports: AllocatedPorts) -> dict[str, Any]:
    service_ports = [
        {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"]}
        for p in _proxy_ports(spec, ports)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": proxy_object_name(spec),
            "labels": common_labels(spec, "proxy", "pdctl-proxy"),
        },
        "spec": {"selector": proxy_selector(spec), "ports": service_ports},
    }


def _registry_policy(spec: DeploymentSpec, ports: AllocatedPorts) -> dict[str, Any]:
    """The proxy's HTTP port open to all; its ZMQ registry only to this deployment's engines
    (MoRIIO's registration has no authentication)."""
    engines = {
        "matchLabels": {"app.kubernetes.io/instance": spec.name},
        "matchExpressions": [
            {
                "key": ROLE_LABEL,
                "operator": "In",
                "values": sorted(
                    {g.role.value for g in spec.groups if g.role in (Role.PREFILL, Role.DECODE)}
                ),
            }
        ],
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": f"{proxy_object_name(spec)}-registry",
            "labels": common_labels(spec, "proxy", "pdctl-proxy"),
        },
        "spec": {
            "podSelector": {"matchLabels": proxy_selector(spec)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"ports": [{"protocol": "TCP", "port": ports.proxy}]},
                {
                    "from": [{"podSelector": engines}],
                    "ports": [{"protocol": "TCP", "port": ports.registry}],
                },
            ],
        },
    }


def _pod_monitor(spec: DeploymentSpec) -> dict[str, Any]:
    """Every pod of the deployment with an `http` port: engines (leaders only, as workers
    serve no HTTP) and the proxy, labelled with role and group as prometheus.yml does."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {
            "name": spec.name,
            "labels": common_labels(spec, "monitoring", "pdctl"),
        },
        "spec": {
            "selector": {
                "matchLabels": {
                    "app.kubernetes.io/instance": spec.name,
                    "app.kubernetes.io/managed-by": "pdctl",
                }
            },
            "podTargetLabels": [
                "app.kubernetes.io/component",
                ROLE_LABEL,
                "pdctl/group",
            ],
            "podMetricsEndpoints": [
                {"port": "http", "path": "/metrics", "interval": SCRAPE_INTERVAL}
            ],
        },
    }
