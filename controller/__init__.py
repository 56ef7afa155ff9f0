"""The controller: desired state -> running instances, on a backend (local processes or an
existing Ray cluster), and the manifests for engines pdctl does not drive (compose, Kubernetes).

Its rooms, floor by floor (a room imports only rooms on floors below it; tests/test_layers.py
keeps this true):

1. `spec/`       a deployment as an operator writes it (pydantic), and its checks
2. `launch/`     pure: what runs for a spec (argv, env, ports, placement), secrets masked
3. `manifests/`  pure: the spec as docker compose and Kubernetes manifests
   `backends/`   the seam to processes: local spawns under the shim, Ray actors, /proc
   `clients/`    the seam to HTTP: instances' /health, the proxy's admin API, pair checks
   `autopilot/`  pure: the P:D ratio autopilot's decision and the capacity it reads
4. `supervise/`  the process state machine and the asyncio supervisor around it
5. `switch/`     the steps that change what runs (drain, hold, apply, wait...) and their
                 performer; mode switches' plans and forecast; runtime role moves
6. `rollout/`    the one engine every change to a running deployment goes through: what
                 changes and why, each strategy's steps, deadlines, abort, rollback, records
7. `proposals.py` (the change behind an advisor verdict), `service.py` (the controller as
   the REST API sees it) with `steering.py` (role moves, proxy verbs), `cluster_nodes.py`
   and `recorder.py`, `cli.py` (`pdctl run-instance`, `pdctl deploy compose|k8s`)

This module is the door the floors above (services/, web/) use: each name below is imported
from here, lazily, so that a process which needs one room (the shim, a Ray actor) does not
load them all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.attached import AttachedRefused, attach_refusal
    from controller.autopilot.capacity import capacity_of
    from controller.autopilot.decide import HOUR_S, Decision, decide, instance_slots, sample
    from controller.backends.local import ProcessBackend
    from controller.backends.ray import RayBackend, RayUnreachable
    from controller.clients.proxy_admin import ProxyAdminClient, ProxyAdminError
    from controller.launch.child_env import child_environment
    from controller.launch.cluster_view import NodeView
    from controller.launch.ports import DEFAULT_RANGE, AllocatedPorts, PortsExhausted, allocate
    from controller.launch.render import LaunchSettings
    from controller.launch.stored_spec import StoredSpec
    from controller.proposals import PROPOSING_RULES, Change, front_instances, propose
    from controller.rollout.engine import RolloutBusy, Target
    from controller.rollout.record import IN_PROGRESS, RolloutRecord
    from controller.rollout.revisions import StoreRevisions
    from controller.rollout.strategies import STRATEGY_SUMMARY
    from controller.service import ControlService
    from controller.spec.attach import address_problems
    from controller.spec.deployment import (
        CONNECTORS,
        DeploymentSpec,
        Engine,
        InstancePorts,
        Slug,
        Topology,
    )
    from controller.spec.redact import (
        UNCHANGED,
        holds_mask,
        redact_spec,
        redact_text,
        restore_secrets,
    )
    from controller.spec.sections.encode import EC_CONNECTORS, STORAGE_KEY
    from controller.spec.sections.role_switch import instance_roles
    from controller.spec.sections.timing import TimedSpec, timed_spec
    from controller.spec.surface.reach import EngineReach, reach_for
    from controller.spec.validation import given_ports, host_port_busy, validate
    from controller.supervise.placement_log import PlacementLog
    from controller.supervise.supervisor import Supervisor, SupervisorSettings
    from controller.switch.steps import Timeouts

# Each exported name -> the module that defines it.
_EXPORTS = {
    "AllocatedPorts": "controller.launch.ports",
    "CONNECTORS": "controller.spec.deployment",
    "Change": "controller.proposals",
    "ControlService": "controller.service",
    "DEFAULT_RANGE": "controller.launch.ports",
    "Decision": "controller.autopilot.decide",
    "DeploymentSpec": "controller.spec.deployment",
    "EC_CONNECTORS": "controller.spec.sections.encode",
    "EngineReach": "controller.spec.surface.reach",
    "Engine": "controller.spec.deployment",
    "HOUR_S": "controller.autopilot.decide",
    "IN_PROGRESS": "controller.rollout.record",
    "InstancePorts": "controller.spec.deployment",
    "LaunchSettings": "controller.launch.render",
    "NodeView": "controller.launch.cluster_view",
    "PROPOSING_RULES": "controller.proposals",
    "PlacementLog": "controller.supervise.placement_log",
    "PortsExhausted": "controller.launch.ports",
    "ProcessBackend": "controller.backends.local",
    "ProxyAdminClient": "controller.clients.proxy_admin",
    "ProxyAdminError": "controller.clients.proxy_admin",
    "RayBackend": "controller.backends.ray",
    "RayUnreachable": "controller.backends.ray",
    "STORAGE_KEY": "controller.spec.sections.encode",
    "Slug": "controller.spec.deployment",
    "StoreRevisions": "controller.rollout.revisions",
    "STRATEGY_SUMMARY": "controller.rollout.strategies",
    "RolloutBusy": "controller.rollout.engine",
    "RolloutRecord": "controller.rollout.record",
    "Target": "controller.rollout.engine",
    "StoredSpec": "controller.launch.stored_spec",
    "Supervisor": "controller.supervise.supervisor",
    "SupervisorSettings": "controller.supervise.supervisor",
    "Timeouts": "controller.switch.steps",
    "Topology": "controller.spec.deployment",
    "UNCHANGED": "controller.spec.redact",
    "allocate": "controller.launch.ports",
    "capacity_of": "controller.autopilot.capacity",
    "child_environment": "controller.launch.child_env",
    "decide": "controller.autopilot.decide",
    "front_instances": "controller.proposals",
    "given_ports": "controller.spec.validation",
    "address_problems": "controller.spec.attach",
    "attach_refusal": "controller.attached",
    "AttachedRefused": "controller.attached",
    "holds_mask": "controller.spec.redact",
    "host_port_busy": "controller.spec.validation",
    "instance_roles": "controller.spec.sections.role_switch",
    "instance_slots": "controller.autopilot.decide",
    "propose": "controller.proposals",
    "redact_spec": "controller.spec.redact",
    "redact_text": "controller.spec.redact",
    "restore_secrets": "controller.spec.redact",
    "sample": "controller.autopilot.decide",
    "reach_for": "controller.spec.surface.reach",
    "timed_spec": "controller.spec.sections.timing",
    "TimedSpec": "controller.spec.sections.timing",
    "validate": "controller.spec.validation",
}
__all__ = [
    "CONNECTORS",
    "DEFAULT_RANGE",
    "EC_CONNECTORS",
    "HOUR_S",
    "IN_PROGRESS",
    "PROPOSING_RULES",
    "STORAGE_KEY",
    "STRATEGY_SUMMARY",
    "UNCHANGED",
    "AllocatedPorts",
    "AttachedRefused",
    "Change",
    "ControlService",
    "Decision",
    "DeploymentSpec",
    "Engine",
    "EngineReach",
    "InstancePorts",
    "LaunchSettings",
    "NodeView",
    "PlacementLog",
    "PortsExhausted",
    "ProcessBackend",
    "ProxyAdminClient",
    "ProxyAdminError",
    "RayBackend",
    "RayUnreachable",
    "RolloutBusy",
    "RolloutRecord",
    "Slug",
    "StoreRevisions",
    "StoredSpec",
    "Supervisor",
    "SupervisorSettings",
    "Target",
    "TimedSpec",
    "Timeouts",
    "Topology",
    "address_problems",
    "allocate",
    "attach_refusal",
    "capacity_of",
    "child_environment",
    "decide",
    "front_instances",
    "given_ports",
    "holds_mask",
    "host_port_busy",
    "instance_roles",
    "instance_slots",
    "propose",
    "reach_for",
    "redact_spec",
    "redact_text",
    "restore_secrets",
    "sample",
    "timed_spec",
    "validate",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'controller' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
