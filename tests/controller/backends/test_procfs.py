"""Reading /proc: who a pid is (start time, command line) and who listens on a port."""

import os
import socket
import subprocess
import sys
import time

from controller.backends import procfs


def test_a_script_launched_by_name_matches_the_command_line_the_kernel_shows():
    argv = ["vllm", "serve", "m", "--port", "8000"]
    assert procfs.launched_as(["/venv/bin/python", "/venv/bin/vllm", *argv[1:]], argv)
    assert procfs.launched_as(argv, argv)
    assert not procfs.launched_as(["/venv/bin/python", "/venv/bin/vllm", "serve", "m"], argv)
    assert not procfs.launched_as(["/bin/nc", "serve", "m", "--port", "8000"], argv)
    assert not procfs.launched_as(["python", "-c", "pass", *argv], ["other", *argv[1:]])
    assert not procfs.launched_as(None, argv) and not procfs.launched_as(argv, [])


def test_a_launcher_through_an_exec_wrapper_matches_the_command_it_ran():
    """`nice -n 10 python -m vllm...` runs as `python -m vllm...` (nice execs it): a launch so
    wrapped is still recognised, or it is never signalled (a stop then leaves it running)."""
    engine = ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000"]
    for wrapper in (["nice", "-n", "10"], ["/usr/bin/taskset", "-c", "0"], ["env", "A=1"]):
        assert procfs.launched_as(engine, [*wrapper, *engine]), wrapper
        assert procfs.launched_as(["python3", *engine[1:]], [*wrapper, *engine])
        other = [*engine[:-1], "8001"]
        assert not procfs.launched_as(other, [*wrapper, *engine]), wrapper
    script = ["nice", "-n", "5", "vllm", "serve", "m"]
    assert procfs.launched_as(["/venv/bin/python", "/venv/bin/vllm", "serve", "m"], script)
    # only a known wrapper: another program's arguments are not skipped
    assert not procfs.launched_as(engine, ["/bin/sh", "-c", *engine])
    assert not procfs.launched_as(["nice"], ["nice", "-n", "10"])


def test_a_real_niced_process_is_recognised_by_its_command_line():
    argv = [sys.executable, "-c", "import time; time.sleep(30)"]
    child = subprocess.Popen(["nice", "-n", "5", *argv])
    try:
        for _ in range(100):  # until nice has exec'd python
            seen = procfs.command_line(child.pid)
            if seen and seen[0] != "nice":
                break
            time.sleep(0.02)
        assert procfs.launched_as(procfs.command_line(child.pid), ["nice", "-n", "5", *argv])
    finally:
        child.kill()
        child.wait()


def test_a_command_line_is_read_back_as_it_was_run():
    argv = [sys.executable, "-c", "import time; time.sleep(30)", "a b", ""]
    child = subprocess.Popen(argv)
    try:
        # The kernel sets the new argv up a moment after Popen returns (exec closes the
        # close-on-exec pipe Popen waits on before it copies the arguments).
        deadline = time.monotonic() + 5
        while procfs.command_line(child.pid) != argv and time.monotonic() < deadline:
            time.sleep(0.01)
        assert procfs.command_line(child.pid) == argv
    finally:
        child.kill()
        child.wait()
    assert procfs.command_line(child.pid) is None


def test_the_listener_of_a_port_is_found_by_its_socket():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        assert procfs.listening_pids(port) == set()  # bound, not listening
        server.listen()
        assert procfs.listening_pids(port) == {os.getpid()}
    assert procfs.listening_pids(port) == set()
