"""A bench-only prototype of the per-branch ack watermark: what would it give?

Not production code. The relay is the real one (:class:`pipeline.outbox.Relay`); only its ack
is swapped for one upsert per branch per batch into a scratch table, instead of the per-row
``UPDATE outbox SET status = SENT``. Two variants, so the figure brackets what a real design
(docs/outbox.md, "The ack watermark: design") would cost:

* ``wm_ack``: the watermark ack, today's read (a single drain never rereads what it shipped:
  its cursor is the last id fetched, so the read is the same as the production relay's);
* ``wm_ack_read``: the same, and the read also excludes rows at or below their branch's
  watermark (a correlated lookup per row), as a relay must once rows stay ``PENDING`` in the
  table after they were sent;
* ``wm_design``: the design itself (SQLite): the watermark is a column ``outbox_branch.sent_lsn``
  (added to the bench's scratch store), the ack one guarded ``UPDATE`` per branch (the prefix
  guard ``sent_lsn >= lo - 1`` inside the statement, monotone, no probe), and the read starts
  from the branches with unsent rows (a partial index ``last_lsn > sent_lsn``) and takes each
  one's next ``ceil(n / branches)`` lsns on the unique index, above the watermark and above what
  this pass already handed to the producer. No stopped-branch handling (the bench has none).

The guard is the production one, moved onto the watermark: a run of confirmed rows of a branch
is acked only if its lsn ``lo - 1`` is at or below the branch's watermark (known in memory from
this relay's own acks, else looked up). The upsert never lowers a watermark.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from pipeline.errors import StoreError
from pipeline.outbox import Relay
from pipeline.outbox.fetch import COLUMNS, FetchSql

TABLE = "bench_outbox_sent"

_CREATE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (tenant VARCHAR(100) NOT NULL, "
    "branch_key VARCHAR(300) NOT NULL, sent_lsn BIGINT NOT NULL, "
    "PRIMARY KEY (tenant, branch_key))"
)
# monotone: a lower (or equal) lsn leaves the row alone (SQLite >= 3.24 and PostgreSQL)
_UPSERT = (
    f"INSERT INTO {TABLE} (tenant, branch_key, sent_lsn) VALUES (?, ?, ?) "
    "ON CONFLICT (tenant, branch_key) DO UPDATE SET sent_lsn = excluded.sent_lsn "
    f"WHERE excluded.sent_lsn > {TABLE}.sent_lsn"
)


def reset(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text(_CREATE))
        conn.execute(text(f"DELETE FROM {TABLE}"))


def behind(engine: Engine) -> int:
    """Branches whose watermark is below their last written lsn."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    f"SELECT count(*) FROM outbox_branch b LEFT JOIN {TABLE} s ON "
                    "s.tenant = b.tenant AND s.branch_key = b.branch_key "
                    "WHERE coalesce(s.sent_lsn, 0) < b.last_lsn"
                )
            ).scalar_one()
        )


def _runs(rows: list[Any]) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """Per branch, the first and last lsn of ``rows`` (as ``Acker.ack`` computes them)."""
    firsts: dict[tuple[str, str], int] = {}
    lasts: dict[tuple[str, str], int] = {}
    for row in rows:
        firsts.setdefault((row[1], row[2]), row[3])
        lasts[(row[1], row[2])] = row[3]
    return firsts, lasts


class WatermarkAcker:
    """Acks confirmed rows by raising their branch's watermark (same contract as ``Acker``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._acked_upto: dict[tuple[str, str], int] = {}

    def ack(self, rows: list[Any], *, whole_batch: bool = False) -> None:
        if not rows:
            return
        firsts, lasts = _runs(rows)
        known = self._acked_upto
        probe = [(t, b, lo - 1) for (t, b), lo in firsts.items() if known.get((t, b), 0) != lo - 1]
        try:
            with self.engine.begin() as conn:
                blocked: set[tuple[str, str]] = set()
                for t, b, prev in probe:  # first seen since start, or after a failure: rare
                    mark = conn.execute(
                        text(f"SELECT sent_lsn FROM {TABLE} WHERE tenant = :t AND branch_key = :b"),
                        {"t": t, "b": b},
                    ).scalar()
                    if (mark or 0) < prev:
                        blocked.add((t, b))
                params = [(t, b, lsn) for (t, b), lsn in lasts.items() if (t, b) not in blocked]
                conn.exec_driver_sql(_UPSERT, params)
            for (t, b), lsn in lasts.items():
                if (t, b) not in blocked:
                    known[(t, b)] = lsn
        except SQLAlchemyError as exc:
            raise StoreError(f"watermark prototype: cannot ack {len(rows)} rows: {exc}") from exc


class _FetchAboveWatermark(FetchSql):
    def __init__(self, paramstyle: str, *, tenant: str | None, limit: int) -> None:
        super().__init__(paramstyle, tenant=tenant, limit=limit)
        self._head = (
            f"SELECT {', '.join(COLUMNS)} FROM outbox WHERE status = 0 AND lsn > coalesce(("
            f"SELECT s.sent_lsn FROM {TABLE} s WHERE s.tenant = outbox.tenant "
            "AND s.branch_key = outbox.branch_key), 0)"
        )


_BRANCH_ACK = (
    "UPDATE outbox_branch SET sent_lsn = ? WHERE tenant = ? AND branch_key = ? "
    "AND sent_lsn >= ? AND sent_lsn < ? AND NOT abandoned"
)
_UNSENT = "last_lsn > sent_lsn AND NOT abandoned"


def reset_design(engine: Engine) -> None:
    """Give the scratch store's ``outbox_branch`` a ``sent_lsn`` column (0) and its index."""
    with engine.begin() as conn:
        names = {r[1] for r in conn.exec_driver_sql("PRAGMA table_info(outbox_branch)")}
        if "sent_lsn" not in names:
            conn.exec_driver_sql(
                "ALTER TABLE outbox_branch ADD COLUMN sent_lsn BIGINT NOT NULL DEFAULT 0"
            )
            conn.exec_driver_sql(
                "CREATE INDEX bench_ix_branch_unsent ON outbox_branch (tenant, branch_key) "
                f"WHERE {_UNSENT}"
            )
        conn.exec_driver_sql("UPDATE outbox_branch SET sent_lsn = 0")


def behind_design(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.exec_driver_sql(f"SELECT count(*) FROM outbox_branch WHERE {_UNSENT}").scalar_one()
        )


class BranchWatermarkAcker:
    """The designed ack: per branch, ``sent_lsn`` moves from ``lo - 1`` to ``hi`` or not at all."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def ack(self, rows: list[Any], *, whole_batch: bool = False) -> None:
        if not rows:
            return
        firsts, lasts = _runs(rows)
        params = [(hi, t, b, firsts[(t, b)] - 1, hi) for (t, b), hi in lasts.items()]
        try:
            with self.engine.begin() as conn:
                conn.exec_driver_sql(_BRANCH_ACK, params)
        except SQLAlchemyError as exc:
            raise StoreError(f"watermark prototype: cannot ack {len(rows)} rows: {exc}") from exc


class _DesignRelay(Relay):
    _marks: dict[tuple[str, str], int]

    def _fetch(self, cursor: int | None) -> list[Any]:
        conn = self._reader.raw_connection()
        try:
            cur = conn.cursor()
            if cursor is None:  # a new pass: the branches with unsent rows, from the index
                cur.execute(
                    f"SELECT tenant, branch_key, sent_lsn FROM outbox_branch WHERE {_UNSENT}"
                )
                self._marks = {(t, b): int(m) for t, b, m in cur.fetchall()}
            rows: list[Any] = []
            while self._marks and len(rows) < self.batch_size:  # one statement but at the tail
                rows += self._quantum(cur, self.batch_size - len(rows))
            cur.close()
        finally:
            conn.close()
        return rows

    def _quantum(self, cur: Any, n: int) -> list[Any]:
        """Up to ``n`` rows: each branch's next ``ceil(n / branches)`` lsns, in id order."""
        marks = self._marks
        q = -(-n // len(marks))  # at most n + branches - 1 rows read
        values = ", ".join(["(?, ?, ?)"] * len(marks))
        cols = ", ".join(f"o.{c}" for c in COLUMNS)
        cur.execute(
            f"WITH v(t, b, m) AS (VALUES {values}) SELECT {cols} FROM v JOIN outbox o "
            f"ON o.tenant = v.t AND o.branch_key = v.b AND o.lsn > v.m AND o.lsn <= v.m + {q} "
            "WHERE o.status = 0 ORDER BY o.id",
            [x for (t, b), m in marks.items() for x in (t, b, m)],
        )
        read: list[Any] = cur.fetchall()
        counts: dict[tuple[str, str], int] = {}
        for row in read:
            counts[(row[1], row[2])] = counts.get((row[1], row[2]), 0) + 1
        rows = read[:n]
        for row in rows:  # id order is lsn order within a branch
            marks[(row[1], row[2])] = row[3]
        for row in read[n:]:
            counts[(row[1], row[2])] = q  # rows read but not taken: the branch goes on
        for branch in [b for b in marks if counts.get(b, 0) < q]:
            del marks[branch]  # fewer than q unsent rows: none left for this pass
        return rows


def design_relay(engine: Engine, **kwargs: Any) -> Relay:
    relay = _DesignRelay(engine=engine, **kwargs)
    relay._acker = BranchWatermarkAcker(engine)  # type: ignore[assignment]
    return relay


def watermark_relay(engine: Engine, *, read_above: bool, **kwargs: Any) -> Relay:
    """A production relay whose ack is the watermark (and, with ``read_above``, its read too)."""
    relay = Relay(engine=engine, **kwargs)
    relay._acker = WatermarkAcker(engine)  # type: ignore[assignment]
    if read_above:
        relay._fetch_sql = _FetchAboveWatermark(
            engine.dialect.paramstyle, tenant=None, limit=relay.batch_size
        )
    return relay
