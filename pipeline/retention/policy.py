"""The store's retention policy (fleet.toml ``[retention]``) and the R-STORE-1 horizon rule.

Every table a gateway writes grows with traffic; each finished row has a retention after which
the purger (:mod:`pipeline.retention.purger`) deletes it. Rows still in use are never purged,
whatever the policy says: unsent outbox rows, undrained held messages, pending tracking rows,
waiting turns (docs/store.md, bounded stores).

Two kinds of rows are *dedupe* rows -- they make a redelivered or replayed record a no-op -- and
R-EFF-4 decides their horizon: "key retention must cover the longest period over which
one event can be redelivered or replayed" (the same rule :class:`pipeline.effects.KeyClass`
enforces for idempotency keys; both use :func:`covers`):

* ``dedupe_s`` >= the inbox topic's ``retention.ms`` (``inbox_topic_s``, which the gateway
  declares on its inbox and control topics) + ``replay_window_s``, else
  ``DEDUPE_HORIZON_TOO_SHORT``;
* ``failed_reported_s`` >= the DLQ topic's ``retention.ms`` + ``replay_window_s`` (a replayed
  dead letter must not report a second FAILED), else ``REPORTED_HORIZON_TOO_SHORT``;
* ``sagas_finished_s`` >= the saga topics' ``retention.ms`` (``saga_topic_s``) +
  ``replay_window_s``: a finished saga's row is what makes a redelivered reply stale (a no-op);
  purged early, the reply would find no saga and be dead-lettered ``SAGA_UNKNOWN``. Else
  ``SAGA_HORIZON_TOO_SHORT``.

Pool step results are idempotency keys (``fleet_idempotency``, key class ``pool.<name>``): their
class publishes their expiry and :class:`pipeline.effects.KeyClass` already refuses one shorter
than the pool topic's retention (``IDEM_RETENTION_SHORTER_THAN_REPLAY``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.errors import ConfigError
from pipeline.reasons import Config, Retention
from pipeline.support.binder import config_error

# Light on purpose: host.config imports this, and `fleet send` must not load Kafka or SQL.
DAY_S = 86_400.0
DLQ_RETENTION_S = 14 * DAY_S  # TopologySpec.dlq_retention_ms (a unit test holds them equal)
_DURATIONS = (
    "outbox_sent_s",
    "tracking_finished_s",
    "failed_reported_s",
    "held_drained_s",
    "turns_closed_s",
    "dedupe_s",
    "inbox_topic_s",
    "replay_window_s",
    "runs_completed_s",
    "quarantine_released_s",
    "sagas_finished_s",
    "saga_topic_s",
    "pool_effects_s",
    "pool_members_stale_s",
    "every_s",
)


@dataclass(frozen=True, kw_only=True)
class RetentionConfig:
    """How long finished rows are kept, per table, and how the purger paces itself.

    ``outbox_sent_s`` -- outbox rows the broker confirmed (``SENT``) or a rewind dropped
    (``DROPPED``); ``tracking_finished_s`` -- settled forward-send tracking rows, counted from
    their deadline, and closed inject journal rows, counted from their close; ``failed_reported_s`` -- the FAILED reporter's rows (a dedupe: see the module
    doc); ``held_drained_s`` -- held messages already handed out; ``turns_closed_s`` -- answered,
    abandoned or expired turns, counted from their ASK's expiry; ``dedupe_s`` -- the inbox dedupe
    rows; ``inbox_topic_s`` -- the ``retention.ms`` the gateway declares on its inbox and control
    topics; ``replay_window_s`` -- how much longer than that a record can still come back (an
    offset reset, a replay from a copy); ``runs_completed_s`` -- completed runs of the run journal
    (the run, its branches and steps), counted from their last change, once none of their outbox
    rows is unsent; ``quarantine_released_s`` -- settled release requests (``DONE``/``FAILED``);
    ``sagas_finished_s`` -- completed and aborted sagas, counted from their last change (a
    dedupe: see the module doc); ``saga_topic_s`` -- the saga topics' ``retention.ms``;
    ``pool_effects_s`` -- the pool effect log, counted from the step's end;
    ``pool_members_stale_s`` -- a pool member's lanes row whose beat is that old (and older than
    three beats: its member died without a goodbye); ``batch_rows`` rows per transaction, at most
    ``max_batches`` transactions per table per pass, one pass every ``every_s``.
    """

    outbox_sent_s: float = DAY_S
    tracking_finished_s: float = DAY_S
    failed_reported_s: float = DLQ_RETENTION_S + DAY_S
    held_drained_s: float = DAY_S
    turns_closed_s: float = DAY_S
    dedupe_s: float = 8 * DAY_S
    inbox_topic_s: float = 7 * DAY_S
    replay_window_s: float = DAY_S
    runs_completed_s: float = DAY_S
    quarantine_released_s: float = DAY_S
    sagas_finished_s: float = 8 * DAY_S
    saga_topic_s: float = 7 * DAY_S  # Kafka's default retention.ms: the saga topics declare none
    pool_effects_s: float = DAY_S
    pool_members_stale_s: float = 3600.0
    batch_rows: int = 500
    max_batches: int = 20
    every_s: float = 60.0

    def __post_init__(self) -> None:
        for key in _DURATIONS:
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise _invalid(key, value, "must be a number > 0", Config.CONFIG_INVALID)
        for key in ("batch_rows", "max_batches"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise _invalid(key, value, "must be an integer >= 1", Config.CONFIG_INVALID)
        self._horizon(
            "dedupe_s",
            self.dedupe_s,
            self.inbox_topic_s,
            "the inbox topic's retention",
            Retention.DEDUPE_HORIZON_TOO_SHORT,
        )
        self._horizon(
            "failed_reported_s",
            self.failed_reported_s,
            DLQ_RETENTION_S,
            "the DLQ topic's retention",
            Retention.REPORTED_HORIZON_TOO_SHORT,
        )
        self._horizon(
            "sagas_finished_s",
            self.sagas_finished_s,
            self.saga_topic_s,
            "the saga topics' retention",
            Retention.SAGA_HORIZON_TOO_SHORT,
        )

    @property
    def inbox_retention_ms(self) -> int:
        """``retention.ms`` for the inbox and control topics (the topology declares it)."""
        return int(self.inbox_topic_s * 1000)

    def _horizon(self, key: str, kept: float, topic_s: float, what: str, reason: str) -> None:
        window = topic_s + self.replay_window_s
        if covers(kept, window):
            return
        raise _invalid(
            key,
            kept,
            f"rows kept {kept:g} s but a record can come back for {window:g} s ({what} "
            f"{topic_s:g} s + replay_window_s {self.replay_window_s:g} s); a redelivery after "
            "its row is purged would take effect twice (R-EFF-4). Keep it at least that long.",
            reason,
            horizon_s=window,
        )


def covers(retention_s: float | None, replay_window_s: float | None) -> bool:
    """R-EFF-4: rows kept ``retention_s`` (``None``: forever) outlive every redelivery
    or replay within ``replay_window_s`` (``None``: the topic keeps records forever)."""
    if retention_s is None:
        return True
    if replay_window_s is None:
        return False
    return retention_s >= replay_window_s


def _invalid(key: str, value: object, detail: str, reason: str, **extra: object) -> ConfigError:
    """Named under the ``[retention]`` table even when built in code."""
    return config_error(f"retention.{key}", value, detail, reason, **extra)
