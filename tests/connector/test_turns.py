"""Multi-turn traffic as the proxy sees it: a chat request carrying an earlier assistant answer
continues a conversation; a completion's prompt cannot say."""

import aiohttp
import pytest

from connector.legs.client_body import turn_kind
from harness.processes import metric_value
from tests.connector.fakes import FakeEngine, engines, run, running, settings_for
from tests.connector.test_proxy import post

CHAT = "/v1/chat/completions"


@pytest.mark.parametrize(
    ("body", "endpoint", "kind"),
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, CHAT, "first"),
        (
            {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]},
            CHAT,
            "first",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "yo"},
                    {"role": "user", "content": "more"},
                ]
            },
            CHAT,
            "follow_up",
        ),
        ({"messages": ["not a dict", {"role": "user", "content": "hi"}]}, CHAT, "first"),
        ({"prompt": "hi"}, "/v1/completions", "unknown"),
    ],
)
def test_turn_kind(body, endpoint, kind):
    assert turn_kind(body, endpoint) == kind


def test_the_proxy_counts_turns_by_kind():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            first = {
                "model": "tiny",
                "max_tokens": 2,
                "messages": [{"role": "user", "content": "hi"}],
            }
            follow = {
                **first,
                "messages": [
                    *first["messages"],
                    {"role": "assistant", "content": "hello"},
                    {"role": "user", "content": "and?"},
                ],
            }
            for payload in (first, follow, follow):
                status, _, _ = await post(base, payload, path=CHAT)
                assert status == 200
            status, _, _ = await post(base, {"model": "tiny", "prompt": "x", "max_tokens": 2})
            assert status == 200
            text = await _metrics(base)
        assert metric_value(text, "pdctl_proxy_turns_total", kind="first") == 1
        assert metric_value(text, "pdctl_proxy_turns_total", kind="follow_up") == 2
        assert metric_value(text, "pdctl_proxy_turns_total", kind="unknown") == 1

    run(body())


async def _metrics(base: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(base + "/metrics") as r:
        return await r.text()
