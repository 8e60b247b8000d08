"""Every supported API and version: encode -> decode gives back the body, and re-encodes byte-identically."""

from __future__ import annotations

import pytest

from tidelog.protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_header_version,
    response_header_version,
)
from tidelog.protocol.samples import all_api_versions, message_body, normalize

CASES = all_api_versions()
IDS = [f"{k}v{v}" for k, v in CASES]


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
@pytest.mark.parametrize(("api_key", "version"), CASES, ids=IDS)
def test_request_roundtrip(api_key: int, version: int, nulls: bool) -> None:
    for seed in range(3):
        body = message_body(api_key, version, "request", seed, nulls)
        frame = encode_request(api_key, version, 12345, "client-ü", body)
        assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
        header, decoded = decode_request(frame[4:], {api_key: (version, version)})
        assert header.api_key == api_key
        assert header.api_version == version
        assert header.correlation_id == 12345
        assert header.client_id == "client-ü"
        assert header.header_version == request_header_version(api_key, version)
        assert normalize(decoded) == body
        assert encode_request(api_key, version, 12345, "client-ü", decoded) == frame


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
@pytest.mark.parametrize(("api_key", "version"), CASES, ids=IDS)
def test_response_roundtrip(api_key: int, version: int, nulls: bool) -> None:
    for seed in range(3):
        body = message_body(api_key, version, "response", seed, nulls)
        chunks = encode_response(api_key, version, -7, body)
        frame = b"".join(chunks)
        assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
        correlation_id, decoded = decode_response(api_key, version, frame[4:])
        assert correlation_id == -7
        assert normalize(decoded) == body
        assert b"".join(encode_response(api_key, version, -7, decoded)) == frame
        # header: correlation id, then an (empty) tagged section only for header v1
        if response_header_version(api_key, version) == 1:
            assert frame[8] == 0


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=IDS)
def test_defaults_only_bodies(api_key: int, version: int) -> None:
    """Handlers may omit every default field: {} encodes, decodes to the defaults and re-encodes the same."""
    frame = b"".join(encode_response(api_key, version, 1, {}))
    _, decoded = decode_response(api_key, version, frame[4:])
    assert b"".join(encode_response(api_key, version, 1, decoded)) == frame
    req = encode_request(api_key, version, 1, None, {})
    header, decoded = decode_request(req[4:], {api_key: (version, version)})
    assert header.client_id is None
    assert encode_request(api_key, version, 1, None, decoded) == req
