"""Gateway configuration: :class:`GatewayConfig`, one host's frozen, keyword-only value object.

Only the CLI entry point reads a file (:func:`pipeline.host.config.load_config`); everything
else receives a :class:`GatewayConfig`. Its entities and spawn profiles are in
:mod:`pipeline.host.entity_config`, the checks they share in
:mod:`pipeline.host.config_checks`. The value objects validate themselves, so a config built in
code is held to the same rules as one read from TOML. Unknown keys are errors, never ignored: a typo in a
safety setting must not silently fall back to a default.

Reason codes (public API, all on :class:`~pipeline.errors.ConfigError`)::

    CONFIG_NOT_FOUND         the file cannot be read
    CONFIG_SYNTAX            the file is not valid TOML (or not UTF-8)
    CONFIG_UNKNOWN_KEY       a key this version does not know (typo?)
    CONFIG_MISSING_KEY       a required key is absent (host, gid, role, delivery, type, ...)
    CONFIG_INVALID           a value of the wrong type or out of range
    CONFIG_DUPLICATE_GID     two entities share a global id
    CONFIG_MISSING_INJECTOR  an entity with delivery "inject" has no injector
    CONFIG_UNKNOWN_CALLBACK  a callback injector names no registered callable (build_injector)
    INVALID_NAME             a host id, gid or group outside the safe charset

Every message names the file, the key path (``entities[1].injector.pane``) and the bad value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pipeline.kafka.security import PLAINTEXT, KafkaSecurity
from pipeline.reasons import Config
from pipeline.retention.policy import RetentionConfig
from pipeline.schemas import Framing
from pipeline.support.binder import config_error

from .config_checks import check_gid, check_number, check_text, checked_name, checked_strings
from .entity_config import EntityConfig, ProfileConfig

_PREFIX = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_BOOTSTRAP = re.compile(r"^[^,\s]+:\d{1,5}(,[^,\s]+:\d{1,5})*$")

MAX_AWAY_GRACE_S = 600.0  # the presence TTL every reader accepts (RosterView max_ttl_ms)
MAX_SPACING_MS = 100.0  # a spacing past this is a unit mistake (seconds written as ms)
# ``wal_checkpoint``: a thread of the process's own, or SQLite's writers (docs/store.md)
WAL_CHECKPOINTS = ("thread", "writers")


def _one_of(choices: tuple[str, ...]) -> str:
    """``"a" or "b"``: the values a choice key takes, as its CONFIG_INVALID says them."""
    return " or ".join(f'"{c}"' for c in choices)


@dataclass(frozen=True, kw_only=True)
class GatewayConfig:
    """One host's gateway. ``<host>`` in ``store_url``/``key_file``/``trust_dir`` is replaced."""

    host: str
    bootstrap: str = "127.0.0.1:9092"
    store_url: str = "sqlite:///fleet-<host>.sqlite"
    topic_prefix: str = "fleet."
    key_file: str | None = None
    trust_dir: str | None = None
    inject_deadline_s: float = 30.0
    # briefs of one entity journaled as one burst (docs/gateway.md "The inject journal")
    inject_burst: int = 8
    max_held_per_recipient: int = 10000
    max_ttl_s: float = 86400
    clock_skew_s: float = 30
    presence_interval_s: float = 5.0
    presence_ttl_s: float = 20.0
    # a SIGTERM stop announces the entities away for this long (docs/presence.md "Away");
    # 0: a stop tombstones them, as ``fleet gateway leave`` does. At most the readers' presence
    # TTL bound (600 s), or every peer would reject the away record TTL_TOO_LONG
    away_grace_s: float = 300.0
    sweep_interval_s: float = 5.0
    nudge_initial_s: float = 5.0
    nudge_max_s: float = 300.0
    entities: tuple[EntityConfig, ...] = ()
    profiles: tuple[ProfileConfig, ...] = ()
    spawn_deadline_s: float = 60.0
    # [retention]: docs/store.md, bounded stores
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    kafka: KafkaSecurity = PLAINTEXT  # the [kafka] table: login, TLS, pass-through properties
    # the local socket (docs/gateway.md): None = next to a SQLite store, "" = none
    socket_path: str | None = None
    socket_mode: int = 0o600
    # under load, the local socket commits a group at most every socket_spacing_ms and the relay
    # starts a pass at most every relay_spacing_ms: CPU per message for latency (docs/gateway.md
    # "The local socket", docs/outbox.md invariant 10); 0: off, every send committed and shipped
    # at once. An idle send is never held
    socket_spacing_ms: float = 4.0
    relay_spacing_ms: float = 6.0
    # the pairwise MAC mode (docs/envelope.md): off by default, opt in per fleet
    pairwise_mac: bool = False
    # the inbox's commit before inject (docs/gateway.md "The inbox's commit is pipelined"): true,
    # the injects wait for the broker's answer and the inbox goes on; false, the inbox waits with
    # them. Unset: pipelined on SQLite, waiting on PostgreSQL, where the smaller batches of an
    # inbox that never waits cost a transaction each (``pipelines_commit``)
    pipelined_commit: bool | None = None
    # gids that may STOP any worker spawned on this host (docs/lifecycle.md "Authority")
    operators: tuple[str, ...] = ()
    # how structured bodies start (docs/envelope.md "Body framing"): "v1" 0x00 N, every release
    # reads it; "v2" 0xFB 0x02 N, which no Confluent deserializer misreads but v0.12.0 refuses
    body_framing: str = "v1"
    # who copies a SQLite store's WAL back into the database (docs/store.md "SQLite: the WAL
    # checkpointed off the writers' path"): "thread", a thread of the process's own, off the
    # writers' path; "writers", SQLite's own way, inside the COMMIT that passes 1,000 pages
    wal_checkpoint: str = "thread"

    def __post_init__(self) -> None:
        checked_name(self.host, "host", "host id")
        if not isinstance(self.retention, RetentionConfig):
            raise config_error("retention", self.retention, "must be a table ([retention])")
        if not isinstance(self.kafka, KafkaSecurity):
            raise config_error("kafka", type(self.kafka).__name__, "must be a [kafka] table")
        if not isinstance(self.bootstrap, str) or not _BOOTSTRAP.match(self.bootstrap):
            raise config_error("bootstrap", self.bootstrap, "must be host:port[,host:port...]")
        if not isinstance(self.topic_prefix, str) or not _PREFIX.match(self.topic_prefix):
            raise config_error(
                "topic_prefix", self.topic_prefix, "use letters, digits, '.', '_', '-'"
            )
        for key in ("store_url", "key_file", "trust_dir", "socket_path"):
            value = getattr(self, key)
            if not (key == "socket_path" and value == ""):  # "": no local socket
                check_text(value, key, optional=key != "store_url")
            if value is not None:
                object.__setattr__(self, key, value.replace("<host>", self.host))
        for key, value, unset in (
            ("pairwise_mac", self.pairwise_mac, False),
            ("pipelined_commit", self.pipelined_commit, True),  # unset: by the store
        ):
            if not (isinstance(value, bool) or (unset and value is None)):
                raise config_error(key, value, "must be true or false")
        for key, choices in (("body_framing", tuple(Framing)), ("wal_checkpoint", WAL_CHECKPOINTS)):
            if getattr(self, key) not in choices:
                raise config_error(key, getattr(self, key), "must be " + _one_of(choices))
        if self.socket_mode not in (0o600, 0o660) or isinstance(self.socket_mode, bool):
            raise config_error(
                "socket_mode",
                self.socket_mode,
                "use 0o600 (the gateway's user) or 0o660 (and its group)",
            )
        names = [p.name for p in self.profiles if isinstance(p, ProfileConfig)]
        if len(names) != len(self.profiles):
            raise config_error("profiles", self.profiles, "must be a list of profile tables")
        for i, name in enumerate(names):
            if name in names[:i]:
                raise config_error(f"profiles[{i}].name", name, "profile name used twice")
        for key in (
            "spawn_deadline_s",
            "inject_deadline_s",
            "max_ttl_s",
            "presence_interval_s",
            "sweep_interval_s",
            "nudge_initial_s",
        ):
            check_number(getattr(self, key), key)
        check_number(self.nudge_max_s, "nudge_max_s", minimum=self.nudge_initial_s, strict=False)
        check_number(self.clock_skew_s, "clock_skew_s", strict=False)
        check_number(self.presence_ttl_s, "presence_ttl_s", minimum=self.presence_interval_s)
        check_number(self.away_grace_s, "away_grace_s", strict=False)
        for key in ("socket_spacing_ms", "relay_spacing_ms"):
            check_number(getattr(self, key), key, strict=False)
            if getattr(self, key) > MAX_SPACING_MS:
                raise config_error(key, getattr(self, key), f"at most {MAX_SPACING_MS:g} ms")
        if self.away_grace_s > MAX_AWAY_GRACE_S:
            raise config_error(
                "away_grace_s", self.away_grace_s, f"at most {MAX_AWAY_GRACE_S:.0f} s"
            )
        if not isinstance(self.max_held_per_recipient, int):
            raise config_error(
                "max_held_per_recipient", self.max_held_per_recipient, "must be an integer"
            )
        check_number(self.max_held_per_recipient, "max_held_per_recipient")
        if not isinstance(self.inject_burst, int) or isinstance(self.inject_burst, bool):
            raise config_error("inject_burst", self.inject_burst, "must be an integer")
        check_number(self.inject_burst, "inject_burst")
        if not isinstance(self.entities, tuple):
            raise config_error("entities", self.entities, "must be a list of entity tables")
        seen: set[str] = set()
        for i, entity in enumerate(self.entities):
            if not isinstance(entity, EntityConfig):
                raise config_error(f"entities[{i}]", entity, "must be an EntityConfig")
            if entity.gid in seen:
                raise config_error(
                    f"entities[{i}].gid", entity.gid, "gid used twice", Config.CONFIG_DUPLICATE_GID
                )
            seen.add(entity.gid)
        for i, gid in enumerate(checked_strings(self.operators, "operators")):
            check_gid(gid, key=f"operators[{i}]")

    @property
    def pipelines_commit(self) -> bool:
        """Whether the inbox's commit before inject is pipelined: ``pipelined_commit``, else
        on SQLite. On PostgreSQL the inbox waits by default: with it pipelined, the latency
        rows' mix cost gateway B 150 µs more per message at 500 msg/s and the server 50 (a
        transaction per smaller batch), and send -> ``INJECTED`` p99 rose (docs/performance.md)."""
        if self.pipelined_commit is not None:
            return self.pipelined_commit
        return self.store_url.startswith("sqlite")

    @property
    def background_checkpoint(self) -> bool:
        """Whether this host's SQLite store has its WAL checkpointed by a thread of its own
        (``wal_checkpoint = "thread"``, :func:`pipeline.store.make_engine`)."""
        return self.wal_checkpoint == "thread"

    @property
    def local_socket(self) -> str | None:
        """Where the gateway serves local sends: ``socket_path``, else ``<store file>.sock`` for
        a SQLite store; ``None`` when there is none (``socket_path = ""``, or PostgreSQL without
        a ``socket_path``)."""
        if self.socket_path is not None:
            return self.socket_path or None
        prefix = "sqlite:///"
        if self.store_url.startswith(prefix) and len(self.store_url) > len(prefix):
            db = self.store_url[len(prefix) :].split("?", 1)[0]
            if db != ":memory:":
                return f"{db}.sock"
        return None
