"""``fleet keys init|trust|untrust|list`` -- host signing keys and trust directories.

Rotation (docs/envelope.md, "Key rotation"): ``init`` a new key, ``trust`` its public file on
every host, switch the gateway to the new private key, then ``untrust`` the old key id.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer

from pipeline.envelope.keys import Signer, TrustStore, read_public_file
from pipeline.errors import ConfigError
from pipeline.reasons import Keys

from .output import console, emit_json, fail_on_fleet_error

app = typer.Typer(help="Ed25519 host keys: create, trust, rotate.", no_args_is_help=True)

DEFAULT_KEY_DIR = Path.home() / ".fleet" / "keys"
DEFAULT_TRUST_DIR = Path.home() / ".fleet" / "trust"
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
TrustDirOpt = Annotated[Path, typer.Option("--dir", help="Trust directory (*.pub files).")]


@app.command()
@fail_on_fleet_error
def init(
    host: Annotated[str, typer.Option("--host", help="This host's id.")],
    directory: Annotated[Path, typer.Option("--dir", help="Where to write the key files.")] = (
        DEFAULT_KEY_DIR
    ),
    key_id: Annotated[str | None, typer.Option(help="Key id (default host.<hash>).")] = None,
    trust_dir: Annotated[
        Path | None, typer.Option(help="Also trust the new public key in this directory.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a key pair: <key_id>.key (mode 0600) and <key_id>.pub."""
    out = create_key(host, directory, key_id=key_id, trust_dir=trust_dir)
    if as_json:
        emit_json(out)
    else:
        console.print(
            f"key id {out['key_id']}\nprivate {out['private']} (0600)\npublic  {out['public']}"
        )


def create_key(
    host: str, directory: Path, *, key_id: str | None = None, trust_dir: Path | None = None
) -> dict[str, str]:
    """Write ``<key_id>.key`` (0600) and ``<key_id>.pub`` in ``directory``; trust the public key
    in ``trust_dir`` if given. The file name is the key id (``<host>.<hash>`` by default): the
    ``key_file`` a fleet.toml names (``fleet init`` writes both)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    signer = Signer.generate(host, key_id)
    private = directory / f"{signer.key_id}.key"
    if private.exists():
        raise ConfigError(f"{private} exists; refusing to overwrite a key", reason=Keys.KEY_EXISTS)
    signer.write_private(private)
    public = signer.write_public(directory / f"{signer.key_id}.pub")
    if trust_dir is not None:
        _trust(public, trust_dir)
    return {"host": host, "key_id": signer.key_id, "private": str(private), "public": str(public)}


def _trust(public: Path, trust_dir: Path) -> str:
    key = read_public_file(public)  # validates before anything lands in the trust dir
    trust_dir.mkdir(parents=True, exist_ok=True)
    TrustStore.load(trust_dir).add(key.host, key.key_id, key.public_key_bytes)  # clash check
    dest = trust_dir / f"{key.key_id}.pub"
    if dest.resolve() != public.resolve():
        shutil.copyfile(public, dest)
    return key.key_id


@app.command()
@fail_on_fleet_error
def trust(
    public_files: Annotated[list[Path], typer.Argument(help="Public key files (*.pub).")],
    directory: TrustDirOpt = DEFAULT_TRUST_DIR,
) -> None:
    """Add public keys to a trust directory (several keys per host = rotation overlap)."""
    for public in public_files:
        console.print(f"trusted {_trust(public, directory)}")


@app.command()
@fail_on_fleet_error
def untrust(
    key_id: Annotated[str, typer.Argument(help="Key id to remove.")],
    directory: TrustDirOpt = DEFAULT_TRUST_DIR,
) -> None:
    """Remove a key from a trust directory (end of a rotation overlap, or a revoked key)."""
    removed = [p for p in directory.glob("*.pub") if read_public_file(p).key_id == key_id]
    if not removed:
        raise ConfigError(f"key {key_id} is not in {directory}", reason=Keys.KEY_UNKNOWN)
    for p in removed:
        p.unlink()
    console.print(f"untrusted {key_id}")


@app.command("list")
@fail_on_fleet_error
def list_keys(directory: TrustDirOpt = DEFAULT_TRUST_DIR, as_json: JsonOpt = False) -> None:
    """List the trusted keys, by host."""
    keys = TrustStore.load(directory).all()
    rows = [{"host": k.host, "key_id": k.key_id, "public_key_hex": k.public_key_bytes.hex()}
            for k in keys]  # fmt: skip
    if as_json:
        emit_json(rows)
        return
    from rich.table import Table

    table = Table(title=f"trusted keys in {directory}")
    for col in ("host", "key_id", "public_key_hex"):
        table.add_column(col)
    for row in rows:
        table.add_row(row["host"], row["key_id"], row["public_key_hex"])
    console.print(table)
