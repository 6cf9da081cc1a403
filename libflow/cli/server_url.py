"""Which server the client commands talk to: ``LIBFLOW_URL``, else the server's own settings."""

from __future__ import annotations

import os

from settings import SettingsError, settings_from_env

URL_VARIABLE = "LIBFLOW_URL"
_FALLBACK = "http://127.0.0.1:8080"


def default_server_url() -> str:
    """``LIBFLOW_URL``, else the URL the settings give the server (``LIBFLOW_PUBLIC_BASE_URL``,
    or ``LIBFLOW_HOST`` and ``LIBFLOW_PORT``), as a server started in this environment has it."""
    url = os.environ.get(URL_VARIABLE, "").strip()
    if url:
        return url.rstrip("/")
    try:
        return settings_from_env().resolved_public_base_url
    except SettingsError:
        # The command reports bad settings itself when it needs them; --url still works.
        return _FALLBACK
