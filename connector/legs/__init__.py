"""Pure request shaping: the prefill and decode legs of one request, the client's body, when to
retry, chat on token ids, multi-turn KV."""
