"""Admin input schemathesis found wrong: a null dp_size was a 500, a negative one accepted, an
unknown query parameter silently ignored. Each is now a 400 naming the field."""

from __future__ import annotations

import aiohttp
import pytest

from tests.connector.fakes import run, running, settings_for


async def admin(base: str, method: str, path: str, body: dict | None = None):
    async with (
        aiohttp.ClientSession() as s,
        s.request(method, base + "/admin" + path, json=body) as r,
    ):
        return r.status, await r.json()


@pytest.mark.parametrize("field", ["dp_size", "tp_size"])
@pytest.mark.parametrize(
    ("value", "status"),
    [(None, 201), (1, 201), (4, 201), (0, 400), (-541157, 400), ("2", 400), (True, 400)],
)
def test_sizes_are_positive_integers_or_null(field: str, value, status: int):
    async def body():
        async with running(settings_for()) as (base, proxy):
            code, answer = await admin(
                base,
                "POST",
                "/instances",
                {"url": "http://127.0.0.1:9", "role": "decode", field: value},
            )
            assert code == status, answer
            if status == 400:
                assert answer["error"]["param"] == field
                assert proxy.pool.get("http://127.0.0.1:9") is None
            else:
                assert answer[field] == (value or 1)

    run(body())


def test_an_unknown_query_parameter_is_400_naming_it():
    async def body():
        async with running(settings_for()) as (base, _):
            assert (await admin(base, "GET", "/requests?limit=5"))[0] == 200
            code, answer = await admin(base, "GET", "/requests?limt=5")
            assert code == 400 and answer["error"]["param"] == "limt"
            assert "the only one is 'limit'" in answer["error"]["message"]

    run(body())
