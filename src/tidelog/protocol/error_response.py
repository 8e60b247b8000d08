"""An error response for any request, built from the API's specs (Kafka's ``AbstractRequest.getErrorResponse``).

Kafka answers a request whose handler failed unexpectedly with that API's error response: every error code
set to the error (UNKNOWN_SERVER_ERROR for an unexpected exception), and one entry per topic, partition, group or
resource the request named, so the client can pin the error on what it asked about. Kafka writes one
``getErrorResponse`` per API; here one walker does it for every API from the request and response specs:

* every ``error_code`` field of the response (or ``<x>_error_code``) is set to the code (``error_message`` beside it to the message);
* a response array whose entries carry an error code mirrors the request array it answers: the same key
  (``topics`` → ``topics``) or a known rename (``topic_data`` → ``responses``, ``partition_data`` →
  ``partition_responses``, ``groups_names`` → ``results``...);
* a mirrored entry copies the request entry's identifying fields, under the response's name for them
  (``partition`` / ``index`` → ``partition_index``, ``topic`` → ``name``...); an entry mirrored from a list of
  strings or ints (``groups_names``, ``partition_indexes``) gets it as its name / group id / partition;
* everything else takes its schema default (an array the request did not ask for is empty).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidelog.protocol.schema import FieldSpec, spec_index

UNKNOWN_SERVER_ERROR = -1
_ALTER_REPLICA_LOG_DIRS = 34

# response array key -> request array keys it may answer, in order of preference
_ARRAY_SOURCES: dict[str, tuple[str, ...]] = {
    "responses": ("topic_data", "topics", "topic_names", "resources"),
    "partition_responses": ("partition_data", "partitions"),
    "partitions": ("partitions", "partition_data", "partition_indexes"),
    "results": ("resources", "topics", "groups_names", "groups", "users", "upsertions", "deletions", "creations"),
    "filter_results": ("filters",),  # DeleteAcls
    "coordinators": ("coordinator_keys",),
    "groups": ("groups", "groups_names", "group_ids"),  # DescribeGroups, ConsumerGroupDescribe
    # transactions: AddPartitionsToTxn (v0-3 and the batched v4+), DescribeTransactions
    "results_by_topic_v3_and_below": ("v3_and_below_topics",),
    "results_by_partition": ("partitions",),
    "results_by_transaction": ("transactions",),
    "topic_results": ("topics",),
    "transaction_states": ("transactional_ids",),
    # ElectLeaders: topics and their partition numbers
    "replica_election_results": ("topic_partitions",),
    "partition_result": ("partitions",),
}

# response scalar key -> request keys that carry the same identity
_IDENTITY_SOURCES: dict[str, tuple[str, ...]] = {
    "name": ("name", "topic"),
    "user": ("user", "name"),
    "topic": ("topic", "name"),
    "topic_id": ("topic_id",),
    "partition_index": ("partition_index", "partition", "index"),
    "partition": ("partition", "partition_index", "index"),
    "index": ("index", "partition_index", "partition"),
    "group_id": ("group_id",),
    "member_id": ("member_id",),
    "group_instance_id": ("group_instance_id",),
    "resource_type": ("resource_type",),
    "resource_name": ("resource_name",),
    "key": ("key",),
    "transactional_id": ("transactional_id",),
    "producer_id": ("producer_id",),
}

# the field a string / int element of a request list lands in, by the response entry's fields
_STRING_IDENTITY = ("name", "group_id", "key", "topic", "resource_name", "transactional_id")
_INT_IDENTITY = ("partition_index", "partition", "index", "partition_id")


def error_response(api_key: int, version: int, request: dict[str, Any], code: int = UNKNOWN_SERVER_ERROR,
                   message: str | None = None) -> dict[str, Any]:
    """The response body answering ``request`` with ``code`` everywhere a response can carry an error."""
    if api_key == _ALTER_REPLICA_LOG_DIRS:
        # the request names partitions per directory, the response per topic (Kafka's getErrorResponse)
        return {"throttle_time_ms": 0, "results": [
            {"topic_name": t.get("name"), "partitions": [{"partition_index": p, "error_code": code}
                                                         for p in t.get("partitions") or []]}
            for d in request.get("dirs") or [] for t in d.get("topics") or []]}
    specs = spec_index()
    return _struct(specs[(api_key, "response")].fields, specs[(api_key, "request")].fields, request, version,
                   code, message, top=True)


def _present(fields: list[FieldSpec], version: int) -> list[FieldSpec]:
    return [f for f in fields if f.present(version)]


def _struct(resp_fields: list[FieldSpec], req_fields: list[FieldSpec], req: dict[str, Any], version: int,
            code: int, message: str | None, top: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    resp_present = _present(resp_fields, version)
    req_by_key = {f.key: f for f in _present(req_fields, version)}
    has_error = any(_is_error_code(f) for f in resp_present)
    for f in resp_present:
        if f.is_array and f.is_struct:
            src = _array_source(f, req_by_key, req) if _carries_error(f, version) else None
            if src is not None:
                out[f.key] = [_entry(f, src, elem, version, code, message) for elem in (req.get(src.key) or [])]
        elif f.is_array or f.is_struct:
            continue
        elif _is_error_code(f):
            out[f.key] = code
        elif f.key == "error_message" and has_error and message is not None:
            out[f.key] = message
        elif not top:
            for k in _IDENTITY_SOURCES.get(f.key, ()):
                if k in req_by_key and k in req and not req_by_key[k].is_array:
                    out[f.key] = req[k]
                    break
    return out


def _carries_error(f: FieldSpec, version: int) -> bool:
    """Whether entries of this struct (array) have an error code, directly or in a nested array."""
    return any(_is_error_code(sf) or (sf.is_struct and _carries_error(sf, version))
               for sf in _present(f.fields, version))


def _is_error_code(f: FieldSpec) -> bool:
    """``error_code``, or a prefixed one (AddPartitionsToTxn's ``partition_error_code``)."""
    return not f.is_array and not f.is_struct and (f.key == "error_code" or f.key.endswith("_error_code"))


def _array_source(f: FieldSpec, req_by_key: dict[str, FieldSpec], req: dict[str, Any]) -> FieldSpec | None:
    """The request array whose entries the response array answers: the first candidate with entries, else the
    first present (AlterUserScramCredentials names its users in two arrays, upsertions and deletions)."""
    present = [req_by_key[k] for k in (f.key, *_ARRAY_SOURCES.get(f.key, ()))
               if k in req_by_key and req_by_key[k].is_array and k in req]
    return next((src for src in present if req.get(src.key)), present[0] if present else None)


def _entry(f: FieldSpec, src: FieldSpec, elem: Any, version: int, code: int, message: str | None) -> dict[str, Any]:
    if src.is_struct:
        return _struct(f.fields, src.fields, elem, version, code, message)
    out = _struct(f.fields, [], {}, version, code, message)
    keys = {sf.key for sf in _present(f.fields, version)}
    for k in _STRING_IDENTITY if isinstance(elem, str) else _INT_IDENTITY if isinstance(elem, int) else ():
        if k in keys:
            out[k] = elem
            break
    return out


# -- counting the error codes of a response (the broker's errors metric) ---------------------------------------

ErrorCounter = Callable[[dict[str, Any], dict[int, int]], None]
_COUNTERS: dict[tuple[int, int], ErrorCounter | None] = {}


def error_counter(api_key: int, version: int) -> ErrorCounter | None:
    """A function ``count(body, out)`` adding each non-zero ``error_code`` of a response body of this API version to
    ``out`` (code -> occurrences), walking only the structs of the response schema that can hold one (a Produce
    response: topics, then partitions); None when the response has no ``error_code`` at all. Built once per API
    version: much cheaper per response than walking every value of the body."""
    key = (api_key, version)
    if key in _COUNTERS:
        return _COUNTERS[key]
    spec = spec_index().get((api_key, "response"))
    counter = _struct_counter(spec.fields, version) if spec is not None else None
    _COUNTERS[key] = counter
    return counter


def _struct_counter(fields: list[FieldSpec], version: int) -> ErrorCounter | None:
    present = _present(fields, version)
    has_code = any(f.key == "error_code" and not f.is_array and not f.is_struct for f in present)
    subs: list[tuple[str, ErrorCounter, bool]] = []
    for f in present:
        if f.is_struct:
            sub = _struct_counter(f.fields, version)
            if sub is not None:
                subs.append((f.key, sub, f.is_array))
    if not has_code and not subs:
        return None

    def count(body: dict[str, Any], out: dict[int, int]) -> None:
        if has_code:
            code = body.get("error_code")
            if code:
                out[code] = out.get(code, 0) + 1
        for k, sub, is_array in subs:
            value = body.get(k)
            if value:
                if is_array:
                    for item in value:
                        sub(item, out)
                else:
                    sub(value, out)

    return count
