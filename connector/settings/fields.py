"""The types of the proxy's settings that more than ProxySettings uses (connector/settings/):
an instance URL flag, and the bounded numbers a deployment spec's proxy section also sets."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, InstanceOf, PlainSerializer

from connector.pool.policy import POLICIES
from connector.settings.parsing import FlagInstance, one_of, parse_instance

# An instance URL flag: text on the command line, a FlagInstance inside, text again in argv.
InstanceUrl = Annotated[
    InstanceOf[FlagInstance], BeforeValidator(parse_instance), PlainSerializer(lambda f: f.text)
]
Instances = tuple[InstanceUrl, ...]

# The types of the settings a deployment spec's proxy section also sets (ProxyConfig in
# controller/spec/deployment.py takes them, bounding a few more tightly).
Policy = Annotated[
    str,
    one_of(POLICIES, "policy"),
    Field(description="Pair selection: round-robin | least-tokens."),
]
HoldQueue = Annotated[
    int, Field(ge=0, description="Requests held at most while a group is paused.")
]
HoldDeadline = Annotated[float, Field(ge=0, description="Seconds a held request waits.")]
PrefillTimeout = Annotated[float, Field(gt=0, description="Seconds for the prefill leg.")]
DecodeTimeout = Annotated[
    float, Field(gt=0, description="Longest silence (s) between two decode chunks.")
]
# A leg (prefill or decode) waiting this long for its first byte (a decode in write mode:
# counted from the prefill's answer), while its instance answered and streamed nothing on any
# request either, is hung: with a spare, the request is tried elsewhere and the instance
# ejected. A busy engine streams or answers its other requests meanwhile, so it cannot fire
# there; an idle-but-for-this-leg one waits this long. Apart from the leg timeouts: a slow
# TTFT is not a hang. 0: no such deadline.
FirstByteTimeout = Annotated[
    float,
    Field(
        ge=0,
        le=3600,
        description="Seconds a prefill or decode leg may wait for its first byte while its "
        "instance answers and streams nothing else, before it counts as hung (retried "
        "elsewhere, the instance ejected, with a spare), plus its prompt's and, not streamed, "
        "its answer's time at floor speeds; a read-mode decode leg past it whose prefill has "
        "since refused a connection lost its KV (retried on another prefill). 0: only the leg "
        "timeouts apply.",
    ),
]
# On by default (issue 39): long enough for a KV pull and a step on a lone request, short
# enough that a retry on the spare still fits the retry deadline and a 30 s client.
FIRST_BYTE_TIMEOUT_S = 10.0
RetryAttempts = Annotated[
    int,
    Field(ge=1, le=10, description="Attempts per request, the first included (1: no retries)."),
]
RetryDeadline = Annotated[
    float,
    Field(gt=0, le=3600, description="Seconds after a request arrived that no new attempt starts."),
]
RetryBudgetRatio = Annotated[
    float,
    Field(ge=0, le=1, description="Retries at most this share of requests (plus the floor)."),
]
# With a spare, a refused connection, garbage or a hang ejects at once; at most this share of
# a role's instances in a group is ejected at a time.
EjectMaxShare = Annotated[
    float,
    Field(
        gt=0,
        le=1,
        description="Largest share of a role's instances in a group ejected at once.",
    ),
]
SloMs = Annotated[float | None, Field(gt=0, allow_inf_nan=False)]
