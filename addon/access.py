"""Who may use the user's models: closed to the network unless the user opens it.

- mitmproxy listens on loopback unless the user chose `listen_host` (mitmproxy's own default is every
  interface). The default is set while the script loads, which mitmproxy 11 does before it binds its
  servers; `running` checks the bound addresses anyway and rebinds if that ever changes.
- A client may start local runs and sees the user's models when it passed mitmproxy's `proxyauth`, or
  when it reached a loopback-bound listener from a loopback address (it is on this machine). Anyone
  else (a listener on another address, no proxyauth) gets Cursor's own service only: runs on the
  user's models are refused with a Connect error, model lists are left as Cursor's backend sent them.
- `authenticated_user(flow)` is the one place that reads the proxyauth identity of a flow.
- `proxyauth=any` never identifies a user (a fixed contract): mitmproxy's `any` accepts every name and
  password, so its user name says nothing. On a listener other machines can reach, or with a team
  file, the proxy refuses to start with it; otherwise it is no authentication at all (a warning says
  so): clients on this machine get the user's models under no user name, nobody else gets them.

The decision is pure (`may_use_user_models`) so it can be tested with any addresses.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable

from mitmproxy import ctx, exceptions, http, optmanager
from mitmproxy.proxy import mode_specs

log = logging.getLogger("byok.access")

LOOPBACK_DEFAULT = "127.0.0.1"
ANY_CREDENTIALS = "any"
"""mitmproxy's proxyauth value that accepts every user name and password (it checks nothing)."""
ALL_INTERFACES = ("", "0.0.0.0", "::")
NO_LISTENER_MODES = (mode_specs.LocalMode, mode_specs.OsProxyMode)
"""Modes that capture this machine's own processes instead of accepting connections."""


# ---- the decision (pure) -------------------------------------------------------------------------


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # ::ffff:127.0.0.1 on a dual-stack socket
    return ip


def is_loopback(host: str | None) -> bool:
    """127.0.0.0/8, ::1 (also IPv4-mapped) or the name `localhost`; '' (every interface) is not."""
    if not host:
        return False
    if host.lower().rstrip(".") == "localhost":
        return True
    ip = _ip(host)
    return ip is not None and ip.is_loopback


def listener_is_loopback(bind_host: str, local_addr: str | None = None) -> bool:
    """Whether a listener bound to `bind_host` accepts connections only from this machine.

    A host name binds the addresses it resolves to, so the connection's own local address tells."""
    if bind_host in ALL_INTERFACES:
        return False
    if _ip(bind_host) is not None or bind_host.lower().rstrip(".") == "localhost":
        return is_loopback(bind_host)
    return is_loopback(local_addr)


def may_use_user_models(bind_host: str | None, peer: str | None, user: str | None, *,
                        local_addr: str | None = None) -> bool:
    """May this client start local runs and see the user's models?

    bind_host: the address its listener is bound to ('' = every interface), None when the mode has no
    listener (local redirect: this machine's own processes). peer: the client's address. user: the
    name it passed proxyauth with, None if it did not."""
    if user is not None:
        return True
    if bind_host is None:
        return True
    return listener_is_loopback(bind_host, local_addr) and is_loopback(peer)


def identifies_users(proxyauth: str | None) -> bool:
    """Whether this proxyauth setting checks credentials, so that its user name is an identity."""
    return bool(proxyauth) and proxyauth != ANY_CREDENTIALS


def _shown_addrs(addrs: list[tuple[str, int]]) -> str:
    # a listener bound twice to one address (two modes) is shown once
    shown = dict.fromkeys(f"[{h}]:{p}" if ":" in h else f"{h or '*'}:{p}" for h, p in addrs)
    return ", ".join(shown) or "no address"


def any_credentials_problem(proxyauth: str | None, exposed_at: str | None, team: bool) -> tuple[bool, str] | None:
    """(fatal, message) when proxyauth is `any`, else None. Fatal on an exposed listener (`exposed_at`
    names its addresses) or with a team file: anyone could use the user's keys, or be any user."""
    if proxyauth != ANY_CREDENTIALS:
        return None
    checks_nothing = "proxyauth=any accepts every user name and password, so it identifies nobody"
    if exposed_at:
        return True, (f"{checks_nothing}, and the proxy listens on {exposed_at}, which OTHER MACHINES CAN REACH: "
                      "anyone there could run turns on your models and API keys. cursor-byok does not start like "
                      "this. Fix: real credentials (--proxyauth user:long-random-password, or "
                      "--proxyauth @/path/to/.htpasswd; docs/cursor-setup.md), or listen on 127.0.0.1 only")
    if team:
        return True, (f"{checks_nothing}, and a team file is set (byok_team): anyone could claim to be any user "
                      "and take their models, keys, budget and conversations. cursor-byok does not start like "
                      "this. Fix: --set proxyauth=@/etc/byok/htpasswd (or ldap:...; docs/team.md)")
    return False, (f"{checks_nothing}: cursor-byok treats it as no authentication (clients on this machine get "
                   "your models under no user name, no other machine gets them). Set real credentials "
                   "(user:password, @htpasswd) to name users")


def describe_exposure(listen_addrs: Iterable[tuple[str, int]], proxyauth: str | None) -> tuple[bool, str]:
    """(exposed, one log line) for the addresses the proxy is bound to."""
    addrs = [(host, port) for host, port, *_ in listen_addrs]
    shown = _shown_addrs(addrs)
    exposed = [a for a in addrs if not is_loopback(a[0])]
    if not exposed:
        return False, (f"the proxy listens on {shown}: only this machine can reach it; "
                       "your models and local runs serve local clients")
    who = ("clients that pass proxyauth" if identifies_users(proxyauth)
           else "clients on this machine (proxyauth is not set, so no other machine)" if not proxyauth
           else "clients on this machine (proxyauth=any checks nothing, so no other machine)")
    return True, (f"the proxy listens on {shown}: OTHER MACHINES CAN REACH IT. Your models and local runs "
                  f"(your API keys) are served only to {who}; everything else passes to Cursor as usual. "
                  f"Listen on {LOOPBACK_DEFAULT} unless you mean to share it (docs/cursor-setup.md)")


# ---- flows ---------------------------------------------------------------------------------------


def authenticated_user(flow: http.HTTPFlow) -> str | None:
    """The user name this flow's client passed mitmproxy's proxyauth with, or None.

    mitmproxy's ProxyAuth addon stores (user, password) in `flow.metadata["proxyauth"]`, for the
    CONNECT and for every request inside that tunnel (it runs before script addons). With
    `proxyauth=any` it stores whatever the client sent: that is nobody's identity."""
    if _proxyauth() == ANY_CREDENTIALS:
        return None
    creds = flow.metadata.get("proxyauth")
    if isinstance(creds, (tuple, list)) and creds and isinstance(creds[0], str):
        return creds[0]
    return None


def flow_bind_host(flow: http.HTTPFlow) -> str | None:
    mode = flow.client_conn.proxy_mode
    if isinstance(mode, NO_LISTENER_MODES):
        return None
    return mode.listen_host(ctx.options.listen_host)


def flow_may_use_user_models(flow: http.HTTPFlow) -> bool:
    conn = flow.client_conn
    return may_use_user_models(
        flow_bind_host(flow), _host(conn.peername), authenticated_user(flow), local_addr=_host(conn.sockname))


def refusal_message(flow: http.HTTPFlow) -> str:
    peer = _host(flow.client_conn.peername) or "this client"
    return (f"cursor-byok serves your own models only to clients on this machine or clients that passed the "
            f"proxy's authentication (proxyauth); {peer} connected from elsewhere without it. Set proxyauth "
            f"and the credentials in Cursor's http.proxy, or use the proxy from this machine")


def _host(address) -> str | None:
    return address[0] if address else None


async def _until_free(ports: set[int], timeout: float = 5.0) -> None:
    """Wait until every port can be bound again, TCP and UDP (or the deadline passed)."""
    import asyncio
    import socket

    def free(port: int) -> bool:
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
            with socket.socket(socket.AF_INET, kind) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(("", port))
                except OSError:
                    return False
        return True

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not all(free(port) for port in ports) and loop.time() < deadline:
        await asyncio.sleep(0.01)


def peer_is_loopback(address) -> bool:
    """Whether a connection's peer (host, port) is on this machine."""
    return is_loopback(_host(address))


def _proxyauth() -> str | None:
    return getattr(ctx.options, "proxyauth", None)  # declared by mitmproxy's ProxyAuth addon


def _team_set() -> bool:
    return bool(getattr(ctx.options, "byok_team", ""))


# ---- the addon -----------------------------------------------------------------------------------


class ClientAccess:
    """Loopback by default, a start-up line saying who can reach the proxy, and the per-flow gate."""

    CHECKED = frozenset({"proxyauth", "byok_team", "listen_host", "mode"})
    """Options that decide whether proxyauth=any is refused."""

    def __init__(self) -> None:
        self.defaulted = False
        """True when this addon chose listen_host (the user did not)."""
        self.started = False
        self._reported: tuple[bool, str] | None = None

    def configure(self, updated: set[str]) -> None:
        if "listen_host" in updated and not self.defaulted \
                and ctx.options._options["listen_host"].value is optmanager.unset:  # not set by flag, --set or config
            self.defaulted = True
            ctx.options.update(listen_host=LOOPBACK_DEFAULT)  # configures again, checks included
            return
        if updated & self.CHECKED:
            self._check_any_credentials()

    async def running(self) -> None:
        self.started = True
        proxyserver = ctx.master.addons.get("proxyserver")
        if proxyserver is None:
            return
        if self.defaulted and ctx.options.listen_host == LOOPBACK_DEFAULT:
            await self._rebind_if_exposed(proxyserver)
        self._check_any_credentials()  # now with the addresses really bound
        if self._reported is not None and self._reported[0]:
            return
        exposed, line = describe_exposure(proxyserver.listen_addrs(), _proxyauth())
        log.log(logging.WARNING if exposed else logging.INFO, "cursor-byok: %s", line)

    def _check_any_credentials(self) -> None:
        """proxyauth=any: refused on an exposed listener or with a team file, a warning otherwise.
        At start-up the refusal is an error log line, which makes mitmproxy exit before it serves
        anything (its errorcheck addon); at run time (mitmweb's options editor) the change is refused."""
        problem = any_credentials_problem(_proxyauth(), self._exposed_at(), _team_set())
        if problem is None or problem == self._reported:
            self._reported = problem
            return
        fatal, message = problem
        if fatal and self.started:
            raise exceptions.OptionsError(message)
        self._reported = problem
        log.log(logging.ERROR if fatal else logging.WARNING, "cursor-byok: %s", message)

    @staticmethod
    def _exposed_at() -> str | None:
        """The addresses other machines can reach the proxy on (None: loopback only): the bound ones
        once the servers run, before that the ones the options ask for (a host name counts as exposed)."""
        proxyserver = ctx.master.addons.get("proxyserver")
        addrs = [(h, p) for h, p, *_ in proxyserver.listen_addrs()] if proxyserver is not None else []
        if not addrs:
            for spec in ctx.options.mode:
                try:
                    mode = mode_specs.ProxyMode.parse(spec)
                except ValueError:
                    continue  # mitmproxy reports a bad mode itself
                if not isinstance(mode, NO_LISTENER_MODES):
                    addrs.append((mode.listen_host(ctx.options.listen_host), mode.listen_port(ctx.options.listen_port)))
        exposed = [a for a in addrs if not is_loopback(a[0])]
        return _shown_addrs(exposed) if exposed else None

    @staticmethod
    async def _rebind_if_exposed(proxyserver) -> None:
        """Servers bound before the default applied (a load order mitmproxy does not promise) rebind."""
        stale = [s for s in proxyserver.servers
                 if s.mode.custom_listen_host is None and any(not is_loopback(a[0]) for a in s.listen_addrs)]
        if not stale:
            return
        log.warning("cursor-byok: the proxy bound every interface before the loopback default applied; rebinding")
        modes = [s.mode for s in proxyserver.servers]
        ports = {a[1] for s in stale for a in s.listen_addrs}
        await proxyserver.servers.update([m for m in modes if all(m is not s.mode for s in stale)])
        # a stopped UDP listener (reverse mode listens on TCP and UDP) frees its port a moment later
        await _until_free(ports)
        await proxyserver.servers.update(modes)

    allows = staticmethod(flow_may_use_user_models)
    refusal = staticmethod(refusal_message)
