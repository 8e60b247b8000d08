/* tidelog.records._recwalk: the produce-time walk of every record of a v2 batch, in C.
 *
 * check_records(data, count, consecutive, start=0, end=len(data)) -> None
 *
 * Walks the records area data[start:end] exactly as tidelog.records.batch._walk_records does (same checks,
 * same order, same exception classes and messages; positions in messages are relative to ``start``) and
 * raises CorruptRecordError / InvalidRecordError from tidelog.records.errors. ``data`` is any C-contiguous
 * buffer (bytes, bytearray, memoryview): nothing is copied. The GIL is released while walking more than
 * RELEASE_GIL_BYTES; the buffer stays exported (a bytearray cannot be resized) for the whole walk.
 *
 * validate_single_batch(data, max_size, check_crc, walk=True) -> header tuple | None: the whole produce-time
 * check of one v2 batch (header, sizes, CRC-32C, record walk) in one call, for PartitionLog.append_as_leader; None on
 * any failure (the Python checks then raise the exact error).
 * crc32c(data, value=0) -> int: CRC-32C (carry-less-multiply folding on CPUs with PCLMULQDQ/VPCLMULQDQ above
 * a few hundred bytes, SSE4.2 below, else slicing-by-8); crc32c_using(path, data, value=0) runs one of them.
 * _C_API: a capsule with the bytes-only C API of _recwalk_capi.h (CRC-32C, record walk, header tuple) for
 * tidelog.storage._segment, which owns the I/O (the stamped write, fallocate, the recovery scan).
 *
 * The extension is compiled from this file (the walk, the whole-batch check, the capsule, the module) and
 * _crc32c.c (the CRC-32C, its Python functions and constants), which share _crc32c.h.
 *
 * Record layout (all varints zig-zag):
 *   length varint | attributes int8 | timestampDelta varlong | offsetDelta varint | keyLength varint | key
 *   | valueLength varint | value | headersCount varint | [hKeyLength varint | hKey | hValueLength varint | hValue]
 *
 * Varints follow tidelog.records.varint (Kafka's ByteUtils): at most 5 (varlong 10) bytes, a continuation
 * bit on the last allowed byte is an error, bits beyond 32 (64) are dropped. All reads are bounded by the
 * end of the records area (not of the record), like the Python walker's IndexError.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include <errno.h>
#include <limits.h>
#include <string.h>

#include "_bytes.h"
#include "_crc32c.h"
#include "_recwalk.h"

typedef tl_walk_error walk_error;

static PyObject *CorruptRecordError = NULL;
static PyObject *InvalidRecordError = NULL;

/* The walk of check_records over the records area d[0:n]: the cursor of _recwalk.h over every record. */
static int
walk(const uint8_t *d, Py_ssize_t n, long long count, int consecutive, walk_error *e)
{
    Py_ssize_t pos = 0;
    int rc = tl_check_count(0, n, count, e);
    if (rc)
        return rc;
    for (long long index = 0; index < count; index++) {
        rc = tl_record_next(d, n, &pos, index, consecutive, NULL, e); /* the checks only: nothing stored */
        if (rc)
            return rc;
    }
    return tl_check_end(pos, n, count, e);
}

/* Raise the exception the Python walker raises for the error ``e`` over a records area of ``n`` bytes. */
static void
raise_error(const walk_error *e, Py_ssize_t n)
{
    const char *what = e->varlong ? "varlong" : "varint";
    switch (e->code) {
    case TL_E_COUNT:
        PyErr_Format(InvalidRecordError,
                     "batch declares %lld records but its %zd bytes of records can hold at most %zd",
                     e->value, n, n / MIN_RECORD_SIZE);
        break;
    case TL_E_LENGTH:
        PyErr_Format(CorruptRecordError, "record %lld at byte %zd declares length %lld, but %lld bytes remain",
                     e->index, e->pos, e->value, e->extra);
        break;
    case TL_E_TRUNC:
        PyErr_Format(CorruptRecordError,
                     "record %lld is truncated: it runs past the end of the records (%zd bytes) near byte %zd",
                     e->index, n, e->pos);
        break;
    case TL_E_VARINT_TRUNC:
        PyErr_Format(CorruptRecordError, "record %lld: truncated %s at position %zd: input ends at %zd",
                     e->index, what, e->pos, n);
        break;
    case TL_E_VARINT_LONG:
        PyErr_Format(CorruptRecordError, "record %lld: %s at position %zd is longer than %d bytes", e->index,
                     what, e->pos, e->varlong ? 10 : 5);
        break;
    case TL_E_NOT_CONSEC:
        PyErr_Format(InvalidRecordError,
                     "record %lld of a compressed batch has offset delta %lld: the inner records of a "
                     "compressed batch must have consecutive offsets from 0",
                     e->index, e->value);
        break;
    case TL_E_KEY:
        PyErr_Format(CorruptRecordError, "record %lld: its key runs past the record's end", e->index);
        break;
    case TL_E_VALUE:
        PyErr_Format(CorruptRecordError, "record %lld: its value runs past the record's end", e->index);
        break;
    case TL_E_HCOUNT:
        PyErr_Format(CorruptRecordError, "record %lld: invalid header count %lld", e->index, e->value);
        break;
    case TL_E_HKEY_NEG:
        PyErr_Format(CorruptRecordError, "record %lld: header key length %lld is negative", e->index,
                     e->value);
        break;
    case TL_E_HKEY:
        PyErr_Format(CorruptRecordError, "record %lld: a header key runs past the record's end", e->index);
        break;
    case TL_E_HVALUE:
        PyErr_Format(CorruptRecordError, "record %lld: a header value runs past the record's end", e->index);
        break;
    case TL_E_MISMATCH:
        PyErr_Format(CorruptRecordError,
                     "record %lld: declared length %lld does not match its fields (%lld bytes)", e->index,
                     e->value, e->extra);
        break;
    case TL_E_TRAILING:
        PyErr_Format(InvalidRecordError, "batch declares %lld records but %lld bytes remain after the last one",
                     e->value, e->extra);
        break;
    default:
        PyErr_Format(PyExc_SystemError, "_recwalk: unknown error code %d", e->code);
    }
}

PyDoc_STRVAR(check_records_doc,
"check_records(data, count, consecutive, start=0, end=None, /) -> None\n\n"
"Walk the ``count`` records of the records area ``data[start:end]`` (uncompressed record bytes) and check\n"
"that they decode: every length inside its record, the fields filling each record exactly, the records\n"
"tiling the area exactly. ``consecutive``: offset deltas must be 0, 1, 2, ... (compressed batches).\n"
"Raises CorruptRecordError or InvalidRecordError, as tidelog.records.batch._walk_records does.");

static PyObject *
check_records(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 3 || nargs > 5) {
        PyErr_Format(PyExc_TypeError, "check_records expected 3 to 5 arguments, got %zd", nargs);
        return NULL;
    }
    long long count = PyLong_AsLongLong(args[1]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    int consecutive = PyObject_IsTrue(args[2]);
    if (consecutive < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t start = 0, end = view.len;
    if (nargs >= 4) {
        start = PyNumber_AsSsize_t(args[3], PyExc_OverflowError);
        if (start == -1 && PyErr_Occurred())
            goto fail;
    }
    if (nargs == 5 && args[4] != Py_None) {
        end = PyNumber_AsSsize_t(args[4], PyExc_OverflowError);
        if (end == -1 && PyErr_Occurred())
            goto fail;
    }
    if (start < 0 || end < start || end > view.len) {
        PyErr_Format(PyExc_ValueError, "check_records: bad range [%zd:%zd] of a %zd-byte buffer", start, end,
                     view.len);
        goto fail;
    }
    const uint8_t *d = (const uint8_t *)view.buf + start;
    const Py_ssize_t n = end - start;
    walk_error e = {0};
    int rc;
    if (n > RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        rc = walk(d, n, count, consecutive, &e);
        Py_END_ALLOW_THREADS
    } else {
        rc = walk(d, n, count, consecutive, &e);
    }
    PyBuffer_Release(&view);
    if (rc != TL_OK) {
        raise_error(&e, n);
        return NULL;
    }
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&view);
    return NULL;
}

/* ------------------------------------------------------------------------------- whole-batch check */

/* the 13 fields of tidelog.records.header's HeaderTuple for the batch at d (at least 61 bytes) */
static PyObject *
header_tuple(const uint8_t *d)
{
    PyObject *t = PyTuple_New(13);
    if (t == NULL)
        return NULL;
    PyObject *v[13] = {
        PyLong_FromLongLong(be64(d)),
        PyLong_FromLong((int32_t)be32u(d + HDR_BATCH_LENGTH)),
        PyLong_FromLong((int32_t)be32u(d + HDR_PARTITION_LEADER_EPOCH)),
        PyLong_FromLong((int8_t)d[HDR_MAGIC]),
        PyLong_FromUnsignedLong(be32u(d + HDR_CRC)),
        PyLong_FromLong(be16(d + HDR_ATTRIBUTES)),
        PyLong_FromLong((int32_t)be32u(d + HDR_LAST_OFFSET_DELTA)),
        PyLong_FromLongLong(be64(d + HDR_BASE_TIMESTAMP)),
        PyLong_FromLongLong(be64(d + HDR_MAX_TIMESTAMP)),
        PyLong_FromLongLong(be64(d + HDR_PRODUCER_ID)),
        PyLong_FromLong(be16(d + HDR_PRODUCER_EPOCH)),
        PyLong_FromLong((int32_t)be32u(d + HDR_BASE_SEQUENCE)),
        PyLong_FromLong((int32_t)be32u(d + HDR_RECORDS_COUNT)),
    };
    int ok = 1;
    for (int i = 0; i < 13; i++) {
        if (v[i] == NULL)
            ok = 0;
        PyTuple_SET_ITEM(t, i, v[i] ? v[i] : Py_NewRef(Py_None));
    }
    if (!ok) {
        Py_DECREF(t);
        return NULL;
    }
    return t;
}

PyDoc_STRVAR(validate_single_batch_doc,
"validate_single_batch(data, max_size, check_crc, walk=True, /) -> tuple | None\n\n"
"The whole produce-time check of ``data`` as exactly one v2 batch, in one call: the 61-byte header (magic 2),\n"
"the size checks of validate_batch_tuple (batchLength >= 49, size <= max_size unless None, size == len(data),\n"
"lastOffsetDelta and recordsCount >= 0), the CRC-32C over attributes..end when ``check_crc``, and for an\n"
"uncompressed batch (unless ``walk`` is false) the record walk of check_records. Returns the 13 header fields as the tuple\n"
"validate_batch_tuple returns, or None when any check fails: the caller then runs the Python checks, which\n"
"raise the exact error (nothing is raised here). The GIL is released over RELEASE_GIL_BYTES.");

static PyObject *
validate_single_batch(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 3 || nargs > 4) {
        PyErr_Format(PyExc_TypeError, "validate_single_batch expected 3 or 4 arguments, got %zd", nargs);
        return NULL;
    }
    long long max_size = -1;
    if (args[1] != Py_None) {
        int overflow = 0;
        max_size = PyLong_AsLongLongAndOverflow(args[1], &overflow);
        if (max_size == -1 && PyErr_Occurred())
            return NULL;
        if (overflow > 0)
            max_size = -1;  /* larger than any batch: no limit */
        else if (overflow < 0 || max_size < 0)
            Py_RETURN_NONE;  /* every size is too large: let Python raise */
    }
    int check_crc = PyObject_IsTrue(args[2]);
    if (check_crc < 0)
        return NULL;
    int walk_wanted = nargs == 4 ? PyObject_IsTrue(args[3]) : 1;
    if (walk_wanted < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *d = (const uint8_t *)view.buf;
    const Py_ssize_t n = view.len;
    if (n < BATCH_HEADER || d[HDR_MAGIC] != BATCH_MAGIC)
        goto fallback;
    const int32_t batch_length = (int32_t)be32u(d + HDR_BATCH_LENGTH);
    const long long size = (long long)batch_length + BATCH_LOG_OVERHEAD;
    const int16_t attributes = be16(d + HDR_ATTRIBUTES);
    const int32_t last_delta = (int32_t)be32u(d + HDR_LAST_OFFSET_DELTA);
    const int32_t count = (int32_t)be32u(d + HDR_RECORDS_COUNT);
    if (batch_length < BATCH_HEADER - BATCH_LOG_OVERHEAD || (max_size >= 0 && size > max_size) || size != n
        || last_delta < 0 || count < 0)
        goto fallback;
    const uint32_t stored_crc = be32u(d + HDR_CRC);
    int ok = 1;
    walk_error e = {0};
    const int walk_records = walk_wanted && (attributes & 0x07) == 0;
    if (n > RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        if (check_crc && tl_crc32c(0, d + HDR_ATTRIBUTES, (size_t)(n - HDR_ATTRIBUTES)) != stored_crc)
            ok = 0;
        else if (walk_records && walk(d + BATCH_HEADER, n - BATCH_HEADER, count, 0, &e) != TL_OK)
            ok = 0;
        Py_END_ALLOW_THREADS
    } else {
        if (check_crc && tl_crc32c(0, d + HDR_ATTRIBUTES, (size_t)(n - HDR_ATTRIBUTES)) != stored_crc)
            ok = 0;
        else if (walk_records && walk(d + BATCH_HEADER, n - BATCH_HEADER, count, 0, &e) != TL_OK)
            ok = 0;
    }
    if (!ok)
        goto fallback;
    PyObject *t = header_tuple(d);
    if (t == NULL)
        goto error;
    PyBuffer_Release(&view);
    return t;
fallback:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    PyBuffer_Release(&view);
    return NULL;
}

/* ------------------------------------------------------------------------------------------------------------
 * The bytes-only C API for tidelog.storage._segment (records/_recwalk_capi.h): the CRC-32C every caller uses and
 * the record walk, exported once as the capsule tidelog.records._recwalk._C_API. No Python objects, no I/O.
 */
#include "_recwalk_capi.h"

static int
capi_records_ok(const uint8_t *records, Py_ssize_t n, long long count)
{
    walk_error e = {0};
    return walk(records, n, count, 0, &e) == TL_OK;
}

static const tidelog_records_capi recwalk_capi = {
    TIDELOG_RECORDS_CAPI_VERSION,
    tl_crc32c,  /* _crc32c.c: the capsule points at it directly (one call, as when it was inlined here) */
    capi_records_ok,
    header_tuple,
};

PyDoc_STRVAR(record_deltas_doc,
"record_deltas(data, count, start, end, /) -> list[tuple[int, int]] | None\n\n"
"(offsetDelta, timestampDelta) of each of the ``count`` records of the records area ``data[start:end]``, walked\n"
"with the record cursor (the checks of check_records); None when the walk fails (the Python walk then raises\n"
"the exact error). For the log's scan by timestamp.");

static PyObject *
record_deltas(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "record_deltas expected 4 arguments, got %zd", nargs);
        return NULL;
    }
    long long count = PyLong_AsLongLong(args[1]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t start = PyNumber_AsSsize_t(args[2], PyExc_OverflowError);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t end = PyNumber_AsSsize_t(args[3], PyExc_OverflowError);
    if (end == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = NULL;
    if (start < 0 || end < start || end > view.len) {
        PyErr_Format(PyExc_ValueError, "record_deltas: bad range [%zd:%zd] of a %zd-byte buffer", start, end,
                     view.len);
        goto done;
    }
    const uint8_t *d = (const uint8_t *)view.buf + start;
    const Py_ssize_t n = end - start;
    tl_walk_error e;
    tl_record r;
    Py_ssize_t pos = 0;
    if (count < 0 || tl_check_count(0, n, count, &e)) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    out = PyList_New((Py_ssize_t)count); /* count <= n / MIN_RECORD_SIZE: bounded by the buffer */
    if (out == NULL)
        goto done;
    for (long long i = 0; i < count; i++) {
        if (tl_record_next(d, n, &pos, i, 0, &r, &e)) {
            Py_SETREF(out, Py_NewRef(Py_None));
            goto done;
        }
        PyObject *t = Py_BuildValue("(iL)", (int)r.delta, (long long)r.tsd);
        if (t == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, t);
    }
    if (tl_check_end(pos, n, count, &e))
        Py_SETREF(out, Py_NewRef(Py_None));
done:
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef recwalk_methods[] = {
    {"record_deltas", (PyCFunction)(void (*)(void))record_deltas, METH_FASTCALL, record_deltas_doc},
    {"check_records", (PyCFunction)(void (*)(void))check_records, METH_FASTCALL, check_records_doc},
    {"validate_single_batch", (PyCFunction)(void (*)(void))validate_single_batch, METH_FASTCALL,
     validate_single_batch_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef recwalk_module = {
    PyModuleDef_HEAD_INIT,
    "tidelog.records._recwalk",
    "C walk of the records of a v2 batch (the accelerated check_record_structure).",
    -1,
    recwalk_methods,
};

PyMODINIT_FUNC
PyInit__recwalk(void)
{
    PyObject *errors = PyImport_ImportModule("tidelog.records.errors");
    if (errors == NULL)
        return NULL;
    Py_XSETREF(CorruptRecordError, PyObject_GetAttrString(errors, "CorruptRecordError"));
    Py_XSETREF(InvalidRecordError, PyObject_GetAttrString(errors, "InvalidRecordError"));
    Py_DECREF(errors);
    if (CorruptRecordError == NULL || InvalidRecordError == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&recwalk_module);
    if (m == NULL)
        return NULL;
    if (tl_crc32c_init_module(m) < 0 || PyModule_AddIntConstant(m, "RELEASE_GIL_BYTES", RELEASE_GIL_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New((void *)&recwalk_capi, TIDELOG_RECORDS_CAPI_NAME, NULL);
    if (capsule == NULL || PyModule_AddObject(m, "_C_API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
