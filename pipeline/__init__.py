"""fleet-pipeline: signed agent messaging on Apache Kafka.

The public API is exactly ``__all__`` (``tests/unit/test_public_api.py`` holds it to that).
"""

from pipeline.errors import FleetError
from pipeline.kafka.settings import AckMode
from pipeline.kafka.topics import TopicNames

__all__ = ["AckMode", "FleetError", "TopicNames"]
__version__ = "0.1.0"
