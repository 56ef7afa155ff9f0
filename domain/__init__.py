"""The ground floor: the words and rules every path of pdctl shares, defined once.

Modes, roles and connectors (modes.py); SLO targets and the one judge of "met" (slo.py);
vLLM's metric names and buckets (vllm_metrics.py); hardware and model profiles (profiles/);
the tokenizer, arrival schedules and datasets (workload/). Pure, and imports nothing of
pdctl's.

Rooms: `profiles/` (hardware and model profiles, TOML files with their sources), `workload/`
(arrival schedules, datasets, the tokenizer), `kv_connectors/` (one backend per KV connector,
above modes.py: everything else asks it what a connector does).
"""
