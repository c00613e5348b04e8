"""Resolve a pinned Kafka broker classpath from Maven Central into a cache folder, once.

The ``kafka_2.13`` POM brings the broker's runtime modules but not the SLF4J 1.x -> log4j2
binding, without which the broker runs silently; we add ``log4j-slf4j-impl`` (and log4j
api/core) ourselves. A ``.complete`` marker makes later runs offline.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import ArtifactUnresolved, LauncherError
from pipeline.reasons import Launcher

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"
SCALA_BINARY = "2.13"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>fleet-pipeline.local</groupId>
  <artifactId>kafka-broker-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-api</artifactId>
      <version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
      <version>{log4j}</version></dependency>
  </dependencies>
</project>
"""

_MISSING = re.compile(
    r"(?:Could not find artifact|Failure to find|Could not resolve dependencies for project)\s+(\S+)"
)
_MISSING_IN_LIST = re.compile(
    r"The following artifacts could not be resolved: ([^:]+:[^:]+:[^:]+:[^\s:,]+)"
)


@dataclass(frozen=True, kw_only=True)
class BrokerClasspath:
    kafka_version: str
    lib_dir: Path

    @property
    def classpath(self) -> str:
        return str(self.lib_dir / "*")


def default_cache_dir() -> Path:
    env = os.environ.get("FLEET_KAFKA_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "fleet-pipeline" / "kafka"


def resolve_classpath(
    *,
    kafka_version: str = KAFKA_VERSION,
    log4j_version: str = LOG4J_VERSION,
    cache_dir: Path | None = None,
    mvn: str | None = None,
) -> BrokerClasspath:
    """Return the cached classpath for ``kafka_version``, resolving it with Maven the first time."""
    root = (
        cache_dir or default_cache_dir()
    ) / f"kafka_{SCALA_BINARY}-{kafka_version}-log4j-{log4j_version}"
    lib = root / "lib"
    marker = root / ".complete"
    if marker.exists() and any(lib.glob("kafka_*.jar")):
        return BrokerClasspath(kafka_version=kafka_version, lib_dir=lib)
    maven = mvn or shutil.which("mvn")
    if maven is None:
        raise LauncherError(
            "Maven (mvn) not found: it is needed once to fetch the Kafka broker jars "
            f"org.apache.kafka:kafka_{SCALA_BINARY}:{kafka_version}; install Maven 3.8+",
            reason=Launcher.MAVEN_NOT_FOUND,
        )
    root.mkdir(parents=True, exist_ok=True)
    staging = root / "lib.partial"
    shutil.rmtree(staging, ignore_errors=True)
    pom = root / "pom.xml"
    pom.write_text(_POM.format(scala=SCALA_BINARY, kafka=kafka_version, log4j=log4j_version))
    cmd = [
        maven,
        "-B",
        "-q",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=900)
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
        match = _MISSING_IN_LIST.search(output) or _MISSING.search(output)
        artifact = (
            match.group(1) if match else f"org.apache.kafka:kafka_{SCALA_BINARY}:{kafka_version}"
        )
        tail = "\n".join(line for line in output.splitlines() if "ERROR" in line)[-1500:]
        raise ArtifactUnresolved(
            f"Maven could not resolve the Kafka broker artifact {artifact} "
            f"(wanted org.apache.kafka:kafka_{SCALA_BINARY}:{kafka_version}).\n{tail}",
            context={"artifact": artifact},
        )
    shutil.rmtree(lib, ignore_errors=True)
    staging.rename(lib)
    marker.write_text(kafka_version + "\n")
    return BrokerClasspath(kafka_version=kafka_version, lib_dir=lib)
