"""A send to a reaped worker is refused at once with ``RECIPIENT_GONE`` (a later brief
to it gives its sender one FAILED (RECIPIENT_GONE); R-LIFE-1).

The cause comes from the worker's presence departure, mirrored into the store's roster cache
(``fleet_roster_gone``) by the gateway; a plain tombstone (a gateway that left) stays
``UNKNOWN_RECIPIENT``; a broadcast skips the departed gid silently.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.bootstrap.client import build_client
from pipeline.cli.main import app
from pipeline.envelope import Signer
from pipeline.errors import DeliveryError
from pipeline.host import roster_cache
from pipeline.host.entity_config import EntityConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.presence.model import Delivery, Role
from pipeline.store import make_engine, session_factory

FAR = 10**15
Entry = roster_cache.RosterEntry


def _client(tmp_path: Path, entries: list[Entry]):  # type: ignore[no-untyped-def]
    engine = make_engine(f"sqlite:///{tmp_path / 'A.sqlite'}")
    with session_factory(engine).begin() as s:
        roster_cache.replace_all(s, entries)
    cfg = GatewayConfig(
        host="A", entities=(EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL),)
    )
    return build_client(cfg, signer=Signer.generate("A"), engine=engine), engine


def test_a_send_to_a_reaped_worker_is_recipient_gone_naming_gid_and_cause(tmp_path: Path) -> None:
    client, engine = _client(
        tmp_path,
        [
            Entry("w-2", "B", "worker", "inject", ("crew",), FAR),
            Entry("w-1", "B", "worker", "inject", (), 0, "stopped"),
            Entry("w-3", "B", "worker", "inject", (), 0, "died"),
        ],
    )
    with pytest.raises(DeliveryError) as err:
        client.send(sender="main-a", to="w-1", body=b"late")
    assert err.value.reason == "RECIPIENT_GONE" and not err.value.retriable
    assert "w-1" in str(err.value) and "stopped" in str(err.value)
    assert err.value.context == {"to": "w-1", "host": "B", "gone": "stopped"}
    with pytest.raises(DeliveryError) as died:
        client.send(sender="main-a", to="w-3", body=b"late")
    assert (died.value.reason, died.value.context["gone"]) == ("RECIPIENT_GONE", "died")
    with pytest.raises(DeliveryError) as unknown:
        client.send(sender="main-a", to="w-9", body=b"never announced")
    assert unknown.value.reason == "UNKNOWN_RECIPIENT"
    # a departure is no binding: not known, not a member, and a live send still goes
    assert client.binding("w-1") is None and not client.knows("w-1")
    assert [e.gid for e in client.roster()] == ["w-2"]
    assert client.send(sender="main-a", to="w-2", body=b"hi").to == "w-2"
    engine.dispose()


def test_the_mirror_replaces_departures_too(tmp_path: Path) -> None:
    """A gid bound again (or forgotten by the roster) loses its cause at the next refresh."""
    _, engine = _client(tmp_path, [Entry("w-1", "B", "worker", "inject", (), 0, "stopped")])
    sessions = session_factory(engine)
    with sessions() as s:
        assert roster_cache.departed(s, "w-1") == ("B", "stopped")
    with sessions.begin() as s:
        roster_cache.replace_all(s, [Entry("w-1", "B", "worker", "inject", (), FAR)])
    with sessions() as s:
        assert roster_cache.departed(s, "w-1") is None
        assert roster_cache.lookup(s, "w-1") is not None
    engine.dispose()


def test_fleet_send_json_shows_the_reason(tmp_path: Path) -> None:
    """``fleet send --json`` prints the refusal as JSON (reason, gid, cause) and exits 2; the
    text form is the CLI's one FleetError line."""
    engine = make_engine(f"sqlite:///{tmp_path / 'A.sqlite'}")
    with session_factory(engine).begin() as s:
        roster_cache.replace_all(s, [Entry("w-1", "B", "worker", "inject", (), 0, "stopped")])
    engine.dispose()
    keys = tmp_path / "keys"
    toml = tmp_path / "fleet.toml"
    toml.write_text(
        f'host = "A"\nstore_url = "sqlite:///{tmp_path / "A.sqlite"}"\n'
        f'key_file = "{keys / "A.key"}"\n'
        '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'
    )
    keys.mkdir()
    Signer.generate("A").write_private(keys / "A.key")
    out = CliRunner().invoke(app, ["send", "-c", str(toml), "--from", "main-a", "--to", "w-1",
                                   "late", "--json"])  # fmt: skip
    assert out.exit_code == 1, out.output
    got = json.loads(out.stdout)["error"]
    assert (got["reason"], got["to"], got["gone"], got["retriable"]) == (
        "RECIPIENT_GONE",
        "w-1",
        "stopped",
        False,
    )
    text = CliRunner().invoke(app, ["send", "-c", str(toml), "--from", "main-a", "--to", "w-1",
                                    "late"])  # fmt: skip
    assert text.exit_code == 1 and "[RECIPIENT_GONE]" in text.output
