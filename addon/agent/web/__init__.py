"""The web capabilities the proxy itself runs for the model: search backends (search.py), the
WebFetch guard and text extraction (fetch.py), image generation (images.py). `WebTools` is what a
run's tools get (RunToolContext.web): built from the providers file and the options."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from .fetch import FetchPolicy
from .images import ImageBackend
from .search import SearchBackend


@dataclass(frozen=True)
class WebTools:
    http: httpx.AsyncClient | None = None
    search: SearchBackend | None = None
    """None: no [web_search] table, WebSearch is not offered."""
    images: ImageBackend | None = None
    """None: no [image_generation] table, GenerateImage is not offered."""
    fetch: FetchPolicy = FetchPolicy()

    def unoffered(self) -> frozenset[str]:
        """Tools this configuration cannot serve: they are left out of every manifest."""
        return frozenset(name for name, backend in (("WebSearch", self.search), ("GenerateImage", self.images))
                         if backend is None)
