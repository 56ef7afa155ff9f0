"""How a supervisor runs: its run dir, what it renders launches with, the machines' policy and
how often it looks (controller/supervise/supervisor.py and its passes, watcher.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from controller.launch.render import LaunchSettings
from controller.supervise import machine as m


@dataclass(frozen=True, slots=True)
class SupervisorSettings:
    run_dir: Path
    launch: LaunchSettings = field(default_factory=LaunchSettings)
    policy: m.Policy = field(default_factory=m.Policy)
    poll_interval: float = 0.2  # exits, deadlines, drains
    health_interval: float = 1.0  # /health probes per process
    health_failures: int = 3  # failed probes in a row before a RUNNING process is replaced

    def __post_init__(self) -> None:
        # Once, at start: relative to the directory `pdctl serve` was started from.
        object.__setattr__(self, "run_dir", Path(self.run_dir).expanduser().absolute())
