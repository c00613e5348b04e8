"""The public API is deliberate: exactly these names, nothing leaks by accident."""

import pipeline

EXPECTED = {"AckMode", "FleetError", "TopicNames"}


def test_exported_names_are_exactly_the_public_api() -> None:
    assert set(pipeline.__all__) == EXPECTED
    for name in pipeline.__all__:
        assert hasattr(pipeline, name), name


def test_every_public_name_is_documented() -> None:
    for name in pipeline.__all__:
        assert getattr(pipeline, name).__doc__, f"{name} has no docstring"
