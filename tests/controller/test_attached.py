"""controller/attached.py: what an attached deployment's refusals tell the operator to run."""

from __future__ import annotations

from controller.attached import attach_refusal, changed_flags
from controller.spec.deployment import DeploymentSpec


def spec(**decode) -> DeploymentSpec:
    return DeploymentSpec.model_validate(
        {
            "name": "ext",
            "engine": "external",
            "model": "m",
            "topology": "disaggregated",
            "connector": "NixlConnector",
            "groups": [
                {"name": "prefill", "role": "prefill", "urls": ["http://127.0.0.1:8100"]},
                {"name": "decode", "role": "decode", "urls": ["http://127.0.0.1:8200"], **decode},
            ],
        }
    )


def test_changed_flags_name_new_values_and_dropped_flags():
    old = ["--port", "1", "--max-num-seqs", "8", "--no-enable-prefix-caching"]
    new = ["--port", "1", "--max-num-seqs", "16", "--max-model-len=4096"]
    assert changed_flags(old, new) == [
        "--max-num-seqs 16",
        "--max-model-len 4096",
        "(drop --no-enable-prefix-caching)",
    ]


def test_start_names_each_instances_command_at_its_address():
    refused = attach_refusal("ext", "start", spec())
    assert refused.status == 409
    assert "'ext' is attached" in refused.message and "does not start it" in refused.message
    assert refused.commands["decode-0"][:6] == ["vllm", "serve", "m", "--port", "8200", "--host"]


def test_an_apply_names_only_the_flags_that_change_where():
    refused = attach_refusal("ext", "apply", spec(), spec(max_num_seqs=32))
    assert refused.commands == {"decode-0": ["--max-num-seqs 32"]}
    assert "decode-0: --max-num-seqs 32" in refused.message


def test_a_change_that_renders_no_flags_says_to_store_it():
    refused = attach_refusal("ext", "switch", spec(), spec())
    assert refused.commands == {} and "rollout=false" in refused.message
