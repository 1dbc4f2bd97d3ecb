"""The Dockerfile, its entrypoint and compose.yaml, checked without a container engine (none exists
on the CI machine): every path they name exists, every option they set is real, the services fit."""

from __future__ import annotations

import re
import shlex
import stat
import subprocess
import tomllib
from pathlib import Path

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
ENTRYPOINT = ROOT / "deploy" / "entrypoint.sh"
COMPOSE = ROOT / "compose.yaml"


def instructions() -> list[tuple[str, str]]:
    out = []
    for line in DOCKERFILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_copies_only_what_exists_and_installs_the_team_extra():
    steps = instructions()
    assert steps[0][0] == "FROM" and "python:3.13" in steps[0][1]
    copies = [shlex.split(rest) for word, rest in steps if word == "COPY"]
    for *sources, _target in copies:
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such path in the repository"
    packaged = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dirs = set(packaged["tool"]["setuptools"]["package-dir"].values())
    copied = {sources[0] for *sources, _ in copies}
    assert dirs <= copied, f"package folders not copied: {dirs - copied}"
    runs = " ".join(rest for word, rest in steps if word == "RUN")
    extra = re.search(r"pip install '\.\[(\w+)\]'", runs).group(1)
    assert extra in packaged["project"]["optional-dependencies"]
    assert any("psycopg" in dep for dep in packaged["project"]["optional-dependencies"][extra])
    [(entry, target)] = [(sources[0], target) for *sources, target in copies if sources[0].startswith("deploy/")]
    assert entry == "deploy/entrypoint.sh" and ENTRYPOINT.stat().st_mode & stat.S_IXUSR
    assert dict(steps)["ENTRYPOINT"] == f'["{Path(target).name}"]' and target.startswith("/usr/local/bin/")
    assert ("USER", "byok") in steps and dict(steps)["EXPOSE"] == "8080"


def fake_mitmdump(tmp_path: Path) -> dict:
    """Run the entrypoint with a stand-in `mitmdump` that prints the arguments it was given."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "mitmdump").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    (bindir / "mitmdump").chmod(0o755)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "BYOK_DB": "postgresql://byok:pw@db:5432/byok", "BYOK_REPLICA": "p1"}
    done = subprocess.run(["sh", str(ENTRYPOINT), "--set", "termlog_verbosity=info"], env=env,
                          capture_output=True, text=True, timeout=30, check=True)
    args = done.stdout.splitlines()
    sets = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--set")
    return {"args": args, "sets": sets}


def test_entrypoint_starts_the_addon_with_real_options(tmp_path):
    from mitmproxy.addons.proxyauth import ProxyAuth
    from mitmproxy.addons.termlog import TermLog
    from mitmproxy.test import taddons

    from byok.main import make_addons

    assert subprocess.run(["sh", "-n", str(ENTRYPOINT)]).returncode == 0
    got = fake_mitmdump(tmp_path)
    assert got["args"][:2] == ["-s", "/app/addon/cursor_byok.py"] and (ROOT / "addon" / "cursor_byok.py").exists()
    sets = got["sets"]
    assert sets["byok_db"] == "postgresql://byok:pw@db:5432/byok" and sets["byok_replica"] == "p1"
    assert sets["proxyauth"] == "@/etc/byok/htpasswd" and sets["termlog_verbosity"] == "info"
    with taddons.context(ProxyAuth(), TermLog(), *make_addons()) as tctx:
        known = set(tctx.options._options)
    assert set(sets) <= known, f"unknown options: {set(sets) - known}"
    done = subprocess.run(["sh", str(ENTRYPOINT)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert done.returncode != 0 and "set BYOK_DB" in done.stderr


def test_compose_wires_the_proxy_to_its_database_ca_and_files(tmp_path):
    compose = YAML(typ="safe").load(COMPOSE.read_text())
    services = compose["services"]
    assert set(services) == {"db", "proxy"}
    db, proxy = services["db"], services["proxy"]
    assert db["image"].startswith("postgres:") and "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert proxy["build"] == "." and (ROOT / "Dockerfile").exists()
    assert proxy["depends_on"]["db"]["condition"] == "service_healthy"
    url = proxy["environment"]["BYOK_DB"]
    assert url.startswith("postgresql://") and "@db:5432/" in url
    assert db["environment"]["POSTGRES_USER"] in url and url.endswith("/" + db["environment"]["POSTGRES_DB"])
    mounts = {m.split(":")[1]: m.split(":")[0] for m in proxy["volumes"]}
    sets = fake_mitmdump(tmp_path)["sets"]
    assert mounts["/data/mitmproxy"] == "ca" and sets["confdir"] == "/data/mitmproxy"
    assert all(sets[k].lstrip("@").startswith("/etc/byok/") for k in ("byok_config", "proxyauth"))
    assert "/etc/byok" in mounts
    declared = set(compose["volumes"])
    named = {m.split(":")[0] for s in services.values() for m in s.get("volumes", []) if not m.startswith(".")}
    assert named <= declared
    assert proxy["ports"] == ["8080:8080"]


def test_compose_takes_any_key_variable_from_keys_env_and_the_docs_example_key():
    """Issue 24.4.13: the docs' first example uses DEEPSEEK_API_KEY; any other goes in keys.env."""
    compose = YAML(typ="safe").load(COMPOSE.read_text())
    proxy = compose["services"]["proxy"]
    assert proxy["env_file"] == [{"path": "./keys.env", "required": False}]
    assert {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "DEEPSEEK_API_KEY"} <= set(proxy["environment"])
    docs = (ROOT / "docs" / "team.md").read_text()
    assert "keys.env" in docs and "docker compose cp proxy:/data/mitmproxy/mitmproxy-ca-cert.pem" in docs
    uid = re.search(r"useradd --system --uid (\d+)", DOCKERFILE.read_text()).group(1)
    assert f"uid {uid}" in docs and f"chown {uid}" in docs


def test_entrypoint_refuses_a_mounted_file_its_user_cannot_read(tmp_path):
    """A providers file copied in with chmod 600 by a host user: the container's user cannot read it."""
    import os
    import shutil

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        import pytest

        pytest.skip("needs root and setpriv to run the entrypoint as another user")
    import tempfile

    # under /tmp itself: pytest's own temporary folders are closed to other users
    etc = Path(tempfile.mkdtemp(prefix="byok-etc-", dir="/tmp"))
    etc.chmod(0o755)
    (etc / "providers.toml").write_text("")
    (etc / "providers.toml").chmod(0o600)  # root's, as a host user's file looks to uid 10001
    (etc / "htpasswd").write_text("")
    (etc / "htpasswd").chmod(0o644)
    env = {"PATH": "/usr/bin:/bin", "BYOK_DB": "postgresql://byok:pw@db/byok", "BYOK_ETC": str(etc)}
    try:
        done = subprocess.run(["setpriv", "--reuid=10001", "--regid=10001", "--clear-groups", "sh", "-s"],
                              input=ENTRYPOINT.read_text(), env=env, capture_output=True, text=True, timeout=30)
    finally:
        shutil.rmtree(etc)
    assert done.returncode == 1
    assert f"cannot read {etc}/providers.toml" in done.stderr and "uid 10001" in done.stderr
    assert "chmod 644 team/providers.toml" in done.stderr and "chown 10001 team/providers.toml" in done.stderr
