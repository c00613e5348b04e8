"""Which Kafka principal a login is, for ``fleet acls plan|apply`` (docs/security.md).

Three kinds of login, three ways the broker names the principal its ACLs are written for::

    SCRAM / PLAIN user        User:<username>                        (--login NAME)
    client certificate (mTLS) User:<the subject DN, mapped by the     (--cert FILE
                              broker's ssl.principal.mapping.rules>    --mapping-rules RULES)
    OAUTHBEARER token         User:<the token's sub claim>            (--principal User:SUB)

:func:`map_certificate` applies the mapping rules the way Kafka's ``SslPrincipalMapper`` does:
the rules in order, the first whose pattern matches the whole DN (RFC 2253 string, most
specific attribute first, as ``X500Principal.getName()`` prints it) gives the name (``$1``
groups, ``/L`` lower case, ``/U`` upper case); ``DEFAULT`` is the DN itself.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from pipeline.errors import ConfigError
from pipeline.reasons import Config

# Kafka's own rule syntax (SslPrincipalMapper.RULE_PARSER)
_RULE: Final = re.compile(
    r"((DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?))\s*(,\s*|$)"
)


def check_principal(principal: str) -> str:
    """``principal`` if it is ``User:<name>`` with a name Kafka can hold, else a ConfigError."""
    kind, sep, name = principal.partition(":")
    if kind != "User" or not sep or not name.strip() or any(ord(c) < 32 for c in name):
        raise ConfigError(
            f"a principal is User:<name>, got {principal!r}",
            reason=Config.CONFIG_INVALID,
            context={"key": "principal"},
        )
    return principal


def parse_rules(rules: str) -> list[tuple[re.Pattern[str], str, str] | None]:
    """The rules as (pattern, replacement, case) or None for DEFAULT; malformed rules are a
    ConfigError (as the broker refuses them at start)."""
    out: list[tuple[re.Pattern[str], str, str] | None] = []
    pos, text = 0, rules.strip()
    while pos < len(text):
        m = _RULE.match(text, pos)
        if m is None or m.end() == pos:
            break
        pos = m.end()
        if m.group(2):
            out.append(None)
        elif m.group(6) is not None and m.group(3) is None:
            raise ConfigError(
                f"not a principal mapping rule: {m.group(6)!r}",
                reason=Config.CONFIG_INVALID,
                context={"key": "mapping-rules"},
            )
        else:
            repl = re.sub(r"\$(\d)", r"\\g<\1>", m.group(4).replace("\\/", "/"))
            out.append((re.compile(m.group(3).replace("\\/", "/")), repl, m.group(5)))
    return out or [None]


def map_dn(dn: str, rules: str = "DEFAULT") -> str:
    """The principal name Kafka gives the certificate subject ``dn`` under ``rules``."""
    for rule in parse_rules(rules):
        if rule is None:
            return dn
        pattern, repl, case = rule
        if pattern.fullmatch(dn):
            name = pattern.sub(repl, dn)
            return name.lower() if case == "L" else name.upper() if case == "U" else name
    raise ConfigError(
        f"no principal mapping rule matches {dn!r} (the broker refuses such a certificate)",
        reason=Config.CONFIG_INVALID,
        context={"key": "mapping-rules"},
    )


def certificate_dn(path: str | Path) -> str:
    """The subject DN of the first certificate in PEM file ``path``, as Kafka prints it."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{path}: not a readable PEM certificate: {exc}",
            reason=Config.CONFIG_INVALID,
            context={"key": "cert"},
        ) from None
    return cert.subject.rfc4514_string()


def map_certificate(path: str | Path, rules: str = "DEFAULT") -> str:
    """``User:<name>``: the principal a broker with ``ssl.principal.mapping.rules = rules``
    gives the client certificate in ``path``."""
    return f"User:{map_dn(certificate_dn(path), rules)}"
