"""Keys: private file 0600, public file round trip, trust directories, rotation overlap
(R-ENV-7: cross-host identity comes from the key)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.envelope import Envelope, Kind, Signer, TrustStore, encode
from pipeline.envelope import reasons as r
from pipeline.errors import ConfigError, EnvelopeError
from tests.envelope_kit import Fleet

runner = CliRunner()


def test_keys_init_writes_0600_private_and_a_loadable_pair(tmp_path: Path) -> None:
    res = runner.invoke(app, ["keys", "init", "--host", "h1", "--dir", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    private, public = Path(out["private"]), Path(out["public"])
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    signer = Signer.load(private)
    assert signer.host == "h1" and signer.key_id == out["key_id"]
    assert json.loads(public.read_text())["public_key_hex"] == signer.public_key_bytes.hex()
    assert "private_key_hex" not in public.read_text()


def test_trust_dir_round_trip_and_rotation_overlap(tmp_path: Path) -> None:
    keys, trust = tmp_path / "keys", tmp_path / "trust"
    ids = []
    for _ in range(2):  # old and new key of the same host, both trusted during the overlap
        res = runner.invoke(
            app,
            ["keys", "init", "--host", "h1", "--dir", str(keys), "--trust-dir", str(trust),
             "--json"],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        ids.append(json.loads(res.stdout)["key_id"])
    store = TrustStore.load(trust)
    assert sorted(store.keys_of("h1")) == sorted(ids)
    f = Fleet()
    f.trust = store
    f.presence.hosts["w-h1"] = "h1"
    for key_id in ids:  # records signed with either key verify during the overlap
        signer = Signer.load(keys / f"{key_id}.key")
        env = Envelope.new(kind=Kind.SEND, sender="w-h1", to="m-b", ttl_s=60, now_ms=f.now)
        k, h, v = encode(env, topic=f.topics.inbox("b"), signer=signer)
        assert f.verifier("b").verify(topic=f.topics.inbox("b"), key=k, headers=h, value=v)
    res = runner.invoke(app, ["keys", "untrust", ids[0], "--dir", str(trust)])
    assert res.exit_code == 0, res.output
    f.trust = TrustStore.load(trust)
    old = Signer.load(keys / f"{ids[0]}.key")
    env = Envelope.new(kind=Kind.SEND, sender="w-h1", to="m-b", ttl_s=60, now_ms=f.now)
    k, h, v = encode(env, topic=f.topics.inbox("b"), signer=old)
    with pytest.raises(EnvelopeError) as info:
        f.verifier("b").verify(topic=f.topics.inbox("b"), key=k, headers=h, value=v)
    assert info.value.reason == r.UNKNOWN_KEY
    listed = runner.invoke(app, ["keys", "list", "--dir", str(trust), "--json"])
    assert [row["key_id"] for row in json.loads(listed.stdout)] == [ids[1]]


def test_init_never_overwrites_and_bad_files_are_config_errors(tmp_path: Path) -> None:
    res = runner.invoke(
        app, ["keys", "init", "--host", "h1", "--dir", str(tmp_path), "--key-id", "h1.k"]
    )
    assert res.exit_code == 0
    again = runner.invoke(
        app, ["keys", "init", "--host", "h1", "--dir", str(tmp_path), "--key-id", "h1.k"]
    )
    assert again.exit_code == 1 and "KEY_EXISTS" in again.output
    (tmp_path / "junk.pub").write_text("{}")
    with pytest.raises(ConfigError):
        TrustStore.load(tmp_path)


def test_one_key_id_cannot_name_two_keys() -> None:
    store = TrustStore()
    a, b = Signer.generate("h1", "same.id"), Signer.generate("h2", "same.id")
    store.add(a.host, a.key_id, a.public_key_bytes)
    store.add(a.host, a.key_id, a.public_key_bytes)  # idempotent
    with pytest.raises(ConfigError):
        store.add(b.host, b.key_id, b.public_key_bytes)


def test_signer_repr_has_no_key_material() -> None:
    s = Signer.generate("h1")
    assert s.seed().hex() not in repr(s)


def test_reload_swaps_keys_and_a_broken_dir_keeps_the_old_ones(tmp_path: Path) -> None:
    a, b = Signer.generate("h1"), Signer.generate("h2")
    a.write_public(tmp_path / f"{a.key_id}.pub")
    store = TrustStore.load(tmp_path)
    b.write_public(tmp_path / f"{b.key_id}.pub")
    (tmp_path / f"{a.key_id}.pub").unlink()
    store.reload(tmp_path)
    assert store.lookup(a.key_id) is None and store.lookup(b.key_id) is not None
    (tmp_path / "broken.pub").write_text("not json")
    with pytest.raises(ConfigError):
        store.reload(tmp_path)
    assert store.lookup(b.key_id) is not None
