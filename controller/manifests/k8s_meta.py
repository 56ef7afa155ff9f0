"""Pure: the names, labels and literal text every Kubernetes object of a deployment shares.

Object names are `<deployment>-<group>` and `<deployment>-proxy`. Labels are the recommended
`app.kubernetes.io/*` ones, llm-d's `llm-d.ai/role` (prefill, decode; `both` for a colocated
instance, as llm-d's scheduler reads it) and `pdctl/group`, which selects a group's pods.
"""

from __future__ import annotations

from controller.spec.deployment import DeploymentSpec, Engine, InstanceGroup, Role
from controller.spec.field_error import FieldError

# At most 47 characters: a StatefulSet's pods carry `controller-revision-hash: <name>-<hash>`
# and a LeaderWorkerSet's worker pods `<name>-<group>-<hash>`, label values of at most 63.
MAX_NAME = 47
# The engine's address while controller/launch/render.py renders its argv and env; the pod gets it
# as $(POD_IP), which the kubelet expands from the downward API (status.podIP). A reserved
# name (RFC 2606), so no spec can mean it.
POD_IP_PLACEHOLDER = "pod-ip.pdctl.invalid"
POD_IP = "POD_IP"
ROLE_LABEL = "llm-d.ai/role"
GROUP_LABEL = "pdctl/group"
LLM_D_ROLES = {
    Role.PREFILL: "prefill",
    Role.DECODE: "decode",
    Role.COLOCATED: "both",
    Role.ENCODE: "encode",  # an EPD encoder (controller/spec/sections/encode.py)
    Role.RENDER: "render",  # a render tier instance (controller/spec/sections/render_tier.py)
}


class NotOnKubernetes(FieldError):
    """A spec field Kubernetes has no meaning for, or asks for what it cannot give."""


def field_path(loc: tuple) -> str:
    """`("groups", 0, "placement")` as people write it: `groups[0].placement`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "spec"


def group_object_name(spec: DeploymentSpec, gi: int) -> str:
    name = f"{spec.name}-{spec.groups[gi].name}"
    if len(name) > MAX_NAME:
        raise NotOnKubernetes(
            ("groups", gi, "name"),
            f"the Kubernetes objects of this group would be named {name!r}, {len(name)} "
            f"characters; at most {MAX_NAME} fit (shorten the deployment or group name)",
        )
    if name == proxy_object_name(spec):
        raise NotOnKubernetes(
            ("groups", gi, "name"), f"{name!r} is the proxy's name on Kubernetes: rename the group"
        )
    return name


def proxy_object_name(spec: DeploymentSpec) -> str:
    return f"{spec.name}-proxy"


def instance_host(spec: DeploymentSpec, gi: int, index: int) -> str:
    """Where the proxy reaches instance `index` of group `gi`: its pod's name under the headless
    Service of the same name as its StatefulSet or LeaderWorkerSet (in the same namespace)."""
    name = group_object_name(spec, gi)
    return f"{name}-{index}.{name}"


def common_labels(spec: DeploymentSpec, component: str, app: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/instance": spec.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "pdctl",
        "app.kubernetes.io/managed-by": "pdctl",
    }


def group_selector(spec: DeploymentSpec, group: InstanceGroup) -> dict[str, str]:
    return {"app.kubernetes.io/instance": spec.name, GROUP_LABEL: group.name}


def group_labels(spec: DeploymentSpec, group: InstanceGroup) -> dict[str, str]:
    app = "pdctl-sim" if spec.engine == Engine.SIM else "vllm"
    return {
        **common_labels(spec, group.role.value, app),
        ROLE_LABEL: LLM_D_ROLES[group.role],
        GROUP_LABEL: group.name,
    }


def proxy_selector(spec: DeploymentSpec) -> dict[str, str]:
    return {"app.kubernetes.io/instance": spec.name, "app.kubernetes.io/component": "proxy"}


def literal(text: str) -> str:
    """Kubernetes expands `$(NAME)` in args and env values and reads `$$` as `$`: what comes
    from a spec is meant literally, except the pod's own address."""
    return text.replace("$", "$$").replace(POD_IP_PLACEHOLDER, f"$({POD_IP})")
