"""Bidirectional KV for multi-turn through real processes: NIXL stand-ins and `pdctl proxy` on
loopback. With it on, a conversation's second turn's prefill pulls the blocks the first
turn's decode kept and computes only what follows them (the new user text and the answer's
last token, which the decode sampled but never computed); with it off nothing changes."""

import http.client
import json

import pytest

from domain.workload import tokenizer
from harness.processes import metric_value, running
from harness.stack import nixl_sim, proxy, wait_until

pytestmark = pytest.mark.e2e

BIDIR = {"bidirectional_kv_xfer": True, "decoder_kv_blocks_ttl": 60}
CHAT = "/v1/chat/completions"
ANSWER_TOKENS = 24
NEW_TEXT = "and then what happened next"


def _stack(tmp, bidir: bool):
    extra = BIDIR if bidir else None
    prefill = nixl_sim(tmp, "prefill", "kv_producer", extra=extra)
    decode = nixl_sim(tmp, "decode", "kv_consumer", extra=extra)
    flags = ["--connector", "nixl", "--mode", "read", "--prefill", prefill.url]
    flags += ["--decode", decode.url, *(["--bidirectional-kv"] if bidir else [])]
    return prefill, decode, flags


@pytest.fixture(scope="module", params=[True, False], ids=["on", "off"])
def stack(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bidir-" + ("on" if request.param else "off"))
    prefill, decode, flags = _stack(tmp, request.param)
    with running(prefill, decode):
        front = proxy(tmp, "proxy", *flags)
        with running(front):
            yield request.param, prefill, decode, front


def _post(front, path: str, body: dict) -> str:
    """POST a JSON body through the proxy; the 200 answer's text."""
    host, port = front.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read().decode()
    conn.close()
    assert resp.status == 200, raw
    return raw


def _chat(front, messages, stream=False) -> tuple[str, int]:
    """(answer text, prompt tokens) of one turn through the proxy."""
    body = {
        "model": "tiny",
        "messages": messages,
        "max_tokens": ANSWER_TOKENS,
        "ignore_eos": True,
        "stream": stream,
        "stream_options": {"include_usage": True} if stream else None,
    }
    if not stream:
        body.pop("stream_options")
    raw = _post(front, CHAT, body)
    if not stream:
        answer = json.loads(raw)
        return answer["choices"][0]["message"]["content"], answer["usage"]["prompt_tokens"]
    text, prompt = "", None
    for line in raw.splitlines():
        if not line.startswith("data: {"):
            continue
        event = json.loads(line[6:])
        if event.get("choices"):
            text += event["choices"][0]["delta"].get("content") or ""
        if event.get("usage"):
            prompt = event["usage"]["prompt_tokens"]
    assert prompt is not None
    return text, prompt


def _by_source(inst) -> dict[str, float]:
    text = inst.metrics()
    return {
        s: metric_value(text, "vllm:prompt_tokens_by_source_total", source=s) or 0.0
        for s in ("local_compute", "local_cache_hit", "external_kv_transfer")
    }


def _delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k] for k in after}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_second_turn_prefill_computes_only_the_new_tokens(stack, stream):
    on, prefill, _, front = stack
    user = f"tell me about the fox {'streamed' if stream else 'whole'} " * 12
    first = [{"role": "user", "content": user}]
    answer, first_len = _chat(front, first, stream)
    second = [*first, {"role": "assistant", "content": answer}]
    second.append({"role": "user", "content": NEW_TEXT})
    before = _by_source(prefill)
    answer2, second_len = _chat(front, second, stream)
    spent = _delta(_by_source(prefill), before)
    held = first_len + ANSWER_TOKENS - 1  # the decode's KV: prompt and answer but its last
    if on:
        assert spent["external_kv_transfer"] == held
        assert spent["local_compute"] == second_len - held
        # the new text, its role token, the "assistant" prompt token, the answer's last token
        assert spent["local_compute"] == len(tokenizer.encode(NEW_TEXT)) + 3
    else:
        assert spent["external_kv_transfer"] == 0
        assert spent["local_compute"] + spent["local_cache_hit"] == second_len
    assert len(answer2.split()) == ANSWER_TOKENS


_ANSWERS: dict[str, str] = {}  # the "on" stack's answers, which the "off" one must give


def test_with_it_on_the_answers_are_the_same_as_without(stack):
    """The stand-in seeds a decode's output with the CRC of the KV it received: the same
    second-turn answer with it on and off says the hand-off carried the right bytes."""
    _, _, _, front = stack
    first = [{"role": "user", "content": "same answer either way " * 10}]
    answer, _ = _chat(front, first)
    second = [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": "ok"}]
    answer2, _ = _chat(front, second)
    assert answer2 == _ANSWERS.setdefault(json.dumps(second), answer2)


def test_an_edited_answer_is_a_new_conversation(stack):
    """A follow-up whose earlier answer is not the one the decode gave (the client edited
    it) has no kept KV: the proxy misses, the prefill computes it all."""
    _, prefill, _, front = stack
    first = [{"role": "user", "content": "edit me " * 10}]
    answer, _ = _chat(front, first)
    edited = [*first, {"role": "assistant", "content": answer + " extra"}]
    edited.append({"role": "user", "content": "go on"})
    before = _by_source(prefill)
    _chat(front, edited)
    spent = _delta(_by_source(prefill), before)
    assert spent["external_kv_transfer"] == 0


def test_the_proxy_counts_what_it_carried(stack):
    on, prefill, _, front = stack
    first = [{"role": "user", "content": "count me " * 10}]
    answer, _ = _chat(front, first)
    follow = [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": "x"}]
    _chat(front, follow)
    text = front.metrics()
    carried = metric_value(text, "pdctl_proxy_bidir_kv_total", outcome="carried")
    pulled = metric_value(prefill.metrics(), "pdctl_sim_kv_pullbacks_total", outcome="ok")
    if on:
        assert carried >= 1 and pulled >= 1
        # the same follow-up again: its kept KV was taken once, so it misses
        _chat(front, follow)
        wait_until(
            lambda: (
                metric_value(front.metrics(), "pdctl_proxy_bidir_kv_total", outcome="missed") >= 1
            ),
            5,
            "a repeated follow-up missed",
        )
    else:
        assert not carried and not pulled


def _complete(front, prompt: str, stream: bool = False) -> tuple[str, int]:
    """(answer text, prompt tokens) of one completion through the proxy."""
    body = {"model": "tiny", "prompt": prompt, "max_tokens": ANSWER_TOKENS, "ignore_eos": True}
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    raw = _post(front, "/v1/completions", body)
    if not stream:
        answer = json.loads(raw)
        return answer["choices"][0]["text"], answer["usage"]["prompt_tokens"]
    text, prompt_tokens = "", None
    for line in raw.splitlines():
        if line.startswith("data: {"):
            event = json.loads(line[6:])
            if event.get("choices"):
                text += event["choices"][0].get("text") or ""
            if event.get("usage"):
                prompt_tokens = event["usage"]["prompt_tokens"]
    assert prompt_tokens is not None
    return text, prompt_tokens


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_completion_that_extends_the_last_one_pulls_its_kv_back(stack, stream):
    """An agent loop on /v1/completions: the next prompt is the last prompt, its answer and
    new text. With it on, that prompt's prefill pulls what the decode kept."""
    on, prefill, _, front = stack
    prompt = f"the agent looks at the {'streamed' if stream else 'whole'} log " * 12
    answer, first_len = _complete(front, prompt, stream)
    before = _by_source(prefill)
    answer2, second_len = _complete(front, prompt + answer + " " + NEW_TEXT, stream)
    spent = _delta(_by_source(prefill), before)
    held = first_len + ANSWER_TOKENS - 1
    if on:
        assert spent["external_kv_transfer"] == held
        assert spent["local_compute"] == second_len - held
    else:
        assert spent["external_kv_transfer"] == 0
    assert len(answer2.split()) == ANSWER_TOKENS
    # a prompt that only shares the beginning is no follow-up
    before = _by_source(prefill)
    _complete(front, prompt + "something else entirely")
    assert _delta(_by_source(prefill), before)["external_kv_transfer"] == 0
