"""Feeds a :class:`RosterView` from the roster topic: rebuilt from offset 0 at start, then kept
current by a background thread (seed 000 §8 step 5: "consume -> maintain the union view")."""

from __future__ import annotations

import logging
import threading
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from pipeline.errors import BrokerError
from pipeline.kafka.settings import consumer_config
from pipeline.kafka.topics import TopicNames

from .roster import RosterView

log = logging.getLogger(__name__)


class RosterFollower:
    """Reads every partition of the roster with ``assign`` (no group offsets: the view is always
    rebuilt from the compacted log, which is what makes it a union view after a restart)."""

    def __init__(
        self,
        *,
        bootstrap: str,
        view: RosterView,
        topics: TopicNames = TopicNames(),
        poll_s: float = 0.5,
    ) -> None:
        self.view = view
        self.topics = topics
        self._poll_s = poll_s
        self._consumer = Consumer(
            consumer_config(bootstrap, f"{topics.prefix}roster-reader.{uuid.uuid4().hex[:12]}")
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def catch_up(self, timeout_s: float = 30.0) -> int:
        """Assign all roster partitions from the beginning and apply records up to the end
        offsets seen now. Returns the number of records read."""
        topic = self.topics.roster
        meta = self._consumer.list_topics(topic, timeout=timeout_s)
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None:
            raise BrokerError(f"roster topic {topic} unavailable: {tmeta and tmeta.error}")
        parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(tmeta.partitions)]
        self._consumer.assign(parts)
        ends = {}
        for tp in parts:
            low, high = self._consumer.get_watermark_offsets(tp, timeout=timeout_s)
            if high > low:
                ends[tp.partition] = high
        deadline = time.monotonic() + timeout_s
        count = 0
        while ends and time.monotonic() < deadline:
            msg = self._consumer.poll(self._poll_s)
            if msg is not None:
                count += self._handle(msg)
            # positions, not message offsets: a position moves past transaction markers and
            # compacted gaps that are never delivered as messages
            for tp in self._consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    ends.pop(tp.partition, None)
        if ends:
            raise BrokerError(f"roster catch-up timed out; partitions behind: {sorted(ends)}")
        return count

    def _handle(self, msg: Message) -> int:
        err = msg.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("roster: consume error %s", err)
            return 0
        headers = msg.headers()
        self.view.apply(
            topic=msg.topic() or "",
            key=msg.key(),
            headers=list(headers.items()) if isinstance(headers, dict) else headers,
            value=msg.value(),
        )
        return 1

    def start(self, timeout_s: float = 30.0) -> RosterFollower:
        self.catch_up(timeout_s)
        self._thread = threading.Thread(target=self._run, name="roster-follower", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(self._poll_s)
            if msg is not None:
                self._handle(msg)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._consumer.close()
