"""Spawn admission: R-SPAWN-5, R-FAIL-8 (an orchestrator fans out too far: a cap on
subagents per parent and per job, and a spawn budget per job) -> CAP_EXCEEDED; an unknown
profile has its own reason."""

from __future__ import annotations

import pytest

from pipeline.control.caps import Counts, admit
from pipeline.host.entity_config import InjectorSpec, ProfileConfig
from pipeline.reasons import Lifecycle

PROFILE = ProfileConfig(
    name="shell",
    launch=("sh", "-c", "echo {gid}"),
    injector=InjectorSpec(type="command", command=("cat",)),
    max_live_per_parent=2,
    max_live_per_job=3,
    max_spawns_per_job=4,
)
PROFILES = {"shell": PROFILE}


def test_under_every_cap_is_admitted() -> None:
    assert admit(PROFILES, "shell", Counts(live_of_parent=1, live_of_job=2, spawned_of_job=3),
                 job="j").admitted  # fmt: skip


@pytest.mark.parametrize(
    ("counts", "what"),
    [
        (Counts(live_of_parent=2), "parent"),
        (Counts(live_of_job=3), "live workers of this job"),
        (Counts(spawned_of_job=4), "spawns of this job"),
    ],
)
def test_each_cap_refuses_with_cap_exceeded(counts: Counts, what: str) -> None:
    got = admit(PROFILES, "shell", counts, job="j")
    assert not got.admitted and got.reason is Lifecycle.CAP_EXCEEDED
    assert what in got.detail


def test_job_caps_apply_only_to_a_spawn_with_a_job() -> None:
    assert admit(PROFILES, "shell", Counts(live_of_job=9, spawned_of_job=9), job=None).admitted


def test_unknown_profile_has_its_own_reason() -> None:
    got = admit(PROFILES, "nope", Counts(), job=None)
    assert got.reason is Lifecycle.UNKNOWN_PROFILE and "shell" in got.detail
