"""Per-topic consume rates for the Topics page, from the brokers' own Prometheus endpoints (issue 28).

Two figures per topic, each the difference of a broker counter between two refreshes of the page divided by the
time between them (as the produce rate is the difference of the summed end offsets):

* ``consume_rate`` — records consumed per second by consumer groups: the growth of the groups' committed offsets
  (``tidelog_consumergroup_committed_offset{group,topic,partition}``, published by each group's coordinator),
  summed over groups and partitions. A consumer that commits nothing (an assign-only reader, ``tidelog consume``
  without ``--group``) is not counted; an offset moved back (a reset) counts as 0, not as a negative rate.
* ``bytes_out_rate`` — bytes fetched per second (``tidelog_topic_bytes_out_total{topic}``, summed over brokers).
  tidelog counts follower fetches in it too; Kafka's ``BytesOutPerSec`` does not (it has
  ``ReplicationBytesOutPerSec`` for them), so on a replicated topic the figure includes replication.

Only the lines of those two series are read (a string scan, not a full exposition parse: a broker with 1,000
partitions publishes tens of thousands of lines). A cluster whose brokers publish no such endpoint (not tidelog)
has no figures: the page shows none.
"""

from __future__ import annotations

import re
import time
import urllib.request

COMMITTED = "tidelog_consumergroup_committed_offset{"
BYTES_OUT = "tidelog_topic_bytes_out_total{"
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
MAX_BODY = 64 * 1024 * 1024


def _labels(text: str) -> dict[str, str]:
    return {k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\") for k, v in _LABEL.findall(text)}


def parse(text: str) -> tuple[dict[tuple[str, str, str], float], dict[str, float]]:
    """(group, topic, partition) -> committed offset, and topic -> bytes out, from one exposition text."""
    committed: dict[tuple[str, str, str], float] = {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(COMMITTED) or line.startswith(BYTES_OUT):
            head, _, rest = line.rpartition("}")
            try:
                value = float(rest.split()[0])
            except (IndexError, ValueError):
                continue
            labels = _labels(head)
            if line.startswith(COMMITTED):
                committed[(labels.get("group", ""), labels.get("topic", ""), labels.get("partition", ""))] = value
            elif "topic" in labels:
                out[labels["topic"]] = out.get(labels["topic"], 0.0) + value
    return committed, out


class TopicRates:
    """The last sample of every broker's endpoint, to turn the next one into rates."""

    def __init__(self, timeout: float = 5.0) -> None:
        self.timeout = timeout
        self._last: tuple[float, dict[tuple[str, str, str], float], dict[str, float]] | None = None

    def fetch(self, urls: dict[int, str]) -> tuple[dict[tuple[str, str, str], float], dict[str, float]]:
        committed: dict[tuple[str, str, str], float] = {}
        out: dict[str, float] = {}
        for _node, url in sorted(urls.items()):
            try:
                with urllib.request.urlopen(url, timeout=self.timeout) as r:
                    text = r.read(MAX_BODY).decode("utf-8", "replace")
            except OSError:
                continue  # a broker down: its share is missing from this sample
            c, o = parse(text)
            for k, v in c.items():  # a group's series is on its coordinator only: one value per key
                committed[k] = max(committed.get(k, v), v)
            for topic, v in o.items():
                out[topic] = out.get(topic, 0.0) + v
        return committed, out

    def rates(self, urls: dict[int, str]) -> dict[str, dict[str, float | None]]:
        """topic -> {"consume_rate": records/s, "bytes_out_rate": bytes/s} since the previous call (None on the
        first call, or for a topic not in both samples)."""
        if not urls:
            return {}
        committed, out = self.fetch(urls)
        now = time.monotonic()
        last, self._last = self._last, (now, committed, out)
        if last is None or now <= last[0]:
            return {}
        dt = now - last[0]
        consumed: dict[str, float] = {}
        for key, value in committed.items():
            before = last[1].get(key)
            if before is not None:
                consumed[key[1]] = consumed.get(key[1], 0.0) + max(0.0, value - before)
        result: dict[str, dict[str, float | None]] = {}
        for topic in set(consumed) | set(out):
            before_out = last[2].get(topic)
            result[topic] = {
                "consume_rate": round(consumed[topic] / dt, 1) if topic in consumed else None,
                "bytes_out_rate": (round(max(0.0, out[topic] - before_out) / dt, 1)
                                   if topic in out and before_out is not None else None)}
        return result
