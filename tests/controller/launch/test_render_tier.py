"""What runs for a render group (controller/launch/render_tier.py): `vllm launch render` shown,
the stand-in `pdctl sim --render` run, HTTP port only, no GPU or KV config; the proxy is told
of it with --render, MoRIIO deployments included."""

from __future__ import annotations

from controller.launch.ports import allocate
from controller.launch.process import LaunchSettings
from controller.launch.render import render
from controller.launch.render_tier import vllm_render_argv
from controller.spec.rules import check
from tests.specs import moriio_1p1d, nixl_1p1d, spec


def with_render(body: dict, **over: object) -> dict:
    return {**body, "groups": [*body["groups"], {"name": "render", "role": "render"}], **over}


def launches(body: dict, settings: LaunchSettings | None = None) -> dict:
    s = spec(body)
    check(s)
    return {launch.name: launch for launch in render(s, allocate(s), settings)}


def test_the_stand_in_runs_pdctl_sim_render_and_shows_vllm_launch_render() -> None:
    out = launches(with_render(nixl_1p1d(max_model_len=2048)))
    r = out["render-0"]
    port = str(r.http_port)
    assert r.argv[:3] == ["pdctl", "sim", "tiny"] and r.argv[-1] == "--render"
    head = ["--port", port, "--host", "127.0.0.1", "--served-model-name", "tiny"]
    assert r.argv[3:11] == [*head, "--max-model-len", "2048"]
    assert "--kv-transfer-config" not in r.argv and "-tp" not in r.argv
    assert r.command.startswith("vllm launch render tiny --port " + port)
    assert r.role == "render" and r.gpus == [] and r.ports.side_channel is None
    assert r.url == f"http://127.0.0.1:{port}"
    proxy = out["proxy"].argv
    assert proxy[proxy.index("--render") + 1] == r.url


def test_vllm_runs_vllm_launch_render() -> None:
    out = launches(with_render(nixl_1p1d(engine="vllm", model="Qwen/Qwen3-0.6B")))
    assert out["render-0"].argv[:4] == ["vllm", "launch", "render", "Qwen/Qwen3-0.6B"]
    assert "--enable-scale-out" not in out["render-0"].argv


def test_the_launch_follows_the_operators_vllm() -> None:
    flags = ["--port", "1"]
    assert vllm_render_argv(("/venv/bin/vllm", "serve"), "m", flags) == [
        "/venv/bin/vllm",
        "launch",
        "render",
        "m",
        "--port",
        "1",
    ]
    python = ("/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server")
    argv = vllm_render_argv(python, "m", flags)
    assert argv[:2] == ["/venv/bin/python", "-c"] and "vllm.entrypoints.cli.main" in argv[2]
    assert argv[3:] == ["launch", "render", "m", "--port", "1"]


def test_moriio_engines_register_but_the_render_tier_is_given_by_flag() -> None:
    out = launches(with_render(moriio_1p1d()))
    proxy = out["proxy"].argv
    assert "--prefill" not in proxy and "--decode" not in proxy
    assert proxy[proxy.index("--render") + 1] == out["render-0"].url
    assert out["render-0"].ports.handshake is None and out["render-0"].registers is False


def test_docker_compose_and_kubernetes_both_run_it() -> None:
    """tests/controller/manifests/test_k8s_render_tier.py checks the Kubernetes objects in full."""
    from controller.manifests.compose import render_compose
    from controller.manifests.k8s import render_k8s

    s = spec(with_render(nixl_1p1d()))
    services = render_compose(s, allocate(s))["services"]
    assert services["render-0"]["command"][-1] == "--render"
    assert "--render" in services["proxy"]["command"]
    docs = render_k8s(s, allocate(s))
    assert "pd-render" in [d["metadata"]["name"] for d in docs if d["kind"] == "StatefulSet"]
