"""``fleet init --host H``: a working fleet.toml, a signing key and a trust folder for one host.

Writes, in ``--dir`` (default: the current directory)::

    fleet.toml                 host, bootstrap, store, key_file, trust_dir, one pull main
    keys/<key id>.key (0600)   the host's Ed25519 key, named by its key id (as `fleet keys init`)
    keys/<key id>.pub
    keys/trusted/<key id>.pub  the trust folder, holding this host's own public key

Copy the other hosts' ``.pub`` files into ``keys/trusted`` (``fleet keys trust``) so their
messages verify. Nothing is overwritten: an existing fleet.toml is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from pipeline.errors import ConfigError
from pipeline.host.config import load_config
from pipeline.host.gateway_config import GatewayConfig

from .keys_cmd import create_key
from .login import BOOTSTRAP_ENV, BOOTSTRAP_NAMES
from .output import console, emit_json, fail_on_fleet_error

TEMPLATE = """\
# fleet.toml for host {host}, written by `fleet init`. Every key: docs/configuration.md.
# Run:  fleet gateway run --config {config}
host = {q_host}
bootstrap = {bootstrap}   # Kafka bootstrap servers
store_url = {store}   # held store, outbox, dedupe; PostgreSQL by URL
topic_prefix = {prefix}
key_file = {key_file}   # this host's signing key, named by its key id
trust_dir = {trust_dir}   # public keys of the hosts we accept (fleet keys trust)

# A main drained through pull (fleet poll, fleet mcp --as {host}-main).
[[entities]]
gid = {main}
role = "main"
delivery = "pull"
"""


def render(*, host: str, bootstrap: str, prefix: str, root: Path, key_file: str) -> str:
    """The fleet.toml text (strings quoted as TOML basic strings, which JSON's escapes are)."""
    return TEMPLATE.format(
        host=host,
        q_host=json.dumps(host),
        bootstrap=json.dumps(bootstrap),
        store=json.dumps(f"sqlite:///{root / ('fleet-' + host + '.sqlite')}"),
        prefix=json.dumps(prefix),
        key_file=json.dumps(key_file),
        trust_dir=json.dumps(str(root / "keys" / "trusted")),
        main=json.dumps(f"{host}-main"),
        config=root / "fleet.toml",
    )


def init(
    host: Annotated[str, typer.Option("--host", help="This host's id.")],
    directory: Annotated[Path, typer.Option("--dir", help="Where to write everything.")] = Path(),
    bootstrap: Annotated[
        str,
        typer.Option(
            *BOOTSTRAP_NAMES,
            envvar=BOOTSTRAP_ENV,
            help="Kafka bootstrap servers to write into the file.",
        ),
    ] = "127.0.0.1:9092",
    topic_prefix: Annotated[str, typer.Option(help="Topic and group prefix.")] = "fleet.",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Write a working fleet.toml, a signing key and a trust folder for host H."""
    root = directory.resolve()
    config = root / "fleet.toml"
    if config.exists():
        raise ConfigError(f"{config} exists; refusing to overwrite it")
    # host, bootstrap and prefix are checked before anything is written
    GatewayConfig(host=host, bootstrap=bootstrap, topic_prefix=topic_prefix)
    trust_dir = root / "keys" / "trusted"
    key = create_key(host, root / "keys", trust_dir=trust_dir)
    text = render(
        host=host, bootstrap=bootstrap, prefix=topic_prefix, root=root, key_file=key["private"]
    )
    config.write_text(text, encoding="utf-8")
    load_config(config)  # what we wrote loads, or this is a bug
    out = {"config": str(config), "trust_dir": str(trust_dir), **key}
    if as_json:
        emit_json(out)
        return
    console.print(
        f"wrote {config}\nkey id  {key['key_id']}\nprivate {key['private']} (0600)\n"
        f"trusted {trust_dir}\nnext: copy the other hosts' .pub files into {trust_dir} "
        f"(fleet keys trust --dir {trust_dir} FILE.pub), then fleet gateway run --config {config}"
    )


def register(root: typer.Typer) -> None:
    root.command("init")(fail_on_fleet_error(init))
