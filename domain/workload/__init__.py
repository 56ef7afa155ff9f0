"""What load looks like: arrival schedules (pdctl's and vLLM bench's), synthetic datasets, the one
tokenizer."""
