"""The "did you mean" every unknown-name error ends with."""

from __future__ import annotations

from domain.names import closest, did_you_mean


def test_a_typo_finds_the_name_it_meant() -> None:
    assert closest("dmeo", ["demo", "prod"]) == "demo"
    assert did_you_mean("light_trafic", ["ttft_binding", "light_traffic"]) == (
        " (did you mean 'light_traffic'?)"
    )
    assert did_you_mean("decod-0", ["proxy", "prefill-0", "decode-0"]) == (
        " (did you mean 'decode-0'?)"
    )


def test_nothing_close_or_nothing_known_suggests_nothing() -> None:
    assert did_you_mean("zzz", ["demo"]) == ""
    assert did_you_mean("demo", []) == ""
    assert closest("x", ["demo"]) is None
