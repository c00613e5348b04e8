"""A small OpenID Connect token issuer on loopback, for tests of OAUTHBEARER logins.

It is what a team's identity provider (Keycloak, Okta, Entra ID) is to a Kafka cluster, cut
down to the client-credentials grant (docs/security.md "OAUTHBEARER with OIDC")::

    GET  /.well-known/openid-configuration   issuer, token_endpoint, jwks_uri
    GET  /jwks                                the RSA public key(s) as a JWK Set (the broker's
                                              OAuthBearerValidatorCallbackHandler reads it)
    POST /token                               grant_type=client_credentials, the client's id and
                                              secret by HTTP Basic or form fields; answers an
                                              RS256 JWT: sub = the client's subject, aud, iss,
                                              scope, iat, exp = now + lifetime_s

A client it does not know, a wrong secret or a refused client (:meth:`OidcIssuer.refuse`) gets
``401 invalid_client``. ``issued`` / ``issued_at`` count and time the tokens given per client, so a test sees refreshes.
The JWS is built here with ``cryptography`` (RS256 = RSASSA-PKCS1-v1_5 with SHA-256, RFC 7518):
no JWT library is needed. Secrets are compared in constant time and never logged.
"""

from __future__ import annotations

import base64
import hmac
import json
import secrets
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int_b64(value: int) -> str:
    return b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


@dataclass(frozen=True)
class OidcClient:
    """A registered client: its id, its secret, and the ``sub`` its tokens carry."""

    client_id: str
    secret: str
    subject: str
    audience: str | None = None  # None: the issuer's; another: a token the broker refuses


class OidcIssuer:
    """The issuer: start it, register clients, point the broker at :attr:`jwks_url` and the
    clients at :attr:`token_url`; :meth:`stop` ends it."""

    def __init__(self, *, audience: str, lifetime_s: float = 3600.0) -> None:
        self.audience = audience
        self.lifetime_s = lifetime_s
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = secrets.token_hex(8)
        self._clients: dict[str, OidcClient] = {}
        self._refused: set[str] = set()
        self.issued: Counter[str] = Counter()
        self.issued_at: dict[str, list[float]] = {}  # client id -> when each token was given
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> OidcIssuer:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer._get(self)

            def do_POST(self) -> None:
                issuer._post(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a request line may carry a client id; nothing is logged

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="oidc-issuer", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the issuer first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/jwks"

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    # -- clients ---------------------------------------------------------------------------
    def register(
        self, client_id: str, *, subject: str | None = None, audience: str | None = None
    ) -> OidcClient:
        """A new client with a random secret; its tokens' ``sub`` is ``subject`` (default: the
        client id, as most providers do for a service account), their ``aud`` ``audience``
        (default: the issuer's)."""
        client = OidcClient(
            client_id, secrets.token_urlsafe(24), subject or client_id, audience=audience
        )
        with self._lock:
            self._clients[client_id] = client
        return client

    def refuse(self, client_id: str, refused: bool = True) -> None:
        """Answer ``client_id``'s token requests with 401 (a disabled client) or stop doing so."""
        with self._lock:
            (self._refused.add if refused else self._refused.discard)(client_id)

    # -- tokens ----------------------------------------------------------------------------
    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        key = {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid}
        return {"keys": [key | {"n": _int_b64(numbers.n), "e": _int_b64(numbers.e)}]}

    def token(self, subject: str, *, scope: str = "", audience: str | None = None) -> str:
        """A signed RS256 JWT for ``subject``, valid for ``lifetime_s`` from now."""
        now = int(time.time())
        claims = {
            "iss": self.url,
            "sub": subject,
            "aud": audience or self.audience,
            "iat": now,
            "nbf": now,
            "exp": now + max(1, round(self.lifetime_s)),
            "jti": secrets.token_hex(8),
            "scope": scope,
        }
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        signing_input = ".".join(
            b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
        ).encode()
        signature = self._key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input.decode()}.{b64url(signature)}"

    def _authenticate(
        self, headers: Mapping[str, str], form: Mapping[str, str]
    ) -> OidcClient | None:
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        auth = headers.get("Authorization", "")
        if auth.startswith("Basic "):
            try:
                pair = base64.b64decode(auth[6:]).decode()
            except (ValueError, UnicodeDecodeError):
                return None
            client_id, _, secret = pair.partition(":")
            client_id, secret = urllib.parse.unquote(client_id), urllib.parse.unquote(secret)
        with self._lock:
            client = self._clients.get(client_id)
            refused = client_id in self._refused
        if client is None or refused or not hmac.compare_digest(client.secret, secret):
            return None
        return client

    # -- HTTP ------------------------------------------------------------------------------
    def _get(self, req: BaseHTTPRequestHandler) -> None:
        if req.path == "/.well-known/openid-configuration":
            _json(req, 200, {
                "issuer": self.url,
                "token_endpoint": self.token_url,
                "jwks_uri": self.jwks_url,
                "grant_types_supported": ["client_credentials"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic",
                                                          "client_secret_post"],
            })  # fmt: skip
        elif req.path == "/jwks":
            _json(req, 200, self.jwks())
        else:
            _json(req, 404, {"error": "not_found"})

    def _post(self, req: BaseHTTPRequestHandler) -> None:
        if req.path != "/token":
            _json(req, 404, {"error": "not_found"})
            return
        length = int(req.headers.get("Content-Length") or 0)
        form = dict(urllib.parse.parse_qsl(req.rfile.read(length).decode()))
        if form.get("grant_type") != "client_credentials":
            _json(req, 400, {"error": "unsupported_grant_type"})
            return
        client = self._authenticate(dict(req.headers.items()), form)
        if client is None:
            _json(req, 401, {"error": "invalid_client"})
            return
        scope = form.get("scope", "")
        token = self.token(client.subject, scope=scope, audience=client.audience)
        with self._lock:
            self.issued[client.client_id] += 1
            self.issued_at.setdefault(client.client_id, []).append(time.time())
        _json(req, 200, {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": max(1, round(self.lifetime_s)),
            "scope": scope,
        })  # fmt: skip


def _json(req: BaseHTTPRequestHandler, status: int, body: Mapping[str, Any]) -> None:
    data = json.dumps(body).encode()
    req.send_response(status)
    req.send_header("Content-Type", "application/json")
    req.send_header("Content-Length", str(len(data)))
    req.send_header("Cache-Control", "no-store")
    req.end_headers()
    req.wfile.write(data)
