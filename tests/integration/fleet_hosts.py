"""Helpers for gateway tests: keys, per-host config files, gateway processes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pipeline.envelope import Signer, TrustStore
from pipeline.testing import unique_name


@dataclass
class Fleet:
    """Keys and a shared trust dir for a set of hosts, under one unique topic prefix."""

    root: Path
    bootstrap: str
    prefix: str
    signers: dict[str, Signer] = field(default_factory=dict)

    @classmethod
    def create(cls, root: Path, bootstrap: str, hosts: tuple[str, ...]) -> Fleet:
        fleet = cls(root=root, bootstrap=bootstrap, prefix=unique_name("t").replace(".", "") + ".")
        (root / "trusted").mkdir(parents=True, exist_ok=True)
        for h in hosts:
            s = Signer.generate(h)
            s.write_private(root / f"{h}.key")
            s.write_public(root / "trusted" / f"{h}.pub")
            fleet.signers[h] = s
        return fleet

    @property
    def trust(self) -> TrustStore:
        return TrustStore.load(self.root / "trusted")

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
        path = self.root / f"{host}-{len(list(self.root.glob(host + '-*.toml')))}.toml"
        store_url = store or f"sqlite:///{self.root / (host + '.sqlite')}"
        path.write_text(
            f'host = "{host}"\nbootstrap = "{self.bootstrap}"\nstore_url = "{store_url}"\n'
            f'topic_prefix = "{self.prefix}"\nkey_file = "{self.root / (host + ".key")}"\n'
            f'trust_dir = "{self.root / "trusted"}"\npresence_interval_s = {presence_interval_s}\n'
            f"presence_ttl_s = {presence_ttl_s}\nsweep_interval_s = 0.5\n{extra}\n{entities}\n"
        )
        return path
