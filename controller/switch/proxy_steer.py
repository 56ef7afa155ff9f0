"""Pause, release, drain and undrain at a deployment's pdctl proxy, by an operator's hand:
pause holds a group's new requests in the proxy's bounded queue, release lets them go; drain
sends an instance no new legs (its outstanding ones finish), undrain routes to it again. The
proxy is the one the supervisor runs, or an attached deployment's when it is pdctl's
(controller/switch/attached_steer.py refuses the others, saying why)."""

from __future__ import annotations

from typing import Any

from controller.clients.proxy_admin import ProxyAdminClient, ProxyAdminError
from domain.errors import ConfigError, UpstreamError
from domain.modes import Mode
from domain.names import did_you_mean

GROUP_VERBS = ("pause", "release")
INSTANCE_VERBS = ("drain", "undrain")
ALL_GROUPS = tuple(m.value for m in Mode)


def check_target(verb: str, instance: str | None, group: str | None, urls: dict[str, str]) -> None:
    """A group verb names no instance; an instance verb names a known one: a ConfigError
    naming the field otherwise."""
    if verb in GROUP_VERBS:
        if instance is not None:
            raise ConfigError.at(("instance",), f"{verb} holds a proxy group, not an instance")
        return
    if instance is None:
        raise ConfigError.at(("instance",), f"{verb} names the instance to {verb}")
    if group is not None:
        raise ConfigError.at(("group",), f"{verb} is for an instance: drop group")
    if instance not in urls:
        known = ", ".join(sorted(urls)) or "none"
        raise ConfigError.at(
            ("instance",),
            f"no instance {instance!r} here (instances: {known}){did_you_mean(instance, urls)}",
        )


async def steer(
    admin: ProxyAdminClient, verb: str, instance: str | None, group: str | None, url: str | None
) -> dict[str, Any]:
    """Make the call; what it did, for the answer and the event. UpstreamError (502) when
    the proxy refuses or does not answer; `listed` false when it does not route to `url`."""
    try:
        if verb in GROUP_VERBS:
            groups = [group] if group is not None else list(ALL_GROUPS)
            for g in groups:
                await (admin.pause(g) if verb == "pause" else admin.resume(g))
            return {"verb": verb, "groups": groups, "proxy": admin.base_url}
        if url is None:
            raise ConfigError.at(("instance",), f"{verb} names the instance to {verb}")
        listed = await (admin.drain(url) if verb == "drain" else admin.undrain(url))
        return {
            "verb": verb,
            "instance": instance,
            "url": url,
            "listed": listed,
            "proxy": admin.base_url,
        }
    except ProxyAdminError as exc:
        raise UpstreamError(f"{verb} at the proxy {admin.base_url}: {exc}") from None
    finally:
        await admin.aclose()
