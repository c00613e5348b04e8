"""Test hooks (pipeline/hooks.py): off by default, planted bugs only through FLEET_FAULT."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.hooks import NO_HOOKS, PLANTED, Hooks, Window, hooks_from_fault


def test_production_has_every_hook_off() -> None:
    assert hooks_from_fault(None) is NO_HOOKS
    assert Hooks() == NO_HOOKS
    assert not (NO_HOOKS.commit_before_transaction or NO_HOOKS.dedupe_own_transaction
                or NO_HOOKS.ack_before_delivery_report)  # fmt: skip
    NO_HOOKS.at(Window.COMMITTED_BEFORE_TRANSACTION)  # no crash hook: a no-op


def test_each_plant_switches_on_exactly_its_bug_and_a_crash() -> None:
    bugs = {
        name: (h.commit_before_transaction, h.dedupe_own_transaction,
               h.ack_before_delivery_report, h.crash is not None)
        for name in PLANTED
        for h in [hooks_from_fault(name)]
    }  # fmt: skip
    assert bugs == {
        "plant_commit_first": (True, False, False, True),
        "plant_dedupe_apart": (False, True, False, True),
        "plant_ack_first": (False, False, True, True),
    }


def test_a_crash_point_fires_at_the_nth_time_its_window_is_reached(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exits: list[int] = []
    monkeypatch.setattr("pipeline.hooks.os._exit", exits.append)
    h = hooks_from_fault("crash_before_mark_sent", "3")
    h.at(Window.ACKED_BEFORE_REPORT)  # another window: ignored
    h.at(Window.REPORTED_NOT_MARKED)
    h.at(Window.REPORTED_NOT_MARKED)
    assert exits == []
    h.at(Window.REPORTED_NOT_MARKED)
    assert exits == [137]
    inject = hooks_from_fault("crash_after_inject")
    inject.at(Window.REPORTED_NOT_MARKED)
    assert exits == [137]
    inject.at(Window.INJECTED_NOT_RECORDED)
    assert exits == [137, 137]
    del exits[1:]
    commit = hooks_from_fault("crash_after_commit", "2").fault_after_commit
    assert commit is not None
    commit(0)  # no injects pending: not the window
    commit(1)
    assert exits == [137]
    commit(1)
    assert exits == [137, 137]


@pytest.mark.parametrize(("fault", "at"), [("nope", None), ("crash_after_commit", "0"),
                                           ("crash_after_commit", "x")])  # fmt: skip
def test_an_unknown_fault_or_a_bad_count_is_a_config_error(fault: str, at: str | None) -> None:
    with pytest.raises(ConfigError) as err:
        hooks_from_fault(fault, at)
    assert err.value.reason == "CONFIG_INVALID"
