"""The decode side's handshake state per prefill address, kept as real connectors keep it.

A NIXL decode loads a prefill's agent metadata once (the handshake over the side channel)
and keeps it, with its UCX endpoints, for that peer; MoRIIO likewise keeps one session per
prefill handshake address. When the prefill restarts at the same host and port it is a new
engine with a new agent, but the decode still holds the old one: transfers through it fail
("Remote I/O error", NIXL_ERR_REMOTE_DISCONNECT) or hang until the transfer timeout, request
after request, until the decode restarts (vLLM issue 49238, PR 50047 "the decoder can keep
the previous peer's NIXL resources and cached metadata until TTL cleanup"; llm-d 2187).

The stand-in's wire names the agent it holds in every read and notify frame; a prefill that
is another engine answers `stale`. What the decode does then is `--kv-stale-peer`:

    heal   forget the old agent, handshake again, carry on (vLLM with PR 50047); the default
    hang   keep the stale agent; the transfer waits until its timeout, every time
    fail   keep the stale agent; the transfer fails at once, every time
"""

from __future__ import annotations

STALE_PEER = ("heal", "hang", "fail")


class PeerAgents:
    """Decode side: the agent (a prefill's engine id) learned at the first contact with each
    prefill address, and what a stale one leads to."""

    def __init__(self, on_stale: str = "heal") -> None:
        if on_stale not in STALE_PEER:
            raise ValueError(f"--kv-stale-peer must be one of {', '.join(STALE_PEER)}")
        self.on_stale = on_stale
        self._agents: dict[tuple[str, int], str] = {}
        self.stale_seen = 0  # transfers that met a stale agent

    def agent(self, host: str, port: int) -> str | None:
        return self._agents.get((host, port))

    def learned(self, host: str, port: int, engine_id: object) -> None:
        """A prefill answered: the first contact makes its agent ours (a stale one stays)."""
        if isinstance(engine_id, str) and (host, port) not in self._agents:
            self._agents[(host, port)] = engine_id

    def met_stale(self, host: str, port: int, engine_id: object) -> str | None:
        """A prefill answered `stale`. Returns None when the decode heals (the new agent is
        learned, the caller tries once more), else why the transfer cannot go on."""
        self.stale_seen += 1
        old = self._agents.get((host, port))
        if self.on_stale == "heal":
            self._agents.pop((host, port), None)
            self.learned(host, port, engine_id)
            return None
        return (
            f"the KV handshake with {host}:{port} is stale: this decode holds the agent of "
            f"engine {old}, and the prefill there is now engine {engine_id} (it restarted)"
        )


def stale_reply(frame: dict, engine_id: str) -> dict | None:
    """Prefill side: the answer to a frame that names another engine's agent, or None."""
    agent = frame.get("agent")
    if agent is None or agent == engine_id:
        return None
    return {
        "ok": False,
        "stale": True,
        "agent": engine_id,
        "error": f"agent {agent} is not this engine's ({engine_id}): handshake again",
    }
