"""`cursor-byok setup`: point Cursor at the proxy in one command, and take it back with `--undo`.

Two changes, shown first and made only when you agree (`--yes` for scripts, `--dry-run` to only look):
1. Cursor's user settings.json gets `http.proxy` (the proxy's URL) and `http.proxySupport: "on"`,
   edited in place: comments, order and every other setting stay byte for byte (jsonc.py).
2. The operating system trusts this proxy's own CA certificate (`<confdir>/mitmproxy-ca-cert.pem`;
   created the way mitmproxy does on its first start if it does not exist yet). Only the
   certificate ever leaves the confdir, never the CA key (`mitmproxy-ca.pem`).
   - macOS: the login keychain, user trust settings (`security add-trusted-cert`; no sudo);
   - Windows: the user's Root store (`certutil -user -addstore Root`; no admin rights);
   - Linux: the distribution's CA store (Debian/Ubuntu, Fedora/RHEL, openSUSE, Arch; these commands
     need root and run with sudo) and the NSS database Chromium and Electron read
     (`~/.pki/nssdb`, with `certutil` from libnss3-tools / nss-tools).
What was changed (the settings file's original bytes, each CA entry and the commands that remove it)
is saved in `~/.cursor-byok/setup-state.json`; `--undo` restores the file and removes exactly those
entries. The OS commands come from pure functions of (OS, paths), tested as command lines.
"""

from __future__ import annotations

import argparse
import base64
import difflib
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .common import CA_CERT, byok_home, console, default_confdir, default_proxy, fail, platform_name
from .output import emit_json, line

STATE_FILE = "setup-state.json"
NICKNAME = "cursor-byok"
"""The name of our entry in NSS databases, and the stem of the file in a Linux CA store."""
PROXY_SETTINGS = ("http.proxy", "http.proxySupport")
CERT = "{certificate}"
"""Stands for the certificate file in saved undo commands (written from the saved PEM at undo)."""


# ---- commands (pure) -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    why: str
    root: bool = False
    """Needs root: run with sudo (shown so)."""

    def full(self) -> list[str]:
        return (["sudo"] if self.root else []) + list(self.argv)

    def shown(self, os_name: str) -> str:
        return subprocess.list2cmdline(self.full()) if os_name == "windows" else shlex.join(self.full())


@dataclass(frozen=True)
class LinuxStore:
    """A distribution's CA store: where an anchor file goes and what rebuilds the bundle."""

    name: str
    anchors: Path | None
    """Folder of extra CA files (None: the store is changed by `trust anchor` itself)."""
    suffix: str
    update: tuple[str, ...]
    update_after_remove: tuple[str, ...] = ()

    @property
    def anchor_file(self) -> Path | None:
        return None if self.anchors is None else self.anchors / f"{NICKNAME}-mitmproxy{self.suffix}"


LINUX_STORES = (
    LinuxStore("Debian/Ubuntu", Path("/usr/local/share/ca-certificates"), ".crt", ("update-ca-certificates",),
               ("update-ca-certificates", "--fresh")),
    LinuxStore("Fedora/RHEL", Path("/etc/pki/ca-trust/source/anchors"), ".pem", ("update-ca-trust",)),
    LinuxStore("openSUSE", Path("/etc/pki/trust/anchors"), ".pem", ("update-ca-certificates",)),
    LinuxStore("Arch", None, ".pem", ("trust", "anchor", "--store")),
)


def detect_linux_store(which=shutil.which) -> LinuxStore | None:
    """The first store whose folder exists and whose update tool is installed."""
    for store in LINUX_STORES:
        if store.anchors is not None and store.anchors.is_dir() and which(store.update[0]):
            return store
        if store.anchors is None and which("trust"):
            return store
    return None


def macos_trust(cert: Path, keychain: Path) -> list[Command]:
    # user trust settings in the login keychain: macOS asks for the login password, no sudo
    return [Command(("security", "add-trusted-cert", "-r", "trustRoot", "-k", str(keychain), str(cert)),
                    "trust the proxy's CA for your user (login keychain)")]


def macos_untrust(cert: Path, sha1: str, keychain: Path) -> list[Command]:
    return [Command(("security", "remove-trusted-cert", str(cert)), "remove its trust settings"),
            Command(("security", "delete-certificate", "-Z", sha1.upper(), str(keychain)),
                    "delete the certificate from the login keychain")]


def windows_trust(cert: Path) -> list[Command]:
    return [Command(("certutil", "-user", "-addstore", "Root", str(cert)),
                    "trust the proxy's CA for your user (Root store; Windows asks you to confirm)")]


def windows_untrust(serial: str) -> list[Command]:
    return [Command(("certutil", "-user", "-delstore", "Root", serial), "remove it from your user's Root store")]


def linux_store_trust(store: LinuxStore, cert: Path, root: bool) -> list[Command]:
    if store.anchor_file is None:
        return [Command((*store.update, str(cert)), f"add it to the {store.name} CA store", root)]
    return [Command(("install", "-m", "0644", str(cert), str(store.anchor_file)),
                    f"copy the certificate into the {store.name} CA store", root),
            Command(store.update, "rebuild the system CA bundle", root)]


def linux_store_untrust(store: LinuxStore, cert: Path, root: bool) -> list[Command]:
    if store.anchor_file is None:
        return [Command(("trust", "anchor", "--remove", str(cert)), f"remove it from the {store.name} CA store", root)]
    return [Command(("rm", "-f", str(store.anchor_file)), f"remove the certificate from the {store.name} CA store",
                    root),
            Command(store.update_after_remove or store.update, "rebuild the system CA bundle", root)]


def nss_trust(db: Path, cert: Path, create: bool) -> list[Command]:
    commands = []
    if create:
        commands += [Command(("mkdir", "-p", str(db)), "create the NSS database Chromium/Electron read"),
                     Command(("certutil", "-d", f"sql:{db}", "-N", "--empty-password"), "initialise it")]
    return commands + [Command(("certutil", "-d", f"sql:{db}", "-A", "-t", "C,,", "-n", NICKNAME, "-i", str(cert)),
                               "trust it in the NSS database (Chromium, Electron)")]


def nss_untrust(db: Path) -> list[Command]:
    return [Command(("certutil", "-d", f"sql:{db}", "-D", "-n", NICKNAME), "remove it from the NSS database")]


# ---- the certificate -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaCert:
    path: Path
    pem: str
    sha1: str
    sha256: str
    serial: str

    @classmethod
    def read(cls, path: Path) -> "CaCert":
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.serialization import Encoding

        data = path.read_bytes()
        cert = x509.load_pem_x509_certificate(data)
        if b"PRIVATE KEY" in data:  # never hand a key to a trust store, whatever the file is called
            raise ValueError(f"{path} holds a private key: only the certificate may be trusted")
        return cls(path, cert.public_bytes(Encoding.PEM).decode(), cert.fingerprint(hashes.SHA1()).hex(),
                   cert.fingerprint(hashes.SHA256()).hex(), format(cert.serial_number, "x"))


def create_ca(confdir: Path) -> None:
    """mitmproxy's own CA files, made the way mitmproxy makes them on its first start."""
    from mitmproxy.certs import CertStore
    from mitmproxy.options import CONF_BASENAME, KEY_SIZE

    CertStore.create_store(confdir, CONF_BASENAME, KEY_SIZE)


# ---- the plan ------------------------------------------------------------------------------------------------


@dataclass
class CaStep:
    """One trust store change: the commands that make it and the ones that undo it."""

    store: str
    commands: list[Command]
    undo: list[Command]
    detail: dict = field(default_factory=dict)


@dataclass
class Plan:
    os_name: str
    settings_path: Path
    settings_before: bytes | None
    settings_after: bytes
    ca_path: Path
    create_ca: bool
    ca_steps: list[CaStep]
    notes: list[str]

    @property
    def settings_changed(self) -> bool:
        return self.settings_before != self.settings_after

    def diff(self) -> str:
        before = (self.settings_before or b"").decode("utf-8").splitlines(keepends=True)
        after = self.settings_after.decode("utf-8").splitlines(keepends=True)
        return "".join(difflib.unified_diff(before, after, str(self.settings_path) if self.settings_before is not None
                                            else "/dev/null", str(self.settings_path)))


def settings_text(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


def plan_setup(args, os_name: str, state: dict | None) -> Plan:
    from . import jsonc

    settings_path = _settings_path(args, os_name)
    before = settings_text(settings_path)
    text = (before or b"").decode("utf-8")
    values = {"http.proxy": args.proxy or default_proxy(), "http.proxySupport": "on"}
    notes = []
    try:
        current = jsonc.parse(text) if text.strip() else {}
    except ValueError:
        current = {}
    old_proxy = current.get("http.proxy")
    if old_proxy and old_proxy != values["http.proxy"] and not (state or {}).get("settings"):
        notes.append(f"http.proxy was {old_proxy}: if Cursor needs that proxy to reach the internet, start "
                     f"mitmdump with --mode upstream:{old_proxy}")
    after = jsonc.set_members(text, values).encode("utf-8")
    confdir = args.confdir or default_confdir()
    ca_path = confdir / CA_CERT
    # a step that failed half-way (complete false) runs again
    done = {(e["store"], e["sha256"]) for e in (state or {}).get("ca", []) if e.get("complete")}
    steps, create = [], not ca_path.exists()
    if create:
        notes.append(f"no CA in {confdir} yet: it is created now, as mitmproxy does on its first start")
    cert = None if create else CaCert.read(ca_path)
    for step in ca_steps(args, os_name, ca_path, cert, notes):
        if (step.store, step.detail.get("sha256")) not in done:
            steps.append(step)
    return Plan(os_name, settings_path, before, after, ca_path, create, steps, notes)


def ca_steps(args, os_name: str, ca_path: Path, cert: CaCert | None, notes: list[str]) -> list[CaStep]:
    """The trust store changes for this OS; `cert` is None when the CA is created first (its
    fingerprints are filled in after)."""
    sha = {"sha256": cert.sha256 if cert else None}
    if os_name == "macos":
        keychain = Path.home() / "Library" / "Keychains" / "login.keychain-db"
        return [CaStep("macos-keychain", macos_trust(ca_path, keychain), macos_untrust(ca_path, cert.sha1 if cert
                                                                                        else "", keychain),
                       {**sha, "keychain": str(keychain)})]
    if os_name == "windows":
        cer = ca_path.with_suffix(".cer")
        return [CaStep("windows-root", windows_trust(cer if cer.exists() or cert is None else ca_path),
                       windows_untrust(cert.serial if cert else ""), sha)]
    steps = []
    store = linux_store_override(args) or detect_linux_store()
    if store is None:
        notes.append("no known CA store found (Debian/Ubuntu, Fedora/RHEL, openSUSE, Arch): trust "
                     f"{ca_path} by hand (docs/cursor-setup.md#linux)")
    else:
        root = _needs_root(store)
        steps.append(CaStep(f"linux-{store.name}", linux_store_trust(store, ca_path, root),
                            linux_store_untrust(store, ca_path, root),
                            {**sha, "anchor": str(store.anchor_file) if store.anchor_file else None}))
    if shutil.which("certutil"):
        db = Path.home() / ".pki" / "nssdb"
        create = not (db / "cert9.db").exists()
        steps.append(CaStep("nss", nss_trust(db, ca_path, create), nss_untrust(db), {**sha, "db": str(db)}))
    else:
        notes.append("certutil is not installed (libnss3-tools on Debian/Ubuntu, nss-tools on Fedora/Arch): "
                     "Chromium's NSS database is not changed; install it and run setup again")
    return steps


def linux_store_override(args) -> LinuxStore | None:
    if not args.linux_anchors:
        return None
    update = tuple(shlex.split(args.linux_update)) if args.linux_update else ("update-ca-certificates",)
    return LinuxStore("custom", Path(args.linux_anchors), ".crt", update)


def _needs_root(store: LinuxStore) -> bool:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return False
    return store.anchors is None or not os.access(store.anchors, os.W_OK)


def _settings_path(args, os_name: str) -> Path:
    from .doctor import cursor_settings_path

    return args.cursor_settings or cursor_settings_path(os_name)


# ---- state -------------------------------------------------------------------------------------------------


def state_path() -> Path:
    return byok_home() / STATE_FILE


def load_state() -> dict | None:
    path = state_path()
    return json.loads(path.read_text()) if path.exists() else None


def save_state(state: dict) -> None:
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(path)


def _argvs(commands: list[Command]) -> list[dict]:
    return [{"argv": list(c.argv), "why": c.why, "root": c.root} for c in commands]


def _commands(saved: list[dict]) -> list[Command]:
    return [Command(tuple(c["argv"]), c["why"], c["root"]) for c in saved]


# ---- running -----------------------------------------------------------------------------------------------


class StepFailed(Exception):
    pass


def execute(command: Command) -> None:
    try:
        done = subprocess.run(command.full(), capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise StepFailed(f"{command.argv[0]}: {e}") from None
    if done.returncode != 0:
        raise StepFailed(f"`{shlex.join(command.full())}` failed ({done.returncode}): "
                         f"{(done.stderr or done.stdout).strip()[:500]}")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("setup", help="point Cursor at the proxy: its proxy settings and the CA (--undo reverts)",
                       description="Write Cursor's proxy settings (http.proxy, http.proxySupport) into its "
                                   "settings.json, keeping every other byte, and make the operating system trust "
                                   "this proxy's CA certificate (never its key). Shows what it will do and asks "
                                   "first. --undo restores the settings file and removes exactly what it added.")
    p.add_argument("--undo", action="store_true", help="restore what an earlier setup changed")
    p.add_argument("--dry-run", action="store_true", help="only show what would be done")
    p.add_argument("--yes", "-y", action="store_true", help="do it without asking (commands needing root use sudo)")
    p.add_argument("--json", action="store_true", help="print the plan and what was done as JSON")
    p.add_argument("--proxy", default=None, help="the proxy's URL for http.proxy (default http://127.0.0.1:8080)")
    p.add_argument("--cursor-settings", type=Path, default=None,
                   help="Cursor's settings.json (default: the per-OS location)")
    p.add_argument("--confdir", type=Path, default=None, help="mitmproxy confdir holding the CA (default ~/.mitmproxy)")
    p.add_argument("--os", choices=("macos", "linux", "windows"), default=None,
                   help="show another OS's plan (with --dry-run only)")
    p.add_argument("--linux-anchors", default=None, help=argparse.SUPPRESS)
    p.add_argument("--linux-update", default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    os_name = args.os or platform_name()
    if os_name != platform_name() and not args.dry_run:
        return fail(f"--os {os_name} is for looking only: add --dry-run")
    try:
        return undo(args, os_name) if args.undo else setup(args, os_name)
    except (ValueError, OSError) as e:
        return fail(str(e))


def _ask(args, question: str) -> bool:
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise ValueError("not asking without a terminal: add --yes to go ahead (or --dry-run to look)")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def setup(args, os_name: str) -> int:
    state = load_state()
    plan = plan_setup(args, os_name, state)
    out = console(stderr=args.json)
    commands = [c for step in plan.ca_steps for c in step.commands]
    report = {"action": "setup", "os": os_name, "dry_run": args.dry_run, "settings": {
        "path": str(plan.settings_path), "changed": plan.settings_changed, "diff": plan.diff()},
        "create_ca": str(plan.ca_path.parent) if plan.create_ca else None,
        "commands": [{"shown": c.shown(os_name), **_argvs([c])[0]} for c in commands], "notes": plan.notes,
        "done": False, "state": str(state_path())}
    show_plan(out, plan, commands)
    if not plan.settings_changed and not commands and not plan.create_ca:
        line(out, ("Nothing to do: Cursor is already set up for this proxy.", "green"))
        report["done"] = True
        return _finish(args, report, 0)
    if args.dry_run:
        line(out, "Dry run: nothing was changed.")
        return _finish(args, report, 0)
    sudo = [c for c in commands if c.root]
    question = "Make these changes?" + (f" ({len(sudo)} command(s) run with sudo)" if sudo else "")
    if not _ask(args, question):
        line(out, "Nothing was changed.")
        return _finish(args, report, 1)
    state = state or {"version": 1, "os": os_name, "created_ms": int(time.time() * 1000), "ca": []}
    try:
        apply_plan(args, plan, state, out)
    except StepFailed as e:
        save_state(state)
        line(out, ("error:", "red"), f" {e}")
        line(out, "What was done so far is saved: `cursor-byok setup --undo` reverts it.")
        report["error"] = str(e)
        return _finish(args, report, 1)
    save_state(state)
    report["done"] = True
    line(out, ("Done.", "green"), " Reload Cursor's window (Developer: Reload Window) or restart Cursor; start the "
              "proxy if it is not running. `cursor-byok setup --undo` reverts all of it.")
    return _finish(args, report, 0)


def apply_plan(args, plan: Plan, state: dict, out) -> None:
    if plan.create_ca:
        create_ca(plan.ca_path.parent)
        line(out, f"created mitmproxy's CA in {plan.ca_path.parent}")
    cert = CaCert.read(plan.ca_path)
    if plan.settings_changed:
        saved = state.get("settings")
        if saved is None:
            saved = state["settings"] = {
                "path": str(plan.settings_path), "existed": plan.settings_before is not None,
                "original_b64": base64.b64encode(plan.settings_before or b"").decode()}
        plan.settings_path.parent.mkdir(parents=True, exist_ok=True)
        plan.settings_path.write_bytes(plan.settings_after)
        saved["written_sha256"] = hashlib.sha256(plan.settings_after).hexdigest()
        save_state(state)
        line(out, f"wrote {plan.settings_path}")
    # the CA's fingerprints are known now (a CA created above was not when the plan was made)
    steps = ca_steps(args, plan.os_name, plan.ca_path, cert, []) if plan.create_ca else plan.ca_steps
    for step in steps:
        # saved before it runs (a step that fails half-way is undone as far as it got), and undone
        # with the certificate set up, saved here, even if the confdir's changes meanwhile
        undo_commands = [Command(tuple(CERT if a == str(plan.ca_path) else a for a in c.argv), c.why, c.root)
                         for c in step.undo]
        entry = {"store": step.store, "sha256": cert.sha256, "cert_pem": cert.pem, "complete": False,
                 "undo": _argvs(undo_commands), **{k: v for k, v in step.detail.items() if k != "sha256"}}
        state["ca"] = [e for e in state["ca"] if (e["store"], e["sha256"]) != (step.store, cert.sha256)]
        state["ca"].append(entry)  # replaces the entry of an earlier, failed try of this step
        save_state(state)
        for command in step.commands:
            line(out, f"$ {command.shown(plan.os_name)}")
            execute(command)
        entry["complete"] = True
        save_state(state)


def undo(args, os_name: str) -> int:
    state = load_state()
    out = console(stderr=args.json)
    report = {"action": "undo", "os": os_name, "dry_run": args.dry_run, "done": False, "state": str(state_path())}
    if state is None:
        line(out, f"Nothing to undo: no {state_path()} (setup was not run, or was undone).")
        report["done"] = True
        return _finish(args, report, 0)
    settings = state.get("settings")
    restore = None
    if settings is not None:
        restore = restored_settings(settings)
        path = Path(settings["path"])
        current = settings_text(path)
        report["settings"] = {"path": str(path), "diff": "".join(difflib.unified_diff(
            (current or b"").decode().splitlines(keepends=True), (restore or b"").decode().splitlines(keepends=True),
            str(path), str(path) if restore is not None else "/dev/null"))}
        line(out, ("Cursor's settings", "bold"), f" ({path}):")
        line(out, report["settings"]["diff"].rstrip("\n") or "  (already as before setup)")
    commands = [c for entry in state.get("ca", []) for c in _commands(entry["undo"])]
    report["commands"] = [{"shown": c.shown(os_name), **_argvs([c])[0]} for c in commands]
    if commands:
        line(out, ("Trust store changes to revert:", "bold"))
        for c in commands:
            line(out, f"  {c.shown(os_name)}", ("   (sudo)" if c.root else "", "yellow"), (f"   # {c.why}", "dim"))
    if args.dry_run:
        line(out, "Dry run: nothing was changed.")
        return _finish(args, report, 0)
    if not _ask(args, "Revert these changes?"):
        line(out, "Nothing was changed.")
        return _finish(args, report, 1)
    if settings is not None:
        path = Path(settings["path"])
        if restore is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(restore)
        del state["settings"]
        save_state(state)
        line(out, f"restored {path}")
    while state.get("ca"):
        entry = state["ca"][0]
        with tempfile.TemporaryDirectory() as tmp:
            cert_file = Path(tmp) / "cursor-byok-ca.pem"
            cert_file.write_text(entry["cert_pem"])
            for command in _commands(entry["undo"]):
                command = Command(tuple(str(cert_file) if a == CERT else a for a in command.argv),
                                  command.why, command.root)
                line(out, f"$ {command.shown(os_name)}")
                try:
                    execute(command)
                except StepFailed as e:
                    if entry.get("complete", True):
                        save_state(state)
                        line(out, ("error:", "red"), f" {e}")
                        report["error"] = str(e)
                        return _finish(args, report, 1)
                    # a step that failed half-way at setup: what it never did cannot be undone
                    line(out, ("note: ", "yellow"), f"{e} (that setup step had not completed)")
        state["ca"].pop(0)
        save_state(state)
    state_path().unlink(missing_ok=True)
    report["done"] = True
    line(out, ("Undone.", "green"), " Reload Cursor's window or restart Cursor.")
    return _finish(args, report, 0)


def restored_settings(saved: dict) -> bytes | None:
    """The settings file as it was before setup: its original bytes when nothing touched it since;
    otherwise the current file with only the two proxy settings put back as they were."""
    from . import jsonc

    original = base64.b64decode(saved["original_b64"]) if saved["existed"] else None
    path = Path(saved["path"])
    current = settings_text(path)
    if current is None or hashlib.sha256(current).hexdigest() == saved.get("written_sha256"):
        return original
    text = current.decode("utf-8")
    before = jsonc.parse((original or b"").decode("utf-8")) if original else {}
    text = jsonc.remove_members(text, {k for k in PROXY_SETTINGS if k not in before})
    put_back = {k: before[k] for k in PROXY_SETTINGS if k in before}
    return (jsonc.set_members(text, put_back) if put_back else text).encode("utf-8")


def show_plan(out, plan: Plan, commands: list[Command]) -> None:
    line(out, ("Cursor's settings", "bold"), f" ({plan.settings_path}):")
    if plan.settings_changed:
        line(out, plan.diff().rstrip("\n"))
    else:
        line(out, "  already set")
    if plan.create_ca:
        line(out, ("CA:", "bold"), f" create mitmproxy's CA in {plan.ca_path.parent} (certificate "
                                   f"{plan.ca_path.name}; its key stays there)")
    if commands:
        line(out, ("Trust the proxy's CA", "bold"), f" ({plan.ca_path}; never the key):")
        for c in commands:
            line(out, f"  {c.shown(plan.os_name)}", ("   (sudo)" if c.root else "", "yellow"), (f"   # {c.why}", "dim"))
    elif not plan.create_ca:
        line(out, ("CA:", "bold"), " already trusted by an earlier setup")
    for note in plan.notes:
        line(out, ("note: ", "yellow"), note)


def _finish(args, report: dict, code: int) -> int:
    if args.json:
        emit_json(report)
    return code
