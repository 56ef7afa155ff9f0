"""Pure: secrets masked in what people are shown (command previews, events, log tails), never in
what runs.

A name looks secret when one of its words (split on `_`, `-`, `.`) ends in TOKEN, KEY, KEYS,
SECRET, SECRETS, PASSWORD, PASSWD, CREDENTIAL or CREDENTIALS, in any case: `HF_TOKEN`,
`VLLM_API_KEY`, `AWS_SECRET_ACCESS_KEY`, `--api-key`, `--hf-token`, `hftoken`. Plural TOKENS
is left alone: `--max-num-batched-tokens` is a count, not a credential.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

MASK = "***"
_WORDS = re.compile(r"[_\-.]+")
# In free text: a name, then `=`, `:` or spaces (quotes allowed around either), then a value.
# A lookahead, so that a value (`--api-key` after `argv:`) can itself be the next name.
_NAMED_VALUE = re.compile(
    r"""(?<![\w.\-])(?=(?P<name>-{0,2}[A-Za-z][\w.\-]*)"""
    r"""(?P<sep>['"]?\s*[=:]\s*['"]?|\s+)(?P<value>[^\s'",;}\])]+))"""
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[^\s'\",;]+")
_SECRET_ENDINGS = (
    "TOKEN",
    "KEY",
    "KEYS",
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "CREDENTIALS",
)


def is_secret_name(name: str) -> bool:
    return any(word.upper().endswith(_SECRET_ENDINGS) for word in _WORDS.split(name) if word)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: MASK if is_secret_name(k) else v for k, v in env.items()}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The value of a secret-looking flag masked: `--api-key X` and `--api-key=X` alike."""
    out: list[str] = []
    masking_next = False
    for arg in argv:
        if masking_next and not arg.startswith("-"):
            out.append(MASK)
            masking_next = False
            continue
        masking_next = False
        flag, eq, _ = arg.partition("=")
        if flag.startswith("-") and is_secret_name(flag.lstrip("-")):
            if eq:
                out.append(f"{flag}={MASK}")
                continue
            masking_next = True
        out.append(arg)
    return out


def redact_command(command: str) -> str:
    """A shell-quoted command line with its secret flags masked."""
    try:
        argv = shlex.split(command)
    except ValueError:  # not a line shlex.join made; show nothing rather than a secret
        return MASK
    shown = redact_argv(argv)
    return command if shown == argv else shlex.join(shown)


def redact_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A deployment spec (as JSON) with secret env values and secret extra args masked."""
    out = dict(spec)
    if isinstance(out.get("env"), Mapping):
        out["env"] = redact_env(out["env"])
    if isinstance(out.get("extra_args"), list):
        out["extra_args"] = redact_argv(out["extra_args"])
    if isinstance(out.get("groups"), list):
        out["groups"] = [redact_spec(g) if isinstance(g, Mapping) else g for g in out["groups"]]
    return out


def redact_text(text: str) -> str:
    """A log line with what follows a secret-looking name masked (`HF_TOKEN=x`, `--api-key x`,
    `'api_key': 'x'`) and HTTP credentials (`Bearer x`). Errs on masking a word too many."""
    spans: list[tuple[int, int]] = []
    for match in _NAMED_VALUE.finditer(text):
        inside_a_secret = spans and match.start("name") < spans[-1][1]
        if is_secret_name(match["name"]) and not inside_a_secret:
            spans.append(match.span("value"))
    for start, end in reversed(spans):  # from the right, so earlier offsets stay valid
        text = text[:start] + MASK + text[end:]
    return _BEARER.sub(lambda m: f"{m[1]} {MASK}", text)
