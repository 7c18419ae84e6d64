"""A minimal pod watch that only says "something changed", for the kubelet's wake-ups.

The kubelet reconciles from fresh lists, so a watch event needs no decoding beyond its
resourceVersion (to resume without replaying) and type. Short server-side timeouts let the
thread notice ``stop`` within a couple of seconds without closing sockets from outside.
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

WATCH_TIMEOUT_SECONDS = 2


def watch_pods(
    server: str,
    token: str,
    ca_cert: Path,
    field_selector: str,
    on_change: Callable[[], None],
    stopping: threading.Event,
) -> None:
    """Call ``on_change`` for every pod event matching ``field_selector`` until ``stopping``."""
    context = ssl.create_default_context(cafile=str(ca_cert))
    resource_version = ""
    while not stopping.is_set():
        query = {
            "watch": "1",
            "fieldSelector": field_selector,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT_SECONDS),
        }
        if resource_version:
            query["resourceVersion"] = resource_version
        request = urllib.request.Request(
            f"{server}/api/v1/pods?{urllib.parse.urlencode(query)}",
            headers={"Authorization": f"Bearer {token}"},
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                for line in response:
                    event = json.loads(line)
                    if event.get("type") == "ERROR":  # e.g. 410 Gone: relist from now
                        resource_version = ""
                        break
                    metadata = event.get("object", {}).get("metadata", {})
                    resource_version = metadata.get("resourceVersion", resource_version)
                    if event.get("type") != "BOOKMARK":
                        on_change()
        except (urllib.error.URLError, OSError, ValueError):
            stopping.wait(0.5)
