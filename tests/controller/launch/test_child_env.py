"""What a supervised process inherits of the control plane's environment: the short list only."""

from controller.launch.child_env import PASSTHROUGH, child_environment


def test_the_control_planes_tokens_and_other_variables_stay_behind():
    parent = {
        "PATH": "/usr/bin",
        "HOME": "/home/op",
        "LC_ALL": "C.UTF-8",
        "PDCTL_OPERATOR_TOKENS": "alice:s3cret",
        "PDCTL_VIEWER_TOKENS": "bob:v13w",
        "AWS_SECRET_ACCESS_KEY": "aws",
        "PYTHONWARNINGS": "ignore::antigravity.X",
        "BROWSER": "/tmp/evil.sh",
    }
    env = child_environment(parent, {"VLLM_ROCM_USE_AITER": "1"})
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/home/op",
        "LC_ALL": "C.UTF-8",
        "VLLM_ROCM_USE_AITER": "1",
    }


def test_the_launchs_own_entries_win_over_what_is_passed_through():
    env = child_environment({"PATH": "/usr/bin", "TMPDIR": "/tmp"}, {"TMPDIR": "/scratch"})
    assert env == {"PATH": "/usr/bin", "TMPDIR": "/scratch"}


def test_no_pdctl_setting_of_the_control_plane_is_passed_through():
    assert not [name for name in PASSTHROUGH if name.startswith("PDCTL_") and "SIM" not in name]
