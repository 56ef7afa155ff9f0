"""Secret files are never written through a symlink another local user planted: not the
file itself, not its temporary copy, not a log beside it (issue 39, weak 6)."""

import errno
import os

import pytest

from connector.api.admin_token import write_generated_token
from controller.backends import private_files, shim
from controller.supervise import run_state
from domain import secret_files


def plant(link, target):
    target.write_text("")
    link.symlink_to(target)
    return target


def test_a_standalone_proxy_s_token_is_not_written_through_a_planted_temporary_link(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    path = shared / "proxy-7.admin-token"
    # Every name the writer could have picked for its copy, as an attacker would guess it.
    bait = tmp_path / "attacker-reads-this"
    bait.write_text("")
    for name in (f".{path.name}.{os.getpid()}", f".{path.name}.{os.getpid()}.tmp"):
        (shared / name).symlink_to(bait)
    token = write_generated_token(path)
    assert bait.read_text() == "" and path.read_text().strip() == token
    assert not path.is_symlink() and (path.stat().st_mode & 0o777) == 0o600


@pytest.mark.parametrize(
    "write",
    [
        lambda path: write_generated_token(path),
        lambda path: private_files.replace_text(path, "secret"),
        lambda path: secret_files.replace(path, b"secret"),
    ],
    ids=["proxy token", "run dir file", "any secret"],
)
def test_a_secret_file_that_is_a_symlink_is_refused(tmp_path, write):
    path = tmp_path / "token"
    bait = plant(path, tmp_path / "elsewhere")
    with pytest.raises(OSError) as err:
        write(path)
    assert err.value.errno == errno.ELOOP and str(path) in str(err.value)
    assert bait.read_text() == "" and path.is_symlink()


def test_run_dir_records_and_logs_refuse_planted_links(tmp_path):
    folder = private_files.private_dir(tmp_path / "dep")
    bait = plant(folder / run_state.ADMIN_TOKEN_FILE, tmp_path / "bait-token")
    with pytest.raises(OSError):
        run_state.write_admin_token(folder, "s3cret")
    assert bait.read_text() == ""
    # An instance's log (it may quote the spec's secrets) is never appended through a link.
    (folder / "decode-0").mkdir()
    log_bait = plant(folder / "decode-0" / shim.LOG_FILE, tmp_path / "bait-log")
    log = shim.RotatingLog(folder / "decode-0" / shim.LOG_FILE, 1 << 20, 2)
    log.write(b"HF_TOKEN=hf_abc\n")
    log.close()
    assert log_bait.read_text() == "" and log.error and "logs stopped" in log.error


def test_the_proxy_cli_names_its_flag_when_the_token_file_is_a_link(tmp_path, monkeypatch):
    import connector.server
    from tests.connector.test_cli import invoke

    monkeypatch.setattr(connector.server, "serve", lambda settings: None)
    monkeypatch.delenv("PDCTL_ADMIN_TOKEN", raising=False)
    path = tmp_path / "token"
    plant(path, tmp_path / "bait")
    result = invoke("--port", "7", "--admin-token-file", str(path))
    assert result.exit_code == 2 and "--admin-token-file" in result.output
    assert "symlink" in result.output
