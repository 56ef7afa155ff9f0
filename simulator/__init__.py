"""The vLLM stand-in engine (`pdctl sim`) and the what-if planner (`pdctl plan`).

Its rooms, floor by floor (tests/test_layers.py):

1. `model/`     pure: step times (roofline), KV hand-off costs, encoder and frontend costs
2. `engine/`    the continuous-batching scheduler, its block pool and requests, on a
                virtual or a wall clock; `protocol/` OpenAI shapes and vLLM's refusals
3. `config/`    the engine's settings from vLLM's flags; `metrics/` vLLM's /metrics;
                `plan/` the planner on the virtual clock
4. `kv/`        the stand-in KV transport over real TCP, and what kv_transfer_params ask
5. `server/`    the OpenAI-compatible server, registration, role switching, the render tier
6. `cli`        `pdctl sim`"""
