"""Broker-side and environment faults, as catalogue rows.

Each fault is an :data:`~pipeline.chaos.nemesis.Action` (do the fault, hold it, heal it)
and, where the fault needs apparatus, a rig (a proxy, a small filesystem, a clock-skew shim) that
lives for one repetition. The cluster faults run on the scenario's own brokers - three KRaft
nodes (RF 3, min ISR 2) for the leader faults - never on a shared one. The faults themselves:
:mod:`.broker_faults` (leader-kill9, paused-leader, logdir-unwritable, rolling-restart),
:mod:`.client_cut` (cut-off), :mod:`.disk_full` (store-full), :mod:`.skewed_clock` (clock-skew),
:mod:`.lost_offsets` (retention-gap); the waits a heal ends with:
:mod:`.own_cluster`.

How each fault is made on this machine (we run as root, loopback only) is in ``docs/chaos.md``.
"""

from __future__ import annotations

from .broker_faults import (
    leader_kill9,
    leader_pause,
    logdir_unwritable,
    roll_workload,
    rolling_restart,
)
from .client_cut import broker_with_cut_listener, cut_off, cut_rig
from .disk_full import small_disk_rig, store_full
from .lost_offsets import retention_gap
from .nemesis import Fault, Scenario
from .skewed_clock import clock_skew, skew_rig

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="leader-kill9",
            number=7,
            fault=Fault.LEADER_KILL9,
            action=leader_kill9,
            checks="R-TOP-7 'a delivery report is a promise' with acks=all and min ISR 2: "
            "kill -9 of the node leading a busy partition of B's inbox, five times, on three "
            "nodes (RF 3, min ISR 2); nothing acknowledged is lost, nothing applied twice",
            own_broker=True,
            nodes=3,
            max_faults=5,
            duration_s=50.0,
            first_s=(2.0, 3.0),
            hold_s=(0.5, 2.0),
            gap_s=(0.5, 1.5),
        ),
        Scenario(
            name="paused-leader",
            number=9,
            fault=Fault.LEADER_PAUSE,
            action=leader_pause,
            checks="R-TOP-7 under a zombie leader: SIGSTOP of the node leading "
            "a busy partition of B's inbox, inside and past broker.session.timeout.ms (9 s), "
            "then SIGCONT; the fenced leader cannot take an acks=all write alone",
            own_broker=True,
            nodes=3,
            max_faults=3,
            duration_s=40.0,
            hold_s=(3.0, 14.0),
            gap_s=(1.0, 2.0),
        ),
        Scenario(
            name="rolling-restart",
            number=14,
            fault=Fault.ROLLING_RESTART,
            action=rolling_restart,
            checks="R-ACK-2 under an orderly broker roll: each of three nodes stopped "
            "cleanly and restarted, full ISR awaited between; strict - no duplicates at all, "
            "no FAILED, dead letter or refusal",
            own_broker=True,
            nodes=3,
            max_faults=1,
            duration_s=30.0,
            hold_s=(0.5, 1.5),
            strict=True,
            workload=roll_workload,
        ),
        Scenario(
            name="cut-off",
            number=11,
            fault=Fault.CUT_OFF,
            action=cut_off,
            checks="R-ACK-2, R-ACK-3 and R-OUT-1 (the broker away) seen from one client: host "
            "B cut off from the cluster for a minute (past session.timeout.ms and "
            "message.timeout.ms) by a TCP proxy, while A and the broker carry on",
            own_broker=True,
            broker=broker_with_cut_listener,
            rig=cut_rig,
            max_faults=1,
            first_s=(3.0, 5.0),
            hold_s=(60.0, 60.0),
        ),
        Scenario(
            name="logdir-unwritable",
            number=12,
            fault=Fault.LOGDIR_UNWRITABLE,
            action=logdir_unwritable,
            checks="R-TOP-7 when a broker's disk fails: the log directory of "
            "the node leading a busy partition of B's inbox made immutable (chattr +i) until "
            "the node halts, then restored and restarted; three nodes, RF 3, min ISR 2",
            own_broker=True,
            nodes=3,
            max_faults=2,
            duration_s=40.0,
            hold_s=(20.0, 20.0),  # the bound on waiting for the halt
            gap_s=(1.0, 2.0),
        ),
        Scenario(
            name="store-full",
            number=13,
            fault=Fault.STORE_FULL,
            action=store_full,
            rig=small_disk_rig,
            checks="R-ACK-8 'the dedupe row in the effect's own transaction' and R-STORE-2 when "
            "that transaction cannot be written: host B's SQLite store on a small tmpfs filled "
            "to ENOSPC (SQLITE_FULL) for a while; no offset is committed past an unwritten hold",
            hold_s=(3.0, 8.0),
            gap_s=(2.0, 4.0),
        ),
        Scenario(
            name="clock-skew",
            number=16,
            fault=Fault.CLOCK_SKEW,
            action=clock_skew,
            rig=skew_rig,
            checks="R-ENV-6 'ts <= now + skew' and 'now <= expiresAt + skew': "
            "host B restarted with its wall clock off by 0.2-0.7x clock_skew_s "
            "(nothing may change), then 1.5-3x (refusals carry CLOCK_SKEW; nothing silent)",
            max_faults=2,
            duration_s=90.0,  # room for both faults: a skewed start took 11-17 s here
            hold_s=(8.0, 12.0),
            gap_s=(1.0, 2.0),
        ),
        Scenario(
            name="retention-gap",
            number=18,
            fault=Fault.RETENTION,
            action=retention_gap,
            checks="R-FAIL-7 'never a silent skip': host B kill -9'd, the records it had not "
            "read deleted while it is down, restarted: B must stop with OFFSETS_LOST (exit 3, "
            "metric, log) until the group is reset; a deleted send counts as explained only if "
            "B reported it",
            own_broker=True,
            max_faults=1,
            first_s=(3.0, 5.0),
            hold_s=(3.0, 6.0),
        ),
    )
}
