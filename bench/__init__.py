"""The product's load generator (`pdctl bench`): streamed OpenAI requests at arrival times,
each judged by the one SLO judge, summarised in `vllm bench serve`'s field names.

Rooms: `turns/` (multi-turn chat workloads whose context grows with real answers),
`workers/` (several processes offering one rate's load). Beside them: `client` (the one door
to the server), `runner` (rates and sweeps), `offer`, `records`, `summary`, `report`, `cli`."""
