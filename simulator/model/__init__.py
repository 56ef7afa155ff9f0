"""Pure cost models: engine step time (a roofline over datasheet figures), KV hand-off, vision
encoder, API-server CPU, and the KV calculator."""
