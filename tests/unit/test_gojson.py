"""nsqpy.internal.gojson: Go's JSON encoding and its one struct decoder.

The decoder serves two semantics: nsqd's IDENTIFY (json.Unmarshal into identifyDataV2), checked
here against Go nsqd's recorded answers and, on generated objects, against a small model of
encoding/json's rules written out in this file (_go_model), and
nsqadmin's request bodies (json.NewDecoder(r).Decode into an anonymous struct of strings),
whose texts test_admin_compat checks against Go nsqadmin."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.internal.gojson import GoJSONError, GoStruct, encode, error_body, unmarshal_strings
from nsqpy.lookupd.protocol_v1 import decode_identify as lookupd_decode_identify
from nsqpy.lookupd.registration_db import PeerInfo
from nsqpy.protocol_v2 import decode_identify

#: nsqd's identifyDataV2 (nsqd/protocol_v2.go), as protocol_v2.decode_identify reads it
IDENTIFY = GoStruct(
    {
        "client_id": "string",
        "hostname": "string",
        "heartbeat_interval": "int",
        "output_buffer_size": "int",
        "output_buffer_timeout": "int",
        "feature_negotiation": "bool",
        "tls_v1": "bool",
        "deflate": "bool",
        "deflate_level": "int",
        "snappy": "bool",
        "sample_rate": "int32",
        "user_agent": "string",
        "msg_timeout": "int",
    },
    name="identifyDataV2",
    type_name="nsqd.identifyDataV2",
)


def _identify_verdict(body: bytes) -> Any:
    try:
        return decode_identify(body)
    except (ValueError, RecursionError):
        return "refused"


_INT_RANGE = {"int": 1 << 63, "int32": 1 << 31}


class _Fraction(str):
    """A JSON number with a fraction or an exponent, as the model reads it."""

    __slots__ = ()


def _go_model(body: bytes) -> Any:
    """encode/json.Unmarshal of a JSON object into identifyDataV2, for the objects the
    generator below makes (ASCII-cased keys, no surrogates), written from the Go rules, not
    from gojson: keys in document order, matched to a field case-insensitively, unknown keys
    skipped, null leaves a field as it is, a value of the wrong JSON type (a fraction or an
    out-of-range number into an int, anything but true/false into a bool, anything but a
    string into a string) is an UnmarshalTypeError: nsqd refuses the IDENTIFY."""
    fields = {name.lower(): (name, kind) for name, kind in IDENTIFY.fields.items()}
    out: dict[str, Any] = {}
    for key, raw in json.loads(body, object_pairs_hook=list, parse_float=_Fraction):
        if key.lower() not in fields:
            continue
        name, kind = fields[key.lower()]
        if raw is None:
            continue
        if kind == "bool":
            ok = isinstance(raw, bool)
        elif kind == "string":
            ok = type(raw) is str
        else:
            limit = _INT_RANGE[kind]
            ok = type(raw) is int and -limit <= raw < limit
        if not ok:
            return "refused"
        out[name] = raw
    return out


def _gojson_verdict(body: bytes) -> Any:
    try:
        return IDENTIFY.unmarshal(body)
    except GoJSONError:
        return "refused"


# bodies the daemon tests and the differential runs against Go nsqd send to IDENTIFY
IDENTIFY_BODIES = [
    b"",
    b"   ",
    b"{}",
    b"null",
    b" null ",
    b"{bad",
    b"{bad}",
    b"[1,2]",
    b'"s"',
    b"1",
    b"true",
    b'{"a":1}x',
    b"{} {}",
    b"\xff\xfe",
    b"{}\xff",
    b"\xef\xbb\xbf{}",
    "{}".encode("utf-16-le"),
    "{}".encode("utf-16"),
    "{}".encode("utf-32"),
    b"NaN",
    b'{"x": NaN}',
    b'{"x": -Infinity}',
    b'{"x": Infinity}',
    b"[" * 1000 + b"]" * 1000,
    b'{"unknown":' + b"[" * 500 + b"]" * 500 + b"}",
    b'{"heartbeat_interval":"1s"}',
    b'{"heartbeat_interval":500}',
    b'{"heartbeat_interval":1.5}',
    b'{"heartbeat_interval":1e3}',
    b'{"heartbeat_interval":1E3}',
    b'{"heartbeat_interval":true}',
    b'{"heartbeat_interval":null}',
    b'{"heartbeat_interval":-0}',
    b'{"msg_timeout":18446744073709551616}',
    b'{"msg_timeout":9223372036854775807}',
    b'{"msg_timeout":9223372036854775808}',
    b'{"msg_timeout":-9223372036854775808}',
    b'{"msg_timeout":-9223372036854775809}',
    b'{"sample_rate":2147483647}',
    b'{"sample_rate":2147483648}',
    b'{"sample_rate":-2147483648}',
    b'{"sample_rate":-2147483649}',
    b'{"sample_rate":"1"}',
    b'{"feature_negotiation":1}',
    b'{"feature_negotiation":"yes"}',
    b'{"feature_negotiation":false,"tls_v1":true,"snappy":false,"deflate":true}',
    b'{"client_id":1}',
    b'{"client_id":["a"]}',
    b'{"client_id":{"a":1}}',
    b'{"Client_ID":"case","HOSTNAME":"h","User_Agent":"ua"}',
    b'{"client_id":"a\xffb","hostname":"h\xc3"}',
    b'{"client_id":"a","client_id":"b"}',
    b'{"client_id":null,"CLIENT_ID":"x"}',
    b'{"unknown_key":[1,2],"x":{"a":null},"deflate_level":6}',
    b'{"client_id":"x"',
    b'{"client_id" "x"}',
    b'{"client_id":"x",}',
    b'{"client_id":"\x01"}',
    b'{"client_id":"\\q"}',
    b"\t{\r\n}\n",
]


@pytest.mark.parametrize("body", IDENTIFY_BODIES)
def test_unmarshal_gives_decode_identifys_verdict(body: bytes) -> None:
    assert _gojson_verdict(body) == _identify_verdict(body)


# where protocol_v2.decode_identify (a dict of the last value per lower-cased key) is not Go:
# Go nsqd 1.3's answers, recorded side by side (IDENTIFY, then /stats for the client_id):
# repeated keys are each decoded in order, "ſ" folds to "s", a lone surrogate escape is U+FFFD
# (nsqpy-d kept it, and its /stats?format=json then failed with 500 INTERNAL_ERROR)
GO_OVER_DECODE_IDENTIFY = {
    b'{"heartbeat_interval":"x","heartbeat_interval":1000}': "refused",
    b'{"sample_rate":200,"sample_rate":null}': {"sample_rate": 200},
    '{"\u017fample_rate":200}'.encode(): {"sample_rate": 200},
    b'{"client_id":"\\ud800x","hostname":"h"}': {"client_id": "\ufffdx", "hostname": "h"},
}


@pytest.mark.parametrize("body", sorted(GO_OVER_DECODE_IDENTIFY))
def test_unmarshal_follows_go_where_decode_identify_does_not(body: bytes) -> None:
    assert _gojson_verdict(body) == GO_OVER_DECODE_IDENTIFY[body]


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.sampled_from([0, -1, 1000, 2**31 - 1, 2**31, -(2**31), 2**63 - 1, 2**63, -(2**63)]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_KEYS = st.sampled_from([*IDENTIFY.fields, "Client_ID", "SAMPLE_RATE", "unknown", "x"])


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES, max_size=6))
def test_unmarshal_matches_gos_rules_on_random_objects(data: dict[str, Any]) -> None:
    body = json.dumps(data).encode()
    assert _gojson_verdict(body) == _go_model(body) == _identify_verdict(body)


def _unmarshal_error(body: bytes) -> str:
    with pytest.raises(GoJSONError) as e:
        IDENTIFY.unmarshal(body)
    return str(e.value)


def test_unmarshal_error_texts_are_gos() -> None:
    """encoding/json's texts for json.Unmarshal (Go 1.21): type errors name the struct field."""
    t = "Go struct field identifyDataV2"
    assert _unmarshal_error(b'{"heartbeat_interval":"1s"}') == (
        f"json: cannot unmarshal string into {t}.heartbeat_interval of type int"
    )
    assert _unmarshal_error(b'{"msg_timeout":1.50}') == (
        f"json: cannot unmarshal number 1.50 into {t}.msg_timeout of type int"
    )
    assert _unmarshal_error(b'{"sample_rate":2147483648}') == (
        f"json: cannot unmarshal number 2147483648 into {t}.sample_rate of type int32"
    )
    assert _unmarshal_error(b'{"tls_v1":1,"client_id":2}') == (
        f"json: cannot unmarshal number into {t}.tls_v1 of type bool"
    )
    assert _unmarshal_error(b"[1]") == (
        "json: cannot unmarshal array into Go value of type nsqd.identifyDataV2"
    )
    assert _unmarshal_error(b"") == "unexpected end of JSON input"
    assert _unmarshal_error(b'{"a":') == "unexpected end of JSON input"
    assert _unmarshal_error(b"{} {}") == "invalid character '{' after top-level value"
    assert _unmarshal_error(b"NaN") == "invalid character 'N' looking for beginning of value"
    assert _unmarshal_error(b"-Infinity") == "invalid character 'I' in numeric literal"
    assert _unmarshal_error(b"\xef\xbb\xbf{}") == (
        "invalid character '\u00ef' looking for beginning of value"
    )
    assert _unmarshal_error(b'{"a":"\x01"}') == "invalid character '\\x01' in string literal"


def test_decode_reads_the_first_value_only() -> None:
    """json.NewDecoder(r).Decode: what follows the first value is left unread; an empty body
    is io.EOF; strings default to absent (nsqadmin's handlers read them as "")."""
    admin = GoStruct({"topic": "string", "channel": "string"})
    assert admin.decode(b'{"topic": "t"} trailing') == {"topic": "t"}
    assert admin.decode(b"null") == {}
    with pytest.raises(GoJSONError, match="^EOF$"):
        admin.decode(b" \n")
    with pytest.raises(GoJSONError, match="^unexpected EOF$"):
        admin.decode(b'{"topic"')
    with pytest.raises(GoJSONError) as e:
        admin.decode(b"[]")
    assert str(e.value) == (
        "json: cannot unmarshal array into Go value of type struct { "
        'Topic string "json:\\"topic\\""; Channel string "json:\\"channel\\"" }'
    )
    with pytest.raises(GoJSONError) as e:
        admin.decode(b'{"channel": 1}')
    assert (
        str(e.value) == "json: cannot unmarshal number into Go struct field .channel of type string"
    )


def test_unsupported_field_type_is_refused() -> None:
    with pytest.raises(ValueError):
        GoStruct({"x": "float64"})


def test_encode_is_gos_marshal() -> None:
    assert encode({"b": 1, "a": [True, None, "x"]}) == b'{"b":1,"a":[true,null,"x"]}'
    assert encode("<a&b>\u2028\u2029é") == b'"\\u003ca\\u0026b\\u003e\\u2028\\u2029\xc3\xa9"'
    assert error_body("NOT_FOUND") == b'{"message":"NOT_FOUND"}'
    assert error_body("bad <x>") == b'{"message":"bad \\u003cx\\u003e"}'


def test_unmarshal_strings() -> None:
    """json.Unmarshal into []string (nsqd's and nsqadmin's PUT /config address lists)."""
    assert unmarshal_strings(b'["a", null, "b"]') == ["a", "", "b"]
    assert unmarshal_strings(b" null ") is None
    assert unmarshal_strings(b"[]") == []
    for raw, text in [
        (b'"a"', "json: cannot unmarshal string into Go value of type []string"),
        (b'["a", 1]', "json: cannot unmarshal number into Go value of type string"),
        (b"[NaN]", "invalid character 'N' looking for beginning of value"),
        (b"\xef\xbb\xbf[]", "invalid character '\u00ef' looking for beginning of value"),
        (b"[", "unexpected end of JSON input"),
    ]:
        with pytest.raises(GoJSONError) as e:
            unmarshal_strings(raw)
        assert str(e.value) == text


# nsqlookupd's PeerInfo (nsqlookupd/registration_db.go, 1.3.0), and nsqpy-d's node_id beyond it
PEER_INFO = GoStruct(
    {
        "remote_address": "string",
        "hostname": "string",
        "broadcast_address": "string",
        "tcp_port": "int",
        "http_port": "int",
        "version": "string",
        "node_id": "any",
    },
    name="PeerInfo",
    type_name="nsqlookupd.PeerInfo",
)


def _peer_by_gojson(body: bytes) -> Any:
    """What lookupd/protocol_v1.decode_identify's body can become."""
    peer = PeerInfo("x")
    try:
        found = PEER_INFO.unmarshal(body)
    except GoJSONError:
        return "refused"
    node_id = found.pop("node_id", None)
    if type(node_id) is int and 0 <= node_id < 1024:
        peer.node_id = node_id
    for name, value in found.items():
        setattr(peer, name, value)
    return (*peer.to_json().values(), peer.node_id)


def _peer_by_lookupd(body: bytes) -> Any:
    peer = PeerInfo("x")
    try:
        lookupd_decode_identify(body, peer)
    except (ValueError, RecursionError):
        return "refused"
    return (*peer.to_json().values(), peer.node_id)


@pytest.mark.parametrize(
    "body",
    [
        *IDENTIFY_BODIES,
        *GO_OVER_DECODE_IDENTIFY,
        b'{"tcp_port":4150,"http_port":4151,"version":"1.3.0","broadcast_address":"h"}',
        b'{"TCP_PORT":1,"tcp_port":"x"}',
        b'{"tcp_port":1,"tcp_port":null}',
        b'{"http_port":1.0}',
        b'{"http_port":9223372036854775808}',
        b'{"hostname":"\\ud800","node_id":7}',
        b'{"node_id":1024}',
        b'{"node_id":"1"}',
        b'{"node_id":[1]}',
        '{"\u017fostname":"x","HOSTNAME":"y"}'.encode(),
    ],
)
def test_one_decoder_serves_lookupds_peer_info(body: bytes) -> None:
    assert _peer_by_gojson(body) == _peer_by_lookupd(body)
