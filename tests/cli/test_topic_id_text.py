"""Topic ids printed as Kafka prints them (``Uuid.toString``: URL-safe base64), not as librdkafka's ``Uuid`` string
(standard base64, with ``/`` and ``+``), which ``tidelog topics describe`` used to print for about half of all ids."""

from __future__ import annotations

import base64
import os
import struct

from confluent_kafka import Uuid

from tidelog.cli.topics import kafka_uuid


def test_an_id_with_slashes_in_librdkafkas_form() -> None:
    u = Uuid(-1, 5)
    assert str(u) == "//////////8AAAAAAAAABQ"  # librdkafka's text: not Kafka's
    assert kafka_uuid(u.get_most_significant_bits(), u.get_least_significant_bits()) == "__________8AAAAAAAAABQ"


def test_any_id_round_trips_in_kafkas_alphabet() -> None:
    for _ in range(2000):
        raw = os.urandom(16)
        text = kafka_uuid(*struct.unpack(">qq", raw))
        assert len(text) == 22 and not set(text) - set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        assert base64.urlsafe_b64decode(text + "==") == raw
