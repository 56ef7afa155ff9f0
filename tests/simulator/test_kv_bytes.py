"""The stand-in's answer depends on the KV bytes its decode received: a correct hand-off gives
exactly the colocated answer (the prefill answering alone), the corrupt_kv fault other tokens
with a 200. Through a real `pdctl proxy`, for NIXL (read) and MoRIIO read and write."""

import urllib.request

import pytest

from harness.processes import http_post, running
from harness.stack import moriio_sim, nixl_sim, proxy, zmq_address
from simulator.kv.wire import CHUNK, kv_digest, payload_crc

pytestmark = pytest.mark.e2e

BODY = {"model": "tiny", "prompt": "the canary sings a fixed song", "max_tokens": 12}
BODY |= {"temperature": 0, "ignore_eos": True}


def test_payload_is_the_prompts_and_its_crc_depends_on_every_byte():
    a, b = kv_digest([1, 2, 3, 99]), kv_digest([1, 2, 3, 7])
    assert a == b  # the last prompt token is the decode's own (not handed on)
    assert kv_digest([1, 2, 4, 9]) != a and len(a) == 32
    assert payload_crc(a, 3 * CHUNK + 5) == payload_crc(a, 3 * CHUNK + 5)
    assert payload_crc(a, CHUNK) != payload_crc(kv_digest([5, 6]), CHUNK)


def text(url: str, body: dict) -> str:
    status, out = http_post(url + "/v1/completions", body, timeout=20)
    assert status == 200, out
    return out["choices"][0]["text"]


FAULTS = "--enable-fault-injection"


def pair(tmp, kind):
    if kind == "nixl":
        p, d = nixl_sim(tmp, "p", "kv_producer", FAULTS), nixl_sim(tmp, "d", "kv_consumer")
        return (
            p,
            d,
            ("--connector", "nixl", "--mode", "read", "--prefill", p.url, "--decode", d.url),
        )
    read = kind == "moriio-read"
    p = moriio_sim(tmp, "p", "kv_producer", read, None, FAULTS)
    d = moriio_sim(tmp, "d", "kv_consumer", read)
    flags = ("--connector", "moriio", "--mode", "read" if read else "write")
    return (
        p,
        d,
        (*flags, "--prefill", f"{p.url}#{zmq_address(p)}", "--decode", f"{d.url}#{zmq_address(d)}"),
    )


@pytest.mark.parametrize("kind", ["nixl", "moriio-read", "moriio-write"])
def test_corrupted_kv_changes_the_tokens_and_correct_kv_gives_the_colocated_answer(tmp_path, kind):
    prefill, decode, flags = pair(tmp_path, kind)
    with running(prefill, decode):
        alone = text(prefill.url, BODY)  # colocated: no hand-off
        front = proxy(tmp_path, "proxy", *flags)
        with running(front):
            assert text(front.url, BODY) == alone
            http_post(prefill.url + "/_fault", {"fault": "corrupt_kv"})
            wrong = text(front.url, BODY)
            assert wrong != alone and len(wrong.split()) == len(alone.split())
            assert text(prefill.url, BODY) == alone  # no KV moves: the fault does not apply
            urllib.request.urlopen(
                urllib.request.Request(prefill.url + "/_fault", method="DELETE"), timeout=5
            ).close()
            assert text(front.url, BODY) == alone
