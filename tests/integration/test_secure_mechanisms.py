"""The three logins on one real secured broker: SCRAM-SHA-512, mutual TLS, OAUTHBEARER/OIDC.

R-SEC-1 (a private broker over TLS with per-gateway logins) for each kind of login a Kafka
team uses. One broker for the module (``fleet kafka up --secure`` with the MTLS and OAUTH
listeners, secure.py) and one OIDC issuer on loopback (pipeline.testing.oidc_issuer) whose
tokens live a few seconds. For each mechanism a gateway pair runs the core flows (a brief
INJECTED, a REPLY held) with only the ACLs ``fleet acls apply`` gives its principal: User:a
(SCRAM), User:gateway-a (the certificate's DN mapped by ssl.principal.mapping.rules),
User:svc-a-... (the token's sub). Then the refusals: an untrusted certificate, a token the
issuer will not give, a token for another audience -- AUTH_FAILED; a running gateway whose
certificate is revoked, or whose OAuth client is disabled, stops with AUTH_FAILED. Last, no
secret (password, key password, client secret) is in any output or broker log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pipeline.bootstrap.client import Factories, build_client
from pipeline.bootstrap.gateway import build_gateway
from pipeline.chaos.gateway_process import GatewayProc
from pipeline.cli.main import app
from pipeline.envelope import Kind
from pipeline.envelope.receipts import read_receipt
from pipeline.errors import SecurityError
from pipeline.host.config import load_config
from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.host.gateway_config import GatewayConfig
from pipeline.kafka.local import LauncherConfig, LocalCluster
from pipeline.kafka.local.client_certs import MAPPING_RULES, certificate_pem, issue_client, new_ca
from pipeline.kafka.local.secure import ADMIN, MTLS, OAUTH, OAuthValidation
from pipeline.kafka.security import KafkaSecurity, security_from_table
from pipeline.kafka.topics import TopicNames
from pipeline.presence.roles import Delivery, Role
from pipeline.reasons import Security
from pipeline.support.waiting import wait_until
from pipeline.testing import test_broker_dir as broker_dir
from pipeline.testing import unique_name
from pipeline.testing.oidc_issuer import OidcIssuer
from tests.integration.fleet_hosts import Fleet
from tests.integration.secure_logins import topology

pytestmark = [pytest.mark.kafka, pytest.mark.own_cluster]  # it starts its own secured broker
ROOT = Path(__file__).resolve().parents[2]
AUDIENCE = "fleet-kafka"
TOKEN_LIFETIME_S = 5.0  # librdkafka refreshes at 80%: a new token every 4 s
REAUTH_MS = 4000  # the OAUTH listener makes every connection re-authenticate this often

_SEEN: list[str] = []  # every captured log line and output: scanned for secrets at the end
_LOGS: list[Path] = []
_SECRETS: list[str] = []  # the OAuth client secrets the tests made


class _Keep(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        _SEEN.append(record.getMessage())


@dataclass
class Secured:
    cluster: LocalCluster
    issuer: OidcIssuer


@pytest.fixture(scope="module")
def secured() -> Iterator[Secured]:
    """One secured broker with all three listeners, and the issuer its OAUTH listener trusts."""
    issuer = OidcIssuer(audience=AUDIENCE, lifetime_s=TOKEN_LIFETIME_S).start()
    cluster = LocalCluster(
        LauncherConfig(
            directory=broker_dir("mechanisms"),
            secure_hosts=("a", "b"),
            mtls_clients=("gateway-a", "gateway-b", "gateway-z"),
            oauth=OAuthValidation(
                jwks_url=issuer.jwks_url,
                issuer=issuer.url,
                audience=AUDIENCE,
                reauth_ms=REAUTH_MS,
                clock_skew_s=1,  # an expired token is refused within a second: refresh is needed
            ),
            heap_mb=512,
            ready_timeout_s=300.0,
        ),
        owned=True,
    )
    handler = _Keep()
    logging.getLogger("pipeline").addHandler(handler)
    try:
        cluster.start()
        yield Secured(cluster, issuer)
    finally:
        logging.getLogger("pipeline").removeHandler(handler)
        cluster.stop()
        issuer.stop()


def _admin_toml(s: Secured) -> str:
    assert s.cluster.secure is not None
    return str(s.cluster.secure.folder / f"{ADMIN}.kafka.toml")


# -- the three logins ------------------------------------------------------------------------
@dataclass(frozen=True)
class Login:
    """How host ``host`` connects under one mechanism, and the acls flags naming its principal."""

    bootstrap: str
    security: KafkaSecurity
    acl_flags: tuple[str, ...]  # --principal / --cert for fleet acls plan|apply
    principal: str


def scram(s: Secured, host: str, tmp: Path) -> Login:
    assert s.cluster.secure is not None
    return Login(s.cluster.bootstrap_servers, s.cluster.secure.security(host), (), f"User:{host}")


def mtls(s: Secured, host: str, tmp: Path) -> Login:
    assert s.cluster.secure is not None
    name = f"gateway-{host}"
    cert = s.cluster.secure.client_files(name)[0]
    flags = ("--cert", str(cert), "--mapping-rules", MAPPING_RULES)
    return Login(
        s.cluster.listener_bootstrap(MTLS),
        s.cluster.secure.mtls_security(name),
        flags,
        f"User:{name}",
    )


def oauth_table(s: Secured, client_id: str, secret_file: Path) -> dict[str, Any]:
    """The [kafka] table an OAUTHBEARER/OIDC login writes (the secret by file)."""
    assert s.cluster.secure is not None
    return {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "OAUTHBEARER",
        "ssl_ca_location": str(s.cluster.secure.ca),
        "sasl_oauthbearer_client_secret_file": str(secret_file),
        "properties": {
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": client_id,
            "sasl.oauthbearer.token.endpoint.url": s.issuer.token_url,
            "sasl.oauthbearer.scope": "kafka",
        },
    }


def oauth_client(
    s: Secured, client_id: str, tmp: Path, **register: Any
) -> tuple[KafkaSecurity, str]:
    """A client registered at the issuer, its secret in a 0600 file: (login, principal)."""
    client = s.issuer.register(client_id, **register)
    _SECRETS.append(client.secret)
    secret_file = tmp / f"{client_id}.secret"
    secret_file.write_text(client.secret + "\n")
    secret_file.chmod(0o600)
    security = security_from_table(oauth_table(s, client_id, secret_file), environ={})
    return security, f"User:{client.subject}"


def oauth(s: Secured, host: str, tmp: Path) -> Login:
    client_id = unique_name(f"fleet-{host}").replace(".", "-")
    security, principal = oauth_client(s, client_id, tmp, subject=f"svc-{host}-{client_id[-8:]}")
    return Login(
        s.cluster.listener_bootstrap(OAUTH), security, ("--principal", principal), principal
    )


MECHANISMS: dict[str, Callable[[Secured, str, Path], Login]] = {
    "scram-sha-512": scram,
    "mtls": mtls,
    "oauthbearer-oidc": oauth,
}


def _acls(s: Secured, host: str, prefix: str, login: Login) -> None:
    """``fleet acls plan`` names the principal; ``fleet acls apply`` (as admin) creates exactly
    that set: the only ACLs the gateway has."""
    base = ["acls", "plan", "--host", host, "--prefix", prefix, "--json", *login.acl_flags]
    planned = CliRunner().invoke(app, base)
    assert planned.exit_code == 0, planned.output
    assert f'"principal": "{login.principal}"' in planned.output
    args = ["acls", "apply", "--host", host, "--prefix", prefix, *login.acl_flags]
    args += ["-b", s.cluster.bootstrap_servers, "--command-config", _admin_toml(s)]
    applied = CliRunner().invoke(app, args)
    _SEEN.append(applied.output)
    assert applied.exit_code == 0, applied.output
    assert f"ACLs in place for {login.principal} (gateway)" in applied.output


def _config(
    login: Login, fleet: Fleet, root: Path, host: str, *entities: EntityConfig
) -> GatewayConfig:
    return GatewayConfig(
        host=host,
        bootstrap=login.bootstrap,
        store_url=f"sqlite:///{root / (host + '.sqlite')}",
        topic_prefix=fleet.prefix,
        entities=entities,
        kafka=login.security,
        inject_deadline_s=30,
        presence_interval_s=1.0,
        presence_ttl_s=30.0,
        sweep_interval_s=0.5,
    )


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_a_gateway_pair_runs_the_core_flows_with_only_the_planned_acls(
    secured: Secured, tmp_path: Path, mechanism: str
) -> None:
    """R-SEC-1, R-SEC-2 under each login: gateways a and b, each under its own principal with
    only ``fleet acls apply``'s set (authorizer on, nothing allowed by default): a brief from
    main-a is INJECTED into worker-b, worker-b's REPLYs are held for main-a. Under OAUTHBEARER
    the tokens live 5 s and the listener re-authenticates every 4 s: the REPLYs go on over
    several token refreshes and every one arrives exactly once, in order; neither gateway stops."""
    make = MECHANISMS[mechanism]
    logins = {host: make(secured, host, tmp_path) for host in ("a", "b")}
    fleet = Fleet.create(tmp_path, logins["a"].bootstrap, ("a", "b"))
    names = TopicNames(prefix=fleet.prefix)
    topology(secured.cluster, names, ("a", "b"))  # the operator's, as admin
    for host, login in logins.items():
        _acls(secured, host, fleet.prefix, login)
    injected: list[bytes] = []
    main = EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL)
    work = EntityConfig(
        gid="worker-b",
        role=Role.WORKER,
        delivery=Delivery.INJECT,
        injector=InjectorSpec(type="callback", callback="worker-b"),
    )
    a = build_gateway(
        _config(logins["a"], fleet, tmp_path, "a", main),
        signer=fleet.signers["a"],
        trust=fleet.trust,
    )
    b = build_gateway(
        _config(logins["b"], fleet, tmp_path, "b", work),
        signer=fleet.signers["b"],
        trust=fleet.trust,
        callbacks={"worker-b": lambda *, body, **_: injected.append(body)},
    )
    a.gateway.start()
    b.gateway.start()
    got: list[Any] = []

    def pulled(want: int) -> bool:
        got.extend(a.client.poll("main-a"))
        return len(got) >= want

    try:
        wait_until(
            lambda: a.client.knows("worker-b") and b.client.knows("main-a"),
            timeout_s=90,
            what=f"presence under {mechanism}",
        )
        brief = a.client.send(sender="main-a", to="worker-b", body=b"brief")
        wait_until(lambda: injected == [b"brief"], timeout_s=60, what="the inject on b")
        # REPLYs for a while: under OAUTHBEARER, one a second across four token lifetimes
        rounds = 4 * round(TOKEN_LIFETIME_S) if mechanism == "oauthbearer-oidc" else 2
        sent: list[str] = []
        for i in range(rounds):
            if sent and mechanism == "oauthbearer-oidc":
                time.sleep(1.0)  # spread over the lifetimes, not a timing assertion
            reply = b.client.send(sender="worker-b", to="main-a", kind=Kind.REPLY, body=b"r%d" % i)
            sent.append(reply.msg_id)
            wait_until(partial(pulled, len(sent) + 1), timeout_s=60, what=f"reply {i} at a")
        assert [m.kind for m in got][:1] == ["INJECTED"]
        assert read_receipt("INJECTED", got[0].body).msg_id == brief.msg_id
        replies = [m.msg_id for m in got if m.kind == "REPLY"]
        assert replies == sent, "every REPLY held once, in order"
        assert a.gateway.fatal is None and b.gateway.fatal is None
        assert not a.gateway.stop_event.is_set() and not b.gateway.stop_event.is_set()
        if mechanism == "oauthbearer-oidc":
            for login in logins.values():
                client_id = dict(login.security.properties)["sasl.oauthbearer.client.id"]
                issued = secured.issuer.issued_at[client_id]
                # tokens kept coming: the last given three lifetimes after the first, so the
                # REPLYs at the end went over connections logged in with refreshed tokens
                # (the listener accepts no token expired more than a second)
                assert issued[-1] - issued[0] >= 3 * TOKEN_LIFETIME_S, issued
    finally:
        a.gateway.stop()
        b.gateway.stop()


def _refused(bootstrap: str, security: KafkaSecurity) -> SecurityError:
    with pytest.raises(SecurityError) as exc:
        Factories().secured(security).check_access(bootstrap, timeout_s=30)
    _SEEN.append(str(exc.value))
    return exc.value


def test_a_certificate_the_broker_does_not_trust_is_auth_failed(
    secured: Secured, tmp_path: Path
) -> None:
    """R-SEC-1, mutual TLS: a client certificate signed by a CA the MTLS listener does not trust is a
    refused login (AUTH_FAILED, the broker's alert about our certificate), not TLS_FAILED (that
    is our verdict on the broker's certificate)."""
    assert secured.cluster.secure is not None
    foreign = issue_client(tmp_path / "foreign", "gateway-a", new_ca("someone else's CA"))
    cert, key, password = foreign
    security = security_from_table(
        {
            "security_protocol": "SSL",
            "ssl_ca_location": str(secured.cluster.secure.ca),
            "ssl_certificate_location": str(cert),
            "ssl_key_location": str(key),
            "ssl_key_password_file": str(password),
        },
        environ={},
    )
    refused = _refused(secured.cluster.listener_bootstrap(MTLS), security)
    assert refused.reason == Security.AUTH_FAILED, refused
    assert "client certificate" in str(refused)
    _SECRETS.append(password.read_text().strip())


def test_a_token_the_issuer_refuses_or_for_another_audience_is_auth_failed(
    secured: Secured, tmp_path: Path
) -> None:
    """R-SEC-1, OAUTHBEARER: a disabled client (the issuer answers 401) and a token for another
    audience (the broker's validator refuses it) are both AUTH_FAILED at start."""
    bootstrap = secured.cluster.listener_bootstrap(OAUTH)
    disabled, _ = oauth_client(secured, unique_name("off").replace(".", "-"), tmp_path)
    secured.issuer.refuse(dict(disabled.properties)["sasl.oauthbearer.client.id"])
    refused = _refused(bootstrap, disabled)
    assert refused.reason == Security.AUTH_FAILED and "invalid_client" in str(refused)
    elsewhere, _ = oauth_client(
        secured, unique_name("aud").replace(".", "-"), tmp_path, audience="another-cluster"
    )
    refused = _refused(bootstrap, elsewhere)
    assert refused.reason == Security.AUTH_FAILED, refused


def test_a_disabled_oauth_client_stops_its_running_gateway_with_auth_failed(
    secured: Secured, tmp_path: Path
) -> None:
    """R-SEC-1: a gateway runs under OAUTHBEARER; its client is disabled at the issuer. At the next
    refresh (80% of 5 s) librdkafka cannot get a token: the login watch makes it the gateway's
    fatal error, AUTH_FAILED naming the OAuth client, and the gateway stops instead of going on
    deaf until its session expires."""
    login = oauth(secured, "y", tmp_path)
    fleet = Fleet.create(tmp_path, login.bootstrap, ("y",))
    names = TopicNames(prefix=fleet.prefix)
    topology(secured.cluster, names, ("y",))
    _acls(secured, "y", fleet.prefix, login)
    main = EntityConfig(gid="main-y", role=Role.MAIN, delivery=Delivery.PULL)
    y = build_gateway(
        _config(login, fleet, tmp_path, "y", main), signer=fleet.signers["y"], trust=fleet.trust
    )
    y.gateway.start()
    try:
        wait_until(lambda: y.client.knows("main-y"), timeout_s=90, what="y's gateway up")
        assert y.gateway.fatal is None
        client_id = dict(login.security.properties)["sasl.oauthbearer.client.id"]
        secured.issuer.refuse(client_id)
        wait_until(y.gateway.stop_event.is_set, timeout_s=60, what="y's gateway to stop")
        fatal = y.gateway.fatal
        assert isinstance(fatal, SecurityError), fatal
        assert fatal.reason == Security.AUTH_FAILED
        assert f"OAuth client {client_id}" in str(fatal)
        _SEEN.append(str(fatal))
    finally:
        y.gateway.stop()


def test_zy_a_revoked_certificate_stops_the_running_gateway_with_auth_failed(
    secured: Secured, tmp_path: Path
) -> None:
    """R-SEC-1: ``fleet gateway run`` under mutual TLS (the fleet.toml's [kafka] table: SSL, the
    certificate, the key and the key's password file). The operator revokes the CA that signed
    gateway-z's certificate (the MTLS listener's client truststore no longer holds it) and the
    cluster restarts: the gateway's reconnect is refused by the broker and it stops with
    AUTH_FAILED (exit 3), instead of retrying for ever. Runs late: the MTLS listener then
    trusts no client certificate of this module."""
    cluster = secured.cluster
    assert cluster.secure is not None
    login = mtls(secured, "z", tmp_path)
    fleet = Fleet.create(tmp_path, login.bootstrap, ("z",))
    names = TopicNames(prefix=fleet.prefix)
    topology(cluster, names, ("z",))
    _acls(secured, "z", fleet.prefix, login)
    cert, key, password = cluster.secure.client_files("gateway-z")
    _SECRETS.append(password.read_text().strip())
    kafka = (
        '[kafka]\nsecurity_protocol = "SSL"\n'
        f'ssl_ca_location = "{cluster.secure.ca}"\n'
        f'ssl_certificate_location = "{cert}"\nssl_key_location = "{key}"\n'
        f'ssl_key_password_file = "{password}"\n'
    )
    entity = '[[entities]]\ngid = "main-z"\nrole = "main"\ndelivery = "pull"\n'
    config = fleet.config_file("z", entity, extra=kafka)
    log = tmp_path / "z.log"
    _LOGS.append(log)
    gateway = GatewayProc(config, log, env={"PYTHONPATH": str(ROOT)}).start()
    try:
        client = build_client(load_config(config), signer=fleet.signers["z"])
        wait_until(
            lambda: client.knows("main-z"), timeout_s=90, what=f"z's gateway up\n{gateway.output()}"
        )
        # revoke: the listener now trusts another CA only
        _, other = new_ca("the clients' next CA")
        (cluster.secure.folder / "clients-ca.pem").write_bytes(certificate_pem(other))
        cluster.stop_all()
        cluster.start_again()
        code = gateway.wait_exit(120)
        output = gateway.output()
        assert code == 3, output[-4000:]
        assert "AUTH_FAILED" in output and "client certificate" in output, output[-4000:]
    finally:
        gateway.stop()


def test_zz_no_secret_in_any_output(secured: Secured) -> None:
    """R-SEC-3, runs last: no SCRAM password, client key password or OAuth client secret is in a
    captured log line, a child's output or the broker's own logs."""
    assert secured.cluster.secure is not None
    texts = list(_SEEN) + [p.read_text(errors="replace") for p in _LOGS if p.exists()]
    for node in secured.cluster.nodes:
        texts += [p.read_text(errors="replace") for p in (node.server_log, node.stdout_log)]
    secrets = [secured.cluster.secure.password(u).reveal() for u in secured.cluster.secure.users]
    secrets += _SECRETS
    assert len(texts) > 5 and len(secrets) > 4
    for text in texts:
        for secret in secrets:
            assert secret not in text
