"""Issue 10.1: who may use the user's models, decided from the listener, the peer and proxyauth."""

from __future__ import annotations

import asyncio

import pytest
from mitmproxy import hooks
from mitmproxy.addons.proxyauth import ProxyAuth, mkauth
from mitmproxy.proxy import mode_specs
from mitmproxy.test import taddons, tflow

from byok import access, models as m
from byok.access import ClientAccess, describe_exposure, is_loopback, may_use_user_models
from byok.agent.runtime import Route, Runtime
from byok.cli.client import user_turn_request
from byok.proto import agent_pb2 as apb
from tests.unit.test_models import routes  # noqa: F401 (fixture)


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.9.8.7", True), ("::1", True), ("::ffff:127.0.0.1", True), ("[::1]", True),
    ("localhost", True), ("LOCALHOST.", True),
    ("", False), ("0.0.0.0", False), ("::", False), ("10.0.0.1", False), ("192.168.1.20", False),
    ("fe80::1%eth0", False), ("::ffff:10.0.0.1", False), ("example.lan", False), (None, False),
])
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("bind, peer, user, local_addr, allowed", [
    # a loopback listener: only this machine can connect
    ("127.0.0.1", "127.0.0.1", None, None, True),
    ("::1", "::1", None, None, True),
    ("localhost", "127.0.0.1", None, None, True),
    ("127.0.0.1", "10.1.2.3", None, None, False),  # DNAT onto loopback (route_localnet): still another machine
    # every interface, or another address: proxyauth only, whoever the peer claims to be
    ("", "127.0.0.1", None, None, False),
    ("0.0.0.0", "192.168.1.20", None, None, False),
    ("::", "::ffff:127.0.0.1", None, None, False),
    ("198.18.0.1", "198.18.0.2", None, None, False),
    ("0.0.0.0", "192.168.1.20", "alice", None, True),
    ("198.18.0.1", "198.18.0.2", "bob", None, True),
    # a host name binds what it resolves to: the connection's local address tells
    ("myhost", "127.0.0.1", None, "127.0.1.1", True),
    ("myhost", "192.168.1.20", None, "192.168.1.5", False),
    # local redirect mode: no listener, this machine's own processes
    (None, "192.168.1.5", None, None, True),
])
def test_the_decision_with_fake_peers(bind, peer, user, local_addr, allowed):
    assert may_use_user_models(bind, peer, user, local_addr=local_addr) is allowed


def test_exposure_is_described_once_per_listener_set():
    exposed, line = describe_exposure([("127.0.0.1", 8080)], None)
    assert not exposed and "127.0.0.1:8080" in line and "only this machine" in line
    exposed, line = describe_exposure([("0.0.0.0", 8080, 0, 0), ("::", 8080, 0, 0)], None)
    assert exposed and "OTHER MACHINES" in line and "[::]:8080" in line and "proxyauth is not set" in line
    exposed, line = describe_exposure([("", 8080)], "@/etc/htpasswd")
    assert exposed and "*:8080" in line and "clients that pass proxyauth" in line


def flow_from(peer: str, mode: str = "regular", sockname: str = "127.0.0.1", headers: dict | None = None):
    f = tflow.tflow()
    f.client_conn.peername = (peer, 50000)
    f.client_conn.sockname = (sockname, 8080)
    f.client_conn.proxy_mode = mode_specs.ProxyMode.parse(mode)
    for k, v in (headers or {}).items():
        f.request.headers[k] = v
    return f


def signed_in(auth: ProxyAuth, peer: str, user: str, password: str):
    """A flow from `peer` that sent these credentials, after mitmproxy's ProxyAuth saw it."""
    flow = flow_from(peer, headers={"Proxy-Authorization": mkauth(user, password)})
    auth.requestheaders(flow)
    return flow


def test_the_proxyauth_identity_is_read_from_mitmproxys_own_addon():
    auth = ProxyAuth()
    with taddons.context(auth, ClientAccess()) as tctx:
        tctx.configure(auth, proxyauth="alice:s3cret", listen_host="0.0.0.0")
        good = signed_in(auth, "192.168.1.20", "alice", "s3cret")
        bad = signed_in(auth, "192.168.1.20", "alice", "guess")
        assert access.authenticated_user(good) == "alice" and access.flow_may_use_user_models(good)
        assert access.authenticated_user(bad) is None and not access.flow_may_use_user_models(bad)
        assert bad.response.status_code == 407  # mitmproxy itself refuses the wrong password
        # the per-mode listen host wins over the global option
        assert access.flow_may_use_user_models(flow_from("127.0.0.1", "regular@127.0.0.1:8081"))
        assert not access.flow_may_use_user_models(flow_from("127.0.0.1"))
        assert access.flow_may_use_user_models(flow_from("192.168.1.5", "local"))


def load_like_a_script(tctx, addon) -> None:
    """What mitmproxy's script loader does: register, then configure with every option."""
    tctx.master.addons.register(addon)
    tctx.master.addons.invoke_addon_sync(addon, hooks.ConfigureHook(set(tctx.options.keys())))


def test_listen_host_defaults_to_loopback_but_the_users_choice_stands():
    with taddons.context() as tctx:
        addon = ClientAccess()
        load_like_a_script(tctx, addon)
        assert tctx.options.listen_host == "127.0.0.1" and addon.defaulted
    with taddons.context() as tctx:
        tctx.options.update(listen_host="")  # explicit: every interface, as `--listen-host ''` says
        addon = ClientAccess()
        load_like_a_script(tctx, addon)
        assert tctx.options.listen_host == "" and not addon.defaulted


def test_model_lists_are_left_alone_for_a_client_that_may_not_see_user_models(routes):
    from byok.proto import aiserver_pb2 as spb
    from tests.unit.test_models import StubProbe, make_flow

    upstream = spb.AvailableModelsResponse(model_names=["cursor-a"]).SerializeToString()

    async def go(allowed: bool):
        addon = m.ModelListInjector(lambda: routes, probe=StubProbe(False),
                                    may_see_user_models=lambda flow: allowed)
        with taddons.context(addon):
            path = "/aiserver.v1.AiService/AvailableModels"
            unreachable = make_flow(path)
            await addon.request(unreachable)  # upstream down: answered locally only for allowed clients
            answered = make_flow(path, body=upstream)
            addon.response(answered)
            names = spb.AvailableModelsResponse.FromString(answered.response.content).model_names
            return unreachable.response is not None, list(names)

    async def both():
        return await go(False), await go(True)

    refused, (local, names) = asyncio.run(both())
    assert refused == (False, ["cursor-a"])
    assert local and names[0] == "cursor-a" and len(names) == 1 + len(routes)


def test_runtime_refuses_runs_on_user_models_for_clients_that_may_not_use_them():
    def run_request(model):
        return apb.AgentClientMessage(run_request=user_turn_request("q", model_id=model))

    heartbeat = apb.AgentClientMessage(client_heartbeat=apb.ClientHeartbeat())

    async def scenario():
        rt = Runtime(is_user_model=lambda model_id: model_id == "mine", make_turn=lambda request: None)
        waiting = asyncio.ensure_future(rt.wait_route("r", 5))
        await asyncio.sleep(0)
        assert rt.on_append("r", 0, run_request("mine"), b"", local_allowed=False) is Route.REFUSED
        assert await waiting is Route.REFUSED and rt.run("r") is None  # no run, nothing for a provider
        assert rt.on_append("r", 1, heartbeat, b"") is Route.REFUSED  # whoever sends more
        assert await rt.wait_route("r", 1) is Route.REFUSED
        # Cursor's own models pass upstream for anyone
        assert rt.on_append("u", 0, run_request("cursor-model"), b"", local_allowed=False) is Route.UPSTREAM
        # a run started by an allowed client takes nothing from another one
        assert rt.on_append("l", 0, run_request("mine"), b"") is Route.LOCAL
        assert rt.on_append("l", 1, heartbeat, b"", local_allowed=False) is Route.REFUSED
        held = rt.channels["l"].inbox.next_seqno
        await rt.shutdown(timeout=1)
        return held

    assert asyncio.run(scenario()) == 1  # seqno 1 was not taken


PROC_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0
   2: 0112C6C6:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1 0 100 0 0 10 0
   3: 0100007F:1F90 0100007F:8AB1 01 00000000:00000000 03:00000506 00000000     0        0 0 3 0
   4: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1 0 100 0 0 10 0
"""
PROC_TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue
   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000
   1: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000
"""


def test_listening_addresses_are_read_from_proc_and_lsof():
    from byok.cli.listeners import parse_lsof, parse_proc_net_tcp

    # listeners only (an established connection on the port is not one), the port's only
    assert parse_proc_net_tcp(PROC_TCP, 8080) == ["127.0.0.1", "0.0.0.0", "198.198.18.1"]
    assert parse_proc_net_tcp(PROC_TCP6, 8080) == ["::1", "::"]
    lsof = ("COMMAND PID USER FD TYPE DEVICE SIZE/OFF NODE NAME\n"
            "mitmdump 7 me 6u IPv4 0x1 0t0 TCP 127.0.0.1:8080 (LISTEN)\n"
            "mitmdump 7 me 7u IPv6 0x2 0t0 TCP [::1]:8080 (LISTEN)\n"
            "mitmdump 7 me 8u IPv4 0x3 0t0 TCP *:8080 (LISTEN)\n")
    assert parse_lsof(lsof) == ["127.0.0.1", "::1", "0.0.0.0"]


# ---- proxyauth=any never identifies a user (issue 24.1) --------------------------------------------


def test_proxyauth_any_names_nobody_and_opens_nothing_to_other_machines():
    auth = ProxyAuth()
    with taddons.context(auth, ClientAccess()) as tctx:
        tctx.configure(auth, proxyauth="any", listen_host="127.0.0.1")
        remote = signed_in(auth, "192.168.1.20", "alice", "anything")
        local = signed_in(auth, "127.0.0.1", "bob", "x")
        assert remote.response is None and remote.metadata["proxyauth"] == ("alice", "anything")  # mitmproxy took it
        assert access.authenticated_user(remote) is None and access.authenticated_user(local) is None
        assert not access.flow_may_use_user_models(remote)  # as if no proxyauth was set
        assert access.flow_may_use_user_models(local)
        tctx.configure(auth, proxyauth="alice:s3cret")
        assert access.authenticated_user(signed_in(auth, "192.168.1.20", "alice", "s3cret")) == "alice"


@pytest.mark.parametrize("proxyauth, exposed_at, team, fatal, words", [
    ("any", "0.0.0.0:8080", False, True, ("OTHER MACHINES", "0.0.0.0:8080", "--proxyauth user:", "127.0.0.1")),
    ("any", None, True, True, ("team file", "byok_team", "htpasswd")),
    ("any", None, False, False, ("no authentication",)),
])
def test_proxyauth_any_is_refused_or_warned_about(proxyauth, exposed_at, team, fatal, words):
    got_fatal, message = access.any_credentials_problem(proxyauth, exposed_at, team)
    assert got_fatal is fatal and "proxyauth=any" in message and all(w in message for w in words)
    assert access.any_credentials_problem("alice:pw", "0.0.0.0:8080", True) is None
    assert access.any_credentials_problem(None, "0.0.0.0:8080", True) is None


def test_the_exposure_line_never_says_any_limits_access():
    exposed, line = describe_exposure([("0.0.0.0", 8080)], "any")
    assert exposed and "pass proxyauth" not in line and "proxyauth=any checks nothing" in line
    _, line = describe_exposure([("127.0.0.1", 8443), ("127.0.0.1", 8443), ("127.0.0.1", 8080)], None)
    assert line.count("127.0.0.1:8443") == 1  # a reverse listener on the same address: shown once


def test_proxyauth_any_at_start_is_an_error_on_an_exposed_listener_or_with_a_team(caplog):
    from byok.options import Options

    async def start_with(options):  # taddons logs through the running loop
        with taddons.context(ProxyAuth(), Options(), ClientAccess()) as tctx:  # before the servers bind
            tctx.options.update(proxyauth="any", **options)

    cases = [({"listen_host": "0.0.0.0"}, "ERROR", "OTHER MACHINES"),
             ({"listen_host": "127.0.0.1", "mode": ["regular@0.0.0.0:8081"]}, "ERROR", "0.0.0.0:8081"),
             ({"listen_host": "127.0.0.1", "byok_team": "/etc/byok/team.toml"}, "ERROR", "team file"),
             ({"listen_host": "127.0.0.1"}, "WARNING", "no authentication")]

    async def all_cases():  # one loop: mitmproxy's log handler stays bound to the loop it started on
        for options, level, words in cases:
            caplog.clear()
            await start_with(options)
            mine = [r for r in caplog.records if "proxyauth=any" in r.getMessage()]
            assert len(mine) == 1 and mine[0].levelname == level and words in mine[0].getMessage(), options

    asyncio.run(all_cases())


def test_proxyauth_any_set_at_run_time_is_refused_where_it_would_identify_users():
    from mitmproxy import exceptions

    from byok.options import Options

    async def scenario():
        addon = ClientAccess()
        with taddons.context(ProxyAuth(), Options(), addon) as tctx:
            tctx.options.update(listen_host="127.0.0.1", byok_team="/etc/byok/team.toml", proxyauth="alice:s3cret")
            addon.started = True  # as after `running`
            with pytest.raises(exceptions.OptionsError, match="team file"):
                tctx.options.update(proxyauth="any")
            assert tctx.options.proxyauth == "alice:s3cret"
            tctx.options.update(byok_team="")
            tctx.options.update(proxyauth="any")  # loopback, no team: allowed (no authentication)
            assert tctx.options.proxyauth == "any"

    asyncio.run(scenario())
