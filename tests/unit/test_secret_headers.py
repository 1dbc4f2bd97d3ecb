"""Issue 24.3: one list of secret header names (byok.providers.base.SECRET_HEADERS), used by the
provider calls' redaction and by capture exports alike; no second list anywhere in the package."""

from __future__ import annotations

import ast
from pathlib import Path

import byok
from byok.cli.capture import Redactor
from byok.providers.base import SECRET_HEADERS, redact_headers


def test_secret_header_names_are_listed_once():
    from byok.cli import capture

    defined = []
    for path in sorted(Path(byok.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any("SECRET_HEADERS" in getattr(t, "id", "") for t in targets):
                    defined.append(f"{path.parent.name}/{path.name}")
    assert defined == ["providers/base.py"] and capture.SECRET_HEADERS is SECRET_HEADERS


def test_both_users_redact_every_name_on_the_list():
    headers = {name.title(): f"secret-value-{i}" for i, name in enumerate(sorted(SECRET_HEADERS))}
    headers["x-custom"] = "visible"
    provider_side = redact_headers(headers)
    capture_side = Redactor(secrets=[]).headers(headers)
    for name in SECRET_HEADERS:
        assert provider_side[name.title()] == "<redacted>" and capture_side[name] == "<redacted>"
    assert provider_side["x-custom"] == capture_side["x-custom"] == "visible"
    assert {"x-goog-api-key", "proxy-authorization", "set-cookie"} <= SECRET_HEADERS  # were capture-only
