"""The composition root: the one place concrete objects are built and wired.

Entry points (CLI, demo, tests) call the ``build_*`` functions of its modules (:mod:`.gateway`,
:mod:`.client`, :mod:`.reporters`, :mod:`.pools`, :mod:`.sagas`, :mod:`.mcp`); they only parse
arguments. Kafka clients and engines come from a :class:`Factories` (tests pass their own), test
hooks from one :class:`~pipeline.hooks.Hooks`. Nothing here reads the environment or files beyond
what the frozen configs name.

This package module imports nothing: a one-shot ``fleet send`` imports :mod:`.client` alone,
not the graph the gateway's builder wires.
"""
