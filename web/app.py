"""The control plane's app factory: `create_app(settings)`; everything stateful is built in the
lifespan and kept on `app.state` (engine, hub, store, tokens, metrics registry, controller,
observer, load and bench runs, placements); routes reach them through web/deps.py, none builds
one."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from controller import (
    ControlService,
    EngineReach,
    LaunchSettings,
    PlacementLog,
    ProcessBackend,
    Supervisor,
    SupervisorSettings,
    Timeouts,
    host_port_busy,
    reach_for,
)
from observe.scrape.observer import start_observer
from services.admission import Admission
from services.autopilot_loop import AutopilotLoop
from services.bench_runs.runs import BenchRuns
from services.demo import deployments as demo
from services.load import LoadRuns
from services.rollouts import target as rollout_target
from state import db, migrate
from state.bench_store import BenchStore
from state.calibration_store import CalibrationStore
from state.db import create_engine
from state.event_backlog import EventBacklog
from state.hub import Hub
from state.placement_store import PlacementStore
from state.store import Store
from web import api_docs, errors
from web.deps import current_actor, json_body
from web.event_relay import event_publisher
from web.metrics import LiveCollector, build_registry
from web.pages import actions as page_actions
from web.pages import bench as bench_pages
from web.pages import deployment_forms, login, ttft
from web.pages import main as pages
from web.pages import rollout as rollout_pages
from web.process import left_running, stall_dump
from web.proxy_url import proxy_url
from web.routes import ops
from web.routes.advise import advice, autopilot, bench, calibration, plan, proposals
from web.routes.deployment import lifecycle, proxy_steer, revisions, role_moves, rollouts
from web.routes.deployment import records as deployments
from web.routes.watch import cluster, events, kv, live
from web.security.auth import TokenBook
from web.security.csrf import CrossOriginProtection
from web.security.hosts import HostAllowlist, allowed_names
from web.security.limits import BodyLimit
from web.settings import Settings, get_settings

TEMPLATES = Path(__file__).parent / "templates"
ROOT = Path(__file__).resolve().parent.parent
# Each module's `router` goes under /api, behind a token when tokens are set. A new resource
# (the lifecycle endpoints) is one more module here.
API_ROUTES = (
    deployments,
    revisions,
    events,
    lifecycle,
    role_moves,
    proxy_steer,
    rollouts,
    autopilot,
    live,
    bench,
    plan,
    calibration,
    kv,
    advice,
    proposals,
    cluster,
)


def create_app(settings: Settings | None = None, backend: ProcessBackend | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(
        title="pdctl",
        summary="Control plane for PD-disaggregated vLLM serving",
        lifespan=_lifespan,
        # Served by web/api_docs.py, behind the API's token.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.backend = backend  # None: local processes
    app.state.tokens = TokenBook(settings)
    app.state.templates = Jinja2Templates(directory=TEMPLATES)
    app.state.controller = None  # set by the controller when it runs in this process
    errors.install(app)
    api = APIRouter(
        prefix="/api",
        dependencies=[Depends(current_actor), Depends(json_body)],
        responses=errors.API_RESPONSES,
    )
    for module in API_ROUTES:
        api.include_router(module.router)
    app.include_router(api)
    app.include_router(ops.router)
    app.include_router(api_docs.router)
    app.include_router(live.ws_router)  # websockets authenticate themselves
    app.include_router(login.router)
    # The HTML pages and their fragments; the form's /deployments/new before pages'
    # /deployments/{name}, which would otherwise take "new" for a name.
    for module in (deployment_forms, pages, page_actions, rollout_pages):
        app.include_router(module.router)
    app.include_router(bench_pages.router)
    for module in (plan, kv, advice, proposals, cluster, ttft, autopilot):  # pages, fragments
        app.include_router(module.page_router)
    app.mount("/static", StaticFiles(directory=ROOT / "static"), name="static")
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(CrossOriginProtection, trusted_origins=settings.trusted_origins)
    if not settings.auth_enabled:  # outermost: a rebinding page's request goes no further
        app.add_middleware(
            HostAllowlist, allowed=allowed_names(settings.host, settings.allowed_hosts)
        )
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    db.make_private(settings.db)  # before migrating creates it with the umask's mode
    if settings.migrate_on_start:
        migrate.upgrade(settings.db)
    engine = create_engine(settings.db)
    app.state.hub = hub = Hub(settings.live_queue_size)
    hub.bind(asyncio.get_running_loop())
    hosts = ("127.0.0.1", settings.host)
    admission = Admission(
        settings.port_range,
        settings.allow_code_env,
        partial(host_port_busy, hosts=hosts),
        reserved=frozenset({settings.port}),
        reach=engine_reach(settings),
        attach_hosts=tuple(settings.attach_hosts),
    )
    app.state.store = store = Store(engine, admission, publish=event_publisher(hub))
    app.state.registry = build_registry(store)
    app.state.placements = placements = PlacementStore(engine)
    app.state.calibrations = CalibrationStore(engine)
    created = settings.demo and demo.ensure_demo(store, trade=settings.demo_trade)
    app.state.load_runs = LoadRuns()
    app.state.bench_runs = BenchRuns(
        BenchStore(engine),
        store.record,
        lambda name: store.get(name).revision,
        partial(proxy_url, app.state),
    )
    app.state.autopilot = None  # the P:D ratio autopilot (services/autopilot_loop.py)
    app.state.observer = None  # observe/ scrapes what the controller runs, so only with it
    app.state.demo_load = None
    app.state.left_running = ""  # what the CLI prints once the serve stopped
    if settings.controller:
        app.state.controller = build_controller(settings, store, placements, app.state.backend)
        await app.state.controller.supervisor.open()
        # Rollouts a stopped control plane left running: taken over, on toward their revision.
        app.state.controller.recover(store)
        app.state.observer = await start_observer(settings, app.state.controller, store, hub)
        # Its aggregates and the controller's state on the app's /metrics.
        app.state.registry.register(LiveCollector(app.state.controller, app.state.observer))
        app.state.autopilot = AutopilotLoop(
            app.state.controller,
            app.state.observer,
            store,
            calibrations=app.state.calibrations,
        )
        app.state.autopilot.start()
        if settings.demo and settings.demo_trade:
            app.state.demo_load = await demo.run_trade(
                store, app.state.controller, created, partial(proxy_url, app.state)
            )
    try:
        async with stall_dump.watching():
            yield
    finally:
        if app.state.demo_load is not None:
            await app.state.demo_load.close()
        await app.state.load_runs.close()
        await app.state.bench_runs.close()
        if app.state.autopilot is not None:
            await app.state.autopilot.close()
        if app.state.observer is not None:
            await app.state.observer.close()
        if app.state.controller is not None:
            await app.state.controller.close()
            app.state.left_running = _left_running(settings, app.state.controller)
        engine.dispose()


def _left_running(settings: Settings, controller: ControlService) -> str:
    statuses = controller.statuses()
    server = f"http://{settings.host}:{settings.port}"
    return left_running.note(statuses, str(settings.db), server, settings.auth_enabled)


def build_controller(
    settings: Settings,
    store: Store,
    placements: PlacementStore,
    backend: ProcessBackend | None = None,
) -> ControlService:
    """The supervisor over `runtime_dir` (adopting what still runs there), its events in the
    store, and where it places each process in `placements`; its processes local unless
    `backend` (a joined Ray cluster) says otherwise."""
    launch = LaunchSettings(
        vllm_command=tuple(shlex.split(settings.vllm_launcher)),
        pdctl_command=(sys.executable, str(ROOT / "pdctl.py")),
        sim_registration_interval=settings.sim_registration_interval,
        registry_allow=("any",) if backend is not None and backend.clustered else (),
    )
    # Events a full disk refuses wait in memory (and the log) until a write works again.
    record = EventBacklog(store.record)
    placement_log = PlacementLog(record, placements)  # also records every event
    supervisor = Supervisor(
        SupervisorSettings(run_dir=settings.runtime_dir, launch=launch),
        backend=backend,
        on_event=placement_log,
    )
    placement_log.watch(supervisor)
    return ControlService(
        supervisor,
        record,
        allow_code_env=settings.allow_code_env,
        placements=placement_log,
        rollout_log=store,
        load=partial(rollout_target, store),
        timeouts=Timeouts(ready_s=settings.rollout_ready_s) if settings.rollout_ready_s else None,
        reach=engine_reach(settings),
    )


def engine_reach(settings: Settings) -> EngineReach:
    """Where this host's engines may point paths (the operator's roots) and listen (where
    they bind: loopback, unless placed on a cluster node, where pdctl sets their address)."""
    return reach_for(settings.engine_path_roots, os.environ, settings.runtime_dir)
