"""The control service's one door to starting: a stored revision that today's engine
allowlists refuse never runs, whenever it was saved (a spec stored before a rule existed)."""

import asyncio

import pytest

from controller.launch.ports import allocate
from controller.service import ControlService
from domain.errors import ConfigError
from tests.controller.factories import tiny_pair
from tests.controller.supervise.test_supervisor import Harness


def test_a_stored_spec_the_allowlists_refuse_is_not_started(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        events = []
        service = ControlService(h.sup, lambda *e: events.append(e))
        # as if stored before the env allowlist existed: model_validate does not judge env
        spec = tiny_pair(env={"BROWSER": "/tmp/x.sh", "PYTHONWARNINGS": "ignore"})
        with pytest.raises(ConfigError) as err:
            await service.start("tiny-pd", spec, allocate(spec), "alice", None, 3)
        assert ("env", "BROWSER") in [p.loc for p in err.value.problems]
        assert not h.backend.spawned  # nothing ran
        (refused,) = [e for e in events if e[1] == "deployment.refused"]
        assert "revision 3 was not started" in refused[2]

        ok = tiny_pair(env={"VLLM_LOGGING_LEVEL": "INFO"})
        await service.start("tiny-pd", ok, allocate(ok), "alice", None, 4)
        assert [s[0] for s in h.backend.spawned] == ["proxy"]

    asyncio.run(scenario())
