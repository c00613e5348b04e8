"""The fleet rig: several hosts' files in one folder, for tests, benches, chaos and the demo.

One folder holds, per host ``h``: its signing key ``h.key`` and public half ``trusted/h.pub``
(the trust dir every host shares), its SQLite store ``h.sqlite`` and its gateway config, built
as a :class:`~pipeline.host.gateway_config.GatewayConfig` and written by :mod:`.fleet_toml`
(``h.toml`` unless a path is given). Every host of a rig shares its bootstrap and topic prefix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.envelope import Signer, TrustStore
from pipeline.host.entity_config import EntityConfig
from pipeline.host.gateway_config import GatewayConfig

from .fleet_toml import fleet_toml


@dataclass(frozen=True, kw_only=True)
class Rig:
    """Where the hosts' files go, and what their configs share. ``bootstrap``/``prefix`` None:
    the config's defaults (a rig that never reaches a broker)."""

    root: Path
    bootstrap: str | None = None
    prefix: str | None = None

    @property
    def trust_dir(self) -> Path:
        return self.root / "trusted"

    def key_file(self, host: str) -> Path:
        return self.root / f"{host}.key"

    def store_path(self, host: str) -> Path:
        return self.root / f"{host}.sqlite"

    def store_url(self, host: str) -> str:
        return f"sqlite:///{self.store_path(host)}"

    def write_keys(self, hosts: Iterable[str]) -> dict[str, Signer]:
        """A new signing key per host (``<host>.key``), its public half in the trust dir."""
        self.trust_dir.mkdir(parents=True, exist_ok=True)
        signers = {}
        for host in hosts:
            signer = Signer.generate(host)
            signer.write_private(self.key_file(host))
            signer.write_public(self.trust_dir / f"{host}.pub")
            signers[host] = signer
        return signers

    def config(
        self, host: str, entities: Iterable[EntityConfig] = (), **settings: Any
    ) -> GatewayConfig:
        """``host``'s config: the rig's bootstrap, prefix, store, key and trust dir, then
        ``settings`` (any other :class:`GatewayConfig` field, or one of those replaced)."""
        shared: dict[str, Any] = {
            "store_url": self.store_url(host),
            "key_file": str(self.key_file(host)),
            "trust_dir": str(self.trust_dir),
        }
        if self.bootstrap is not None:
            shared["bootstrap"] = self.bootstrap
        if self.prefix is not None:
            shared["topic_prefix"] = self.prefix
        return GatewayConfig(host=host, entities=tuple(entities), **(shared | settings))

    def write_config(self, config: GatewayConfig, path: Path | None = None) -> Path:
        """``config`` as fleet.toml at ``path`` (default ``<root>/<host>.toml``)."""
        path = path or self.root / f"{config.host}.toml"
        path.write_text(fleet_toml(config), encoding="utf-8")
        return path


def trust_store(signers: Mapping[str, Signer]) -> TrustStore:
    """A trust store of ``signers``' public keys, without a trust dir."""
    trust = TrustStore()
    for signer in signers.values():
        trust.add(signer.host, signer.key_id, signer.public_key_bytes)
    return trust
