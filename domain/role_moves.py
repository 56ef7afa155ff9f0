"""What a runtime role move (prefill <-> decode) may wait for, shared by the API, the CLI and
the autopilot."""

from __future__ import annotations

# How long a moved instance's legs and its engine may take to drain. A prefill leaves for
# decode when the decodes are short, and its last requests then wait for a decode slot to pull
# their KV: about 2 minutes in `make bench-autopilot`, where 60 s failed such moves.
DRAIN_TIMEOUT_S = 300.0
