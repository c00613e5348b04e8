"""How a client reaches a secured cluster: the ``[kafka]`` table of fleet.toml as a frozen value.

:class:`KafkaSecurity` names the protocol, the SASL login and the TLS files; ``properties``
passes further librdkafka settings through, except the ones this package owns (the ack model's
settings in :mod:`pipeline.kafka.settings`, and every credential, which has a named key). It is
applied to every client, producer, consumer and admin alike, by
:func:`pipeline.kafka.settings.with_security`.

Three ways to log in (docs/security.md)::

    SASL_SSL + SCRAM-SHA-512 / -256 / PLAIN   sasl_username + the password (a Secret)
    SSL + a client certificate (mutual TLS)   ssl_certificate_location + ssl_key_location (+ the
                                              key's password, a Secret); the broker maps the
                                              certificate's DN to the principal
    SASL_SSL + OAUTHBEARER (OIDC)             the OAUTH_PROPERTIES (method oidc, client id,
                                              token endpoint, scope) + the client secret (a
                                              Secret); the principal is the token's ``sub``

Secrets::

    never inline          an ``sasl_password`` key in the file is refused (SECRET_INLINE), and
                          so is any property naming a secret or a token
    read at the edge      ``sasl_password_file`` / ``sasl_password_env`` (and the same pair for
                          a client key's password and an OAuth client's secret) are resolved by
                          the loader into a :class:`Secret`; nothing else reads the file or env
    never shown           a Secret's repr and str are ``***``; the dataclass field is repr=False;
                          only :meth:`Secret.reveal` gives the text, and only ``with_security``
                          calls it, to hand it to librdkafka
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pipeline.errors import ConfigError
from pipeline.reasons import Config, Security
from pipeline.support.binder import (
    CONFIG_REASONS,
    HIDDEN,
    bind,
    config_error,
    in_file,
    read_toml,
    refuse_unknown,
)


class SecurityProtocol(enum.StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def sasl(self) -> bool:
        return self.value.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.value.endswith("SSL")


class SaslMechanism(enum.StrEnum):
    SCRAM_SHA_512 = "SCRAM-SHA-512"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    PLAIN = "PLAIN"
    OAUTHBEARER = "OAUTHBEARER"


class Secret:
    """A credential that never prints: ``repr``/``str``/f-strings show ``***``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str) or not value:
            raise ConfigError("a secret must be a non-empty string", reason=Config.CONFIG_INVALID)
        self._value = value

    def reveal(self) -> str:
        """The text itself; call only to hand it to the client library."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __reduce__(self) -> Any:
        raise TypeError("a Secret is not picklable")  # nor written to a file by accident

    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: Any) -> Secret:
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))


# Keys a [kafka.properties] table may not set: the ack models' settings (docs/gateway.md) and
# what identifies a client to its group, which this package sets per client.
OWNED_PROPERTIES: Final = frozenset(
    {
        "bootstrap.servers",
        "metadata.broker.list",
        "group.id",
        "group.instance.id",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "auto.offset.reset",
        "isolation.level",
        "partition.assignment.strategy",
        "enable.idempotence",
        "acks",
        "request.required.acks",
        "max.in.flight.requests.per.connection",
        "max.in.flight",
        "partitioner",
        "transactional.id",
        "enable.partition.eof",
        "logger",
        "error_cb",
        "log_cb",
    }
)
# Keys that have a named key in [kafka] (so the loader can check and hide them).
NAMED_PROPERTIES: Final = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
    }
)
# Credentials librdkafka takes besides the SASL password: a PEM key's or a PKCS#12 keystore's
# password, an OAuth client's secret (from a file or a variable, or a --command-config file;
# never from the command line).
SECRET_PROPERTIES: Final = frozenset(
    {"ssl.key.password", "ssl.keystore.password", "sasl.oauthbearer.client.secret"}
)
OAUTH_SECRET: Final = "sasl.oauthbearer.client.secret"
# The OIDC client-credentials login of librdkafka (sasl.oauthbearer.method=oidc): exactly these
# pass the secret-words rule below; the secret itself is OAUTH_SECRET, a Secret.
OAUTH_PROPERTIES: Final = frozenset(
    {
        "sasl.oauthbearer.method",
        "sasl.oauthbearer.client.id",
        "sasl.oauthbearer.token.endpoint.url",
        "sasl.oauthbearer.scope",
    }
)
_OAUTH_REQUIRED: Final = (
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.token.endpoint.url",
)
# secret property -> the [kafka] table's name for its _file / _env pair
SECRET_SOURCES: Final = {
    "ssl.key.password": "ssl_key_password",
    "sasl.oauthbearer.client.secret": "sasl_oauthbearer_client_secret",
}
_TLS_KEYS: Final = ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location")
_SECRET_WORDS = ("password", "secret", "sasl.jaas", "sasl.oauthbearer.config", ".pem", "token")


def property_refusal(key: str) -> tuple[str, str] | None:
    """Why ``key`` may not appear in ``[kafka.properties]`` (reason, detail), or None."""
    if key in OWNED_PROPERTIES:
        return Security.PROPERTY_OWNED, "set by fleet-pipeline itself (docs/gateway.md)"
    if key in NAMED_PROPERTIES:
        name = key.replace(".", "_").replace("sasl_mechanisms", "sasl_mechanism")
        return Security.PROPERTY_OWNED, f"use the named key [kafka].{name}"
    if key in OAUTH_PROPERTIES:
        return None
    if any(word in key for word in _SECRET_WORDS):
        return Security.SECRET_INLINE, "a credential never goes inline (docs/security.md)"
    return None


@dataclass(frozen=True, kw_only=True)
class KafkaSecurity:
    """How every Kafka client of one process connects (R-SEC-1: TLS, per-gateway logins).

    ``password_source`` says where the password came from (``file:<path>`` or ``env:<NAME>``),
    for messages; the password itself is only in ``sasl_password``, which no repr shows. The
    other credentials (a client key's password, an OAuth client's secret) are Secrets in
    ``secret_properties``.
    """

    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = field(default=None, repr=False)
    password_source: str | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    properties: tuple[tuple[str, str], ...] = ()
    secret_properties: tuple[tuple[str, Secret], ...] = field(default=(), repr=False)
    # where each secret property came from (key, ``file:<path>`` / ``env:<NAME>``), for
    # messages and for writing the table back (pipeline.testing.fleet_toml)
    secret_sources: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        proto = self.security_protocol
        if not isinstance(proto, SecurityProtocol):
            raise _invalid("security_protocol", proto, f"one of {', '.join(SecurityProtocol)}")
        if proto.sasl and not isinstance(self.sasl_mechanism, SaslMechanism):
            raise _invalid(
                "sasl_mechanism", self.sasl_mechanism, f"one of {', '.join(SaslMechanism)}"
            )
        if self.oauth:
            self._check_oauth()
        elif proto.sasl:
            if not isinstance(self.sasl_username, str) or not self.sasl_username:
                raise _invalid("sasl_username", self.sasl_username, f"{proto} needs a username")
            if not isinstance(self.sasl_password, Secret):
                raise _invalid(
                    "sasl_password_file",
                    None,
                    f"{proto} needs sasl_password_file or sasl_password_env",
                    Config.CONFIG_MISSING_KEY,
                )
        else:
            for key in ("sasl_mechanism", "sasl_username", "sasl_password"):
                if getattr(self, key) is not None:
                    raise _invalid(key, "(set)", f"does not apply to {proto}")
        for key in _TLS_KEYS:
            value = getattr(self, key)
            if value is not None and not proto.tls:
                raise _invalid(key, value, f"does not apply to {proto}")
            if value is not None and (not isinstance(value, str) or not value):
                raise _invalid(key, value, "must be a path")
        if (self.ssl_certificate_location is None) != (self.ssl_key_location is None):
            raise _invalid(
                "ssl_key_location", self.ssl_key_location, "a client certificate needs its key"
            )
        for key, value in self.properties:
            refusal = property_refusal(key)
            if refusal is not None:
                raise _invalid(f"properties.{key}", HIDDEN, refusal[1], refusal[0])
            if not isinstance(value, str):
                raise _invalid(f"properties.{key}", value, "must be a string")
        for key, secret in self.secret_properties:
            if key not in SECRET_PROPERTIES or not isinstance(secret, Secret):
                raise _invalid(f"properties.{key}", HIDDEN, "not a credential librdkafka takes")
            if key == OAUTH_SECRET and not self.oauth:
                raise _invalid(f"properties.{key}", HIDDEN, "only with sasl_mechanism OAUTHBEARER")
            if key != OAUTH_SECRET and not proto.tls:
                raise _invalid(f"properties.{key}", HIDDEN, f"does not apply to {proto}")
        if not self.oauth and any(key in OAUTH_PROPERTIES for key, _ in self.properties):
            key = next(key for key, _ in self.properties if key in OAUTH_PROPERTIES)
            raise _invalid(f"properties.{key}", HIDDEN, "only with sasl_mechanism OAUTHBEARER")

    @property
    def oauth(self) -> bool:
        return self.sasl_mechanism is SaslMechanism.OAUTHBEARER

    def _check_oauth(self) -> None:
        """OAUTHBEARER: librdkafka's OIDC client-credentials login, never a username or a
        password; the client secret a Secret."""
        if not self.security_protocol.sasl:
            raise _invalid("sasl_mechanism", "OAUTHBEARER", "needs SASL_SSL (or SASL_PLAINTEXT)")
        for key in ("sasl_username", "sasl_password"):
            if getattr(self, key) is not None:
                raise _invalid(
                    key, "(set)", "does not apply to OAUTHBEARER (the token is the login)"
                )
        props = dict(self.properties)
        method = props.get("sasl.oauthbearer.method")
        if method != "oidc":
            raise _invalid("properties.sasl.oauthbearer.method", method,
                           "OAUTHBEARER here is the OIDC client-credentials login: give oidc",
                           Config.CONFIG_MISSING_KEY if method is None else Config.CONFIG_INVALID)  # fmt: skip
        for key in _OAUTH_REQUIRED:
            if not props.get(key):
                raise _invalid(f"properties.{key}", None, "OAUTHBEARER (oidc) needs it",
                               Config.CONFIG_MISSING_KEY)  # fmt: skip
        if OAUTH_SECRET not in dict(self.secret_properties):
            raise _invalid(
                "sasl_oauthbearer_client_secret_file",
                None,
                "OAUTHBEARER (oidc) needs the client secret: _file or _env",
                Config.CONFIG_MISSING_KEY,
            )

    def principal_hint(self) -> str:
        """Who this login is, for messages: the SASL user, the OAuth client, or the client
        certificate (the broker maps its DN); never a credential."""
        if self.oauth:
            return f"OAuth client {dict(self.properties)['sasl.oauthbearer.client.id']}"
        if self.sasl_username is not None:
            return f"User:{self.sasl_username}"
        if self.ssl_certificate_location is not None:
            return f"the client certificate {self.ssl_certificate_location}"
        return "(anonymous)"

    def client_properties(self) -> dict[str, str]:
        """The librdkafka properties for this login, the password included (for the client only;
        never log the result)."""
        conf: dict[str, str] = {"security.protocol": self.security_protocol.value}
        if self.security_protocol.sasl:
            assert self.sasl_mechanism is not None
            conf["sasl.mechanism"] = self.sasl_mechanism.value
        if self.security_protocol.sasl and not self.oauth:  # OAUTHBEARER: the properties below
            assert self.sasl_username is not None and self.sasl_password is not None
            conf["sasl.username"] = self.sasl_username
            conf["sasl.password"] = self.sasl_password.reveal()
        for key in _TLS_KEYS:
            value = getattr(self, key)
            if value is not None:
                conf[key.replace("_", ".")] = value
        conf.update(dict(self.properties))
        conf.update((key, secret.reveal()) for key, secret in self.secret_properties)
        return conf

    def describe(self) -> dict[str, Any]:
        """What a ``--json`` status may show: everything but the password."""
        return {
            "security_protocol": self.security_protocol.value,
            "sasl_mechanism": self.sasl_mechanism.value if self.sasl_mechanism else None,
            "sasl_username": self.sasl_username,
            "password_source": self.password_source,
            "ssl_ca_location": self.ssl_ca_location,
            "properties": dict(self.properties),
        } | ({"secret_properties": [k for k, _ in self.secret_properties]}
             if self.secret_properties else {})  # fmt: skip


PLAINTEXT: Final = KafkaSecurity()


def _invalid(key: str, value: Any, detail: str, reason: str = Config.CONFIG_INVALID) -> ConfigError:
    return config_error(f"kafka.{key}", value, detail, reason)


_TABLE_KEYS: Final = (
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password_file",
    "sasl_password_env",
    "ssl_ca_location",
    "ssl_certificate_location",
    "ssl_key_location",
    *(f"{name}_{via}" for name in SECRET_SOURCES.values() for via in ("file", "env")),
    "properties",
)


def security_from_table(
    table: Mapping[str, Any], *, environ: Mapping[str, str], base_dir: Path | None = None
) -> KafkaSecurity:
    """The ``[kafka]`` table as a :class:`KafkaSecurity`; the edge (a config loader) calls this,
    and it is the one place a password file or variable is read. Relative paths are taken from
    ``base_dir`` (the config file's folder)."""
    if not isinstance(table, Mapping):
        raise config_error("kafka", table, "must be a table ([kafka])")
    if "sasl_password" in table:
        raise _invalid(
            "sasl_password",
            HIDDEN,
            "a password never goes inline: use sasl_password_file or sasl_password_env",
            Security.SECRET_INLINE,
        )
    refuse_unknown(table, _TABLE_KEYS, at="kafka.", hide_values=True)
    values: dict[str, Any] = {}
    for key in ("security_protocol", "sasl_mechanism", "sasl_username", *_TLS_KEYS):
        if key in table:
            value = table[key]
            if key in _TLS_KEYS and isinstance(value, str) and value and base_dir:
                value = str(base_dir / value)
            values[key] = value
    password, source = password_from_table(table, environ, base_dir)
    if password is not None:
        values["sasl_password"], values["password_source"] = password, source
    secrets, sources = [], []
    for key, name in sorted(SECRET_SOURCES.items()):
        secret, origin = secret_from_table(table, name, environ, base_dir)
        if secret is not None and origin is not None:
            secrets.append((key, secret))
            sources.append((key, origin))
    values["secret_properties"], values["secret_sources"] = tuple(secrets), tuple(sources)
    props = table.get("properties", {})
    if not isinstance(props, Mapping):
        raise _invalid("properties", props, "must be a table ([kafka.properties])")
    pairs = []
    for key, value in props.items():
        refusal = property_refusal(key)
        if refusal is not None:
            raise _invalid(f"properties.{key}", HIDDEN, refusal[1], refusal[0])
        if not isinstance(value, str | int | float):
            raise _invalid(f"properties.{key}", value, "must be a string, number or boolean")
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        pairs.append((key, text))
    values["properties"] = tuple(sorted(pairs))
    return bind(KafkaSecurity, values, reasons=CONFIG_REASONS, at="kafka.")


def password_from_table(
    table: Mapping[str, Any], environ: Mapping[str, str], base_dir: Path | None
) -> tuple[Secret | None, str | None]:
    return secret_from_table(table, "sasl_password", environ, base_dir)


def secret_from_table(
    table: Mapping[str, Any], name: str, environ: Mapping[str, str], base_dir: Path | None
) -> tuple[Secret | None, str | None]:
    """The secret ``<name>_file`` or ``<name>_env`` of ``table`` names, read once, with where
    it came from (``file:<path>`` / ``env:<NAME>``); (None, None) when neither is given."""
    file, env = table.get(f"{name}_file"), table.get(f"{name}_env")
    if file is not None and env is not None:
        raise _invalid(f"{name}_env", env, f"give {name}_file or _env, not both")
    if file is not None:
        if not isinstance(file, str) or not file:
            raise _invalid(f"{name}_file", file, "must be a path")
        path = base_dir / file if base_dir else Path(file)
        try:
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            detail = f"cannot read the secret's file: {getattr(exc, 'strerror', None) or exc}"
            reason = Security.SECRET_UNREADABLE
            raise _invalid(f"{name}_file", str(path), detail, reason) from None
        if not text:
            raise _invalid(f"{name}_file", str(path), "is empty", Security.SECRET_UNREADABLE)
        return Secret(text), f"file:{path}"
    if env is not None:
        if not isinstance(env, str) or not env:
            raise _invalid(f"{name}_env", env, "must be a variable name")
        text = environ.get(env, "")
        if not text:
            raise _invalid(f"{name}_env", env, "is not set", Security.SECRET_UNREADABLE)
        return Secret(text), f"env:{env}"
    return None, None


def load_kafka_file(path: str | Path, *, environ: Mapping[str, str]) -> KafkaSecurity:
    """The ``[kafka]`` table of a TOML file (a fleet.toml, or ``<login>.kafka.toml`` written by
    ``fleet kafka up --secure``), for commands that take ``--kafka-config``; an edge reader."""
    data = read_toml(path, CONFIG_REASONS)
    try:
        return security_from_table(data.get("kafka", {}), environ=environ)
    except ConfigError as exc:
        raise in_file(exc, str(path)) from None
