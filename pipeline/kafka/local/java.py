"""Find a Java runtime and check it is 17 or newer (the Kafka 4.x broker's floor)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from pipeline.errors import JavaNotFound

MIN_JAVA = 17
_VERSION = re.compile(r'version "(?P<v>[^"]+)"')


@dataclass(frozen=True, kw_only=True)
class JavaRuntime:
    executable: str
    major: int
    version_line: str


def _major(version: str) -> int:
    # "1.8.0_392" -> 8, "17.0.15" -> 17, "21" -> 21
    parts = version.split(".")
    if parts[0] == "1" and len(parts) > 1:
        return int(parts[1])
    lead = re.match(r"\d+", parts[0])
    return int(lead.group(0)) if lead else 0


def find_java(explicit: str | None = None) -> JavaRuntime:
    """Resolve ``explicit`` or ``$JAVA_HOME/bin/java`` or ``java`` on PATH; check its version."""
    candidate = explicit
    if candidate is None and os.environ.get("JAVA_HOME"):
        home_java = os.path.join(os.environ["JAVA_HOME"], "bin", "java")
        if os.path.exists(home_java):
            candidate = home_java
    if candidate is None:
        candidate = shutil.which("java")
    if candidate is None or not (os.path.exists(candidate) or shutil.which(candidate)):
        raise JavaNotFound(
            f"Java not found (looked at {explicit or '$JAVA_HOME/bin/java and PATH'}); "
            f"the Kafka broker needs Java {MIN_JAVA}+. Install OpenJDK {MIN_JAVA} or set JAVA_HOME.",
        )
    try:
        out = subprocess.run(
            [candidate, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as exc:
        raise JavaNotFound(f"Java at {candidate} cannot run: {exc}") from exc
    text = (out.stderr or "") + (out.stdout or "")
    match = _VERSION.search(text)
    if out.returncode != 0 or match is None:
        raise JavaNotFound(f"Java at {candidate} did not report a version: {text.strip()[:200]!r}")
    major = _major(match.group("v"))
    if major < MIN_JAVA:
        raise JavaNotFound(
            f"Java at {candidate} is version {match.group('v')}, older than {MIN_JAVA}; "
            f"the Kafka 4.x broker needs Java {MIN_JAVA}+.",
            context={"found": match.group("v")},
        )
    return JavaRuntime(executable=candidate, major=major, version_line=text.splitlines()[0])
