"""Protocol codec benchmark: tidelog's schema-compiled codec vs kafka-python 3's runtime-generated classes.

Measured side by side in one run (µs per operation, best of several repeats):

* Produce v9 request decode — 1 topic, 1 partition, 16 KiB records blob, header included.
* Fetch v12 response encode — 1 topic, 4 partitions of 16 KiB records each, building the response
  (dicts for tidelog, message objects for kafka-python) plus encoding it with header and size prefix.
* Fetch v12 response encode with the records as ``RecordsChunks`` file regions (tidelog only: this is
  the zero-copy path the broker uses with os.sendfile).
* Metadata v12 response encode and ApiVersions v3 request decode, for a feel of small messages.

Run: ``.venv/bin/python bench/protocol_codec.py``
"""

from __future__ import annotations

import timeit
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.consumer.fetch import FetchResponse as KpFetchResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest as KpApiVersionsRequest
from kafka.protocol.metadata.metadata import MetadataResponse as KpMetadataResponse
from kafka.protocol.producer.produce import ProduceRequest as KpProduceRequest

from tidelog.protocol.codec import RecordsChunks, decode_request, encode_request, encode_response


@dataclass
class FileRegion:
    fd: int
    position: int
    length: int


RECORDS_16K = bytes(range(256)) * 64


def _time(fn: Callable[[], Any]) -> float:
    t = timeit.Timer(fn)
    n, _ = t.autorange()
    n = max(n, 1000)
    best = min(t.repeat(repeat=5, number=n)) / n
    return best * 1e6


# --------------------------------------------------------------------------------- Produce v9 decode


def produce_frame() -> bytes:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [{"name": "bench-topic", "partition_data": [{"index": 0, "records": RECORDS_16K}]}],
    }
    return encode_request(0, 9, 42, "bench-client", body)[4:]


def bench_produce_decode() -> tuple[float, float]:
    frame = produce_frame()

    def ours() -> Any:
        return decode_request(frame)

    def theirs() -> Any:
        return KpProduceRequest.decode(frame, version=9, header=True)

    # same answer from both
    _, body = ours()
    kp = theirs()
    assert bytes(body["topic_data"][0]["partition_data"][0]["records"]) == bytes(
        kp.topic_data[0].partition_data[0].records
    )
    return _time(ours), _time(theirs)


# --------------------------------------------------------------------------------- Fetch v12 encode


def fetch_body(records: Callable[[int], Any]) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": "bench-topic",
                "partitions": [
                    {
                        "partition_index": i,
                        "error_code": 0,
                        "high_watermark": 1000,
                        "last_stable_offset": 1000,
                        "log_start_offset": 0,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": records(i),
                    }
                    for i in range(4)
                ],
            }
        ],
    }


def bench_fetch_encode() -> tuple[float, float, float]:
    def ours() -> Any:
        return encode_response(1, 12, 42, fetch_body(lambda i: RECORDS_16K))

    def ours_zero_copy() -> Any:
        return encode_response(
            1, 12, 42, fetch_body(lambda i: RecordsChunks([FileRegion(7, i * 16384, 16384)], 16384))
        )

    topic_cls = KpFetchResponse.FetchableTopicResponse
    part_cls = topic_cls.PartitionData

    def theirs() -> Any:
        resp = KpFetchResponse(
            version=12,
            throttle_time_ms=0,
            error_code=0,
            session_id=0,
            responses=[
                topic_cls(
                    version=12,
                    topic="bench-topic",
                    partitions=[
                        part_cls(
                            version=12,
                            partition_index=i,
                            error_code=0,
                            high_watermark=1000,
                            last_stable_offset=1000,
                            log_start_offset=0,
                            aborted_transactions=None,
                            preferred_read_replica=-1,
                            records=RECORDS_16K,
                        )
                        for i in range(4)
                    ],
                )
            ],
        )
        resp.with_header(correlation_id=42)
        return resp.encode(header=True, framed=True)

    assert b"".join(ours()) == bytes(theirs())
    return _time(ours), _time(theirs), _time(ours_zero_copy)


# --------------------------------------------------------------------------------- small messages


def bench_metadata_encode() -> tuple[float, float]:
    def body() -> dict[str, Any]:
        return {
            "brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}],
            "cluster_id": "tidelog-cluster",
            "controller_id": 1,
            "topics": [
                {
                    "error_code": 0,
                    "name": "bench-topic",
                    "is_internal": False,
                    "partitions": [
                        {
                            "error_code": 0,
                            "partition_index": i,
                            "leader_id": 1,
                            "leader_epoch": 0,
                            "replica_nodes": [1],
                            "isr_nodes": [1],
                            "offline_replicas": [],
                        }
                        for i in range(4)
                    ],
                }
            ],
        }

    def ours() -> Any:
        return encode_response(3, 12, 7, body())

    topic_cls = KpMetadataResponse.MetadataResponseTopic
    part_cls = topic_cls.MetadataResponsePartition
    broker_cls = KpMetadataResponse.MetadataResponseBroker

    def theirs() -> Any:
        resp = KpMetadataResponse(
            version=12,
            throttle_time_ms=0,
            brokers=[broker_cls(version=12, node_id=1, host="localhost", port=9092, rack=None)],
            cluster_id="tidelog-cluster",
            controller_id=1,
            topics=[
                topic_cls(
                    version=12,
                    error_code=0,
                    name="bench-topic",
                    is_internal=False,
                    partitions=[
                        part_cls(
                            version=12,
                            error_code=0,
                            partition_index=i,
                            leader_id=1,
                            leader_epoch=0,
                            replica_nodes=[1],
                            isr_nodes=[1],
                            offline_replicas=[],
                        )
                        for i in range(4)
                    ],
                )
            ],
        )
        resp.with_header(correlation_id=7)
        return resp.encode(header=True, framed=True)

    assert b"".join(ours()) == bytes(theirs())
    return _time(ours), _time(theirs)


def bench_api_versions_decode() -> tuple[float, float]:
    frame = encode_request(
        18, 3, 1, "rdkafka", {"client_software_name": "librdkafka", "client_software_version": "2.16.0"}
    )[4:]

    def ours() -> Any:
        return decode_request(frame)

    def theirs() -> Any:
        return KpApiVersionsRequest.decode(frame, version=3, header=True)

    return _time(ours), _time(theirs)


def main() -> None:
    rows: list[tuple[str, float, float | None]] = []
    p_ours, p_theirs = bench_produce_decode()
    rows.append(("Produce v9 request decode (1 topic, 1 partition, 16 KiB)", p_ours, p_theirs))
    f_ours, f_theirs, f_zc = bench_fetch_encode()
    rows.append(("Fetch v12 response build+encode (1 topic, 4 x 16 KiB bytes)", f_ours, f_theirs))
    rows.append(("Fetch v12 response build+encode, RecordsChunks file regions", f_zc, None))
    m_ours, m_theirs = bench_metadata_encode()
    rows.append(("Metadata v12 response build+encode (1 broker, 1 topic x 4)", m_ours, m_theirs))
    a_ours, a_theirs = bench_api_versions_decode()
    rows.append(("ApiVersions v3 request decode", a_ours, a_theirs))

    w = max(len(r[0]) for r in rows)
    print(f"{'case':<{w}}  {'tidelog µs/op':>13}  {'kafka-python µs/op':>18}  {'kp/tidelog':>10}")
    print("-" * (w + 47))
    for name, ours, theirs in rows:
        t = f"{theirs:18.2f}" if theirs is not None else f"{'-':>18}"
        ratio = f"{theirs / ours:9.2f}x" if theirs is not None else f"{'-':>10}"
        print(f"{name:<{w}}  {ours:13.2f}  {t}  {ratio}")


if __name__ == "__main__":
    main()
