"""The ``fleet`` exit codes: one table, one function from a :class:`FleetError` to its code.

Every command ends through :func:`exit_code` (the Typer commands via
:func:`.output.fail_on_fleet_error`, the lean path via :mod:`.hot`), so a supervisor, a script
or a systemd unit can tell the cases apart (docs/cli.md "Exit codes")::

    0   EXIT_OK         done
    1   EXIT_REFUSED    a FleetError that is not retriable: bad config, unknown recipient,
                        refused login, ... (also a check that says no: ``fleet lag`` AT_RISK)
    2   EXIT_USAGE      the command line itself is wrong (click's usage errors)
    3   EXIT_FATAL      fenced or offsets lost: a person must look, a restart alone does not help
    75  EXIT_RETRY      a retriable FleetError (EX_TEMPFAIL, as the command injector's BUSY_EXIT):
                        the same command may succeed later (broker unreachable, store locked)

Light on purpose: the lean ``fleet send`` imports it.
"""

from __future__ import annotations

from typing import Final

from pipeline.errors import FencedError, FleetError, OffsetsLostError

EXIT_OK: Final = 0
EXIT_REFUSED: Final = 1
EXIT_USAGE: Final = 2
EXIT_FATAL: Final = 3
EXIT_RETRY: Final = 75  # EX_TEMPFAIL (sysexits.h)

# (code, name, meaning): the table docs/cli.md shows; a test holds the two to each other
EXIT_CODES: Final = (
    (EXIT_OK, "EXIT_OK", "done"),
    (EXIT_REFUSED, "EXIT_REFUSED", "refused: a FleetError that is not retriable"),
    (EXIT_USAGE, "EXIT_USAGE", "usage error: the command line is wrong"),
    (EXIT_FATAL, "EXIT_FATAL", "fenced or fatal: a person must look"),
    (EXIT_RETRY, "EXIT_RETRY", "retriable: the same command may succeed later"),
)


def exit_code(exc: FleetError) -> int:
    """The code a command exits with when ``exc`` ends it."""
    if isinstance(exc, FencedError | OffsetsLostError):
        return EXIT_FATAL
    return EXIT_RETRY if exc.retriable else EXIT_REFUSED
