from domain.workload import tokenizer


def test_decode_then_encode_round_trips_ids_and_counts():
    ids = [0, 5, 4095, 17, 17]
    text = tokenizer.decode(ids)
    assert tokenizer.encode(text) == ids
    assert tokenizer.count_tokens(text) == 5


def test_other_text_is_estimated_at_four_characters_a_token():
    text = "Disaggregation pays when long prompts would otherwise stall the decodes."
    assert tokenizer.count_tokens(text) == round(len(text) / tokenizer.CHARS_PER_TOKEN) == 18
    assert tokenizer.count_tokens("hi") == 1  # any text is at least one token
    assert tokenizer.encode(text) == tokenizer.encode(text)  # deterministic ids


def test_vocabulary_words_beside_other_text_still_count_one_each():
    words = tokenizer.decode([3, 4, 5])
    assert tokenizer.count_tokens(f"{words} hi") == 3 + 1
    assert tokenizer.count_tokens("x " * 100) == 100  # a short word is one token, not a quarter


def test_outputs_are_deterministic_per_prompt_and_stream_reassembles():
    a = tokenizer.output_token_ids([1, 2, 3], 0, 8)
    assert a == tokenizer.output_token_ids([1, 2, 3], 0, 8)
    assert a != tokenizer.output_token_ids([1, 2, 4], 0, 8)
    assert tokenizer.output_token_ids([1, 2, 3], 4, 4) == a[4:]
    text = "".join(tokenizer.token_text(t, i == 0) for i, t in enumerate(a))
    assert tokenizer.encode(text) == a
