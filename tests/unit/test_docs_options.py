"""docs/options.md lists every cursor-byok option, with its real default."""

import re
from pathlib import Path

from mitmproxy.test import taddons

from byok.main import make_addons

DOC = Path(__file__).resolve().parents[2] / "docs" / "options.md"


def test_every_option_is_documented_with_its_default():
    rows = dict(re.findall(r"^\| `(byok_[a-z0-9_]+)` \| `([^`]*)` \|", DOC.read_text(), flags=re.M))
    with taddons.context(*make_addons()) as tctx:
        options = {n: o for n, o in tctx.options._options.items() if n.startswith("byok_")}
    assert set(rows) == set(options)
    for name, option in options.items():
        default = option.default
        shown = ", ".join(default) if isinstance(default, (list, tuple)) else str(default).lower() \
            if isinstance(default, bool) else str(default)
        assert rows[name] == shown, name
        assert option.help, f"{name} has no help text"
