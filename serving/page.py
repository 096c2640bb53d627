# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""A page to listen: `GET /` serves `static/index.html` and `GET /page.js` its script (package data, no build step, no
CDN). The page speaks through the public API (`POST /v1/audio/speech` with `stream_format: "sse"` and pcm, scheduled
with the Web Audio API as the deltas arrive), so it needs nothing the API does not offer; it asks for the API key once
when the server has one. Its state is `window.higgs` (`state`, `scheduledSeconds`, `message`, ...), which the browser
test reads."""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response


PAGE_FILES = {"/": ("index.html", "text/html; charset=utf-8"), "/page.js": ("page.js", "text/javascript; charset=utf-8")}
PUBLIC_PATHS = frozenset({*PAGE_FILES, "/favicon.ico"})
"""Paths served without the API key: the page and its script hold no data (the page asks for the key itself)."""


def page_file(name: str) -> bytes:
    """A file of the page, read from the installed package (`serving/static`, package data)."""
    return resources.files(__package__).joinpath("static", name).read_bytes()


def _route(name: str, media_type: str):
    async def serve() -> Response:  # no parameters: nothing of the request names a file
        return Response(page_file(name), media_type=media_type, headers={"Cache-Control": "no-cache"})

    return serve


def add_page_routes(router: APIRouter) -> None:
    for path, (name, media_type) in PAGE_FILES.items():
        router.add_api_route(path, _route(name, media_type), methods=["GET"], include_in_schema=False)

    @router.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return Response(status_code=204)


__all__ = ["PAGE_FILES", "PUBLIC_PATHS", "add_page_routes", "page_file"]
