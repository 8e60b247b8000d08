/* tidelog.protocol._produce: the Produce request of the common shape parsed, and its response encoded, in C
 * (the broker's fast lane for a single-record produce; see Connection.process in tidelog/broker/server.py).
 *
 * parse_produce(frame, accepted)
 *     -> None | (api_version, correlation_id, client_id, acks, timeout_ms, topic, partition, records)
 *   ``frame`` is a request payload (the bytes after the int32 size), ``accepted`` the broker's accepted versions
 *   ({api_key: (min, max)}, read only for a Produce). It is recognised when it is a Produce request (api key 0)
 *   of a version in [max(3, min), min(13, max)] with: header v1 (v3-8) or
 *   v2 (v9+) with no tagged fields, a null transactional id, acks 1 or -1, exactly one topic (a non-empty name,
 *   valid UTF-8; from v13 (KIP-516) its 16-byte topic id instead, returned as ``bytes`` in ``topic``: the caller
 *   resolves it to the name) with exactly one partition, records not null and not a transactional batch (attributes bit 4
 *   of the first batch), no tagged fields anywhere, and nothing after the body. ``records`` is a memoryview
 *   slice of ``frame`` (no copy), as tidelog.protocol.codec.decode_request gives it. Anything else returns None
 *   and the caller decodes the frame with the generic codec, which answers, refuses or raises exactly as it
 *   always did: this parser never accepts a frame the generic decoder would refuse or read differently.
 *
 * encode_produce_response(api_version, correlation_id, topic, partition_response, throttle_time_ms)
 *     -> None | bytes
 *   The whole response frame (int32 size included) of a Produce response with one topic and one partition,
 *   byte for byte what codec.encode_response writes for {"responses": [{"name": topic, "partition_responses":
 *   [partition_response]}], "throttle_time_ms": throttle_time_ms} at versions 3-12 (at v13 ``topic`` is the
 *   16-byte topic id, written as {"topic_id": topic, ...}). ``partition_response`` is
 *   the handler's entry (index, error_code, base_offset, log_append_time_ms, log_start_offset, record_errors,
 *   error_message). None when it is anything this encoder does not write (record_errors not empty, a missing
 *   key, a value of another type or out of range): the caller then uses the generic encoder.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../records/_bytes.h"

#define PRODUCE_KEY 0
#define FIRST_VERSION 3
#define LAST_VERSION 13
#define FIRST_TOPIC_ID 13 /* topics by id (KIP-516) */
#define FIRST_FLEXIBLE 9
#define ATTR_OFFSET 22     /* the low byte of a v2 batch header's attributes (int16 at 21) */
#define TRANSACTIONAL 0x10 /* attributes bit 4 */

static PyObject *produce_key; /* the int 0 */
static PyObject *k_index, *k_error_code, *k_base_offset, *k_log_append_time_ms, *k_log_start_offset,
    *k_record_errors, *k_error_message;

/* ---------------------------------------------------------------------------------------------- reading */

typedef struct {
    const uint8_t *p;
    Py_ssize_t pos, len;
} reader;

static inline int
need(reader *r, Py_ssize_t n)
{
    return n >= 0 && r->len - r->pos >= n;
}

/* an unsigned varint of at most 5 bytes (< 2^32); -1 when truncated or longer */
static inline int64_t
uvarint(reader *r)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (r->pos >= r->len)
            return -1;
        uint8_t b = r->p[r->pos++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v > 0xffffffffULL ? -1 : (int64_t)v;
    }
    return -1;
}

static PyObject *
parse_produce(PyObject *self, PyObject *args)
{
    PyObject *frame, *accepted;
    if (!PyArg_ParseTuple(args, "OO!", &frame, &PyDict_Type, &accepted))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE) < 0) { /* not a contiguous byte buffer: the generic path */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *result = NULL, *client_id = NULL, *topic = NULL, *records = NULL, *mv = NULL;
    reader r = {(const uint8_t *)view.buf, 0, view.len};
    reader *rd = &r;
    if (!need(rd, 10) || be16(r.p) != PRODUCE_KEY)
        goto fallback;
    PyObject *range = PyDict_GetItemWithError(accepted, produce_key); /* borrowed */
    int min_version, max_version;
    if (range == NULL || !PyTuple_CheckExact(range) || PyTuple_GET_SIZE(range) != 2)
        goto fallback_error;
    min_version = PyLong_AsLong(PyTuple_GET_ITEM(range, 0));
    max_version = PyLong_AsLong(PyTuple_GET_ITEM(range, 1));
    if (PyErr_Occurred())
        goto fallback_error;
    int version = be16(r.p + 2);
    int lo = min_version > FIRST_VERSION ? min_version : FIRST_VERSION;
    int hi = max_version < LAST_VERSION ? max_version : LAST_VERSION;
    if (version < lo || version > hi)
        goto fallback;
    int flexible = version >= FIRST_FLEXIBLE;
    int32_t correlation_id = (int32_t)be32u(r.p + 4);
    int16_t cid_len = be16(r.p + 8);
    r.pos = 10;
    if (cid_len >= 0) {
        if (!need(rd, cid_len))
            goto fallback;
        client_id = PyUnicode_DecodeUTF8((const char *)r.p + r.pos, cid_len, NULL);
        if (client_id == NULL)
            goto fallback_error;
        r.pos += cid_len;
    }
    else if (cid_len == -1) {
        client_id = Py_NewRef(Py_None);
    }
    else
        goto fallback;
    if (flexible && uvarint(rd) != 0) /* header tagged fields */
        goto fallback;
    /* transactional_id: null */
    if (flexible) {
        if (uvarint(rd) != 0)
            goto fallback;
    }
    else {
        if (!need(rd, 2) || be16(r.p + r.pos) != -1)
            goto fallback;
        r.pos += 2;
    }
    if (!need(rd, 6))
        goto fallback;
    int acks = be16(r.p + r.pos);
    int32_t timeout_ms = (int32_t)be32u(r.p + r.pos + 2);
    r.pos += 6;
    if (acks != 1 && acks != -1)
        goto fallback;
    /* one topic */
    Py_ssize_t name_len = 0;
    if (version >= FIRST_TOPIC_ID) { /* always flexible: the topic id, no name */
        if (uvarint(rd) != 2 || !need(rd, 16))
            goto fallback;
        topic = PyBytes_FromStringAndSize((const char *)r.p + r.pos, 16);
        if (topic == NULL)
            goto fallback_error;
        r.pos += 16;
    }
    else if (flexible) {
        if (uvarint(rd) != 2)
            goto fallback;
        int64_t n = uvarint(rd);
        if (n < 2) /* null (0) or empty (1) */
            goto fallback;
        name_len = (Py_ssize_t)(n - 1);
    }
    else {
        if (!need(rd, 6) || (int32_t)be32u(r.p + r.pos) != 1)
            goto fallback;
        name_len = be16(r.p + r.pos + 4);
        r.pos += 6;
        if (name_len <= 0)
            goto fallback;
    }
    if (topic == NULL) { /* by name (v3-12) */
        if (!need(rd, name_len))
            goto fallback;
        topic = PyUnicode_DecodeUTF8((const char *)r.p + r.pos, name_len, NULL);
        if (topic == NULL)
            goto fallback_error;
        r.pos += name_len;
    }
    /* one partition */
    if (flexible) {
        if (uvarint(rd) != 2)
            goto fallback;
    }
    else {
        if (!need(rd, 4) || (int32_t)be32u(r.p + r.pos) != 1)
            goto fallback;
        r.pos += 4;
    }
    if (!need(rd, 4))
        goto fallback;
    int32_t partition = (int32_t)be32u(r.p + r.pos);
    r.pos += 4;
    Py_ssize_t rec_len;
    if (flexible) {
        int64_t n = uvarint(rd);
        if (n < 1) /* null or truncated */
            goto fallback;
        rec_len = (Py_ssize_t)(n - 1);
    }
    else {
        if (!need(rd, 4))
            goto fallback;
        rec_len = (int32_t)be32u(r.p + r.pos);
        r.pos += 4;
        if (rec_len < 0)
            goto fallback;
    }
    if (!need(rd, rec_len))
        goto fallback;
    Py_ssize_t rec_start = r.pos;
    if (rec_len > ATTR_OFFSET && (r.p[rec_start + ATTR_OFFSET] & TRANSACTIONAL))
        goto fallback; /* a transactional batch: the generic path (ACL on the transactional id, KIP-890) */
    r.pos += rec_len;
    if (flexible && (uvarint(rd) != 0 || uvarint(rd) != 0 || uvarint(rd) != 0)) /* partition, topic, body tags */
        goto fallback;
    if (r.pos != r.len)
        goto fallback;
    if (PyMemoryView_Check(frame))
        mv = Py_NewRef(frame);
    else {
        mv = PyMemoryView_FromObject(frame);
        if (mv == NULL)
            goto done;
    }
    records = PySequence_GetSlice(mv, rec_start, rec_start + rec_len);
    if (records == NULL)
        goto done;
    result = Py_BuildValue("iiOiiOiO", version, (int)correlation_id, client_id, acks, (int)timeout_ms, topic,
                           (int)partition, records);
    goto done;
fallback_error:
    PyErr_Clear();
fallback:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(client_id);
    Py_XDECREF(topic);
    Py_XDECREF(records);
    Py_XDECREF(mv);
    PyBuffer_Release(&view);
    return result;
}

/* ---------------------------------------------------------------------------------------------- writing */

static inline uint8_t *
put16(uint8_t *o, int v)
{
    o[0] = (uint8_t)((uint16_t)v >> 8);
    o[1] = (uint8_t)v;
    return o + 2;
}

static inline uint8_t *
put32(uint8_t *o, int64_t v)
{
    uint32_t u = (uint32_t)v;
    o[0] = (uint8_t)(u >> 24);
    o[1] = (uint8_t)(u >> 16);
    o[2] = (uint8_t)(u >> 8);
    o[3] = (uint8_t)u;
    return o + 4;
}

static inline uint8_t *
put64(uint8_t *o, int64_t v)
{
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--) {
        o[i] = (uint8_t)u;
        u >>= 8;
    }
    return o + 8;
}

static inline uint8_t *
putuv(uint8_t *o, uint64_t v)
{
    while (v >= 0x80) {
        *o++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *o++ = (uint8_t)v;
    return o;
}

/* an int field of the entry, in [lo, hi]; 0 with *ok cleared when missing, not an int or out of range */
static int64_t
int_field(PyObject *d, PyObject *key, int64_t lo, int64_t hi, int *ok)
{
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (v == NULL || !PyLong_CheckExact(v)) {
        *ok = 0;
        return 0;
    }
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred()) || x < lo || x > hi) {
        *ok = 0;
        return 0;
    }
    return x;
}

static PyObject *
encode_produce_response(PyObject *self, PyObject *args)
{
    int version, correlation_id;
    PyObject *topic, *pr;
    long long throttle;
    if (!PyArg_ParseTuple(args, "iiOO!L", &version, &correlation_id, &topic, &PyDict_Type, &pr, &throttle))
        return NULL;
    int by_id = version >= FIRST_TOPIC_ID;
    if (by_id ? !(PyBytes_CheckExact(topic) && PyBytes_GET_SIZE(topic) == 16) : !PyUnicode_Check(topic))
        Py_RETURN_NONE;
    if (version < FIRST_VERSION || version > LAST_VERSION || throttle < INT32_MIN || throttle > INT32_MAX)
        Py_RETURN_NONE;
    int ok = 1;
    int64_t index = int_field(pr, k_index, INT32_MIN, INT32_MAX, &ok);
    int64_t error_code = int_field(pr, k_error_code, INT16_MIN, INT16_MAX, &ok);
    int64_t base_offset = int_field(pr, k_base_offset, INT64_MIN, INT64_MAX, &ok);
    int64_t log_append_time = int_field(pr, k_log_append_time_ms, INT64_MIN, INT64_MAX, &ok);
    int64_t log_start_offset = int_field(pr, k_log_start_offset, INT64_MIN, INT64_MAX, &ok);
    PyObject *record_errors = PyDict_GetItemWithError(pr, k_record_errors);
    PyObject *message = PyDict_GetItemWithError(pr, k_error_message);
    if (!ok || PyErr_Occurred() || record_errors == NULL || !PyList_CheckExact(record_errors)
        || PyList_GET_SIZE(record_errors) != 0 || message == NULL || (message != Py_None && !PyUnicode_Check(message))) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_ssize_t name_len, msg_len = -1;
    const char *name;
    if (by_id) {
        name = PyBytes_AS_STRING(topic);
        name_len = 16;
    }
    else
        name = PyUnicode_AsUTF8AndSize(topic, &name_len);
    const char *msg = NULL;
    if (name == NULL || name_len > INT16_MAX) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (version >= 8 && message != Py_None) {
        msg = PyUnicode_AsUTF8AndSize(message, &msg_len);
        if (msg == NULL || msg_len > INT16_MAX) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    int flexible = version >= FIRST_FLEXIBLE;
    /* upper bound: size, correlation id, header tags, 5-byte varints, the fixed fields, the two strings */
    Py_ssize_t cap = 4 + 4 + 1 + 5 + 5 + name_len + 5 + 4 + 2 + 8 + 8 + 8 + 5 + 5 + (msg_len > 0 ? msg_len : 0)
                     + 1 + 1 + 4 + 1 + 8;
    PyObject *out = PyBytes_FromStringAndSize(NULL, cap);
    if (out == NULL)
        return NULL;
    uint8_t *start = (uint8_t *)PyBytes_AS_STRING(out);
    uint8_t *o = start + 4;
    o = put32(o, correlation_id);
    if (flexible) {
        *o++ = 0; /* response header tags */
        o = putuv(o, 2);
        if (!by_id) /* v13: the 16 id bytes only */
            o = putuv(o, (uint64_t)name_len + 1);
    }
    else {
        o = put32(o, 1);
        o = put16(o, (int)name_len);
    }
    memcpy(o, name, name_len);
    o += name_len;
    o = flexible ? putuv(o, 2) : put32(o, 1);
    o = put32(o, index);
    o = put16(o, (int)error_code);
    o = put64(o, base_offset);
    o = put64(o, log_append_time); /* v2+ */
    if (version >= 5)
        o = put64(o, log_start_offset);
    if (version >= 8) {
        o = flexible ? putuv(o, 1) : put32(o, 0); /* record_errors: empty */
        if (msg == NULL)
            o = flexible ? putuv(o, 0) : put16(o, -1);
        else {
            o = flexible ? putuv(o, (uint64_t)msg_len + 1) : put16(o, (int)msg_len);
            memcpy(o, msg, msg_len);
            o += msg_len;
        }
    }
    if (flexible) {
        *o++ = 0; /* partition tags (current_leader: default, not written) */
        *o++ = 0; /* topic tags */
    }
    o = put32(o, throttle);
    if (flexible)
        *o++ = 0; /* body tags (node_endpoints: default, not written) */
    Py_ssize_t size = o - start;
    put32(start, size - 4);
    if (_PyBytes_Resize(&out, size) < 0)
        return NULL;
    return out;
}

static PyMethodDef methods[] = {
    {"parse_produce", parse_produce, METH_VARARGS,
     "parse_produce(frame, accepted) -> None | (api_version, correlation_id, client_id, acks, "
     "timeout_ms, topic, partition, records): a Produce request of the common shape, else None"},
    {"encode_produce_response", encode_produce_response, METH_VARARGS,
     "encode_produce_response(api_version, correlation_id, topic, partition_response, throttle_time_ms) -> None | "
     "bytes: the response frame of a one-topic, one-partition Produce, as the generic encoder writes it"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tidelog.protocol._produce", "Produce request parse and response encode in C", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__produce(void)
{
    struct {
        PyObject **slot;
        const char *name;
    } keys[] = {
        {&k_index, "index"},
        {&k_error_code, "error_code"},
        {&k_base_offset, "base_offset"},
        {&k_log_append_time_ms, "log_append_time_ms"},
        {&k_log_start_offset, "log_start_offset"},
        {&k_record_errors, "record_errors"},
        {&k_error_message, "error_message"},
    };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        *keys[i].slot = PyUnicode_InternFromString(keys[i].name);
        if (*keys[i].slot == NULL)
            return NULL;
    }
    produce_key = PyLong_FromLong(PRODUCE_KEY);
    if (produce_key == NULL)
        return NULL;
    return PyModule_Create(&module);
}
