"""cursor-byok: Cursor's Agent backend, answered by a mitmproxy addon with your own provider.

Installed as the import package `byok` (this folder), with `byok.proto`, `byok.store` and
`byok.prompt` mapped from the repository's proto/, store/ and prompt/ folders (pyproject.toml).
Modules directly in this package face mitmproxy; `byok.agent` never imports mitmproxy.
"""
