"""Pure: a process's secrets as references in what `pdctl deploy` writes, never as values.

Found as the masking of controller/spec/redact.py finds them: every environment variable
whose shown value differs from its value (a secret-looking name, a URL's password), and
every argv word that holds a secret (`--api-key k1 k2`: each value; `--api-key=k`: the
value; a JSON word with a secret key: the whole word). Each becomes a variable the pod reads
from a Secret (Kubernetes expands `$(NAME)` in args), keyed by the group, so one Secret per
deployment holds them all and the manifests can be shared (issue 39, weak 6).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.spec.redact import redact_argv, redact_env

_MARK = "\x00secret\x00"  # what the masking puts where a secret was; never in a real argv


@dataclass(frozen=True, slots=True)
class Referenced:
    """argv and env with their secrets taken out: `argv` names variables instead (a
    `${}`-free `$(NAME)` for Kubernetes), `env` holds only what is not secret, and
    `secrets` maps each variable the process must get from the Secret to its key there."""

    argv: list[str]
    env: dict[str, str]
    secrets: dict[str, str] = field(default_factory=dict)  # variable -> key in the Secret


def secret_name(deployment: str) -> str:
    return f"{deployment}-secrets"


def reference(
    argv: list[str], env: dict[str, str], group: str, refer: str = "$({})"
) -> tuple[Referenced, list[int]]:
    """`argv` and `env` of group `group` with every secret replaced; also the argv positions
    that now hold a reference (kept verbatim by the caller, not escaped as spec text)."""
    shown = redact_argv(argv, _MARK)
    out: list[str] = []
    secrets: dict[str, str] = {}
    refs: list[int] = []
    for i, (word, masked) in enumerate(zip(argv, shown, strict=True)):
        if masked == word:
            out.append(word)
            continue
        variable = f"PDCTL_SECRET_{_upper(group)}_ARG_{i}"
        secrets[variable] = f"{group}.arg-{i}"
        flag, eq, _ = word.partition("=")
        if eq and masked == f"{flag}={_MARK}":  # `--api-key=k`: the flag stays readable
            out.append(f"{flag}=" + refer.format(variable))
        else:
            out.append(refer.format(variable))
        refs.append(i)
    shown_env = redact_env(env, _MARK)
    plain = {k: v for k, v in env.items() if shown_env[k] == v}
    secrets |= {k: f"{group}.{k}" for k in env if k not in plain}
    return Referenced(out, plain, secrets), refs


def _upper(group: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in group.upper())
