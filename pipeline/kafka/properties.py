"""A login from the files Kafka teams already have: Java ``.properties`` and librdkafka keys.

``fleet ... --command-config client.properties`` takes the file a team wrote for
``kafka-console-consumer --command-config``; ``-X key=value`` adds librdkafka settings on the
command line. Both end as the same frozen :class:`~pipeline.kafka.security.KafkaSecurity` the
``[kafka]`` table gives, so everything after (``with_security``, the login watch) is one path.

The way in (docs/security.md "Java client properties")::

    read_properties      Java .properties syntax -> {key: text}
    librdkafka_keys      Java client keys -> librdkafka keys; a key librdkafka cannot honour is
                         refused (PROPERTY_UNMAPPABLE), never dropped silently
    security_from_properties
                         librdkafka keys -> KafkaSecurity: the named keys (protocol, mechanism,
                         username, TLS files), the password and the other credentials into
                         Secrets, the rest passed through (owned keys refused: PROPERTY_OWNED)
    command_line_properties
                         ``-X KEY=VALUE`` pairs; a credential there is refused (SECRET_INLINE):
                         a command line is visible to every user of the machine (``ps``)

A password may be in the file (as a Java client has it, in ``sasl.jaas.config``) or named by
``fleet.sasl.password.file`` / ``fleet.sasl.password.env``; it is read once, here, into a
:class:`~pipeline.kafka.security.Secret`. So may a client key's password
(``fleet.ssl.key.password.file|env``) and an OAuth client's secret
(``fleet.sasl.oauthbearer.client.secret.file|env``); the Java client's OIDC login
(``OAuthBearerLoginModule`` with ``clientId``/``clientSecret``/``scope`` and the
``OAuthBearerLoginCallbackHandler``) becomes librdkafka's ``sasl.oauthbearer.method=oidc``. ``bootstrap.servers`` in a file is ignored: the
command's ``--bootstrap-server`` wins, as with ``kafka-console-consumer``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from pipeline.errors import ConfigError
from pipeline.reasons import Config, Security
from pipeline.support.binder import CONFIG_REASONS, HIDDEN, MISSING, bind, config_error, in_file

from .security import (
    OAUTH_PROPERTIES,
    OAUTH_SECRET,
    SECRET_PROPERTIES,
    SECRET_SOURCES,
    KafkaSecurity,
    Secret,
    password_from_table,
    secret_from_table,
)

# librdkafka key -> KafkaSecurity field
_NAMED: Final = {
    "security.protocol": "security_protocol",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "ssl.ca.location": "ssl_ca_location",
    "ssl.certificate.location": "ssl_certificate_location",
    "ssl.key.location": "ssl_key_location",
}
_PASSWORD_SOURCES: Final = {
    "fleet.sasl.password.file": "sasl_password_file",
    "fleet.sasl.password.env": "sasl_password_env",
}
_CREDENTIALS: Final = SECRET_PROPERTIES | {"sasl.password", "sasl.jaas.config"}
_IGNORED: Final = frozenset({"bootstrap.servers"})  # the command line's --bootstrap-server wins
# Java client keys with no librdkafka equivalent; the prefix/suffix rules below catch the rest
_JAVA_ONLY: Final = frozenset(
    {
        "ssl.protocol",
        "ssl.enabled.protocols",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation",
        "ssl.truststore.certificates",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.provider",
    }
)
_OAUTH_MODULE: Final = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_LOGIN_MODULES: Final = {
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-512", "SCRAM-SHA-256"),
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    _OAUTH_MODULE: ("OAUTHBEARER",),
}
# the JAAS options of each module, as librdkafka keys
_JAAS_KEYS: Final = {
    "username": "sasl.username",
    "password": "sasl.password",
    "clientId": "sasl.oauthbearer.client.id",
    "clientSecret": OAUTH_SECRET,
    "scope": "sasl.oauthbearer.scope",
}
_MODULE_OPTIONS: Final = {_OAUTH_MODULE: {"clientId", "clientSecret", "scope"}}
# the Java client's OIDC login handler: librdkafka's sasl.oauthbearer.method=oidc does its job
_OIDC_HANDLER: Final = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
)
_JAAS: Final = re.compile(r"\s*(\S+)\s+(required|requisite|sufficient|optional)\s*(.*?)\s*;?\s*")
_JAAS_OPTION: Final = re.compile(r'([\w.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))\s*')


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java ``.properties`` file as ``{key: value}``: ``key=value``, ``key: value`` or
    ``key value``; ``#``/``!`` comments; a trailing ``\\`` continues the line; ``\\t``, ``\\n``,
    ``\\uXXXX`` and ``\\x`` escapes. The last of a repeated key wins, as in Java."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        detail = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(
            f"{path}: cannot read: {detail}",
            reason=Config.CONFIG_NOT_FOUND,
            context={"file": str(path)},
        ) from None
    return parse_properties(text)


def parse_properties(text: str) -> dict[str, str]:
    """The ``.properties`` syntax of :func:`read_properties`, from text."""
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd run of backslashes: the line continues
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_entry(logical)
        out[key] = value
        logical = ""
    if logical:
        key, value = _split_entry(logical)
        out[key] = value
    return out


def _split_entry(line: str) -> tuple[str, str]:
    i, n = 0, len(line)
    while i < n and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest)


_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        c = m.group(1)
        if c.startswith("u"):
            return chr(int(c[1:], 16))
        return _ESCAPES.get(c, c)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", one, text)


def _refused(key: str, detail: str, reason: str, *, at: str, hide: bool = False) -> ConfigError:
    return config_error(f"{at}{key}", HIDDEN if hide else MISSING, detail, reason)


def librdkafka_keys(props: Mapping[str, str], *, at: str = "") -> dict[str, str]:
    """``props`` with the Java client's keys turned into librdkafka's (``sasl.mechanism``,
    ``sasl.jaas.config``, ``ssl.truststore.*`` as PEM, ``ssl.keystore.*`` as PKCS#12 or PEM,
    ``ssl.endpoint.identification.algorithm``); librdkafka keys pass as they are. A Java key
    librdkafka cannot honour is refused (``PROPERTY_UNMAPPABLE``) with what to do instead."""
    out: dict[str, str] = {}
    rest = dict(props)
    for key in _IGNORED:
        rest.pop(key, None)
    if "sasl.mechanism" in rest:
        out["sasl.mechanisms"] = rest.pop("sasl.mechanism")
    jaas = rest.pop("sasl.jaas.config", None)
    if jaas is not None:
        out |= _from_jaas(jaas, out.get("sasl.mechanisms", rest.get("sasl.mechanisms")), at=at)
    out |= _truststore(rest, at=at) | _keystore(rest, at=at)
    if rest.get("sasl.login.callback.handler.class") == _OIDC_HANDLER:
        del rest["sasl.login.callback.handler.class"]
        out["sasl.oauthbearer.method"] = "oidc"
    algorithm = rest.pop("ssl.endpoint.identification.algorithm", None)
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = algorithm.strip().lower() or "none"
    for key, value in rest.items():
        if key in OAUTH_PROPERTIES or key == OAUTH_SECRET:
            out[key] = value  # librdkafka's OIDC keys (the endpoint's name is the Java one too)
        elif (
            key in _JAVA_ONLY
            or key.endswith((".class", "serializer"))
            or key.startswith(("sasl.login.", "sasl.oauthbearer.", "config.providers"))
        ):
            raise _refused(key, "a Java client setting librdkafka has no equivalent for",
                           Security.PROPERTY_UNMAPPABLE, at=at)  # fmt: skip
        out[key] = value
    return out


def _from_jaas(text: str, mechanism: str | None, *, at: str) -> dict[str, str]:
    m = _JAAS.fullmatch(text)
    key = "sasl.jaas.config"
    if m is None:
        raise _refused(key, "not a JAAS login line", Config.CONFIG_INVALID, at=at, hide=True)
    module, _flag, body = m.groups()
    mechanisms = _LOGIN_MODULES.get(module)
    if mechanisms is None:
        detail = (
            f"login module {module} has no librdkafka equivalent here "
            f"(supported: {', '.join(_LOGIN_MODULES)})"
        )
        raise _refused(key, detail, Security.PROPERTY_UNMAPPABLE, at=at, hide=True)
    if mechanism is not None and mechanism not in mechanisms:
        detail = f"{module.rsplit('.', 1)[-1]} does not log in with sasl.mechanism={mechanism}"
        raise _refused(key, detail, Config.CONFIG_INVALID, at=at, hide=True)
    options: dict[str, str] = {}
    for opt in _JAAS_OPTION.finditer(body):
        value = opt.group(2) if opt.group(2) is not None else opt.group(3)
        options[opt.group(1)] = re.sub(r"\\(.)", r"\1", value)
    if _JAAS_OPTION.sub("", body).strip():
        raise _refused(key, 'options must be name="value"', Config.CONFIG_INVALID, at=at, hide=True)
    allowed = _MODULE_OPTIONS.get(module, {"username", "password"})
    if set(options) - allowed:
        extra = ", ".join(sorted(set(options) - allowed))
        raise _refused(key, f"options {extra} have no librdkafka equivalent",
                       Security.PROPERTY_UNMAPPABLE, at=at, hide=True)  # fmt: skip
    out = {_JAAS_KEYS[name]: value for name, value in options.items()}
    if module == _OAUTH_MODULE:
        out["sasl.oauthbearer.method"] = "oidc"
    if mechanism is None:
        out["sasl.mechanisms"] = mechanisms[0]
    return out


def _truststore(rest: dict[str, str], *, at: str) -> dict[str, str]:
    location = rest.pop("ssl.truststore.location", None)
    kind = rest.pop("ssl.truststore.type", "JKS" if location else "").upper()
    rest.pop("ssl.truststore.password", None)  # a PEM file has none; JKS/PKCS12 are refused
    if location is None:
        return {}
    if kind != "PEM":
        detail = (
            f"librdkafka cannot read a {kind} truststore: export the CA as PEM "
            "(keytool -exportcert -rfc) and give ssl.truststore.type=PEM or ssl.ca.location"
        )
        raise _refused("ssl.truststore.type", detail, Security.PROPERTY_UNMAPPABLE, at=at)
    return {"ssl.ca.location": location}


def _keystore(rest: dict[str, str], *, at: str) -> dict[str, str]:
    location = rest.pop("ssl.keystore.location", None)
    kind = rest.pop("ssl.keystore.type", "JKS" if location else "").upper()
    password = rest.pop("ssl.keystore.password", None)
    if location is None:
        return {} if password is None else {"ssl.keystore.password": password}
    if kind == "PKCS12":
        return {"ssl.keystore.location": location} | (
            {} if password is None else {"ssl.keystore.password": password}
        )
    if kind == "PEM":  # one file holding the certificate chain and the private key
        return {"ssl.certificate.location": location, "ssl.key.location": location}
    detail = (
        f"librdkafka cannot read a {kind} keystore: convert it to PKCS12 "
        "(keytool -importkeystore -deststoretype PKCS12) or PEM"
    )
    raise _refused("ssl.keystore.type", detail, Security.PROPERTY_UNMAPPABLE, at=at)


def security_from_properties(
    props: Mapping[str, str],
    *,
    environ: Mapping[str, str],
    source: str,
    password: tuple[Secret, str] | None = None,
) -> KafkaSecurity:
    """librdkafka-keyed ``props`` as a :class:`KafkaSecurity` (``source``: where they came from,
    for messages and ``password_source``; ``password``: one already read, kept unless ``props``
    names another)."""
    at = f"{source}: "
    values: dict[str, Any] = {}
    rest = dict(props)
    for key, name in _NAMED.items():
        if key in rest:
            values[name] = rest.pop(key)
    if "sasl.mechanism" in rest:
        values["sasl_mechanism"] = rest.pop("sasl.mechanism")
    sources = {name: rest.pop(key) for key, name in _PASSWORD_SOURCES.items() if key in rest}
    inline = rest.pop("sasl.password", None)
    if inline is not None and sources:
        raise _refused("sasl.password", "give the password once", Config.CONFIG_INVALID, at=at)
    if inline is not None:
        password = (Secret(inline), f"file:{source}")
    elif sources:
        try:
            secret, origin = password_from_table(sources, environ, None)
        except ConfigError as exc:
            raise in_file(exc, source) from None
        assert secret is not None and origin is not None
        password = (secret, origin)
    if password is not None:
        values["sasl_password"], values["password_source"] = password
    secrets = [(key, Secret(rest.pop(key))) for key in sorted(SECRET_PROPERTIES) if key in rest]
    origins = [(key, f"file:{source}") for key, _ in secrets]
    for key, name in sorted(SECRET_SOURCES.items()):  # fleet.<key>.file / .env
        named = {f"{name}_{via}": rest.pop(f"fleet.{key}.{via}")
                 for via in ("file", "env") if f"fleet.{key}.{via}" in rest}  # fmt: skip
        if named and any(k == key for k, _ in secrets):
            raise _refused(key, "give the secret once", Config.CONFIG_INVALID, at=at)
        try:
            secret, origin = secret_from_table(named, name, environ, None)
        except ConfigError as exc:
            raise in_file(exc, source) from None
        if secret is not None and origin is not None:
            secrets.append((key, secret))
            origins.append((key, origin))
    values["secret_properties"], values["secret_sources"] = tuple(secrets), tuple(origins)
    values["properties"] = tuple(sorted(rest.items()))
    try:
        return bind(KafkaSecurity, values, reasons=CONFIG_REASONS, at="kafka.")
    except ConfigError as exc:
        raise in_file(exc, source) from None


def load_properties_file(path: str | Path, *, environ: Mapping[str, str]) -> KafkaSecurity:
    """A ``--command-config`` file in Java ``.properties`` syntax (Java client keys or
    librdkafka keys) as a :class:`KafkaSecurity`; an edge reader."""
    props = librdkafka_keys(read_properties(path), at=f"{path}: ")
    return security_from_properties(props, environ=environ, source=str(path))


def command_line_properties(pairs: Sequence[str]) -> dict[str, str]:
    """``-X KEY=VALUE`` pairs as librdkafka keys. A credential is refused (``SECRET_INLINE``):
    put it in the ``--command-config`` file or name it with ``fleet.sasl.password.env``."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise config_error("-X", pair, "expected KEY=VALUE", Config.CONFIG_INVALID)
        if key in _CREDENTIALS or key == "ssl.truststore.password":
            detail = (
                "a credential never goes on the command line (ps shows it to every user): put it "
                "in the --command-config file, or name it with -X fleet.sasl.password.env=VAR"
            )
            raise config_error(f"-X {key}", HIDDEN, detail, Security.SECRET_INLINE)
        if key in _IGNORED:
            detail = "give the brokers with --bootstrap-server (-b)"
            raise config_error(f"-X {key}", value, detail, Security.PROPERTY_OWNED)
        out[key] = value
    return librdkafka_keys(out, at="-X ")


def with_properties(
    security: KafkaSecurity, extra: Mapping[str, str], *, environ: Mapping[str, str]
) -> KafkaSecurity:
    """``security`` with ``extra`` (librdkafka keys, e.g. from ``-X``) laid over it; the
    password already read is kept unless ``extra`` names another source."""
    if not extra:
        return security
    base = {k: v for k, v in security.client_properties().items() if k not in _CREDENTIALS}
    base = {k: v for k, v in base.items() if k not in SECRET_PROPERTIES}
    kept = None
    if security.sasl_password is not None:
        kept = (security.sasl_password, security.password_source or "")
    merged = security_from_properties(base | dict(extra), environ=environ, source="-X",
                                      password=kept)  # fmt: skip
    if security.secret_properties and not merged.secret_properties:
        from dataclasses import replace

        merged = replace(
            merged,
            secret_properties=security.secret_properties,
            secret_sources=security.secret_sources,
        )
    return merged
