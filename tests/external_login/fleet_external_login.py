"""The login of a cluster the suite did not start, laid over every client the suite builds for it.

``KAFKA_BOOTSTRAP`` + ``KAFKA_COMMAND_CONFIG`` (a Java client ``.properties`` file, read by
:func:`pipeline.kafka.properties.load_properties_file`, the same reader as ``--command-config``)
name someone else's cluster and how to log in to it (docs/local-kafka.md "A cluster you bring").
The tests build their clients from ``kafka.bootstrap`` alone, as they do on the suite's own
plaintext broker; this module gives each such client the login: every ``Producer``, ``Consumer``
and ``AdminClient`` whose ``bootstrap.servers`` names a broker of that cluster and which brings no
``security.protocol`` of its own gets the file's settings. A client that brings a login (a test of
logins, a command given ``--command-config``) is left as it is.

It runs in the pytest process (``tests/conftest.py``) and, through the ``sitecustomize`` beside
it on ``PYTHONPATH``, in every Python process the tests start (gateways, pool members, ``fleet``
commands). confluent_kafka is patched when something imports it, never before: a process that
never talks to Kafka loads nothing more (the lazy-CLI tests count the modules a command loads).

The conftest moves the file's name to ``FLEET_TEST_KAFKA_LOGIN`` and drops
``KAFKA_COMMAND_CONFIG`` from its environment, so a command a test runs takes only the login its
own command line gives, as it does on the suite's own broker.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

LOGIN_ENV = "FLEET_TEST_KAFKA_LOGIN"  # the properties file, as the suite's processes see it
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP"
_PATCHED = "_fleet_external_login"


def _servers(text: str) -> set[str]:
    return {s.strip() for s in text.split(",") if s.strip()}


KEYS_ENV = "FLEET_TEST_KAFKA_LOGIN_KEYS"  # the same login in librdkafka keys (also kcat's)


def login_properties(path: str) -> dict[str, str]:
    """The librdkafka settings of the login in ``path`` (password included: never log them).
    A child process reads them from the librdkafka-keyed copy when there is one, so a process
    running another release's ``pipeline`` (the rolling-upgrade tests) takes the login too."""
    keys = os.environ.get(KEYS_ENV)
    if keys and os.path.exists(keys):
        with open(keys, encoding="utf-8") as f:
            pairs = (line.rstrip("\n").partition("=") for line in f if "=" in line)
            return {k: v for k, _, v in pairs}
    from pipeline.kafka.properties import load_properties_file

    return load_properties_file(path, environ=os.environ).client_properties()


def _with_login(conf: dict[str, Any], servers: set[str], login: dict[str, str]) -> dict[str, Any]:
    named = _servers(str(conf.get("bootstrap.servers", "")))
    if "security.protocol" in conf or not named or not named <= servers:
        return conf
    return {**conf, **login}


def patch(module: ModuleType, servers: set[str], login: dict[str, str]) -> None:
    """Make ``module``'s client classes (confluent_kafka or confluent_kafka.admin) take the
    login; idempotent. A Python class (``AdminClient``, which names itself in ``super()``) gets
    its ``__init__`` wrapped in place; a C type (``Producer``, ``Consumer``) is replaced by a
    subclass."""
    for name in ("Producer", "Consumer", "AdminClient"):
        base = getattr(module, name, None)
        if base is None or getattr(base, _PATCHED, False):
            continue
        original = base.__init__

        def init(self: Any, *args: Any, __init: Any = original, **kwargs: Any) -> None:
            if args and isinstance(args[0], dict):
                args = (_with_login(args[0], servers, login), *args[1:])
            elif "bootstrap.servers" in kwargs:
                kwargs = _with_login(kwargs, servers, login)
            __init(self, *args, **kwargs)

        try:
            base.__init__ = init
            setattr(base, _PATCHED, True)
        except TypeError:  # a C type: its attributes cannot be set
            attrs = {"__init__": init, _PATCHED: True, "__module__": module.__name__}
            setattr(module, name, type(name, (base,), attrs))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Patches confluent_kafka and confluent_kafka.admin right after they are imported."""

    def __init__(self, servers: set[str], path: str) -> None:
        self.servers = servers
        self.path = path
        self._login: dict[str, str] | None = None

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in ("confluent_kafka", "confluent_kafka.admin"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        run = loader.exec_module  # type: ignore[attr-defined]

        def exec_module(module: ModuleType) -> None:
            run(module)
            if self._login is None:
                self._login = login_properties(self.path)
            patch(module, self.servers, self._login)
            if fullname == "confluent_kafka.admin" and "confluent_kafka" in sys.modules:
                patch(sys.modules["confluent_kafka"], self.servers, self._login)

        loader.exec_module = exec_module  # type: ignore[attr-defined]
        return spec


def write_kcat_config(path: str, folder: str) -> str:
    """The login in librdkafka keys, for kcat (``KCAT_CONFIG``); written 0600 in ``folder``."""
    target = os.path.join(folder, "kcat.conf")
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.writelines(f"{k}={v}\n" for k, v in login_properties(path).items())
    return target


def install(environ: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    """Lay the login over this process's clients when the environment names one; True if so."""
    path, bootstrap = environ.get(LOGIN_ENV), environ.get(BOOTSTRAP_ENV)
    if not path or not bootstrap:
        return False
    if any(isinstance(f, _AfterImport) for f in sys.meta_path):
        return True
    finder = _AfterImport(_servers(bootstrap), path)
    sys.meta_path.insert(0, finder)
    for name in ("confluent_kafka", "confluent_kafka.admin"):
        if name in sys.modules:  # imported already (a plugin): patch it now
            finder._login = finder._login or login_properties(path)
            patch(sys.modules[name], finder.servers, finder._login)
    return True
