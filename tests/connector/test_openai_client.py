"""The real openai client through the proxy over fake upstreams."""

import openai

from tests.connector.fakes import FakeEngine, engines, run, running, settings_for


def test_openai_client_streams_and_counts():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
            try:
                stream = await client.completions.create(
                    model="tiny",
                    prompt="hello",
                    max_tokens=6,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                texts, usage = [], None
                async for chunk in stream:
                    texts += [c.text for c in chunk.choices]
                    usage = chunk.usage or usage
                assert len(texts) == 6 and usage.completion_tokens == 6

                answer = await client.completions.create(model="tiny", prompt="x", max_tokens=3)
                assert answer.usage.completion_tokens == 3

                chat = await client.chat.completions.create(
                    model="tiny",
                    messages=[{"role": "user", "content": "hi"}],
                    max_completion_tokens=4,
                    stream=True,
                )
                deltas = [c.choices[0].delta.content async for c in chat if c.choices]
                assert len(deltas) == 4

                models = await client.models.list()
                assert [m.id for m in models.data] == ["tiny"]

                try:
                    await client.completions.create(model="tiny", prompt="", max_tokens=3)
                    raise AssertionError("expected a 400")
                except openai.BadRequestError as exc:
                    assert "prompt" in str(exc)
            finally:
                await client.close()

    run(body())
