"""The public API is deliberate: exactly these names, each resolving and documented."""

import pipeline

EXPECTED = {
    "Ack",
    "AckMode",
    "BackoffPolicy",
    "ConsumerRuntime",
    "DeadLetter",
    "EntityConfig",
    "Envelope",
    "FailureContext",
    "FailurePorts",
    "FleetError",
    "Fold",
    "GatewayClient",
    "GatewayConfig",
    "Kind",
    "LauncherConfig",
    "LocalCluster",
    "Quarantine",
    "Record",
    "Relay",
    "Retry",
    "RuntimeConfig",
    "Signer",
    "Staged",
    "TopicNames",
    "TrustStore",
    "Verifier",
    "build_client",
    "build_gateway",
    "load_config",
}


def test_exported_names_are_exactly_the_public_api() -> None:
    assert set(pipeline.__all__) == EXPECTED


def test_every_public_name_resolves_and_is_documented() -> None:
    for name in pipeline.__all__:
        value = getattr(pipeline, name)
        assert value.__doc__ and not value.__doc__.startswith(name + "("), f"{name}: no docstring"


def test_unknown_names_are_attribute_errors() -> None:
    try:
        pipeline.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")
