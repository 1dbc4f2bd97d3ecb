"""cursor-byok: Cursor's Agent backend, answered by a mitmproxy addon with your own provider.

The folders addon/, proto/, store/ and prompt/ are installed as byok.addon, byok.proto, byok.store
and byok.prompt (see pyproject.toml).
"""
