"""Settings from PDCTL_ environment variables, including plain-text lists and ranges."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from web.settings import Settings, get_settings


def test_defaults() -> None:
    s = Settings()
    assert (s.host, s.port, str(s.db), s.allow_code_env, s.vllm_launcher) == (
        "127.0.0.1",
        8000,
        "pdctl.db",
        False,
        "vllm serve",
    )
    assert not s.auth_enabled


def test_tokens_and_range_from_plain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDCTL_OPERATOR_TOKENS", "alice:a1, ci:c2")
    monkeypatch.setenv("PDCTL_VIEWER_TOKENS", '["bob:b"]')
    monkeypatch.setenv("PDCTL_PORT_RANGE", "30000-30100")
    monkeypatch.setenv("PDCTL_ALLOW_CODE_ENV", "true")
    s = Settings()
    assert s.operator_tokens == ["alice:a1", "ci:c2"] and s.viewer_tokens == ["bob:b"]
    assert s.port_range == (30000, 30100) and s.allow_code_env and s.auth_enabled


@pytest.mark.parametrize(
    ("env", "value"),
    [
        ("PDCTL_PORT_RANGE", "30000"),
        ("PDCTL_PORT_RANGE", "300-200"),
        ("PDCTL_PORT_RANGE", "1-70000"),
        ("PDCTL_OPERATOR_TOKENS", "alice:"),
    ],
)
def test_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch, env: str, value: str) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ValidationError):
        Settings()


def test_get_settings_is_cached_and_clearable(monkeypatch: pytest.MonkeyPatch) -> None:
    get_settings.cache_clear()
    monkeypatch.setenv("PDCTL_PORT", "8123")
    try:
        assert get_settings() is get_settings() and get_settings().port == 8123
    finally:
        get_settings.cache_clear()
