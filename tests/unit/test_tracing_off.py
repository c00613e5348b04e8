"""Tracing off (the default): the gateway's hot path imports no OpenTelemetry SDK and never
reaches the seam's span code (docs/observability.md, "Tracing", what tracing off costs)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import os, sys
    from sqlalchemy.orm import Session

    from pipeline.bootstrap.gateway import build_gateway  # the gateway's whole composition
    from pipeline.bootstrap.tracing import install_tracing
    from pipeline.envelope import Envelope, Kind, Signer
    from pipeline.host.outbound import Publisher
    from pipeline.kafka.topics import TopicNames
    from pipeline.record_headers import unpack_headers
    from pipeline.store import make_engine
    from pipeline.store.schema import ensure_schema
    from pipeline.tracing import TRACING, settings_from_env

    stop = install_tracing(settings_from_env(os.environ), host="a")  # as build_gateway does
    engine = make_engine("sqlite:///" + sys.argv[1])
    ensure_schema(engine)
    publisher = Publisher(host="a", signer=Signer.from_seed("a", b"a" * 32), topics=TopicNames())
    with Session(engine) as s, s.begin():
        for _ in range(3):
            env = Envelope.new(kind=Kind.SEND, sender="w-a", to="m-b", body=b"x", ttl_s=60)
            publisher.stage(s, env, to_host="b")
    with engine.connect() as c:
        blobs = [r[0] for r in c.exec_driver_sql("SELECT headers FROM outbox")]
    names = {k for blob in blobs for k, _ in unpack_headers(blob)}
    stop()
    print(TRACING.on, "traceparent" in names, len(blobs),
          sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk", "pipeline.tracing.spans"))))
    """
)


def test_a_gateway_send_with_tracing_off_loads_no_sdk(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parents[2])}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "store.db")],
        capture_output=True, text=True, env=env, check=True, timeout=120,
    )  # fmt: skip
    assert out.stdout.split("\n")[-2] == "False False 3 []", out.stdout + out.stderr
