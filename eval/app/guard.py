"""What the demo server (``eval.app.server``) lets in: its own keys, the requests it serves, and the
folders and paths a request may name.

- **Keys** (:class:`AppConfig`, every default here): ``host``, ``port``, ``allow_dirs``,
  ``allow_hosts``, ``send_timeout_s``, ``max_upload_mb``, and the limits of ``eval.app.limits``
  (``request_timeout_s``, ``min_body_kib_s``, ``max_connections``, ``max_connections_per_ip``);
  every other ``key=value`` is an ``eval.run`` override.
- **Requests** (:class:`Guard`): the ``Host`` header must name the server (127.0.0.1, localhost,
  [::1], the bound address; on a wildcard bind the machine's name and addresses; ``allow_hosts=``),
  so a page served from another name that resolves here (DNS rebinding) is refused; an ``Origin``
  must be the server's own; and every request carries the process's random token (printed in the
  start line's URL as ``?token=``), as the query's ``token``, the cookie the page's first answer sets
  (HttpOnly, SameSite=Strict) or ``Authorization: token <it>``, compared in constant time. A refusal
  is a 403 naming what to fix; the token is never part of it.
- **Paths** (:func:`plain_path`, :func:`inside`): a checkpoint named by a request is a folder path,
  never Hydra override syntax (``${...}``, ``a,b``, ``[..]``...); a video or a checkpoint must lie in
  a folder the server was started with (resolved, symlinks followed), or the refusal lists them.
"""

from __future__ import annotations

import hmac
import os
import secrets
import socket
from dataclasses import dataclass, fields
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

#: The names of this machine's loopback interface: always answered.
LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: A bind to one of these listens on every interface.
WILDCARD = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class AppConfig:
    """The demo server's own keys (``python -m eval.app.server host=... port=...``)."""

    host: str = "127.0.0.1"
    """The address to listen on (``0.0.0.0``: every interface; the token is required either way)."""
    port: int = 7860
    """The port (0: a free one, printed in the start line)."""
    allow_dirs: tuple[str, ...] = ()
    """Folders whose videos and checkpoints a request may name, besides the records' video folders,
    the upload folder and the start checkpoint's parent (``allow_dirs=[/data/clips,/ckpts]``)."""
    allow_hosts: tuple[str, ...] = ()
    """More ``Host`` names the server answers to (a reverse proxy's name, an address)."""
    send_timeout_s: float = 5.0
    """A stream whose client takes no data for this long ends, and frees the model for the next."""
    max_upload_mb: float = 512.0
    """The largest upload (MiB); a larger one is refused with 413."""
    request_timeout_s: float = 10.0
    """A request's line, headers and body must arrive within this many seconds of its connection's
    start, however slowly they trickle; else the connection is closed (``eval.app.limits``)."""
    min_body_kib_s: float = 256.0
    """A body gets one second more per this many KiB (a 512 MiB upload: 2,048 s more)."""
    max_connections: int = 64
    """Connections open at once; one more is answered 503, or takes the place of the connection that
    has waited longest (over 1 s) for its headers."""
    max_connections_per_ip: int = 16
    """Connections open at once from one address (behind a reverse proxy, all come from the proxy:
    set it to ``max_connections``); one more is answered 503."""

    @classmethod
    def split(cls, argv: list[str]) -> tuple[AppConfig, list[str]]:
        """(the app's keys, the other ``key=value`` overrides) of a command line; a bad value of an
        app key raises ``ValueError`` naming it."""
        types = {f.name: f.type for f in fields(cls)}
        given: dict[str, Any] = {}
        rest = []
        for arg in argv:
            key, eq, value = arg.partition("=")
            if not eq or key not in types:
                rest.append(arg)
                continue
            given[key] = _value(key, value, types[key])
        app = cls(**given)
        positive = ("send_timeout_s", "max_upload_mb", "request_timeout_s", "min_body_kib_s")
        positive += ("max_connections", "max_connections_per_ip")
        bad = [f"{k}={getattr(app, k)}" for k in positive if not getattr(app, k) > 0]
        if bad or not 0 <= app.port < 65536:
            raise ValueError(
                f"{', '.join(bad + [f'port={app.port}'])}: the times, sizes and counts must be > 0 and the port "
                "in 0..65535"
            )
        return app, rest


def _value(key: str, value: str, kind: str) -> Any:
    if "tuple" in kind:
        items = value.strip().removeprefix("[").removesuffix("]")
        return tuple(v.strip() for v in items.split(",") if v.strip())
    try:
        return {"int": int, "float": float}.get(kind, str)(value)
    except ValueError:
        raise ValueError(f"{key}={value!r}: expected {kind}") from None


def host_names(host: str, extra: tuple[str, ...] = ()) -> frozenset[str]:
    """The ``Host`` names a server bound to ``host`` answers to (lower case, no brackets)."""
    names = {*LOOPBACK, host.strip("[]").lower(), *(e.strip("[]").lower() for e in extra)}
    if host in WILDCARD:
        name = socket.gethostname()
        names |= {name.lower(), name.split(".")[0].lower()}
        try:
            names |= {str(a[4][0]).lower() for a in socket.getaddrinfo(name, None)}
        except OSError:
            pass
    return frozenset(n for n in names if n)


def _hostname(value: str) -> str:
    """``example.org:80`` -> ``example.org``; ``[::1]:80`` -> ``::1``."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class Guard:
    """The checks every request passes (see the module's docstring). ``token``: the process's
    random one (``secrets.token_urlsafe``); ``names``: :func:`host_names`; ``port``: the bound one
    (the cookie is named after it, so two servers on one host keep their own)."""

    def __init__(self, names: frozenset[str], port: int, token: str | None = None):
        self.names = names
        self.token = token or secrets.token_urlsafe(32)
        self.cookie = f"eval-app-token-{port}"

    def refusal(self, headers: Any, query: dict[str, list[str]]) -> str | None:
        """Why a request is refused (a 403), or None. ``headers``: the request's; ``query``: its
        parsed query string."""
        host = headers.get("Host")
        if not host or _hostname(host) not in self.names:
            shown = ", ".join(f"[{n}]" if ":" in n else n for n in sorted(self.names))
            return f"Host {(host or '')[:80]!r} is not a name this server answers to ({shown}); add it with allow_hosts="
        origin = headers.get("Origin")
        if origin is not None:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or parts.netloc.lower() != host.strip().lower():
                return f"a request from another origin ({origin[:80]!r}) is refused: only the server's own page may call it"
        offered = [*self._header_tokens(headers), *query.get("token", []), *self._cookie_tokens(headers)]
        if not offered:
            return (
                "this server needs its token: open the URL it printed at start (http://HOST:PORT/?token=...)"
            )
        if not any(hmac.compare_digest(t.encode(), self.token.encode()) for t in offered):
            return "wrong token: open the URL the server printed at start (http://HOST:PORT/?token=...)"
        return None

    @staticmethod
    def _header_tokens(headers: Any) -> list[str]:
        scheme, _, value = (headers.get("Authorization") or "").strip().partition(" ")
        return [value.strip()] if scheme.lower() in ("token", "bearer") and value.strip() else []

    def _cookie_tokens(self, headers: Any) -> list[str]:
        try:
            jar = SimpleCookie(headers.get("Cookie") or "")
        except CookieError:
            return []
        return [jar[self.cookie].value] if self.cookie in jar else []

    def set_cookie(self) -> str:
        """The ``Set-Cookie`` value that carries the token for the page's later requests."""
        return f"{self.cookie}={self.token}; HttpOnly; SameSite=Strict; Path=/"


def plain_path(field: str, value: str) -> str:
    """``value`` if it is a plain path (or ``null``) that Hydra reads back as itself; else a
    ``ValueError`` that quotes the field as given (never a resolved value)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    value = value.strip()
    if value.startswith("~"):
        value = os.path.expanduser(value)
    why = "'${' starts an interpolation" if "${" in value else None
    if why is None and value != "null":
        try:
            parsed = OverridesParser.create().parse_override(f"{field}={value}").value()
        except Exception:  # Hydra's grammar errors
            parsed = None
        if parsed != value:
            why = "Hydra would read it as override syntax (, ' \" [ ] ( ) = or non-ASCII)"
    if why:
        raise ValueError(f"{field} {value[:200]!r} is not a plain folder path: {why}; give the folder's path")
    return value


def inside(kind: str, path: str | Path, dirs: list[Path]) -> Path:
    """``path`` resolved (symlinks followed) if it lies in one of ``dirs``; else a ``ValueError``
    naming the folders and how to add one."""
    real = Path(os.path.realpath(Path(path).expanduser()))
    if any(real.is_relative_to(d) for d in dirs):
        return real
    shown = ", ".join(str(d) for d in dirs) or "none"
    raise ValueError(
        f"{kind} {str(path)[:300]} is outside the folders this server reads {kind}s from ({shown}); "
        "start it with allow_dirs=[DIR,...] to add one"
    )


def resolved_dirs(dirs: list[str | Path]) -> list[Path]:
    """``dirs`` resolved, each once, in order."""
    out: list[Path] = []
    for d in dirs:
        real = Path(os.path.realpath(Path(d).expanduser()))
        if real not in out:
            out.append(real)
    return out
