"""The dashboard's pages: (method, path, query, viewer) -> a response, rendered with jinja2.

No mitmproxy here (addon.py is the thin side that calls `Dashboard.handle`). Every page reads the
store through `queries.py`, the same functions `trace`, `usage` and `drift` print, on the dashboard's
own read connection and worker thread: the proxy's event loop never waits on the database, and the
engine's store thread never waits on a page.

Who sees what (`viewer_for`):
- no proxyauth user: the single user, on this machine only (a loopback client); sees everything;
- a proxyauth user: their own conversations, runs and usage; a team file's `admins` see every user's,
  the per-user usage and budgets, and the operator pages (drift, doctor, verify, maintenance);
- with a team file, a client without a user name gets nothing (sign in through proxyauth).
Pages only read. The one action (blob GC) is a POST carrying the session's CSRF token.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import mimetypes
import secrets
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote

import jinja2
from markupsafe import Markup, escape

from . import charts, queries
from .queries import ALL

log = logging.getLogger("byok.dashboard")

HOST = "cursor-byok.invalid"
ORIGIN = f"http://{HOST}"
SESSION_COOKIE = "byok_session"
HERE = Path(__file__).parent
STATIC = HERE / "static"
CONVERSATIONS_PER_PAGE = 50
RUNS_PER_PAGE = 20
FRAMES_PER_PAGE = 200
USAGE_DAYS = 30
MAX_BODY = 16 * 1024
RECENT_RUNS = 10
"""Finished runs the live panel keeps showing under the running ones."""


# ---- who is looking ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Viewer:
    user: str | None
    """The proxyauth user name; None: the single user of a proxy without proxyauth."""
    admin: bool
    """Sees every user's rows and the operator pages."""

    @property
    def scope(self):
        return ALL if self.admin else self.user

    @property
    def sees_users(self) -> bool:
        """Shows whose each row is: a team admin (the single user's rows have no user)."""
        return self.admin and self.user is not None

    @property
    def label(self) -> str:
        if self.user is None:
            return "this machine"
        return f"{self.user} (admin)" if self.admin else self.user


def viewer_for(*, user: str | None, loopback_client: bool, team_enabled: bool,
               admins: frozenset[str] = frozenset()) -> Viewer | str:
    """The viewer, or why this client gets nothing."""
    if user is not None:
        return Viewer(user, admin=user in admins)
    if team_enabled:
        return ("this cursor-byok serves a team: sign in through the proxy's authentication (proxyauth) "
                "to see your dashboard")
    if not loopback_client:
        return ("the cursor-byok dashboard is shown only to this machine, or to users who passed the proxy's "
                "authentication (proxyauth)")
    return Viewer(None, admin=True)


# ---- requests and responses -------------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    """Without the query."""
    query: dict[str, str] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    """Lower-case names."""
    form: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, method: str, target: str, headers: dict[str, str], body: bytes = b"") -> "Request":
        headers = {k.lower(): v for k, v in headers.items()}
        path, _, qs = target.partition("?")
        cookies = {}
        for part in headers.get("cookie", "").split(";"):
            name, eq, value = part.strip().partition("=")
            if eq:
                cookies[name] = value
        form = {}
        if body and headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        return cls(method.upper(), path or "/", {k: v[0] for k, v in parse_qs(qs).items()}, cookies, headers, form)


@dataclass
class Response:
    status: int
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def html(cls, text: str, status: int = 200) -> "Response":
        return cls(status, text.encode(), [("content-type", "text/html; charset=utf-8")])

    @classmethod
    def text(cls, text: str, status: int) -> "Response":
        return cls(status, (text + "\n").encode(), [("content-type", "text/plain; charset=utf-8")])


SECURITY_HEADERS = [
    ("cache-control", "no-store"),
    ("content-security-policy", "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),  # no-referrer would make the browser send `Origin: null` on our own forms
]


class Forbidden(Exception):
    pass


class NotFound(Exception):
    pass


# ---- rendering helpers (jinja filters) ----------------------------------------------------------------


def iso_utc(ms: int | float | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def local_time(ms: int | float | None) -> Markup:
    """A <time> the page's script shows in the browser's local time zone (UTC until it runs)."""
    if ms is None:
        return Markup("-")
    iso = iso_utc(ms)
    shown = iso.replace("T", " ")[:19] + " UTC"
    return Markup(f'<time datetime="{iso}" data-ms="{int(ms)}">{escape(shown)}</time>')


def copyable(value: str | None, href: str | None = None) -> Markup:
    """An id shown whole (never wrapped mid-id), selected with one click, with a copy button."""
    if not value:
        return Markup("-")
    code = f'<code class="id">{escape(value)}</code>'
    if href:
        code = f'<a href="{escape(href)}">{code}</a>'
    return Markup(f'<span class="copyable">{code}<button type="button" class="copy" data-copy="{escape(value)}"'
                  f' title="copy" aria-label="copy {escape(value)}">copy</button></span>')


def number(value) -> str:
    return "-" if value is None else f"{value:,}"


def millis(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def dollars(value) -> str:
    from byok.providers.pricing import usd

    if value is None:
        return "-"
    return usd(value if isinstance(value, Decimal) else Decimal(str(value)))


def percent(value) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def trace_href(ident: str) -> str:
    return "/trace/" + quote(ident, safe="")


def duration(start_ms, end_ms) -> str:
    if start_ms is None or end_ms is None:
        return "-"
    seconds = (end_ms - start_ms) / 1000
    return f"{seconds:.2f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def make_environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(local_time=local_time, copyable=copyable, number=number, millis=millis, dollars=dollars,
                       percent=percent, duration=duration)
    env.globals.update(trace_href=trace_href, quote=quote)
    return env


# ---- the dashboard ----------------------------------------------------------------------------------


@dataclass
class Sources:
    """What the pages read besides the store: each a callable so the addon can hand in live state."""

    config: Callable[[], Path]
    """The providers file (prices)."""
    team: Callable[[], object] = lambda: None
    """agent.team.Team, or None."""
    live_request_ids: Callable[[], list[str]] = lambda: []
    """Runs of this process: running first, then the most recently finished."""
    doctor: Callable[[], list] | None = None
    """cli.doctor.Check list for this proxy (runs on the dashboard thread)."""
    gc: Callable[[int], Awaitable[object]] | None = None
    """Blob GC with this many days' retention (the store's own gc on its own thread)."""
    mode: Callable[[], str | None] = lambda: None
    clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)


class Dashboard:
    def __init__(self, db_target: Path | str, sources: Sources) -> None:
        self.db_target = db_target
        self.sources = sources
        self.secret = secrets.token_bytes(32)
        """Signs the per-session CSRF tokens; random per process, never shown."""
        self._conn = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="byok-dashboard")
        self.env = make_environment()

    # -- plumbing

    def conn(self):
        """The dashboard's own read connection (opened on its thread; SQLite WAL readers never block
        the proxy's writer)."""
        if self._conn is None:
            from byok.cli.common import open_db

            self._conn = open_db(self.db_target, migrate=False)  # the proxy migrated it at start
        return self._conn

    async def call(self, fn: Callable, *args):
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _drop_conn(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def close(self) -> None:
        self._executor.submit(self._drop_conn).result(timeout=10)
        self._executor.shutdown(wait=True)

    def csrf_token(self, session: str, viewer: Viewer) -> str:
        return hmac.new(self.secret, f"{session}\0{viewer.user or ''}".encode(), hashlib.sha256).hexdigest()

    def session_of(self, request: Request) -> tuple[str, bool]:
        """(session id, whether it is new and needs a Set-Cookie)."""
        session = request.cookies.get(SESSION_COOKIE, "")
        if 16 <= len(session) <= 64 and session.replace("-", "").replace("_", "").isalnum():
            return session, False
        return secrets.token_urlsafe(24), True

    # -- entry

    async def handle(self, request: Request, viewer: Viewer) -> Response:
        session, new_session = self.session_of(request)
        try:
            if request.path.startswith("/static/"):
                response = await self.call(self.static, request.path[len("/static/"):])
            elif request.method == "POST":
                response = await self.post(request, viewer, session)
            elif request.method not in ("GET", "HEAD"):
                response = Response.text("the dashboard only reads (GET); its one action is a POST form", 405)
            else:
                response = await self.call(self.page, request, viewer, session)
        except NotFound as e:
            response = await self.error_page(viewer, session, 404, str(e) or "no such page")
        except Forbidden as e:
            response = await self.error_page(viewer, session, 403, str(e))
        except Exception as e:  # a page that fails says so, with the reason; the proxy goes on
            log.exception("dashboard page %s failed", request.path)
            await self.call(self._drop_conn)  # a broken connection (a restarted server) is opened anew
            response = await self.error_page(viewer, session, 500, f"{type(e).__name__}: {e}")
        response.headers += SECURITY_HEADERS
        if new_session:
            response.headers.append(("set-cookie", f"{SESSION_COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict"))
        if request.method == "HEAD":
            response.body = b""
        return response

    async def error_page(self, viewer: Viewer, session: str, status: int, message: str) -> Response:
        """Rendered on the dashboard's thread, like every page (jinja reads template files)."""
        html = await self.call(lambda: self.render("error.html.j2", viewer, session, status=status, message=message))
        return Response.html(html, status)

    def static(self, name: str) -> Response:
        path = (STATIC / name).resolve()
        if path.parent != STATIC.resolve() or not path.is_file():
            raise NotFound(f"no static file {name}")
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        return Response(200, path.read_bytes(), [("content-type", kind + ("; charset=utf-8" if kind.startswith(
            ("text/", "application/javascript")) else ""))])

    def render(self, template: str, viewer: Viewer, session: str, **context) -> str:
        return self.env.get_template(template).render(viewer=viewer, csrf=self.csrf_token(session, viewer),
                                                      mode=self.sources.mode(), **context)

    # -- pages (on the dashboard thread)

    def page(self, request: Request, viewer: Viewer, session: str) -> Response:
        path = request.path.rstrip("/") or "/"
        conn = self.conn()
        if path == "/":
            return Response.html(self.render("overview.html.j2", viewer, session, **self.overview(conn, viewer)))
        if path == "/live":
            return Response.html(self.live_fragment_sync(viewer))
        if path == "/conversations":
            return Response.html(self.render("conversations.html.j2", viewer, session,
                                             page=self.conversations(conn, viewer, request.query.get("before"))))
        if path == "/trace" and request.query.get("id"):  # the find form without its script
            return Response(303, b"", [("location", trace_href(request.query["id"].strip()))])
        if path.startswith("/trace/"):
            return Response.html(self.render("trace.html.j2", viewer, session,
                                             **self.trace(conn, viewer, unquote(path[len("/trace/"):]),
                                                          _int(request.query.get("page"), 1))))
        if path.startswith("/frames/"):
            return Response.html(self.render("frames.html.j2", viewer, session,
                                             **self.frames(conn, viewer, unquote(path[len("/frames/"):]),
                                                           _int(request.query.get("page"), 1))))
        if path == "/usage":
            return Response.html(self.render("usage.html.j2", viewer, session, **self.usage(conn, viewer, request.query)))
        self.operator_only(viewer)
        if path == "/users":
            return Response.html(self.render("users.html.j2", viewer, session, **self.users(conn)))
        if path == "/drift":
            return Response.html(self.render("drift.html.j2", viewer, session, report=queries.drift_report(conn),
                                             wire_types=queries.WIRE_TYPES))
        if path == "/doctor":
            checks = self.sources.doctor() if self.sources.doctor is not None else None
            return Response.html(self.render("doctor.html.j2", viewer, session, checks=checks))
        if path == "/verify":
            return Response.html(self.render("verify.html.j2", viewer, session, **verify_slot(conn)))
        if path == "/maintenance":
            return Response.html(self.render("maintenance.html.j2", viewer, session, result=None,
                                             counts={t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                                                     for t in ("conversations", "runs", "llm_calls", "frames",
                                                               "blobs")}))
        raise NotFound(f"no page {request.path}")

    @staticmethod
    def operator_only(viewer: Viewer) -> None:
        if not viewer.admin:
            raise Forbidden("this page is for the proxy's operator: the team file's admins")

    def overview(self, conn, viewer: Viewer) -> dict:
        prices = self.prices()
        since = self.today() - timedelta(days=USAGE_DAYS - 1)
        report = queries.usage_report(conn, self.sources.config(), since, by="model", user=viewer.scope)
        return {"live": self.live_context(conn, viewer), "usage": report, "hits": queries.cache_hits(report.rows),
                "chart": self.cost_or_tokens_chart(report, since), "since": since,
                "recent": queries.conversations(conn, prices, user=viewer.scope, limit=10)}

    def conversations(self, conn, viewer: Viewer, before: str | None) -> queries.Page:
        if before is not None and not _cursor_ok(before):
            raise NotFound("not a page of this list")
        return queries.conversations(conn, self.prices(), user=viewer.scope, before=before,
                                     limit=CONVERSATIONS_PER_PAGE)

    def trace(self, conn, viewer: Viewer, ident: str, page: int) -> dict:
        found = queries.visible(conn, queries.find(conn, ident), viewer.scope)
        if found is None:
            raise NotFound(f"{ident!r} is not a request, conversation, model call, tool call or tool round id"
                           + ("" if viewer.admin else " of yours"))
        pages = max(1, -(-len(found.request_ids) // RUNS_PER_PAGE))
        page = min(page, pages)
        story = queries.trace_runs(conn, found, self.prices(), offset=(page - 1) * RUNS_PER_PAGE, limit=RUNS_PER_PAGE)
        return {"found": found, "story": story, "page": page, "pages": pages,
                "users": queries.owners(conn, found.request_ids) if viewer.admin else None}

    def frames(self, conn, viewer: Viewer, request_id: str, page: int) -> dict:
        found = queries.visible(conn, queries.find(conn, request_id, prefixes=False), viewer.scope)
        if found is None or found.kind != "request":
            raise NotFound(f"{request_id!r} is not a request id" + ("" if viewer.admin else " of yours"))
        total = conn.execute("SELECT count(*) FROM frames WHERE request_id = ?", [request_id]).fetchone()[0]
        pages = max(1, -(-total // FRAMES_PER_PAGE))
        page = min(page, pages)
        listing = queries.frames(conn, request_id, "all", offset=(page - 1) * FRAMES_PER_PAGE, limit=FRAMES_PER_PAGE)
        return {"request_id": request_id, "conversation_id": found.conversation_id, "frames": listing, "page": page,
                "pages": pages, "per_page": FRAMES_PER_PAGE}

    def usage(self, conn, viewer: Viewer, query: dict[str, str]) -> dict:
        since = _day(query.get("since")) or self.today() - timedelta(days=USAGE_DAYS - 1)
        until = _day(query.get("until"))
        by = "user" if query.get("by") == "user" and viewer.admin else "model"
        report = queries.usage_report(conn, self.sources.config(), since, until, by=by, user=viewer.scope)
        per_model = report if by == "model" else queries.usage_report(conn, self.sources.config(), since, until,
                                                                        user=viewer.scope)
        return {"usage": report, "since": since, "until": until, "by": by, "hits": queries.cache_hits(per_model.rows),
                "tokens_chart": self.chart(report, since, until, "tokens"),
                "cost_chart": self.chart(report, since, until, "cost"), "doc": report.as_json()}

    def users(self, conn) -> dict:
        team = self.sources.team()
        if team is None or not getattr(team, "enabled", False):
            return {"budgets": None, "month": None}
        return {"budgets": queries.budgets(conn, team, self.sources.clock_ms()),
                "month": datetime.fromtimestamp(self.sources.clock_ms() / 1000, tz=timezone.utc).strftime("%Y-%m")}

    # -- live runs

    def live_context(self, conn, viewer: Viewer) -> dict:
        runs = queries.run_summaries(conn, self.sources.live_request_ids(), user=viewer.scope)
        return {"runs": runs, "now_ms": self.sources.clock_ms()}

    def live_fragment_sync(self, viewer: Viewer) -> str:
        return self.env.get_template("live.html.j2").render(viewer=viewer, **self.live_context(self.conn(), viewer))

    async def live_fragment(self, viewer: Viewer) -> str:
        return await self.call(self.live_fragment_sync, viewer)

    # -- the one action

    async def post(self, request: Request, viewer: Viewer, session: str) -> Response:
        if request.path.rstrip("/") != "/gc":
            raise NotFound(f"nothing to POST at {request.path}")
        self.operator_only(viewer)
        origin = request.headers.get("origin")
        site = request.headers.get("sec-fetch-site")
        token = request.form.get("csrf", "")
        if (origin not in (None, ORIGIN) or site not in (None, "same-origin", "none")
                or SESSION_COOKIE not in request.cookies
                or not hmac.compare_digest(token.encode(), self.csrf_token(session, viewer).encode())):
            raise Forbidden("this form is stale or came from another page: reload the maintenance page and try again")
        days = _int(request.form.get("days"), 7, minimum=0)
        if self.sources.gc is None:
            raise Forbidden("blob GC is not available here")
        stats = await self.sources.gc(days)
        counts = await self.call(lambda: {t: self.conn().execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                                          for t in ("conversations", "runs", "llm_calls", "frames", "blobs")})
        return Response.html(await self.call(lambda: self.render("maintenance.html.j2", viewer, session, result=stats,
                                                                 days=days, counts=counts)))

    # -- helpers

    def prices(self) -> dict:
        return queries.load_prices(self.sources.config())[0]

    def today(self) -> date:
        return datetime.fromtimestamp(self.sources.clock_ms() / 1000, tz=timezone.utc).date()

    def cost_or_tokens_chart(self, report: queries.UsageReport, since: date) -> dict:
        kind = "cost" if report.total_cost > 0 else "tokens"
        return self.chart(report, since, None, kind)

    def chart(self, report: queries.UsageReport, since: date, until: date | None, kind: str) -> dict:
        """Tokens or dollars per day (every day of the range, empty ones too), one series per model/user."""
        last = until or self.today()
        days = [(since + timedelta(days=i)).isoformat() for i in range((last - since).days + 1)] if last >= since else []
        keys = sorted({r.model for r in report.rows})
        index = {d: i for i, d in enumerate(days)}
        series = []
        for key in keys:
            values = [0.0] * len(days)
            for r in report.rows:
                if r.model == key and r.day in index:
                    values[index[r.day]] += (float(r.cost or 0) if kind == "cost" else float(
                        r.input_tokens + r.output_tokens + r.cache_read_tokens + r.cache_write_tokens))
            series.append(charts.Series(key, values))
        fmt = _compact_dollars if kind == "cost" else _compact
        title = ("cost per day (USD)" if kind == "cost" else "tokens per day (input + output + cache)") + \
            f", per {report.by}"
        return {"svg": charts.stacked_bars(days, series, title=title, fmt=fmt), "legend": charts.legend(series),
                "title": title}


def verify_slot(conn) -> dict:
    """`cursor-byok verify`'s report (the same function the command prints)."""
    from byok.cli.verify import report

    try:
        return {"report": report(conn), "error": None}
    except Exception as e:  # shown on the page, not a failed page
        return {"report": None, "error": f"{type(e).__name__}: {e}"}


def _compact(value: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:,.1f}{unit}".replace(".0" + unit, unit)
    return f"{value:,.0f}"


def _compact_dollars(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.1 or value == 0 else f"${value:.3f}"


def _int(text: str | None, default: int, minimum: int = 1) -> int:
    try:
        return max(minimum, int(text)) if text is not None else default
    except ValueError:
        return default


def _day(text: str | None) -> date | None:
    try:
        return date.fromisoformat(text) if text else None
    except ValueError:
        return None


def _cursor_ok(text: str) -> bool:
    ms, colon, _ = text.partition(":")
    return bool(colon) and ms.isdigit()
