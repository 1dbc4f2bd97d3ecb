"""The addon list, one small class per concern (the entry script only calls `make_addons`)."""

from __future__ import annotations

from .access import ClientAccess
from .providers.config import ProvidersFile
from .backend import Backend
from .contentview import ContentViewRegistrar
from .dashboard_endpoint import DashboardEndpoint
from .duplex import VersionGate
from .connectivity import ConnectivityAnswer
from .models import ModelListInjector, UpstreamProbe
from .options import Options
from .providers_file import ProvidersFileAddon
from .recorder import Recorder
from .server_config import ServerConfigRewriter
from .status import StatusEndpoint
from .tab_config import TabConfig
from .tab_observe import TabObserver
from .transports.loopback import FlowStreaming
from .transports.one_shot import OneShotCalls
from .transports.run_h2 import RunH2Headers
from .transports.runsse import RunSseTransport


class StoreWiring:
    """Hands the backend's store to the recorder once both are running."""

    def __init__(self, backend: Backend, recorder: Recorder) -> None:
        self.backend = backend
        self.recorder = recorder

    async def running(self) -> None:
        if self.backend.store is not None:
            self.recorder.attach(self.backend.store)


def make_addons() -> list:
    providers = ProvidersFile()
    recorder = Recorder()
    access = ClientAccess()
    backend = Backend(providers, recorder, access)
    probe = UpstreamProbe()
    # one memory of whether Cursor is reachable, for the model lists and IsConnected
    return [
        VersionGate(),
        Options(),
        access,
        ContentViewRegistrar(),
        ProvidersFileAddon(providers),
        recorder,
        ModelListInjector(providers, probe, may_see_user_models=access.allows, routes_for=backend.routes_for_flow),
        ConnectivityAnswer(providers, probe),
        StatusEndpoint(providers, routes_for=backend.routes_for_flow, team=lambda: backend.team),
        ServerConfigRewriter(),
        backend,
        FlowStreaming(backend, recorder),
        TabConfig(providers, probe),
        RunH2Headers(backend, recorder),
        RunSseTransport(backend),
        OneShotCalls(backend),
        TabObserver(backend),
        DashboardEndpoint(backend),  # after the transports: reads the backend's runtime and stream server
        StoreWiring(backend, recorder),
    ]
