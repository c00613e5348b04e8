"""The one strict binder: unknown keys refused, key paths in every message, the caller's codes."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from pipeline.errors import ConfigError
from pipeline.reasons import Config
from pipeline.support.binder import (
    CONFIG_REASONS,
    MISSING,
    Reasons,
    bind,
    config_error,
    in_file,
    read_toml,
    refuse_unknown,
)

OWN = Reasons(
    not_found="T_NOT_FOUND",
    syntax="T_SYNTAX",
    unknown_key="T_UNKNOWN",
    missing_key="T_MISSING",
    invalid="T_INVALID",
)


class Colour(enum.StrEnum):
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


@dataclass(frozen=True, kw_only=True)
class Leaf:
    name: str = field(metadata={"reason": "T_NAME"})
    size: int = 1
    colour: Colour = field(default=Colour.RED, metadata={"choices": (Colour.RED, Colour.GREEN)})

    def __post_init__(self) -> None:
        if self.size > 9:
            raise config_error("size", self.size, "must be <= 9", "T_TOO_BIG")


@dataclass(frozen=True, kw_only=True)
class SelfNamed:
    """A value object that names its own table (like ``[kafka]``, ``[retention]``)."""

    limit_s: float = 1.0

    def __post_init__(self) -> None:
        if self.limit_s > 5:
            raise config_error("own.limit_s", self.limit_s, "too long", "T_LONG", horizon_s=5)


@dataclass(frozen=True, kw_only=True)
class Root:
    host: str
    ratio: float = 0.5
    on: bool = False
    mode: Literal["a", "b"] = "a"
    tags: tuple[str, ...] = ()
    leaf: Leaf | None = None
    leaves: tuple[Leaf, ...] = ()
    own: SelfNamed = field(default_factory=SelfNamed)
    note: str | None = None


def fails(table: dict[str, Any], reasons: Reasons = OWN) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        bind(Root, table, reasons=reasons)
    return info.value


def test_a_full_table_binds_lists_as_tuples_and_strings_as_enum_members() -> None:
    root = bind(
        Root,
        {
            "host": "h",
            "ratio": 2,  # a float field takes an int
            "on": True,
            "mode": "b",
            "tags": ["x", "y"],
            "leaf": {"name": "l", "colour": "green"},
            "leaves": [{"name": "a"}, {"name": "b", "size": 3}],
            "own": {"limit_s": 2},
        },
        reasons=OWN,
    )
    assert root.tags == ("x", "y") and root.ratio == 2 and root.mode == "b"
    assert root.leaf == Leaf(name="l", colour=Colour.GREEN)
    assert type(root.leaf.colour) is Colour
    assert root.leaves == (Leaf(name="a"), Leaf(name="b", size=3))
    assert root.own == SelfNamed(limit_s=2)


def test_absent_keys_take_the_defaults() -> None:
    assert bind(Root, {"host": "h"}) == Root(host="h")


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"host": "h", "hots": 1}, "hots"),
        ({"host": "h", "leaf": {"name": "l", "colur": "red"}}, "leaf.colur"),
        ({"host": "h", "leaves": [{"name": "a"}, {"name": "b", "sise": 2}]}, "leaves[1].sise"),
    ],
)
def test_an_unknown_key_is_refused_with_its_path_and_the_known_keys(
    table: dict[str, Any], key: str
) -> None:
    err = fails(table)
    assert (err.reason, err.context["key"]) == ("T_UNKNOWN", key)
    assert str(err).startswith(f"[T_UNKNOWN] {key} = ")
    assert "unknown key (known: " in str(err)


def test_unknown_values_can_be_hidden() -> None:
    with pytest.raises(ConfigError) as info:
        refuse_unknown({"pasword": "s3cret"}, ("password_file",), at="kafka.", hide_values=True)
    assert info.value.reason == Config.CONFIG_UNKNOWN_KEY
    assert info.value.context["key"] == "kafka.pasword"
    assert "s3cret" not in str(info.value) and "s3cret" not in repr(info.value.context)


@pytest.mark.parametrize(
    ("table", "key"),
    [({}, "host"), ({"host": "h", "leaves": [{"size": 2}]}, "leaves[0].name")],
)
def test_a_field_without_default_is_a_required_key(table: dict[str, Any], key: str) -> None:
    err = fails(table)
    assert (err.reason, err.context["key"]) == ("T_MISSING", key)
    assert f"{key}: required key is missing" in str(err)
    assert "value" not in err.context  # nothing was given: no "= None" in the message


@pytest.mark.parametrize(
    ("table", "key", "detail"),
    [
        ({"host": 5}, "host", "must be a string"),
        ({"host": "h", "on": 1}, "on", "must be true or false"),
        ({"host": "h", "ratio": True}, "ratio", "must be a number"),
        ({"host": "h", "leaf": {"name": "l", "size": True}}, "leaf.size", "must be an integer"),
        ({"host": "h", "leaf": {"name": "l", "size": 1.5}}, "leaf.size", "must be an integer"),
        ({"host": "h", "mode": "c"}, "mode", "must be one of a, b"),
        ({"host": "h", "tags": "x"}, "tags", "must be a list"),
        ({"host": "h", "tags": ["x", 2]}, "tags[1]", "must be a string"),
        ({"host": "h", "leaf": "l"}, "leaf", "must be a table"),
        ({"host": "h", "leaves": {"name": "a"}}, "leaves", "must be an array of tables"),
        ({"host": "h", "leaves": ["a"]}, "leaves", "must be an array of tables"),
        ({"host": "h", "note": 3}, "note", "must be a string"),
    ],
)
def test_a_value_of_the_wrong_shape_names_its_path(
    table: dict[str, Any], key: str, detail: str
) -> None:
    err = fails(table)
    assert (err.reason, err.context["key"]) == ("T_INVALID", key)
    assert detail in str(err) and f"{key} = " in str(err)


def test_choices_narrow_an_enum_and_the_message_offers_only_those() -> None:
    err = fails({"host": "h", "leaf": {"name": "l", "colour": "blue"}})
    assert err.context["key"] == "leaf.colour"
    assert "must be one of red, green" in str(err)


def test_a_field_may_give_a_wrong_value_its_own_reason() -> None:
    err = fails({"host": "h", "leaf": {"name": 5}})
    assert (err.reason, err.context["key"]) == ("T_NAME", "leaf.name")


def test_a_nested_objects_own_error_is_named_under_its_table() -> None:
    """The dataclass said ``size``; the binder names it where the file has it."""
    err = fails({"host": "h", "leaves": [{"name": "a"}, {"name": "b", "size": 10}]})
    assert (err.reason, err.context["key"], err.context["value"]) == (
        "T_TOO_BIG",
        "leaves[1].size",
        10,
    )
    assert "leaves[1].size = 10: must be <= 9" in str(err)


def test_a_key_the_object_already_names_under_its_table_is_kept_with_its_context() -> None:
    err = fails({"host": "h", "own": {"limit_s": 9}})
    assert (err.reason, err.context["key"], err.context["horizon_s"]) == (
        "T_LONG",
        "own.limit_s",
        5,
    )
    assert "own.own." not in str(err)


def test_a_converter_binds_its_field_by_hand_with_the_key_path() -> None:
    seen: list[str] = []

    def leaf(value: Any, key: str) -> Leaf:
        seen.append(key)
        return Leaf(name=str(value))

    assert bind(Root, {"host": "h", "leaf": "x"}, convert={"leaf": leaf}).leaf == Leaf(name="x")
    assert seen == ["leaf"]


def test_the_default_reasons_are_the_config_family() -> None:
    assert fails({"host": "h", "x": 1}, CONFIG_REASONS).reason == Config.CONFIG_UNKNOWN_KEY
    assert fails({}, CONFIG_REASONS).reason == Config.CONFIG_MISSING_KEY
    assert fails({"host": 1}, CONFIG_REASONS).reason == Config.CONFIG_INVALID


def test_config_error_shows_the_value_unless_missing() -> None:
    assert str(config_error("a.b", None, "bad")) == "[CONFIG_INVALID] a.b = None: bad"
    assert str(config_error("a.b", MISSING, "absent", "X")) == "[X] a.b: absent"


def test_read_toml_uses_the_callers_codes_and_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        read_toml(tmp_path / "nope.toml", OWN)
    assert info.value.reason == "T_NOT_FOUND" and "nope.toml" in str(info.value)
    bad = tmp_path / "bad.toml"
    for content in (b"x = [", b"x = '\xff'"):
        bad.write_bytes(content)
        with pytest.raises(ConfigError) as info:
            read_toml(bad, OWN)
        assert info.value.reason == "T_SYNTAX" and str(bad) in str(info.value)
    good = tmp_path / "good.toml"
    good.write_text('host = "h"\n', encoding="utf-8")
    assert read_toml(good, OWN) == {"host": "h"}


def test_in_file_names_the_source_in_message_and_context() -> None:
    err = in_file(config_error("host", 5, "must be a string", "T_INVALID"), "fleet.toml")
    assert str(err) == "[T_INVALID] fleet.toml: host = 5: must be a string"
    assert (err.reason, err.context["file"], err.context["key"]) == (
        "T_INVALID",
        "fleet.toml",
        "host",
    )
