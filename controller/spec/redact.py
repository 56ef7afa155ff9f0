"""Pure: secrets masked in what people are shown (specs, forms, command previews, events, log
tails), never in what runs. `redact_spec` is the one masking of a spec every view uses; the
others are its parts, for argv, env and free text.

A name looks secret when one of its words (split on `_`, `-`, `.`) ends in TOKEN, KEY, KEYS,
SECRET, SECRETS, PASSWORD, PASSWD, CREDENTIAL or CREDENTIALS, or is PAT, in any case:
`HF_TOKEN`, `VLLM_API_KEY`, `AWS_SECRET_ACCESS_KEY`, `--api-key`, `hftoken`, `GITHUB_PAT`.
Plural TOKENS is left alone: `--max-num-batched-tokens` is a count, not a credential.
Besides named values: the password of a URL (`postgres://u:pw@host`, a bare
`https://TOKEN@host` too), `Bearer`/`Basic` credentials, and secret-looking keys inside JSON
(`--hf-overrides '{"api_key": ...}'`). Errs on masking a word too many.

`mask=` picks what replaces a secret: `***` for viewers, `UNCHANGED` in an operator's edit
form, which `restore_secrets` turns back into the stored values when the form is saved.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

MASK = "***"
UNCHANGED = "***unchanged***"
_WORDS = re.compile(r"[_\-.]+")
# In free text: a name, then `=`, `:` or spaces (quotes allowed around either), then a value.
# A lookahead, so that a value (`--api-key` after `argv:`) can itself be the next name.
_NAMED_VALUE = re.compile(
    r"""(?<![\w.\-])(?=(?P<name>-{0,2}[A-Za-z][\w.\-]*)"""
    r"""(?P<sep>['"]?\s*[=:]\s*['"]?|\s+['"]?)(?P<value>[^\s'",;}\])]+))"""
)
_MORE_VALUES = re.compile(r"""['"]?[ \t]+['"]?(?!-)[^\s'",;}\])]+['"]?""")  # a flag's next value
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[^\s'\",;]+")
# scheme://userinfo@ : the password after `user:`, or the whole userinfo when it has no `:`
# (`https://ghp_x@github.com` is a token).
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^\s/?#@:'\"]*)(?::([^\s/?#@'\"]*))?@")
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
_SECRET_WORDS = frozenset({"PAT"})


def is_secret_name(name: str) -> bool:
    words = [w.upper() for w in _WORDS.split(name) if w]
    return any(w.endswith(_SECRET_ENDINGS) or w in _SECRET_WORDS for w in words)


def redact_env(env: Mapping[str, str], mask: str = MASK) -> dict[str, str]:
    """Secret-named values masked whole; the others as text (`DATABASE_URL`'s password)."""
    return {k: mask if is_secret_name(k) else redact_text(str(v), mask) for k, v in env.items()}


def redact_argv(argv: Sequence[str], mask: str = MASK) -> list[str]:
    """Every value of a secret-looking flag masked: `--api-key X`, `--api-key=X`, and the
    further values of one that takes several (`--api-key k1 k2`: each word up to the next
    flag). The first word after the flag is its value even if it starts with `-`. JSON values
    have their secret keys masked; any other word is masked as text (a URL's password)."""
    out: list[str] = []
    masking: str | None = None  # "first": the word after a bare secret flag; "more": after
    for arg in argv:
        if masking == "first" or (masking == "more" and not arg.startswith("-")):
            out.append(mask)
            masking = "more"
            continue
        masking = None
        flag, eq, value = arg.partition("=")
        if flag.startswith("-") and is_secret_name(flag.lstrip("-")):
            out.append(f"{flag}={mask}" if eq else arg)
            masking = "more" if eq else "first"
        elif flag.startswith("-") and eq:
            out.append(f"{flag}={_redact_word(value, mask)}")
        else:
            out.append(_redact_word(arg, mask))
    return out


def redact_command(command: str, mask: str = MASK) -> str:
    """A shell-quoted command line with its secret flags masked."""
    try:
        argv = shlex.split(command)
    except ValueError:  # not a line shlex.join made; show nothing rather than a secret
        return mask
    shown = redact_argv(argv, mask)
    return command if shown == argv else shlex.join(shown)


def redact_spec(spec: Mapping[str, Any], mask: str = MASK) -> dict[str, Any]:
    """A deployment spec (as JSON) with every secret masked, at any depth: values under
    secret-looking keys (env, kv_connector_extra_config, anything), `extra_args` as argv,
    every other string as text."""
    return _redact_tree(spec, mask)


def redact_text(text: str, mask: str = MASK) -> str:
    """A log line with what follows a secret-looking name masked (`HF_TOKEN=x`, `--api-key x`,
    `'api_key': 'x'`), URL passwords and HTTP credentials (`Bearer x`)."""
    spans: list[tuple[int, int]] = []
    for match in _NAMED_VALUE.finditer(text):
        inside_a_secret = spans and match.start("name") < spans[-1][1]
        if is_secret_name(match["name"]) and not inside_a_secret:
            spans.append((match.start("value"), _secret_end(text, match)))
    for start, end in reversed(spans):  # from the right, so earlier offsets stay valid
        text = text[:start] + mask + text[end:]
    text = _URL_USERINFO.sub(lambda m: _userinfo(m, mask), text)
    return _BEARER.sub(lambda m: f"{m[1]} {mask}", text)


def restore_secrets(
    submitted: Mapping[str, Any], stored: Mapping[str, Any], mask: str = UNCHANGED
) -> dict[str, Any]:
    """`submitted` (a spec from a form that showed `redact_spec(stored, mask)`) with each value
    still equal to its masked stored value put back to the stored one: a secret left as shown
    stays what it was, one typed anew is taken as typed."""
    return _restore(submitted, stored, mask)


def holds_mask(value: Any, mask: str = UNCHANGED) -> bool:
    """True when `mask` is still somewhere in `value`: what restore_secrets could not place."""
    if isinstance(value, str):
        return mask in value
    if isinstance(value, Mapping):
        return any(holds_mask(v, mask) for v in value.values())
    if isinstance(value, list):
        return any(holds_mask(v, mask) for v in value)
    return False


# -- the parts ---------------------------------------------------------------------------


def _redact_tree(node: Any, mask: str, key: str = "", secret: bool = False) -> Any:
    """Every scalar under a secret-looking key masked, at any depth; `extra_args` as argv;
    other strings as words."""
    secret = secret or is_secret_name(key)
    if isinstance(node, Mapping):
        return {k: _redact_tree(v, mask, str(k), secret) for k, v in node.items()}
    if isinstance(node, list):
        if key == "extra_args" and not secret and all(isinstance(a, str) for a in node):
            return redact_argv(node, mask)
        return [_redact_tree(v, mask, "", secret) for v in node]
    if node is None:
        return None
    if secret:
        return mask
    return _redact_word(node, mask) if isinstance(node, str) else node


def _secret_end(text: str, match: re.Match[str]) -> int:
    """Where a secret's value ends: a list (`'api_key': ['k1', 'k2']`) at its bracket; a
    flag's (`--api-key k1 k2`) at the next flag, as a flag may take several values."""
    end = match.end("value")
    if match["value"].startswith("["):
        close = text.find("]", end - 1)
        return len(text) if close < 0 else close + 1
    if match["name"].startswith("-"):
        while (more := _MORE_VALUES.match(text, end)) and _value_like(more[0]):
            end = more.end()
    return end


def _value_like(word: str) -> bool:
    """In free text, a further value of a flag rather than the sentence going on: anything
    but a short word of letters only (`for`, `and`); argv is masked to the next flag."""
    bare = word.strip(" \t'\"")
    return not (bare.isalpha() and len(bare) <= 12)


def _redact_word(word: str, mask: str) -> str:
    """One value: JSON with secret keys masked (re-written compactly), else text."""
    stripped = word.strip()
    if stripped[:1] in ("{", "["):
        try:
            parsed = json.loads(stripped)
        except ValueError:
            pass
        else:
            shown = _redact_tree(parsed, mask)
            return word if shown == parsed else json.dumps(shown, separators=(",", ":"))
    return redact_text(word, mask)


def _userinfo(match: re.Match[str], mask: str) -> str:
    scheme, user, password = match[1], match[2], match[3]
    if password is None:
        return f"{scheme}{mask}@" if user else match[0]
    return f"{scheme}{user}:{mask}@"


def _restore(submitted: Any, stored: Any, mask: str, key: str = "", secret: bool = False) -> Any:
    inner = secret or is_secret_name(key)
    if isinstance(submitted, Mapping) and isinstance(stored, Mapping):
        return {
            k: _restore(v, stored[k], mask, str(k), inner) if k in stored else v
            for k, v in submitted.items()
        }
    if isinstance(submitted, list) and isinstance(stored, list):
        if key == "extra_args" and not inner:
            return _restore_argv(submitted, stored, mask)
        if _named(submitted) and _named(stored):  # groups: by name, not by place
            by_name = {s["name"]: s for s in stored}
            return [
                _restore(v, by_name[v["name"]], mask, "", inner) if v["name"] in by_name else v
                for v in submitted
            ]
        return [
            _restore(v, stored[i], mask, "", inner) if i < len(stored) else v
            for i, v in enumerate(submitted)
        ]
    if submitted != stored and submitted == _redact_tree(stored, mask, key, secret):
        return stored
    return submitted


def _named(items: list[Any]) -> bool:
    return all(isinstance(i, Mapping) and isinstance(i.get("name"), str) for i in items)


def _restore_argv(submitted: list[Any], stored: list[Any], mask: str) -> list[Any]:
    """Words are matched to the stored ones by their masked form and the word before it, so
    that adding or removing a line elsewhere does not lose a secret."""
    shown = redact_argv([str(a) for a in stored], mask)
    by_pair: dict[tuple[str | None, str], Any] = {}
    by_word: dict[str, list[Any]] = {}
    for j, word in enumerate(shown):
        if word != stored[j]:
            by_pair.setdefault((shown[j - 1] if j else None, word), stored[j])
            by_word.setdefault(word, []).append(stored[j])
    out = []
    for i, word in enumerate(submitted):
        before = submitted[i - 1] if i else None
        if (before, word) in by_pair:
            out.append(by_pair[(before, word)])
        elif len(set(by_word.get(word, []))) == 1:
            out.append(by_word[word][0])
        else:
            out.append(word)
    return out
