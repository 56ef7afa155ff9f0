"""docker compose renders, checked by the Compose JSON schema (vendored from compose-spec) and,
when installed, by docker-compose's own `config`; the repo's files are the blog render."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from controller.launch.ports import allocate
from controller.manifests.compose import (
    compose_yaml,
    prometheus_yaml,
    render_compose,
    render_prometheus,
)
from controller.spec.deployment import DeploymentSpec
from harness.processes import ROOT
from tests.controller.factories import mori_blog, nixl_1p1d, tiny_pair

SCHEMA = json.loads((Path(__file__).parent / "schema" / "compose-spec.json").read_text())
BLOG_SPEC = ROOT / "deploy" / "mori-blog.json"


def rendered(spec):
    return render_compose(spec, allocate(spec))


def validate(document):
    jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft7Validator)


@pytest.mark.parametrize(
    "spec",
    [mori_blog(), mori_blog("read"), nixl_1p1d(), tiny_pair()],
    ids=["moriio-write", "moriio-read", "nixl", "stand-in"],
)
def test_renders_are_valid_compose(spec):
    validate(rendered(spec))


def test_blog_render_runs_vllm_rocm_with_the_rendered_commands():
    services = rendered(mori_blog())["services"]
    assert list(services) == ["pdctl", "proxy", "prefill-0", "decode-0", "prometheus", "grafana"]
    prefill = services["prefill-0"]
    assert prefill["image"] == "vllm/vllm-openai-rocm:latest"
    assert prefill["entrypoint"] + prefill["command"][:3] == [
        "vllm",
        "serve",
        "Qwen/Qwen3-235B-A22B-FP8",
        "--port",
        "20005",
    ]
    assert {"/dev/kfd", "/dev/dri"} <= set(prefill["devices"])
    assert prefill["ipc"] == "host" and prefill["network_mode"] == "host"
    assert prefill["environment"]["HIP_VISIBLE_DEVICES"] == "0,1,2,3"
    assert services["decode-0"]["environment"]["HIP_VISIBLE_DEVICES"] == "4,5,6,7"
    assert services["decode-0"]["depends_on"] == ["proxy"]  # MoRIIO: the proxy first
    assert services["proxy"]["command"][:3] == ["proxy", "--port", "10001"]
    assert services["pdctl"]["command"][0] == "serve"


def test_nvidia_render_reserves_gpus_and_keeps_cuda_ids():
    decode = rendered(nixl_1p1d())["services"]["decode-0"]
    assert decode["image"] == "vllm/vllm-openai:latest" and "devices" not in decode
    assert decode["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
    assert decode["environment"]["CUDA_VISIBLE_DEVICES"] == "1"


def test_operator_text_is_not_interpolated_by_compose():
    spec = nixl_1p1d(env={"GREETING": "cost $5"}, extra_args=["--chat-template", "${HOME}"])
    decode = rendered(spec)["services"]["decode-0"]
    assert decode["environment"]["GREETING"] == "cost $$5"
    assert decode["command"][-1] == "$${HOME}"


def test_prometheus_scrapes_the_proxy_every_instance_and_the_control_plane():
    spec = mori_blog()
    config = render_prometheus(spec, allocate(spec))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["pdctl-proxy"]["static_configs"][0]["targets"] == ["127.0.0.1:10001"]
    targets = [(c["targets"], c["labels"]["role"]) for c in jobs["vllm"]["static_configs"]]
    assert targets == [(["127.0.0.1:20005"], "prefill"), (["127.0.0.1:40005"], "decode")]
    assert jobs["pdctl"]["static_configs"][0]["targets"] == ["127.0.0.1:8000"]


def test_the_repo_files_are_the_blog_render():
    spec = DeploymentSpec.model_validate_json(BLOG_SPEC.read_text())
    assert spec == mori_blog()
    ports = allocate(spec)
    validate(render_compose(spec, ports))
    assert (ROOT / "docker-compose.yml").read_text() == compose_yaml(render_compose(spec, ports))
    assert (ROOT / "deploy" / "prometheus.yml").read_text() == prometheus_yaml(spec, ports)


def test_the_cli_renders_a_spec_file(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "pdctl.py"),
            "deploy",
            "compose",
            "--spec",
            str(BLOG_SPEC),
            "--output-dir",
            str(tmp_path),
        ],
        capture_output=True,
        timeout=30,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert (tmp_path / "docker-compose.yml").read_text() == (
        ROOT / "docker-compose.yml"
    ).read_text()
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x"}')
    done = subprocess.run(
        [sys.executable, str(ROOT / "pdctl.py"), "deploy", "compose", "--spec", str(bad)],
        capture_output=True,
        timeout=30,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 2 and b"error" in done.stderr


def _compose_cli():
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if (
        shutil.which("docker")
        and subprocess.run(
            ["docker", "compose", "version"], capture_output=True, check=False
        ).returncode
        == 0
    ):
        return ["docker", "compose"]
    return None


@pytest.mark.skipif(_compose_cli() is None, reason="no docker-compose / docker compose here")
@pytest.mark.parametrize(
    "spec", [mori_blog(), nixl_1p1d(), tiny_pair()], ids=["moriio", "nixl", "stand-in"]
)
def test_docker_compose_parses_the_yaml(tmp_path, spec):
    (tmp_path / "docker-compose.yml").write_text(compose_yaml(rendered(spec)))
    done = subprocess.run(
        [*_compose_cli(), "-f", str(tmp_path / "docker-compose.yml"), "config"],
        capture_output=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin:/usr/local/bin"},
    )
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode()
    assert "prefill-0:" in out and "decode-0:" in out
    assert re.search(r"HIP_VISIBLE_DEVICES|CUDA_VISIBLE_DEVICES|pdctl", out)


def test_grafana_dashboard_is_provisioned_from_the_repo():
    dashboard = json.loads((ROOT / "deploy/grafana/dashboards/pdctl.json").read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) >= 8
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
    datasource = (ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text()
    assert uids == {"pdctl-prometheus"} and "uid: pdctl-prometheus" in datasource
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    for metric in (
        "pdctl_proxy_ttft_seconds_bucket",
        "pdctl_proxy_itl_seconds_bucket",
        "pdctl_proxy_slo_met_total",
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_running",
        "vllm:generation_tokens_total",
    ):
        assert metric in exprs
    provider = (ROOT / "deploy/grafana/provisioning/dashboards/pdctl.yml").read_text()
    assert "/var/lib/grafana/dashboards" in provider
    grafana = rendered(mori_blog())["services"]["grafana"]
    assert "./deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro" in grafana["volumes"]


def test_the_cli_renders_a_stored_deployment(tmp_path):
    from services.admission import Admission
    from state import migrate
    from state.db import create_engine
    from state.store import Store

    db = tmp_path / "pdctl.db"
    migrate.upgrade(db)
    engine = create_engine(db)
    store = Store(engine, Admission((20000, 29999), False, lambda port: False))
    store.create(DeploymentSpec.model_validate_json(BLOG_SPEC.read_text()), "test")
    engine.dispose()
    run = [sys.executable, str(ROOT / "pdctl.py"), "deploy", "compose"]
    done = subprocess.run(
        [*run, "mori-blog", "--db", str(db)], capture_output=True, timeout=30, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"vllm serve" in done.stdout or b"vllm" in done.stdout
    for args, needle in (
        (["nope", "--db", str(db)], b"nope"),
        (["x", "--db", str(tmp_path / "none.db")], b"no such file"),
        ([], b"NAME or --spec"),
    ):
        done = subprocess.run([*run, *args], capture_output=True, timeout=30, check=False, cwd=ROOT)
        assert done.returncode == 2 and needle in done.stderr, done.stderr
