import json

import aiohttp

from tests.connector.fakes import FakeEngine, completion, engines, run, running, settings_for


async def call(base, method, path, token=None, body=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as s:
        data = json.dumps(body) if body is not None else None
        async with s.request(method, base + "/admin" + path, data=data, headers=headers) as r:
            return r.status, await r.json()


def test_token_is_required_when_set():
    async def body():
        async with running(settings_for(admin_token="s3cret")) as (base, _):
            status, answer = await call(base, "GET", "/instances")
            assert status == 401 and answer["error"]["code"] == 401
            status, _ = await call(base, "GET", "/instances", token="wrong")
            assert status == 401
            status, answer = await call(base, "GET", "/instances", token="s3cret")
            assert status == 200 and answer["instances"] == []
            # the OpenAI routes are not behind the admin token
            async with aiohttp.ClientSession() as s, s.get(base + "/health") as r:
                assert r.status == 200

    run(body())


def test_add_list_drain_remove():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d"), FakeEngine("d2")) as (p, d, d2),
            running(settings_for([p], [d])) as (base, proxy),
        ):
            status, inst = await call(
                base, "POST", "/instances", body={"url": d2.url, "role": "decode", "group": "read"}
            )
            assert status == 201 and inst["source"] == "admin"
            status, listing = await call(base, "GET", "/instances")
            rows = {i["url"]: i for i in listing["instances"]}
            assert set(rows) == {p.url, d.url, d2.url}
            assert rows[d.url]["group"] == "read" and rows[d.url]["healthy"] is True
            assert "outstanding_tokens" in rows[d.url]
            status, _ = await call(base, "POST", "/instances/drain", body={"url": d.url})
            assert status == 200
            for _ in range(3):
                await aiohttp_post(base)
            assert len(d.seen) == 0 and len(d2.seen) == 3
            status, _ = await call(base, "POST", "/instances/remove", body={"url": d2.url})
            assert status == 200 and proxy.pool.get(d2.url) is None
            status, answer = await call(base, "POST", "/instances/remove", body={"url": d2.url})
            assert status == 404 and d2.url in answer["error"]["message"]

    run(body())


async def aiohttp_post(base):
    async with (
        aiohttp.ClientSession() as s,
        s.post(base + "/v1/completions", json=completion(2)) as r,
    ):
        assert r.status == 200
        await r.read()


def test_bad_admin_input_names_the_field():
    async def body():
        async with running(settings_for()) as (base, _):
            status, answer = await call(base, "POST", "/instances", body={"role": "decode"})
            assert status == 400 and answer["error"]["param"] == "url"
            status, answer = await call(
                base,
                "POST",
                "/instances",
                body={"url": "http://x", "role": "decode", "group": "write"},
            )
            assert status == 400 and "NIXL" in answer["error"]["message"]
            status, answer = await call(base, "POST", "/groups/push/pause")
            assert status == 404

    run(body())


def test_pause_resume_and_requests_log():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            status, group = await call(base, "POST", "/groups/read/pause")
            assert status == 200 and group["paused"] is True
            status, groups = await call(base, "GET", "/groups")
            assert {g["mode"]: g["paused"] for g in groups["groups"]}["read"] is True
            status, group = await call(base, "POST", "/groups/read/resume")
            assert group["paused"] is False
            await aiohttp_post(base)
            status, log = await call(base, "GET", "/requests?limit=5")
            entry = log["requests"][-1]
            assert entry["outcome"] == "ok" and entry["group"] == "read"
            assert entry["prefill"] == p.url and entry["decode"] == d.url
            assert entry["output_tokens"] == 2
            for key in (
                "ttft_ms",
                "e2e_ms",
                "tpot_ms",
                "itl_p99_ms",
                "prefill_ms",
                "transfer_first_decode_ms",
            ):
                assert entry[key] is not None and entry[key] >= 0

    run(body())


def test_whole_sends_whole_requests_to_a_decode_while_its_prefill_drains():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            status, inst = await call(
                base, "POST", "/instances/whole", body={"url": d.url, "whole": True}
            )
            assert status == 200 and inst["whole"] is True
            await call(base, "POST", "/instances/drain", body={"url": p.url})
            for _ in range(2):
                await aiohttp_post(base)
            assert len(p.seen) == 0 and len(d.seen) == 2
            assert [seen.kind for seen in d.seen] == ["whole", "whole"]
            status, answer = await call(
                base, "POST", "/instances/whole", body={"url": d.url, "whole": "yes"}
            )
            assert status == 400 and answer["error"]["param"] == "whole"
            status, _ = await call(base, "POST", "/instances/whole", body={"url": "http://x"})
            assert status == 404

    run(body())
