"""Where the terminal's server and token come from: `--server`, else PDCTL_SERVER, else the
config file, else loopback; the token from PDCTL_TOKEN, else the config file, and never from
argv (which every user of the host can read in /proc).

The config file (PDCTL_CONFIG, default ~/.config/pdctl/config.toml) is TOML with `server` and
`token`; one that holds a token is refused unless only its owner can read it (mode 0600)."""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SERVER_ENV = "PDCTL_SERVER"
TOKEN_ENV = "PDCTL_TOKEN"
CONFIG_ENV = "PDCTL_CONFIG"
DEFAULT_SERVER = "http://127.0.0.1:8000"


class ConfigProblem(RuntimeError):
    """One line naming the file, variable or flag that is wrong."""


@dataclass(frozen=True)
class Target:
    server: str
    token: str | None


def config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    given = env.get(CONFIG_ENV)
    if given:
        return Path(given)
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "pdctl" / "config.toml"


def read_config(path: Path) -> dict[str, str]:
    """The file's `server` and `token` (either may be absent); {} when there is no file."""
    try:
        raw = path.read_bytes()
        mode = path.stat().st_mode
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigProblem(f"config file {path}: cannot read it ({exc.strerror})") from None
    try:
        data = tomllib.loads(raw.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigProblem(f"config file {path}: not TOML ({exc})") from None
    unknown = sorted(set(data) - {"server", "token"})
    if unknown:
        raise ConfigProblem(f"config file {path}: unknown key {unknown[0]!r} (server, token)")
    for key, value in data.items():
        if not isinstance(value, str) or not value:
            raise ConfigProblem(f"config file {path}: {key} must be a non-empty string")
    if "token" in data and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigProblem(
            f"config file {path} holds a token but others may read it "
            f"(mode {stat.S_IMODE(mode):04o}); chmod 600 {path}"
        )
    return data


def resolve(server_flag: str | None, env: Mapping[str, str] | None = None) -> Target:
    """The server and token a verb talks with."""
    env = os.environ if env is None else env
    file = read_config(config_path(env))
    server = server_flag or env.get(SERVER_ENV) or file.get("server") or DEFAULT_SERVER
    if not server.startswith(("http://", "https://")):
        where = "--server" if server_flag else (SERVER_ENV if env.get(SERVER_ENV) else "server")
        raise ConfigProblem(f"{where} {server!r} is not an http:// or https:// URL")
    token = env.get(TOKEN_ENV) or file.get("token") or None
    return Target(server.rstrip("/"), token)
