"""The harness that lays a cluster's login over the suite's clients (tests/external_login,
docs/local-kafka.md "A cluster you bring"): only clients of that cluster that bring no login of
their own get it, and a Python class that names itself in ``super()`` still works."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1] / "external_login"))

import fleet_external_login as ext

LOGIN = {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "tester"}
SERVERS = {"127.0.0.1:1", "127.0.0.1:2"}


class _CType:  # stands for confluent_kafka.Producer
    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf


class _PyAdmin:  # stands for confluent_kafka.admin.AdminClient: names itself in super()
    def __init__(self, conf: dict[str, Any]) -> None:
        super(_module.AdminClient, self).__init__()
        self.conf = conf


_module = ModuleType("fake_kafka")
_module.Producer = _CType  # type: ignore[attr-defined]
_module.AdminClient = _PyAdmin  # type: ignore[attr-defined]


def test_only_clients_of_that_cluster_without_a_login_get_it() -> None:
    ext.patch(_module, SERVERS, LOGIN)
    ext.patch(_module, SERVERS, LOGIN)  # twice: no double wrapping
    producer = _module.Producer({"bootstrap.servers": "127.0.0.1:2,127.0.0.1:1", "acks": "all"})
    assert producer.conf == {"bootstrap.servers": "127.0.0.1:2,127.0.0.1:1", "acks": "all"} | LOGIN
    own = {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SSL"}
    assert _module.Producer(own).conf == own  # brings its own login: left alone
    other = {"bootstrap.servers": "127.0.0.1:3"}
    assert _module.Producer(other).conf == other  # another cluster: left alone
    admin = _module.AdminClient({"bootstrap.servers": "127.0.0.1:1"})
    assert admin.conf["sasl.username"] == "tester"
    assert isinstance(admin, _PyAdmin)


def test_nothing_is_installed_without_a_login_file() -> None:
    assert ext.install({"KAFKA_BOOTSTRAP": "127.0.0.1:1"}) is False
