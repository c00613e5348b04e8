"""A real Apache Kafka broker (KRaft) from Maven Central jars, started on loopback."""

from .classpath import KAFKA_VERSION, BrokerClasspath, resolve_classpath
from .cluster import LauncherConfig, LocalCluster, default_cluster_dir, reap_stale
from .java import find_java
from .node import KafkaNode

__all__ = [
    "KAFKA_VERSION",
    "BrokerClasspath",
    "KafkaNode",
    "LauncherConfig",
    "LocalCluster",
    "default_cluster_dir",
    "find_java",
    "reap_stale",
    "resolve_classpath",
]
