"""What an operator may ask of a dashboard bench run, checked (each limit names its field),
and the `pdctl bench` command that runs it. Pure: no I/O here (services/bench_runs/runs.py runs
it)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from state.store import Current

ROOT = Path(__file__).resolve().parents[2]
MAX_RATE = 50.0
MAX_RATES = 12
MAX_PROMPTS = 2000
MAX_REQUESTS = 10_000  # over every rate of a sweep
MAX_ARRIVALS_S = 900.0  # the arrivals of every rate, back to back
REQUEST_TIMEOUT_S = 60.0
GRACE_S = 30.0  # per rate: past its last arrival, for requests in flight to finish


class BenchRequest(BaseModel):
    """What an operator asks of a run; SLOs left out are the deployment's own."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    rates: list[Annotated[float, Field(gt=0, le=MAX_RATE)]] = Field(
        min_length=1,
        max_length=MAX_RATES,
        description=f"Offered request rates (req/s, each in (0, {MAX_RATE:g}]), run in order; "
        "one number is a single run, several a sweep.",
    )
    num_prompts: int = Field(20, ge=1, le=MAX_PROMPTS, description="Requests per rate.")
    input_len: int = Field(128, ge=1, le=16384, description="Prompt tokens.")
    output_len: int = Field(32, ge=1, le=4096, description="Output tokens (ignore_eos).")
    slo_ttft_ms: float | None = Field(None, gt=0, le=600_000)
    slo_itl_ms: float | None = Field(None, gt=0, le=60_000)
    burstiness: float = Field(
        1.0, gt=0, le=100, description="Gamma shape of arrival gaps; 1 is Poisson."
    )
    seed: int = Field(0, ge=0, le=2**31 - 1)

    @field_validator("rates", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        """One number, a list, or the form's text "1,2,4,8"."""
        if isinstance(value, str):
            return [piece.strip() for piece in value.split(",")]
        return [value] if isinstance(value, int | float) else value

    @field_validator("num_prompts")
    @classmethod
    def _bounded(cls, value: int, info: ValidationInfo) -> int:
        rates = info.data.get("rates")
        if not rates:
            return value
        if value * len(rates) > MAX_REQUESTS:
            raise ValueError(
                f"{value} requests at each of {len(rates)} rates is over the "
                f"{MAX_REQUESTS} a run may send"
            )
        seconds = sum(value / rate for rate in rates)
        if seconds > MAX_ARRIVALS_S:
            raise ValueError(
                f"at these rates the arrivals alone take {seconds:.0f} s, over "
                f"the {MAX_ARRIVALS_S:.0f} s a run may take: fewer prompts or "
                "higher rates"
            )
        return value

    @property
    def total(self) -> int:
        return self.num_prompts * len(self.rates)

    def deadline_s(self) -> float:
        """When the run is killed: its arrivals, a grace per rate, and a start-up allowance."""
        return sum(self.num_prompts / r for r in self.rates) + GRACE_S * len(self.rates) + 10

    def settings(self, current: Current) -> dict[str, Any]:
        """Everything the run used, the deployment's SLOs filled in: stored with the run."""
        slo = current.spec.slo
        return {
            **self.model_dump(),
            "slo_ttft_ms": self.slo_ttft_ms or slo.ttft_ms,
            "slo_itl_ms": self.slo_itl_ms or slo.itl_ms,
            "itl_slo_stat": slo.itl_stat,
        }


def bench_argv(settings: dict[str, Any], base_url: str, folder: Path) -> list[str]:
    """The `pdctl bench` command: a list, never a shell line; `--flag=value` so no value can
    pass for a flag. No `--model`: the bench asks the proxy's /v1/models first, so a proxy
    that does not answer fails the run at once, saying so."""
    argv = [
        sys.executable,
        str(ROOT / "pdctl.py"),
        "bench",
        f"--base-url={base_url}",
        "--request-rate=" + ",".join(repr(float(r)) for r in settings["rates"]),
        f"--num-prompts={int(settings['num_prompts'])}",
        f"--input-len={int(settings['input_len'])}",
        f"--output-len={int(settings['output_len'])}",
        f"--burstiness={float(settings['burstiness'])!r}",
        f"--seed={int(settings['seed'])}",
        f"--itl-slo-stat={settings['itl_slo_stat']}",
        f"--result-json={folder / 'result.json'}",
        f"--progress-file={folder / 'progress.json'}",
        f"--timeout={REQUEST_TIMEOUT_S:g}",
        "--quiet",
    ]
    for key in ("slo_ttft_ms", "slo_itl_ms"):
        if settings.get(key):
            argv.append(f"--{key.replace('_', '-')}={float(settings[key])!r}")
    return argv
