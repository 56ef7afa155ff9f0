"""Which requests the proxy takes for the control plane's canary: only those carrying its
admin token; any other value (or a proxy without a token) is forged, and measured."""

import json

import aiohttp

from connector.canary import DECODE_HEADER, HEADER, PREFILL_HEADER, mark, pair_headers
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
