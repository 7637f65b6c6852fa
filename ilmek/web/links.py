"""Every URL the console writes, built from where it is mounted (``SCRIPT_NAME``).

Thread and checkpoint ids travel in the query string, percent-encoded,
never in the path: a WSGI server decodes ``PATH_INFO`` (so an id holding
``/`` would change the route) but hands the query string over untouched.

Every URL is a path of the console: the mount point and the path each start
with exactly one ``/``, so no link or redirect reads as ``//other.host/``
(a browser's scheme-relative URL, an open redirect); :meth:`Links.page`
makes a path a client sent safe to send back.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence

from .html import Url

__all__ = ["Links"]

Params = Mapping[str, "str | int | Sequence[str] | None"]


def _query(params: Params) -> str:
    pairs: list[tuple[str, str]] = []
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, (str, int)):
            pairs.append((key, str(value)))
        else:
            pairs.extend((key, item) for item in value)
    # A lone surrogate (from a stored value) has no UTF-8 form: written as its escape, never a crash.
    return urllib.parse.urlencode(pairs, quote_via=urllib.parse.quote, safe="", errors="backslashreplace")


class Links:
    """The console's URLs under one mount point.

    Args:
        script_name: Where the console is mounted (the WSGI ``SCRIPT_NAME``),
            ``""`` at the root.
    """

    def __init__(self, script_name: str) -> None:
        # SCRIPT_NAME arrives decoded; encode it again, keeping its slashes.
        mount = urllib.parse.quote(script_name.strip("/"), safe="/")
        self.base = f"/{mount}" if mount else ""

    def to(self, path: str, params: Params | None = None) -> Url:
        """``path`` (starting with ``/``) under the mount point, with a query string."""
        query = _query(params or {})
        # One leading slash, however many it came with: "//host" would leave the console.
        path = "/" + path.lstrip("/")
        return Url(f"{self.base}{path}" + (f"?{query}" if query else ""))

    def page(self, path: str, params: Params | None = None) -> Url:
        """A path a request named (decoded, as in ``PATH_INFO``), as a URL of the console.

        Every character but letters, digits, ``/`` and ``_.-~`` is
        percent-encoded, so a backslash, a tab or a ``%`` reaches the
        browser as text of the path, never as a separator it would drop or
        turn into ``/``.
        """
        return self.to(urllib.parse.quote(path, safe="/", errors="backslashreplace"), params)

    def threads(self, params: Params | None = None) -> Url:
        """The threads page (the inbox)."""
        return self.to("/", params)

    def thread(
        self, thread_id: str, checkpoint_id: str | None = None, *, fragment: str = "", tree: str | None = None
    ) -> Url:
        """A thread's page showing ``checkpoint_id`` (default: the latest); ``tree``: older checkpoints."""
        url = self.to("/thread", {"id": thread_id, "checkpoint": checkpoint_id, "tree": tree})
        return Url(url + (f"#{fragment}" if fragment else ""))

    def value(
        self,
        thread_id: str,
        checkpoint_id: str,
        *,
        channel: str | None = None,
        task: str | None = None,
        key: str | None = None,
    ) -> Url:
        """The page showing one value whole: a channel of a checkpoint, or a step a task recorded."""
        return self.to(
            "/value",
            {"id": thread_id, "checkpoint": checkpoint_id, "channel": channel, "task": task, "key": key},
        )

    def action(self, name: str, thread_id: str, checkpoint_id: str | None = None) -> Url:
        """Where an action's form posts to."""
        return self.to(f"/action/{name}", {"id": thread_id, "checkpoint": checkpoint_id})

    def static(self, name: str) -> Url:
        """A file the console serves itself (its stylesheet)."""
        return self.to(f"/static/{name}")
