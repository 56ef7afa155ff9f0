"""The stand-in's servers: the engine's HTTP surface, registration, role switching, its modelled
start, the encoder stage and the render tier."""
