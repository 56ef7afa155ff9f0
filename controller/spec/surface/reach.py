"""Where an engine may reach on its host: the directories it may read or write (the operator's
roots, PDCTL_ENGINE_PATH_ROOTS) and the address it may listen on (the one pdctl binds it to).

A path is taken as the engine takes it: absolute, with no `..`, under a root both as written
and with its links followed on this host (a link inside a root may lead out of it).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
ENGINE_FILES = "engine-files"  # the run dir's folder for files engines read and write
WILDCARDS = frozenset({"", "*", "0.0.0.0", "::", "[::]"})


@dataclass(frozen=True, slots=True)
class EngineReach:
    """The roots a spec's paths must be under, and the address an engine binds."""

    roots: tuple[str, ...] = ()
    bound: str = "127.0.0.1"

    def addresses(self) -> frozenset[str]:
        """What a listener may be given: the bound address (any loopback name if loopback)."""
        return LOOPBACK_NAMES | {self.bound} if is_loopback(self.bound) else frozenset({self.bound})


def reach_for(
    roots: Sequence[str],
    environ: Mapping[str, str],
    run_dir: Path | None = None,
    bound: str = "127.0.0.1",
) -> EngineReach:
    """The operator's roots (PDCTL_ENGINE_PATH_ROOTS) and the address engines bind. None
    given: the model cache and ENGINE_FILES under the run dir, never the run dir itself (it
    holds every deployment's state and proxy admin token, which a chat template could read)."""
    given = tuple(r.strip() for r in roots if r.strip())
    defaults: tuple[str, ...] = (model_cache(environ),)
    if run_dir is not None:
        defaults += (str(run_dir.absolute() / ENGINE_FILES),)
    return EngineReach(given or defaults, bound)


def roots_variable(environ: Mapping[str, str]) -> list[str]:
    """PDCTL_ENGINE_PATH_ROOTS as a list (comma-separated), for commands without settings."""
    return environ.get("PDCTL_ENGINE_PATH_ROOTS", "").split(",")


def model_cache(environ: Mapping[str, str]) -> str:
    """The Hugging Face cache engines on this host load models from (HF_HUB_CACHE, else
    HF_HOME/hub, else ~/.cache/huggingface/hub): the one root every host has."""
    if hub := environ.get("HF_HUB_CACHE"):
        return hub
    home = environ.get("HF_HOME") or os.path.join(
        environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return os.path.join(home, "hub")


def path_problem(value: str, reach: EngineReach) -> str | None:
    """Why `value` is no path the engine may use; None when it is under a root."""
    if not value.startswith("/"):
        return f"{value!r} is not an absolute path (the engine would resolve it where it runs)"
    if ".." in Path(value).parts:
        return f"{value!r} climbs out with '..'"
    roots = [os.path.normpath(r) for r in reach.roots if r.startswith("/")]
    shown = ", ".join(roots) or "none is set"
    where = f"the operator's roots for engine files ({shown}; PDCTL_ENGINE_PATH_ROOTS)"
    if not any(_under(os.path.normpath(value), r) for r in roots):
        return f"{value!r} is not under {where}"
    real = os.path.realpath(value)
    if not any(_under(real, os.path.realpath(r)) for r in roots):
        return f"{value!r} leads through a link to {real!r}, which is not under {where}"
    return None


def address_problem(value: str, reach: EngineReach) -> str | None:
    """Why an engine may not listen at `value` (HOST, HOST:PORT, [V6]:PORT or
    tcp://HOST:PORT); None when it is the instance's bound address."""
    host = listen_host(value)
    allowed = ", ".join(sorted(reach.addresses()))
    if host in WILDCARDS:
        return f"{value!r} listens on every interface; an engine listens only on {allowed}"
    if host not in reach.addresses():
        return f"{value!r} is not the instance's bound address ({allowed})"
    return None


def listen_host(value: str) -> str:
    rest = value.strip().partition("://")[2] if "://" in value else value.strip()
    if rest.startswith("["):
        return rest[1:].partition("]")[0]
    if rest.count(":") == 1:
        return rest.partition(":")[0]
    return rest


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
