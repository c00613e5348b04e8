"""Helpers for gateway tests: keys, per-host config files, gateway processes."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.envelope import Signer, TrustStore
from pipeline.host.config import config_from_mapping
from pipeline.testing import unique_name
from pipeline.testing.fleet_toml import config_table
from pipeline.testing.rig import Rig


@dataclass
class Fleet:
    """Keys and a shared trust dir for a set of hosts, under one unique topic prefix: the
    :class:`~pipeline.testing.rig.Rig`, with entity tables the tests write as TOML text."""

    root: Path
    bootstrap: str
    prefix: str
    signers: dict[str, Signer] = field(default_factory=dict)

    @classmethod
    def create(cls, root: Path, bootstrap: str, hosts: tuple[str, ...]) -> Fleet:
        prefix = unique_name("t").replace(".", "") + "."
        signers = Rig(root=root, bootstrap=bootstrap, prefix=prefix).write_keys(hosts)
        return cls(root=root, bootstrap=bootstrap, prefix=prefix, signers=signers)

    @property
    def rig(self) -> Rig:
        return Rig(root=self.root, bootstrap=self.bootstrap, prefix=self.prefix)

    @property
    def trust(self) -> TrustStore:
        return TrustStore.load(self.rig.trust_dir)

    def config_file(
        self,
        host: str,
        entities: str,
        *,
        store: str | None = None,
        extra: str = "",
        presence_ttl_s: float = 30.0,
        presence_interval_s: float = 1.0,
    ) -> Path:
        """A new config file for ``host``: the rig's settings, then ``extra`` and ``entities``
        (TOML text), bound by the loader's rules (a bad key fails here, not in the gateway)."""
        path = self.root / f"{host}-{len(list(self.root.glob(host + '-*.toml')))}.toml"
        rigged = self.rig.config(
            host,
            store_url=store or self.rig.store_url(host),
            presence_interval_s=presence_interval_s,
            presence_ttl_s=presence_ttl_s,
            sweep_interval_s=0.5,
        )
        written = tomllib.loads(f"{extra}\n{entities}")
        config = config_from_mapping(config_table(rigged) | written, environ=os.environ)
        return self.rig.write_config(config, path)
