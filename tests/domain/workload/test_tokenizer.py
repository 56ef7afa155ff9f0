from domain.workload import tokenizer


def test_decode_then_encode_round_trips_ids_and_counts():
    ids = [0, 5, 4095, 17, 17]
    text = tokenizer.decode(ids)
    assert tokenizer.encode(text) == ids
    assert tokenizer.count_tokens(text) == 5


def test_unknown_words_still_count_one_token_each():
    assert len(tokenizer.encode("hello, world! ünïcode")) == 3


def test_outputs_are_deterministic_per_prompt_and_stream_reassembles():
    a = tokenizer.output_token_ids([1, 2, 3], 0, 8)
    assert a == tokenizer.output_token_ids([1, 2, 3], 0, 8)
    assert a != tokenizer.output_token_ids([1, 2, 4], 0, 8)
    assert tokenizer.output_token_ids([1, 2, 3], 4, 4) == a[4:]
    text = "".join(tokenizer.token_text(t, i == 0) for i, t in enumerate(a))
    assert tokenizer.encode(text) == a
