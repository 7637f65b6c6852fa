"""Mounting the console (or any WSGI application) in a Django project.

Django is imported only when :func:`django_view` is called, so the console
itself never needs it.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["django_view"]

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _wsgi_string(text: str) -> str:
    # PEP 3333: environ values are bytes carried as latin-1 text.
    return text.encode("utf-8").decode("latin-1")


def django_view(wsgi_app: WsgiApp) -> Callable[..., Any]:
    """A Django view that hands its requests to ``wsgi_app``, mounted where the URL pattern matched.

    The pattern captures the rest of the path as ``path``::

        from django.urls import re_path
        console = ilmek.web.app(checkpointer, graphs, allow_actions=True)
        urlpatterns = [re_path(r"^console(?P<path>/.*)?$", staff_only(ilmek.web.django_view(console)))]

    The application sees ``SCRIPT_NAME`` ending at the mount point
    (``/console``) and builds its links from it. The view is exempt from
    Django's CSRF middleware (the console checks its own tokens); wrap it
    in your authentication (``staff_member_required``, ``login_required``).
    """
    from django.http import HttpResponse, RawPostDataException
    from django.views.decorators.csrf import csrf_exempt

    def view(request: Any, path: str | None = None) -> Any:
        rest = path or ""
        full = request.path_info
        prefix = full[: len(full) - len(rest)] if rest and full.endswith(rest) else full.rstrip("/")
        environ = dict(request.META)
        # Django's scheme, which follows SECURE_PROXY_SSL_HEADER behind a proxy that ends TLS.
        environ["wsgi.url_scheme"] = request.scheme
        environ["SCRIPT_NAME"] = str(request.META.get("SCRIPT_NAME") or "").rstrip("/") + _wsgi_string(prefix)
        environ["PATH_INFO"] = _wsgi_string(rest or "/")
        try:
            body = request.body
        except RawPostDataException:
            # A middleware read the form already: hand the application the same fields.
            body = request.POST.urlencode().encode("ascii")
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        started: dict[str, Any] = {}

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            started["status"], started["headers"] = status, headers
            return lambda data: None

        chunks = wsgi_app(environ, start_response)
        try:
            content = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        response = HttpResponse(content, status=int(started["status"].split()[0]))
        for name, value in started["headers"]:
            response[name] = value
        return response

    exempt: Callable[..., Any] = csrf_exempt(view)
    return exempt
