"""A reference child for the long-lived command injector, and the loop to write one in Python.

``serve(handle)`` reads one framed brief after another from stdin and writes one answer line for
each (:mod:`.framing`); ``handle(brief)`` returns ``"ok"``, ``"retry"`` (busy, nothing injected)
or raises (``"error"`` with the exception's text). Run as a program
(``python -m pipeline.gateway.injectors.child``) it answers ``ok`` to every brief and does
nothing with it -- the long-lived counterpart of ``true``, for benches and smoke tests.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import BinaryIO

from .framing import ERROR, OK, Brief, answer, read_brief


def serve(
    handle: Callable[[Brief], str],
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
) -> None:
    """Answer briefs until stdin ends (the gateway closed it or exited)."""
    src = stdin if stdin is not None else sys.stdin.buffer
    dst = stdout if stdout is not None else sys.stdout.buffer
    while (brief := read_brief(src)) is not None:
        try:
            status, error = handle(brief), ""
        except Exception as exc:  # noqa: BLE001 -- the brief was not injected: say why, keep serving
            status, error = ERROR, f"{type(exc).__name__}: {exc}"
        dst.write(answer(brief.msg_id, status, error))
        dst.flush()


def main() -> None:
    serve(lambda brief: OK)


if __name__ == "__main__":
    main()
