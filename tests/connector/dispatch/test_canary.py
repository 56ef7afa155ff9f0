"""Which requests the proxy takes for the control plane's canary: only those carrying its
admin token; any other value (or a proxy without a token) is forged, and measured."""

import json

import aiohttp

from connector.dispatch.canary import (
    DECODE_HEADER,
    HEADER,
    PAIR_HEADER,
    PREFILL_HEADER,
    mark,
    pair_headers,
)
from tests.connector.fakes import FakeEngine, engines, run, running, settings_for


def test_only_the_admin_token_marks_a_canary():
    assert mark({}, "s3cret") is None
    assert mark({HEADER: "s3cret"}, "s3cret") == "canary"
    assert mark({HEADER: "1"}, "s3cret") == "forged"
    assert mark({HEADER: ""}, "s3cret") == "forged"
    assert mark({HEADER: "1"}, None) == "forged"  # no token: nobody can mark a canary
    assert mark({HEADER: ""}, None) == "forged"


def test_the_pair_goes_in_the_answer_headers():
    assert pair_headers("http://p", "http://d") == {
        PREFILL_HEADER: "http://p",
        DECODE_HEADER: "http://d",
    }
    assert pair_headers(None, "http://c")[PREFILL_HEADER] == ""


async def _post(base, headers):
    body = {"model": "tiny", "prompt": "hello there", "max_tokens": 3, "stream": False}
    async with (
        aiohttp.ClientSession() as s,
        s.post(base + "/v1/completions", data=json.dumps(body), headers=headers) as r,
    ):
        await r.read()
        return r.status, dict(r.headers)


def test_a_canary_is_served_named_and_left_out_of_every_slo_figure_a_forged_one_is_not():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d], admin_token="adm1n")) as (base, proxy),
        ):
            m = proxy.metrics
            status, headers = await _post(base, {HEADER: "adm1n"})
            assert status == 200
            assert (headers[PREFILL_HEADER], headers[DECODE_HEADER]) == (p.url, d.url)
            # not in the outcomes (attainment, goodput), the histograms, arrival gaps, turns
            assert sum(m.outcomes.values()) == 0 and m.histograms["ttft"].count == 0
            assert m.last_arrival is None and sum(m.turns.values()) == 0
            assert m.canaries == {"ok": 1} and proxy.requests[-1]["canary"] is True
            assert proxy.requests[-1]["decode"] == d.url  # the request log names the pair too

            for forged in ({HEADER: "1"}, {HEADER: "adm1nX"}):
                status, headers = await _post(base, forged)
                assert status == 200 and DECODE_HEADER not in headers
            assert m.outcomes["ok"] == 2 and m.histograms["ttft"].count == 2
            assert m.canaries == {"ok": 1, "forged": 2}
            assert "canary" not in proxy.requests[-1]

    run(body())


async def _post_body(base, headers):
    body = {"model": "tiny", "prompt": "hello there", "max_tokens": 3, "stream": False}
    async with (
        aiohttp.ClientSession() as s,
        s.post(base + "/v1/completions", data=json.dumps(body), headers=headers) as r,
    ):
        return r.status, dict(r.headers), await r.json(content_type=None)


def test_a_canary_pinned_to_a_pair_is_served_by_that_pair_whatever_the_routing_picks():
    async def body():
        fakes = FakeEngine("p1"), FakeEngine("p2"), FakeEngine("d1"), FakeEngine("d2")
        async with (
            engines(*fakes) as (p1, p2, d1, d2),
            running(settings_for([p1, p2], [d1, d2], admin_token="adm1n")) as (base, _),
        ):
            for pair in ((p2, d1), (p2, d1), (p1, d2), (p2, d2)):  # round robin would alternate
                pin = f"{pair[0].url} {pair[1].url}"
                status, headers, _ = await _post_body(base, {HEADER: "adm1n", PAIR_HEADER: pin})
                assert status == 200
                assert (headers[PREFILL_HEADER], headers[DECODE_HEADER]) == (
                    pair[0].url,
                    pair[1].url,
                )
            assert [len(f.seen) for f in (p1, p2, d1, d2)] == [1, 3, 2, 2]

    run(body())


def test_a_pinned_canary_is_never_retried_elsewhere_and_its_error_names_the_leg():
    async def body():
        fakes = FakeEngine("p"), FakeEngine("d1", decode_status=500), FakeEngine("d2")
        async with (
            engines(*fakes) as (p, d1, d2),
            running(settings_for([p], [d1, d2], admin_token="adm1n")) as (base, proxy),
        ):
            pin = f"{p.url} {d1.url}"
            status, _, answer = await _post_body(base, {HEADER: "adm1n", PAIR_HEADER: pin})
            assert status == 502 and f"decode leg to {d1.url}" in answer["error"]["message"]
            assert d2.seen == [] and proxy.metrics.retries == {}
            assert proxy.pool.get(d1.url).failed == 1  # judged as any failed leg

    run(body())


def test_a_pin_is_refused_clearly_unless_a_canary_names_a_registered_pair():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d], admin_token="adm1n")) as (base, _),
        ):
            good = f"{p.url} {d.url}"
            cases = [
                ({PAIR_HEADER: good}, 401, "needs X-Pdctl-Canary"),
                ({HEADER: "forged", PAIR_HEADER: good}, 401, "admin token"),
                ({HEADER: "adm1n", PAIR_HEADER: p.url}, 400, "<prefill url> <decode url>"),
                ({HEADER: "adm1n", PAIR_HEADER: f"{d.url} {p.url}"}, 404, "no prefill instance"),
                ({HEADER: "adm1n", PAIR_HEADER: f"{p.url} http://127.0.0.9:1"}, 404, "decode"),
            ]
            for headers, code, words in cases:
                status, _, answer = await _post_body(base, headers)
                assert status == code, headers
                assert (
                    words in answer["error"]["message"]
                    and PAIR_HEADER in answer["error"]["message"]
                )
            assert p.seen == [] and d.seen == []  # nothing was served on a refused pin

    run(body())
