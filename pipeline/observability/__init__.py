"""Observability: consumer lag in messages and seconds, retention risk, fleet gauges.

See ``docs/observability.md`` for every metric, the time-lag method and the alert runbook.
"""

from .collector import METRICS, LagCollector
from .exporter import Exporter, ExporterConfig, build_exporter
from .kafka_reader import KafkaOffsetReader
from .model import LagStatus, PartitionLag, Thresholds
from .ports import OffsetReader, StoreGauges
from .sampler import LagSample, LagSampler, SamplerConfig

__all__ = [
    "METRICS",
    "Exporter",
    "ExporterConfig",
    "KafkaOffsetReader",
    "LagCollector",
    "LagSample",
    "LagSampler",
    "LagStatus",
    "OffsetReader",
    "PartitionLag",
    "SamplerConfig",
    "StoreGauges",
    "Thresholds",
    "build_exporter",
]
