"""`pdctl sim` as a real process, through the real `openai` client and raw HTTP."""

import json
import urllib.request

import openai
import pytest

from domain.workload import tokenizer
from harness.processes import http_get, http_post, metric_value, running, sim

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    proc = sim(tmp_path_factory.mktemp("sim"), "tiny")
    with running(proc):
        yield proc


@pytest.fixture(scope="module")
def client(engine):
    return openai.OpenAI(base_url=engine.url + "/v1", api_key="none", max_retries=0)


def test_models_and_health(engine, client):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert http_get(engine.url + "/health")[0] == 200


def test_completion_whole_counts_usage(client):
    out = client.completions.create(
        model="tiny", prompt="one two three four", max_tokens=7, extra_body={"ignore_eos": True}
    )
    # English text without a tokenizer: the estimate, 19 characters with their spaces / 4.
    assert out.usage.prompt_tokens == 5 and out.usage.completion_tokens == 7
    assert out.usage.total_tokens == 12
    assert tokenizer.count_tokens(out.choices[0].text) == 7
    assert out.choices[0].finish_reason == "length"


def test_completion_stream_with_usage(client):
    stream = client.completions.create(
        model="tiny",
        prompt="a b c",
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert tokenizer.count_tokens(text) == 5
    assert chunks[-1].usage.completion_tokens == 5 and chunks[-1].usage.prompt_tokens == 3
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length"


def test_chat_whole_and_stream(client):
    messages = [{"role": "user", "content": "hello there"}]
    whole = client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=6, extra_body={"ignore_eos": True}
    )
    assert whole.choices[0].message.role == "assistant"
    assert whole.usage.completion_tokens == 6
    stream = client.chat.completions.create(
        model="tiny",
        messages=messages,
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content  # same prompt, same tokens
    assert chunks[-1].usage.completion_tokens == 6


def test_prompt_as_token_ids_and_deterministic_text(client):
    ids = [5, 6, 7, 8]
    a = client.completions.create(
        model="tiny", prompt=ids, max_tokens=4, extra_body={"ignore_eos": True}
    )
    b = client.completions.create(
        model="tiny", prompt=tokenizer.decode(ids), max_tokens=4, extra_body={"ignore_eos": True}
    )
    assert a.choices[0].text == b.choices[0].text
    assert a.usage.prompt_tokens == 4


def test_without_ignore_eos_requests_stop_on_their_own(client):
    out = client.completions.create(model="tiny", prompt="x y", max_tokens=1000)
    assert out.choices[0].finish_reason == "stop"
    assert 32 <= out.usage.completion_tokens < 512


def test_metrics_count_what_was_served(engine, client):
    before = metric_value(engine.metrics(), "vllm:generation_tokens_total")
    client.completions.create(
        model="tiny", prompt="p q", max_tokens=3, extra_body={"ignore_eos": True}
    )
    text = engine.metrics()
    assert metric_value(text, "vllm:generation_tokens_total") == before + 3
    assert metric_value(text, "vllm:time_to_first_token_seconds_count") >= 1
    assert metric_value(text, "vllm:request_success_total", finished_reason="length") >= 1


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, "body.1"),
        ({"model": "nope", "prompt": "x"}, 404, "model"),
        ({"prompt": "x", "max_tokens": -1}, 400, "max_tokens"),
        ({"prompt": "x", "max_tokens": "many"}, 400, "body.max_tokens"),
        ({"prompt": "x", "max_tokens": 5000}, 400, "max_tokens"),
        ({"max_tokens": 4}, 400, "prompt"),
        ({"prompt": "x " * 3000}, 400, "input_tokens"),
        ({"prompt": "x", "n": 2}, 400, "n"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options"),
        ({"prompt": [1, -2]}, 400, "prompt"),
        ([1, 2], 400, "body"),
    ],
)
def test_bad_requests_get_openai_style_errors_naming_the_field(engine, body, status, param):
    got, err = http_post(engine.url + "/v1/completions", body)
    assert got == status
    assert err["error"]["param"] == param and err["error"]["code"] == status
    assert err["error"]["message"]


def test_bad_chat_messages_are_refused(engine):
    got, err = http_post(engine.url + "/v1/chat/completions", {"messages": []})
    assert got == 400 and err["error"]["param"] == "messages"
    got, err = http_post(
        engine.url + "/v1/chat/completions", {"messages": [{"content": "no role"}]}
    )
    assert got == 400 and err["error"]["param"] == "messages[0]"


def test_stream_is_server_sent_events(engine):
    req = urllib.request.Request(
        engine.url + "/v1/completions",
        method="POST",
        data=json.dumps(
            {"prompt": "z", "max_tokens": 2, "stream": True, "ignore_eos": True}
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        body = resp.read().decode()
    events = [e for e in body.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)
