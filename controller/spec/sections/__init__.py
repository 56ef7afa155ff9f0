"""A spec's optional sections, one module each: autopilot, bidirectional KV, canary, encode
and render tiers, connector extras, role switching, and which profiles time the engines."""
