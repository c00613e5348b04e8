"""The ``fleet`` command table: one line per top-level command, read without importing Typer.

:data:`COMMANDS` is what ``fleet --help`` lists (the lean entry, :mod:`.entry`, prints it
without Typer or Rich) and what the Typer root group (:mod:`.lazy`) stands in with until a
command runs. Add a command with one line: its name, the ``pipeline.cli`` module that defines
it, and its help's first paragraph (``tests/unit/test_cli_lazy.py`` checks that text against
the command's own help and that every command a module defines has its line).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # typer (>= 0.26) vendors click; its commands are typed against it
    from typer import _click
    from typer.core import MarkupMode

ROOT_HELP = "fleet-pipeline: signed agent messaging on Apache Kafka."


@dataclass(frozen=True, kw_only=True)
class Lazy:
    """One top-level ``fleet`` command, loaded from ``pipeline.cli.<module>`` when used.

    ``group``: the module's ``app`` is ``fleet <name> ...``; otherwise ``<name>`` is one of the
    top-level commands the module adds (its ``register(root)``, or the commands of an unnamed
    ``app``). ``help`` is the first paragraph of the command's help, as ``fleet --help`` shows it.
    """

    name: str
    module: str
    help: str
    group: bool = False

    def load(self, rich_markup_mode: MarkupMode | None = None) -> _click.Command:
        return self.module_commands(rich_markup_mode)[self.name]

    def module_commands(
        self, rich_markup_mode: MarkupMode | None = None
    ) -> Mapping[str, _click.Command]:
        """Every top-level command the module adds in this entry's role, this one among them
        (``rich_markup_mode``: Typer's default when ``None``)."""
        import typer
        from typer.core import DEFAULT_MARKUP_MODE
        from typer.main import get_group

        module = importlib.import_module(f"pipeline.cli.{self.module}")
        mode = DEFAULT_MARKUP_MODE if rich_markup_mode is None else rich_markup_mode
        holder = typer.Typer(add_completion=False, rich_markup_mode=mode)
        if self.group:
            holder.add_typer(module.app, name=self.name)
        elif hasattr(module, "register"):
            module.register(holder)
        else:
            holder.add_typer(module.app)
        return get_group(holder).commands


def version_line(prog: str = "fleet") -> str:
    """``fleet --version``'s output: ``pipeline.__version__``. The package is read from
    ``sys.modules`` (importing this module imported it) rather than imported: the public-API
    package sits above every layer (tests/unit/test_layers.py)."""
    return f"{prog} {sys.modules['pipeline'].__version__}\n"


def command(name: str, module: str, help: str) -> Lazy:
    return Lazy(name=name, module=module, help=help)


def group(name: str, module: str, help: str) -> Lazy:
    return Lazy(name=name, module=module, help=help, group=True)


def listing_help(text: str | None) -> str:
    """The part of a command's help that a group's listing shows: its first paragraph."""
    import inspect  # not at import: the lean entry reads this module on every `fleet` call

    return inspect.cleandoc(text or "").split("\n\n")[0].strip()


# In `fleet --help` order.
# fmt: off
COMMANDS = (
    command("send", "gateway_cmd", "Send a message (works while the broker is down: it is queued in the outbox)."),
    command("ask", "gateway_cmd", "A worker asks a main; the answer is injected into the worker while its turn waits."),
    command("answer", "gateway_cmd", "Answer an ASK (TOO_LATE comes back if the asker's turn has ended)."),
    command("abandon", "gateway_cmd", "Give up a turn you asked: the asked side gets ABANDONED, a late ANSWER gets TOO_LATE."),
    command("poll", "gateway_cmd", "Drain held messages (an open pull while waiting: ASKs surface here)."),
    command("mcp", "gateway_cmd", "Serve one main over MCP on stdio (send, ask, answer, abandon, broadcast, poll, roster)."),
    command("demo", "demo_cmd", "Main on host A briefs a worker on host B; INJECTED and the REPLY come back, live."),
    command("init", "init_cmd", "Write a working fleet.toml, a signing key and a trust folder for host H."),
    command("spawn", "control_cmd", "Queue a SPAWN (outbox; works while the broker is down). The outcome, or one FAILED\n(SPAWN_TIMEOUT) past spawn_deadline_s, arrives through ``fleet poll``."),
    command("stop", "control_cmd", "Queue a STOP for a spawned worker (outbox; works while the broker is down). Its host\nstops it, tombstones its presence and marks it reaped; the outcome (INJECTED = stopped, or\nFAILED with the reason) arrives through ``fleet poll``."),
    command("workers", "control_cmd", "Live workers this host spawned: gid, parent, job, profile, age (from the local store)."),
    group("kafka", "kafka_cmd", "Run a local Apache Kafka (KRaft) from Maven Central jars; no Docker."),
    command("exporter", "observability_cmd", "Serve Prometheus metrics: lag (messages, seconds), retention risk, DLQ depth, and with\n``--store-url`` held messages, quarantined keys, outbox backlog and oldest unsent age."),
    command("lag", "observability_cmd", 'Per group/topic/partition: committed, log end, lag, lag seconds, retention risk, status;\nper group: time to drain the lag at the measured rates ("never" if it cannot).'),
    group("keys", "keys_cmd", "Ed25519 host keys: create, trust, rotate."),
    group("lab", "lab_cmd", "Size a worker pool: predict with the R-LAB-1 model, then measure it."),
    group("topics", "topics_cmd", "Kafka topology: inboxes, control, roster, DLQ, pools."),
    group("roster", "roster_cmd", "Who is live where (signed presence)."),
    group("outbox", "outbox_cmd", "Inspect the transactional outbox."),
    group("relay", "relay_cmd", "Ship committed outbox rows to Kafka (the outbox relay)."),
    group("store", "store_cmd", "The SQL store: schema version, size per table, retention purges."),
    group("dlq", "dlq_cmd", "Inspect, replay and report the dead-letter topic."),
    group("quarantine", "quarantine_cmd", "Per-key quarantine: list keys, release one."),
    group("idem", "idem_cmd", "Idempotency keys: list them, show one."),
    group("saga", "saga_cmd", "Sagas: list, show, and work the human queue."),
    group("gateway", "gateway_cmd", "Run a host's gateway: the per-host inbox with the dual ack model."),
    group("pool", "pool_cmd", "Worker pools: members of consumer group fleet.pool.<NAME>."),
    group("acls", "acls_cmd", "Least-privilege ACLs per login and role."),
    group("chaos", "chaos_cmd", "Faults on a seeded schedule, a recorded history, one checker."),
)
# fmt: on
