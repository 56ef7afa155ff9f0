"""Pure: one group's engine pods on Kubernetes, a StatefulSet or a LeaderWorkerSet.

The container runs controller/launch/render.py's argv and env for the group's first instance (every
instance of a group renders the same ones here: they share ports, and each pod's address is
$(POD_IP)), with three changes Kubernetes needs:
- GPU ids are the node's business: the device plugin gives the pod `nvidia.com/gpu` or
  `amd.com/gpu` (ROCm: AMD hardware or MoRIIO) and shows them as devices 0..n-1, so the
  spec's CUDA_/HIP_VISIBLE_DEVICES ids, which name a host's GPUs, are not passed on;
- VLLM_NIXL_SIDE_CHANNEL_HOST comes from the downward API (status.podIP);
- one instance across nodes runs vLLM's multi-node mode without Ray: the leader adds
  `--nnodes N --node-rank 0 --master-addr $(LWS_LEADER_ADDRESS)`, each worker the same with
  `--node-rank $(LWS_WORKER_INDEX) --headless` (LeaderWorkerSet sets both variables).
"""

from __future__ import annotations

from typing import Any

from controller.launch.render import Launch, gpu_env_name
from controller.manifests.k8s_meta import (
    POD_IP,
    NotOnKubernetes,
    group_labels,
    group_object_name,
    group_selector,
    literal,
)
from controller.manifests.secret_refs import reference, secret_name
from controller.spec.deployment import DeploymentSpec, Engine, InstanceGroup, Role
from controller.spec.placement import NodeSelector

ROCM_IMAGE = "vllm/vllm-openai-rocm:latest"
CUDA_IMAGE = "vllm/vllm-openai:latest"
HF_SECRET = "hf-token"  # optional Secret with key HF_TOKEN, for gated models
MULTI_NODE_FLAGS = ("--nnodes", "-n", "--node-rank", "--master-addr", "--master-port", "--headless")
SHM_SIZE = "16Gi"  # /dev/shm for the TP workers' shared-memory broadcast
STARTUP_PERIOD_S, STARTUP_FAILURES = 10, 360  # an hour to download and load a model


def group_objects(
    spec: DeploymentSpec, gi: int, launch: Launch, image: str | None, pdctl_image: str
) -> list[dict[str, Any]]:
    """The workload of group `gi` and, for a StatefulSet, its headless Service."""
    group = spec.groups[gi]
    name = group_object_name(spec, gi)
    nodes = group.placement.nodes_per_instance if group.placement else 1
    pod = _PodShape(spec, gi, launch, image or default_image(spec), pdctl_image, nodes)
    meta = {"name": name, "labels": group_labels(spec, group)}
    if nodes == 1:
        return [_stateful_set(meta, group, pod), _headless_service(spec, group, meta, launch)]
    # LeaderWorkerSet makes the headless Service `name` itself (subdomainPolicy Shared).
    return [_leader_worker_set(meta, group, pod, nodes)]


def default_image(spec: DeploymentSpec) -> str:
    return ROCM_IMAGE if amd(spec) else CUDA_IMAGE


def amd(spec: DeploymentSpec) -> bool:
    return gpu_env_name(spec) == "HIP_VISIBLE_DEVICES"


def _stateful_set(meta: dict, group: InstanceGroup, pod: _PodShape) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta,
        "spec": {
            "serviceName": meta["name"],
            "replicas": group.count,
            "podManagementPolicy": "Parallel",  # all at once: engines load for minutes
            "selector": {"matchLabels": pod.selector},
            "template": pod.template(serving=True),
        },
    }


def _leader_worker_set(meta: dict, group: InstanceGroup, pod: _PodShape, nodes: int) -> dict:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": meta,
        "spec": {
            "replicas": group.count,
            "leaderWorkerTemplate": {
                "size": nodes,
                # One instance is all its pods: a worker lost takes the whole group down.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": pod.template(serving=True),
                "workerTemplate": pod.template(serving=False),
            },
        },
    }


def _headless_service(
    spec: DeploymentSpec, group: InstanceGroup, meta: dict, launch: Launch
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "clusterIP": "None",
            # Names resolve before the engine is ready: the proxy's own /health probes decide
            # when an instance takes requests.
            "publishNotReadyAddresses": True,
            "selector": group_selector(spec, group),
            "ports": [{"name": "http", "port": launch.http_port, "targetPort": "http"}],
        },
    }


class _PodShape:
    """What the leader's (or single) pod and a worker's pod of one group have in common."""

    def __init__(
        self,
        spec: DeploymentSpec,
        gi: int,
        launch: Launch,
        image: str,
        pdctl_image: str,
        nodes: int,
    ) -> None:
        self.spec, self.gi, self.launch, self.nodes = spec, gi, launch, nodes
        self.group = spec.groups[gi]
        given = dict(launch.env)
        if self.group.gpus:
            given.pop(gpu_env_name(spec), None)  # ids of a host's GPUs; see the docstring
        # Secrets as references to the deployment's Secret, never values in the manifest.
        self.referenced, self.refs = reference(list(launch.argv), given, self.group.name)
        self.secret = secret_name(spec.name)
        self.selector = group_selector(spec, self.group)
        self.labels = group_labels(spec, self.group)
        self.sim = spec.engine == Engine.SIM
        self.image = pdctl_image if self.sim else image
        self.gpus = gpus_per_pod(spec, gi)
        nodes_given = self.group.placement.nodes if self.group.placement else []
        self.scheduling = scheduling(
            [(("groups", gi, "placement", "nodes", k), s) for k, s in enumerate(nodes_given)]
        )
        if nodes > 1:
            _check_multi_node(spec, gi)

    def template(self, *, serving: bool) -> dict[str, Any]:
        spec: dict[str, Any] = {
            # No SERVICE_HOST/_PORT variables: a Service named vllm would set VLLM_PORT,
            # which vLLM reads as its own setting.
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 30,
            **self.scheduling,
            "containers": [self._container(serving)],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}}],
        }
        return {"metadata": {"labels": self.labels}, "spec": spec}

    def _container(self, serving: bool) -> dict[str, Any]:
        argv = [a if i in self.refs else literal(a) for i, a in enumerate(self.referenced.argv)]
        if self.nodes > 1:
            rank = "0" if serving else "$(LWS_WORKER_INDEX)"
            argv += ["--nnodes", str(self.nodes), "--node-rank", rank]
            argv += ["--master-addr", "$(LWS_LEADER_ADDRESS)"]
            argv += [] if serving else ["--headless"]
        render = self.group.role is Role.RENDER
        head = (
            1 if self.sim else 3 if render else 2
        )  # `pdctl` | `vllm launch render` | `vllm serve`
        container: dict[str, Any] = {
            "name": "engine" if serving else "worker",
            "image": self.image,
            "command": argv[:head],
            "args": argv[head:],
            "env": self._env(),
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
        }
        if self.gpus:
            resource = "amd.com/gpu" if amd(self.spec) else "nvidia.com/gpu"
            container["resources"] = {
                "requests": {resource: str(self.gpus)},
                "limits": {resource: str(self.gpus)},
            }
        if context := self._security_context():
            container["securityContext"] = context
        if serving:
            container["ports"] = [{"name": "http", "containerPort": self.launch.http_port}]
            container |= _probes()
        return container

    def _env(self) -> list[dict[str, Any]]:
        env: list[dict[str, Any]] = [_pod_ip(POD_IP)]
        for key, value in self.referenced.env.items():
            if key == "VLLM_NIXL_SIDE_CHANNEL_HOST":
                env.append(_pod_ip(key))
            else:
                env.append({"name": key, "value": literal(value)})
        for variable, key in self.referenced.secrets.items():
            ref = {"name": self.secret, "key": key}
            env.append({"name": variable, "valueFrom": {"secretKeyRef": ref}})
        if not self.sim and "HF_TOKEN" not in self.launch.env:
            secret = {"name": HF_SECRET, "key": "HF_TOKEN", "optional": True}
            env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": secret}})
        return env

    def _security_context(self) -> dict[str, Any] | None:
        if self.sim or self.group.role is Role.RENDER:  # a render pod has no GPU and no KV
            return None
        add = []
        if self.spec.connector is not None:
            add.append("IPC_LOCK")  # KV over RDMA pins its buffers
        if amd(self.spec):
            add.append("SYS_PTRACE")  # ROCm's peer-to-peer IPC, as AMD's container guide has it
        return {"capabilities": {"add": add}} if add else None


def _pod_ip(name: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


def _probes() -> dict[str, Any]:
    health = {"httpGet": {"path": "/health", "port": "http"}, "timeoutSeconds": 5}
    return {
        "startupProbe": {
            **health,
            "periodSeconds": STARTUP_PERIOD_S,
            "failureThreshold": STARTUP_FAILURES,
        },
        "readinessProbe": {**health, "periodSeconds": 5, "failureThreshold": 2},
        # A busy engine's API server can stall for seconds: a minute of failures, not one.
        "livenessProbe": {**health, "periodSeconds": 10, "failureThreshold": 6},
    }


def gpus_per_pod(spec: DeploymentSpec, gi: int) -> int:
    """Whole GPUs each pod of group `gi` requests: placement's count, else the group's TP size
    (a spec's GPU ids say how many, not which), split over the nodes of one instance; none for
    the stand-in."""
    group = spec.groups[gi]
    if spec.engine == Engine.SIM or group.role is Role.RENDER:  # a render tier runs on CPU
        return 0
    placement = group.placement
    nodes = placement.nodes_per_instance if placement else 1
    loc: tuple[str | int, ...]
    if placement is not None and placement.gpus_per_instance is not None:
        total, loc = placement.gpus_per_instance, ("groups", gi, "placement", "gpus_per_instance")
    else:
        total, loc = float(group.tp), ("groups", gi, "tp")
    if not total.is_integer():
        raise NotOnKubernetes(loc, f"Kubernetes gives whole GPUs, not {total:g}")
    if int(total) % nodes:
        raise NotOnKubernetes(
            loc,
            f"{int(total)} GPUs do not split evenly over the {nodes} nodes of one instance "
            "(placement.nodes_per_instance)",
        )
    return int(total) // nodes


def scheduling(located: list[tuple[tuple, NodeSelector]]) -> dict[str, Any]:
    """A nodeSelector for one selector, node affinity (any of them) for several; each selector
    comes with its field's place. Only labels mean something to the Kubernetes scheduler: Ray
    node ids, addresses and Ray resources are refused naming the field (a node's own name is
    its `kubernetes.io/hostname` label)."""
    for loc, selector in located:
        for name, what in (
            ("node_id", "a Ray node id"),
            ("address", "a node address"),
            ("resources", "Ray resources"),
        ):
            if getattr(selector, name):
                raise NotOnKubernetes(
                    (*loc, name),
                    f"{what} means nothing to the Kubernetes scheduler: select nodes by labels "
                    "(a node's name is its kubernetes.io/hostname label)",
                )
    selectors = [selector for _, selector in located]
    if not selectors:
        return {}
    if len(selectors) == 1:
        return {"nodeSelector": dict(selectors[0].labels)}
    terms = [
        {
            "matchExpressions": [
                {"key": k, "operator": "In", "values": [v]} for k, v in s.labels.items()
            ]
        }
        for s in selectors
    ]
    required = {"nodeSelectorTerms": terms}
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    }


def _check_multi_node(spec: DeploymentSpec, gi: int) -> None:
    loc = ("groups", gi, "placement", "nodes_per_instance")
    if spec.engine == Engine.SIM:
        raise NotOnKubernetes(loc, "the stand-in engine runs on one node: nodes_per_instance 1")
    lists = [
        (("extra_args",), spec.extra_args),
        (("groups", gi, "extra_args"), spec.groups[gi].extra_args),
    ]
    for where, args in lists:
        for k, arg in enumerate(args):
            if arg.split("=", 1)[0] in MULTI_NODE_FLAGS:
                raise NotOnKubernetes(
                    (*where, k),
                    f"{arg.split('=', 1)[0]} is set from placement.nodes_per_instance on "
                    "Kubernetes (the LeaderWorkerSet's leader and workers)",
                )
