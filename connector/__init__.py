"""The PD proxy (`pdctl proxy`): each request split into a prefill and a decode leg, routed
within one mode's instance group, measured as the client sees it.

Its rooms, floor by floor (a room imports only rooms below it; tests/test_layers.py):

1. `errors`     the proxy's error tree, and the fault types its HTTP client raises
2. `registry/` (MoRIIO's ZMQ registry: messages, trust, the heartbeat table), `http/` (the
   HTTP/1.1 stack: toward clients and toward the engines)
3. `legs/`      pure: rewriting a request into its legs (each connector's shape is its
                backend's, domain/kv_connectors/), the client's body, retries, chat on
                token ids, multi-turn KV
4. `pool/`      instance groups, pair selection policies, runtime P/D roles
5. `measure/`   per-request timing, arrivals' demand, interference, the Prometheus export;
   `settings`   the proxy's settings
6. `dispatch/`  the legs' I/O: attempts, relay, hold queue, flights, canaries, tiers;
   `membership` who the proxy routes to beyond its flags
7. `proxy`      the request path; `api/` its admin, info and OpenAPI routes
8. `server` (the aiohttp app), `flags` (the settings as options and as argv) and `cli`"""
