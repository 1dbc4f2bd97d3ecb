"""`cursor-byok setup`: on Linux for real (a temporary HOME with a real settings.json, a throwaway CA
store whose update command is a script of the test's, a real NSS database through certutil), setup
then undo restores everything byte for byte; the JSONC edit keeps every other byte; the macOS and
Windows command lines as generated; asking first, dry runs, partial failures; never the CA key."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from byok.cli import main
from byok.cli import setup as setup_cmd
from byok.cli.doctor import parse_jsonc
from byok.cli.jsonc import JsoncError, remove_members, set_members

PROXY = {"http.proxy": "http://127.0.0.1:8080", "http.proxySupport": "on"}
SETTINGS = """// Cursor's user settings, with comments
{
    "editor.fontSize": 14, // large
    /* a block comment with "quotes", braces } and // slashes */
    "workbench.colorTheme": "Default Dark+",
    "files.exclude": {
        "**/.git": true, // nested, with a trailing comma
    },
    "terminal.integrated.env.linux": {"A": "x//y\\"z"},
}
"""


# ---- the JSONC editor ------------------------------------------------------------------------------------


@pytest.mark.parametrize("before", [
    SETTINGS,
    SETTINGS.replace("\n", "\r\n"),
    "{}",
    "{\n}\n",
    '{"a": 1}',
    '{\n\t"a": [1, 2, {"b": "}"}],\n\t"c": null\n}',
    '{\n  "a": 1 // last, no comma\n}\n',
    '{\n  "http.proxy": "http://corp:3128", "x": true,\n  "http.proxy": "dup"\n}\n',
    '\ufeff{ "a": "é" }',
])
def test_the_edit_sets_the_two_keys_and_keeps_every_other_byte(before):
    after = set_members(before, PROXY)
    assert parse_jsonc(after) == {**parse_jsonc(before), **PROXY}
    assert set_members(after, PROXY) == after  # idempotent
    # what changed is only: our values, our new lines, and one comma behind the old last value
    kept = remove_members(after, set(PROXY) - set(parse_jsonc(before)))
    assert parse_jsonc(kept) == {**parse_jsonc(before), **{k: v for k, v in PROXY.items() if k in parse_jsonc(before)}}
    if "http.proxy" not in before:
        assert kept.replace(",", "").replace("\n", "").replace("\r", "").replace(" ", "") == \
            before.replace(",", "").replace("\n", "").replace("\r", "").replace(" ", "")


def test_a_key_inside_a_nested_object_or_a_comment_is_not_touched():
    before = '{\n    // "http.proxy": "commented out",\n    "x": {"http.proxy": "nested"}\n}\n'
    after = set_members(before, PROXY)
    assert '// "http.proxy": "commented out"' in after and '{"http.proxy": "nested"}' in after
    assert after.startswith(before[:before.index("\n}")])


def test_an_empty_or_missing_file_becomes_a_document_with_the_two_keys():
    assert parse_jsonc(set_members("", PROXY)) == PROXY
    assert parse_jsonc(set_members("// only a comment\n", PROXY)) == PROXY


@pytest.mark.parametrize("broken", ['[1, 2]', '{"a": 1', '{"a" 1}', '{"a": 1} x', '{"a": "open}', '{/* open }'])
def test_a_file_that_is_not_a_settings_object_is_refused_with_its_line(broken):
    with pytest.raises(JsoncError, match="line 1"):
        set_members(broken, PROXY)


# ---- the generated command lines -------------------------------------------------------------------------


def test_macos_command_lines():
    cert, keychain = Path("/Users/me/.mitmproxy/mitmproxy-ca-cert.pem"), Path("/Users/me/Library/Keychains/login.keychain-db")
    assert [c.shown("macos") for c in setup_cmd.macos_trust(cert, keychain)] == [
        "security add-trusted-cert -r trustRoot -k /Users/me/Library/Keychains/login.keychain-db "
        "/Users/me/.mitmproxy/mitmproxy-ca-cert.pem"]
    assert [c.shown("macos") for c in setup_cmd.macos_untrust(cert, "ab12cd", keychain)] == [
        "security remove-trusted-cert /Users/me/.mitmproxy/mitmproxy-ca-cert.pem",
        "security delete-certificate -Z AB12CD /Users/me/Library/Keychains/login.keychain-db"]
    assert not any(c.root for c in setup_cmd.macos_trust(cert, keychain))


def test_windows_command_lines():
    cert = Path("C:/Users/Me Too/.mitmproxy/mitmproxy-ca-cert.cer")
    [add] = setup_cmd.windows_trust(cert)
    assert add.argv == ("certutil", "-user", "-addstore", "Root", str(cert)) and not add.root
    assert add.shown("windows") == f'certutil -user -addstore Root "{cert}"'
    assert [c.argv for c in setup_cmd.windows_untrust("5f3a")] == [("certutil", "-user", "-delstore", "Root", "5f3a")]


def test_linux_command_lines_per_distribution_with_sudo_when_root_is_needed():
    cert = Path("/home/me/.mitmproxy/mitmproxy-ca-cert.pem")
    debian, fedora, suse, arch = setup_cmd.LINUX_STORES
    assert [c.shown("linux") for c in setup_cmd.linux_store_trust(debian, cert, True)] == [
        "sudo install -m 0644 /home/me/.mitmproxy/mitmproxy-ca-cert.pem "
        "/usr/local/share/ca-certificates/cursor-byok-mitmproxy.crt",
        "sudo update-ca-certificates"]
    assert [c.shown("linux") for c in setup_cmd.linux_store_untrust(debian, cert, True)] == [
        "sudo rm -f /usr/local/share/ca-certificates/cursor-byok-mitmproxy.crt", "sudo update-ca-certificates --fresh"]
    assert [c.shown("linux") for c in setup_cmd.linux_store_trust(fedora, cert, True)][1] == "sudo update-ca-trust"
    assert [c.argv[-1] for c in setup_cmd.linux_store_trust(suse, cert, False)] == [
        "/etc/pki/trust/anchors/cursor-byok-mitmproxy.pem", "update-ca-certificates"]
    assert [c.shown("linux") for c in setup_cmd.linux_store_trust(arch, cert, True)] == [
        "sudo trust anchor --store /home/me/.mitmproxy/mitmproxy-ca-cert.pem"]
    assert [c.shown("linux") for c in setup_cmd.linux_store_untrust(arch, cert, True)] == [
        "sudo trust anchor --remove /home/me/.mitmproxy/mitmproxy-ca-cert.pem"]
    assert [c.shown("linux") for c in setup_cmd.nss_trust(Path("/home/me/.pki/nssdb"), cert, False)] == [
        "certutil -d sql:/home/me/.pki/nssdb -A -t C,, -n cursor-byok -i /home/me/.mitmproxy/mitmproxy-ca-cert.pem"]
    assert [c.shown("linux") for c in setup_cmd.nss_untrust(Path("/home/me/.pki/nssdb"))] == [
        "certutil -d sql:/home/me/.pki/nssdb -D -n cursor-byok"]


def test_the_store_is_found_by_its_folder_and_tool():
    debian = setup_cmd.LINUX_STORES[0]
    found = setup_cmd.detect_linux_store(which=lambda tool: "/usr/bin/" + tool if tool == "trust" else None)
    assert found is not None and found.name == "Arch"  # no other store's tool: p11-kit's trust
    assert setup_cmd.detect_linux_store(which=lambda tool: None) is None
    assert debian.anchor_file == Path("/usr/local/share/ca-certificates/cursor-byok-mitmproxy.crt")


def test_other_oses_plans_can_be_looked_at_but_not_run(isolated_home, capsys):
    (isolated_home / ".mitmproxy").mkdir()
    setup_cmd.create_ca(isolated_home / ".mitmproxy")
    assert main(["setup", "--os", "macos", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "security add-trusted-cert -r trustRoot -k " + str(isolated_home / "Library/Keychains/login.keychain-db") in out
    assert str(isolated_home / "Library/Application Support/Cursor/User/settings.json") in out
    assert main(["setup", "--os", "windows"]) == 2
    assert "--dry-run" in capsys.readouterr().err


# ---- on Linux, for real -----------------------------------------------------------------------------------


@pytest.fixture
def linux(isolated_home, tmp_path, monkeypatch):
    """A settings.json with comments, a throwaway CA store and its update script (which builds a
    bundle from the store, like update-ca-certificates), in the temporary HOME."""
    if shutil.which("certutil") is None:
        if os.environ.get("BYOK_REQUIRE_NSS"):
            pytest.fail("certutil (libnss3-tools) is required (BYOK_REQUIRE_NSS)")
        pytest.skip("certutil (libnss3-tools) is not installed")
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    settings = isolated_home / ".config" / "Cursor" / "User" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(SETTINGS)
    store = tmp_path / "anchors"
    store.mkdir()
    bundle = tmp_path / "bundle.pem"
    update = tmp_path / "update-store"
    update.write_text(f"#!/bin/sh\ncat {store}/*.crt > {bundle} 2>/dev/null || : > {bundle}\necho ran >> {tmp_path}/runs\n")
    update.chmod(0o755)
    return {"home": isolated_home, "settings": settings, "store": store, "bundle": bundle, "update": update,
            "args": ["--linux-anchors", str(store), "--linux-update", str(update)],
            "confdir": isolated_home / ".mitmproxy", "nssdb": isolated_home / ".pki" / "nssdb",
            "state": isolated_home / ".cursor-byok" / "setup-state.json"}


def nss_entries(db: Path) -> str:
    if not (db / "cert9.db").exists():
        return ""
    return subprocess.run(["certutil", "-d", f"sql:{db}", "-L"], capture_output=True, text=True, check=True).stdout


def test_setup_then_undo_on_linux_restores_everything_byte_for_byte(linux, capsys):
    original = linux["settings"].read_bytes()
    assert main(["setup", "--yes", *linux["args"]]) == 0
    out = capsys.readouterr().out
    # the settings: the two keys added, everything else as it was
    after = linux["settings"].read_text()
    assert parse_jsonc(after) == {**parse_jsonc(original.decode()), **PROXY}
    assert after.startswith(original.decode()[:original.decode().rindex("}")])
    # the CA (created, as mitmproxy does): the certificate in the store, the bundle rebuilt, NSS trusting it
    cert = (linux["confdir"] / "mitmproxy-ca-cert.pem").read_bytes()
    key = (linux["confdir"] / "mitmproxy-ca.pem").read_bytes()
    assert (linux["store"] / "cursor-byok-mitmproxy.crt").read_bytes() == cert
    assert linux["bundle"].read_bytes() == cert
    assert "cursor-byok" in nss_entries(linux["nssdb"]) and "C,," in nss_entries(linux["nssdb"])
    # never the key: not in the store, the bundle or the saved state
    key_body = key.split(b"-----BEGIN RSA PRIVATE KEY-----")[1][:64]
    state = linux["state"].read_text()
    for place in (linux["bundle"].read_bytes(), (linux["store"] / "cursor-byok-mitmproxy.crt").read_bytes(),
                  state.encode()):
        assert b"PRIVATE KEY" not in place and key_body not in place
    assert "$ certutil -d sql:" in out and "Done." in out
    # run again: nothing to do
    assert main(["setup", "--yes", *linux["args"]]) == 0
    assert "Nothing to do" in capsys.readouterr().out

    assert main(["setup", "--undo", "--yes"]) == 0
    assert linux["settings"].read_bytes() == original
    assert not (linux["store"] / "cursor-byok-mitmproxy.crt").exists()
    assert linux["bundle"].read_bytes() == b""
    assert "cursor-byok" not in nss_entries(linux["nssdb"])
    assert not linux["state"].exists()
    assert (linux["confdir"] / "mitmproxy-ca.pem").read_bytes() == key  # the CA itself stays
    assert main(["setup", "--undo", "--yes"]) == 0
    assert "Nothing to undo" in capsys.readouterr().out


def test_a_missing_settings_file_is_created_and_undo_removes_it(linux, capsys):
    linux["settings"].unlink()
    assert main(["setup", "--yes", "--proxy", "http://127.0.0.1:9090", *linux["args"]]) == 0
    assert parse_jsonc(linux["settings"].read_text()) == {**PROXY, "http.proxy": "http://127.0.0.1:9090"}
    assert main(["setup", "--undo", "--yes"]) == 0
    assert not linux["settings"].exists()


def test_undo_after_the_user_edited_settings_reverts_only_the_proxy_keys(linux, capsys):
    linux["settings"].write_text(SETTINGS.replace('"editor.fontSize": 14,',
                                                  '"editor.fontSize": 14,\n    "http.proxy": "http://corp:3128",'))
    assert main(["setup", "--yes", *linux["args"]]) == 0
    assert "start mitmdump with --mode upstream:http://corp:3128" in capsys.readouterr().out
    text = linux["settings"].read_text()
    linux["settings"].write_text(text.replace('"editor.fontSize": 14', '"editor.fontSize": 16'))  # a later edit
    assert main(["setup", "--undo", "--yes"]) == 0
    restored = parse_jsonc(linux["settings"].read_text())
    assert restored["editor.fontSize"] == 16 and restored["http.proxy"] == "http://corp:3128"
    assert "http.proxySupport" not in restored


def test_a_dry_run_shows_the_diff_and_the_commands_and_changes_nothing(linux, capsys):
    original = linux["settings"].read_bytes()
    assert main(["setup", "--dry-run", *linux["args"]]) == 0
    out = capsys.readouterr().out
    assert '+    "http.proxy": "http://127.0.0.1:8080",' in out and '+    "http.proxySupport": "on",' in out
    assert f"install -m 0644 {linux['confdir']}/mitmproxy-ca-cert.pem {linux['store']}/cursor-byok-mitmproxy.crt" in out
    assert f"certutil -d sql:{linux['nssdb']} -A -t C,, -n cursor-byok -i" in out
    assert "Dry run: nothing was changed." in out
    assert linux["settings"].read_bytes() == original
    assert not linux["confdir"].exists() and not linux["state"].exists() and not any(linux["store"].iterdir())


def test_it_asks_first_and_a_no_changes_nothing(linux, capsys, monkeypatch):
    original = linux["settings"].read_bytes()
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    monkeypatch.setattr("sys.stdin.isatty", lambda: True, raising=False)
    assert main(["setup", *linux["args"]]) == 1
    assert "Nothing was changed." in capsys.readouterr().out
    assert linux["settings"].read_bytes() == original and not linux["state"].exists()
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no terminal, no --yes: refuse
    assert main(["setup", *linux["args"]]) == 2
    assert "add --yes" in capsys.readouterr().err


def test_a_failing_step_keeps_what_was_done_for_undo(linux, capsys):
    linux["update"].write_text("#!/bin/sh\necho 'no space left' >&2\nexit 3\n")
    original = linux["settings"].read_bytes()
    assert main(["setup", "--yes", "--json", *linux["args"]]) == 1
    report = json.loads(capsys.readouterr().out)
    assert "failed (3): no space left" in report["error"] and report["done"] is False
    state = json.loads(linux["state"].read_text())
    # the settings were written, the store step got as far as the copy, the NSS step never began
    assert "settings" in state and [(e["store"], e["complete"]) for e in state["ca"]] == [("linux-custom", False)]
    assert (linux["store"] / "cursor-byok-mitmproxy.crt").exists() and nss_entries(linux["nssdb"]) == ""
    linux["update"].write_text("#!/bin/sh\nexit 0\n")
    assert main(["setup", "--undo", "--yes"]) == 0
    assert linux["settings"].read_bytes() == original
    assert not (linux["store"] / "cursor-byok-mitmproxy.crt").exists() and not linux["state"].exists()


def test_a_step_that_failed_runs_again_on_the_next_setup(linux, capsys):
    """The store update failed once; the next setup runs that step again (not only the NSS one), and the
    state holds one entry per step."""
    good = linux["update"].read_text()
    linux["update"].write_text("#!/bin/sh\nexit 3\n")
    assert main(["setup", "--yes", *linux["args"]]) == 1
    capsys.readouterr()
    linux["update"].write_text(good)
    assert main(["setup", "--yes", *linux["args"]]) == 0
    assert "Done." in capsys.readouterr().out
    assert linux["bundle"].read_bytes() == (linux["confdir"] / "mitmproxy-ca-cert.pem").read_bytes()
    state = json.loads(linux["state"].read_text())
    assert sorted((e["store"], e["complete"]) for e in state["ca"]) == [("linux-custom", True), ("nss", True)]


def test_json_plan_for_scripts(linux, capsys):
    assert main(["setup", "--dry-run", "--json", *linux["args"]]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["action"] == "setup" and report["dry_run"] is True and report["done"] is False
    assert report["settings"]["changed"] is True and '+    "http.proxySupport": "on",' in report["settings"]["diff"]
    assert [c["argv"][0] for c in report["commands"]] == ["install", str(linux["update"]), "mkdir", "certutil",
                                                         "certutil"]
    assert report["create_ca"] == str(linux["confdir"])


def test_a_certificate_file_holding_a_key_is_refused(tmp_path):
    confdir = tmp_path / "conf"
    setup_cmd.create_ca(confdir)
    (confdir / "mitmproxy-ca-cert.pem").write_bytes((confdir / "mitmproxy-ca.pem").read_bytes())
    with pytest.raises(ValueError, match="holds a private key"):
        setup_cmd.CaCert.read(confdir / "mitmproxy-ca-cert.pem")
