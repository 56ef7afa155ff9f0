"""The servers and the two clients of `make bench-measure` (benchmarks/measure/run.py):
a colocated stand-in and a NIXL pair behind `pdctl proxy` on the server core, and each
client's run on the load core, returning its result file with per-request details."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from benchmarks.measure.vllm_client import VllmBenchServe
from benchmarks.proxy.bench import LOAD_CORE, PROXY_CORE, Server, free_port, pdctl, pinned

ROOT = Path(__file__).resolve().parents[2]
INPUT_LEN, OUTPUT_LEN, SEED, MODEL = 256, 64, 0, "tiny"
# The runs of a round send the same seeded prompts: with prefix caching on, a run would
# prefill less for what the runs before it left in the cache, and the later client would win.
FRESH = ("--no-enable-prefix-caching",)


class Clients:
    """The two clients, each run as its own process pinned to the load core."""

    def __init__(self, vllm: VllmBenchServe, tokenizer: Path, logs: Path) -> None:
        self.vllm, self.tokenizer, self.logs = vllm, tokenizer, logs

    def vllm_run(
        self,
        url: str,
        rate: float,
        prompts: int,
        tag: str,
        tokenizer: Path | None = None,
        trust_env: bool = True,
        seed: int = SEED,
        uvloop: bool = False,
    ) -> dict:
        self.vllm.run(
            [
                *self._vllm_args(url, rate, prompts, tokenizer, seed),
                *("--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99"),
                *("--save-result", "--save-detailed", "--result-dir", str(self.logs)),
                *("--result-filename", f"{tag}.json", "--num-warmups", "0", "--disable-tqdm"),
            ],
            trust_env,
            uvloop,
        )
        return json.loads((self.logs / f"{tag}.json").read_text())

    def vllm_prompt_lens(
        self, url: str, rate: float, prompts: int, tokenizer: Path | None, seed: int = SEED
    ) -> tuple[list[int], list[int]]:
        """What vllm_run with these arguments sends: each prompt as vLLM's client counts it,
        and as vLLM's server would."""
        return self.vllm.prompt_lens(self._vllm_args(url, rate, prompts, tokenizer, seed))

    def _vllm_args(
        self, url: str, rate: float, prompts: int, tokenizer: Path | None, seed: int
    ) -> list[str]:
        return [
            *("--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions"),
            *("--model", MODEL, "--tokenizer", str(tokenizer or self.tokenizer)),
            *("--dataset-name", "random", "--random-input-len", str(INPUT_LEN)),
            *("--random-output-len", str(OUTPUT_LEN), "--num-prompts", str(prompts)),
            *("--request-rate", f"{rate:g}", "--seed", str(seed), "--ignore-eos"),
        ]

    def pdctl_run(
        self,
        url: str,
        rate: float,
        prompts: int,
        tag: str,
        seed: int = SEED,
        tokenizer: Path | None = None,
    ) -> dict:
        """`tokenizer`: prompts in that model's tokens, sent as text (`pdctl bench --tokenizer`)."""
        out = self.logs / f"{tag}.json"
        argv = pdctl(
            *("bench", "--base-url", url, "--model", MODEL, "--request-rate", f"{rate:g}"),
            *("--num-prompts", str(prompts), "--input-len", str(INPUT_LEN)),
            *("--output-len", str(OUTPUT_LEN), "--seed", str(seed), "--arrivals", "vllm"),
            *("--save-requests", "--result-json", str(out), "--quiet", "--timeout", "60"),
            *(("--tokenizer", str(tokenizer)) if tokenizer else ()),
        )
        with open(self.logs / f"{tag}.log", "wb") as log:
            subprocess.run(
                [*pinned(LOAD_CORE), *argv], cwd=ROOT, check=True, timeout=600, stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        return json.loads(out.read_text())


def start_servers(logs: Path) -> tuple[list[Server], dict[str, str]]:
    """A colocated stand-in, a NIXL pair and `pdctl proxy` over it, all on the server core."""
    nixl = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
    servers: list[Server] = []

    def start(name: str, argv: list[str], port: int, env: dict | None = None) -> Server:
        servers.append(Server(name, argv, port, PROXY_CORE, logs, env))
        return servers[-1]

    try:
        ports = [free_port() for _ in range(4)]
        colocated = start("colocated", pdctl("sim", "--port", str(ports[0]), *FRESH), ports[0])
        pair = [
            start(
                role,
                pdctl("sim", "--port", str(port), "--kv-transfer-config", nixl, *FRESH),
                port,
                {"VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())},
            )
            for role, port in (("prefill", ports[1]), ("decode", ports[2]))
        ]
        for server in servers:
            server.wait_healthy(120)
        proxy = start(
            "proxy",
            pdctl(
                *("proxy", "--port", str(ports[3]), "--registry-port", "-1"),
                *("--prefill", pair[0].url, "--decode", pair[1].url),
            ),
            ports[3],
        )
        proxy.wait_healthy(120)
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers, {"direct": colocated.url, "proxied": proxy.url}
