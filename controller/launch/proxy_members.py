"""Pure: the instances a proxy's command line lists, and that command line once the proxy was
told at its admin API to route to an instance (as a role), or to forget it. The supervisor
keeps the told one as the proxy's launch, so a proxy restarted in the middle of a rollout
starts listing what it was told, not what its last revision listed."""

from __future__ import annotations

from collections.abc import Sequence

# The proxy's flags that list instances (connector/settings/proxy.py), each with one URL
# (`URL[#zmq]`, connector/settings/parsing.py FlagInstance).
MEMBER_FLAGS = ("--prefill", "--decode", "--instance", "--encode", "--render")
_OWN_FLAG = ("prefill", "decode", "encode", "render")  # any other role: --instance


def member_flag(role: str) -> str:
    """The flag that lists an instance serving `role` (colocated, both: --instance)."""
    return f"--{role}" if role in _OWN_FLAG else "--instance"


def told(argv: Sequence[str], url: str, role: str | None) -> list[str]:
    """`argv` listing `url` once, as a `role` instance (None: not at all); where it is listed
    so already, `argv` as it is (the order a rendered launch lists in is kept)."""
    want = url.rstrip("/")
    if role is not None and (member_flag(role), want) in _split(argv)[1]:
        return list(argv)
    out: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg in MEMBER_FLAGS:
            value = next(args, None)
            if value is None or value.partition("#")[0].rstrip("/") == want:
                continue
            out += [arg, value]
        else:
            out.append(arg)
    return out if role is None else [*out, member_flag(role), want]


def same(one: Sequence[str], other: Sequence[str]) -> bool:
    """The two command lines are the same but for the order of the instances they list."""
    (rest, members), (other_rest, other_members) = _split(one), _split(other)
    return rest == other_rest and sorted(members) == sorted(other_members)


def membership_only(now: Sequence[str], wanted: Sequence[str]) -> bool:
    """The two proxy command lines differ only in the instances they list: told to the
    running proxy through its admin API, never a restart (that cuts every request in
    flight)."""
    return _split(now)[0] == _split(wanted)[0]


def _split(argv: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    rest: list[str] = []
    members: list[tuple[str, str]] = []
    args = iter(argv)
    for arg in args:
        if arg in MEMBER_FLAGS:
            members.append((arg, next(args, "").partition("#")[0].rstrip("/")))
        else:
            rest.append(arg)
    return rest, members
