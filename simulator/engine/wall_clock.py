"""Run the scheduler on the wall clock: one step at a time, sleeping for its modelled duration.

Model time is wall time since start divided by the time scale, so `--time-scale 10` plays
a step of 30 ms in 300 ms and reports 30 ms. Tokens reach the request's queue when the step
that produced them ends. The lag between a step's planned end and when the event loop got
round to it is kept, so figures bent by an overloaded machine can be told apart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from simulator.engine.request import EngineRequest
from simulator.engine.scheduler import Scheduler, StepOutput

FINISHED = -1  # queue item: the request finished (its finish_reason says how)
IDLE_TICK_S = 0.5  # wall seconds between held-KV expiry checks when idle


class EngineLoop:
    def __init__(
        self,
        scheduler: Scheduler,
        time_scale: float = 1.0,
        on_step: Callable[[StepOutput], None] | None = None,
        on_awaiting_kv: Callable[[EngineRequest], None] | None = None,
        on_kv_expired: Callable[[EngineRequest], None] | None = None,
    ) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        self.scheduler = scheduler
        self.time_scale = time_scale
        self._on_step = on_step
        self._on_awaiting_kv = on_awaiting_kv
        self._on_kv_expired = on_kv_expired
        self._queues: dict[str, asyncio.Queue[int]] = {}
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._t0 = self._loop.time()
        self.last_lag_s = 0.0
        self.max_lag_s = 0.0
        self._task: asyncio.Task | None = None

    # ---- the clock ------------------------------------------------------------------

    def now(self) -> float:
        """Model seconds since the engine started."""
        return (self._loop.time() - self._t0) / self.time_scale

    def wall_delay(self, model_time: float) -> float:
        """Wall seconds from now until model time `model_time` (negative if past)."""
        return self._t0 + model_time * self.time_scale - self._loop.time()

    async def sleep_until(self, model_time: float) -> None:
        delay = self.wall_delay(model_time)
        if delay > 0:
            await asyncio.sleep(delay)

    # ---- requests ---------------------------------------------------------------------

    def submit(self, request: EngineRequest) -> asyncio.Queue[int]:
        """Queue a request; its queue receives output-token counts, then FINISHED."""
        self.scheduler.add_request(request)
        queue: asyncio.Queue[int] = asyncio.Queue()
        self._queues[request.request_id] = queue
        self._wake.set()
        return queue

    def abort(self, request_id: str) -> None:
        self.scheduler.abort(request_id, self.now())
        self._queues.pop(request_id, None)
        self._wake.set()

    def done(self, request_id: str) -> None:
        """The server has answered: forget the request (prefill legs stay until taken)."""
        self._queues.pop(request_id, None)
        self.scheduler.forget(request_id)

    def kv_arrived(self, request_id: str, ok: bool, recompute_on_failure: bool) -> None:
        self.scheduler.kv_arrived(request_id, ok, recompute_on_failure)
        req = self.scheduler.requests.get(request_id)
        if req is not None and req.is_finished:  # failed with policy "fail"
            queue = self._queues.get(request_id)
            if queue is not None:
                queue.put_nowait(FINISHED)
        self._wake.set()

    # ---- the loop ----------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="engine-loop")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        scheduler = self.scheduler
        while True:
            now = self.now()
            for req in scheduler.expire_held(now):
                if self._on_kv_expired is not None:
                    self._on_kv_expired(req)
            out = scheduler.step(now)
            for req in out.awaiting_kv:
                if self._on_awaiting_kv is not None:
                    self._on_awaiting_kv(req)
            if out.steps == 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), IDLE_TICK_S)
                continue
            produced = [(req, req.num_output_tokens) for req in out.tokens]
            delay = self.wall_delay(out.end)
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # let the server write what the last step made
            lag = max(0.0, -self.wall_delay(out.end))
            self.last_lag_s = lag
            self.max_lag_s = max(self.max_lag_s, lag)
            queues = self._queues
            for req, count in produced:
                queue = queues.get(req.request_id)
                if queue is not None:
                    queue.put_nowait(count)
            for req in out.finished:
                queue = queues.get(req.request_id)
                if queue is not None:
                    queue.put_nowait(FINISHED)
            if self._on_step is not None:
                self._on_step(out)
