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

#define MIN_RECORD_SIZE 7
#define RELEASE_GIL_BYTES (64 * 1024)

enum {
    OK = 0,
    E_COUNT,         /* InvalidRecordError: count too large for the bytes */
    E_LENGTH,        /* record length out of range */
    E_TRUNC,         /* an inline read ran past the end (Python: IndexError) */
    E_VARINT_TRUNC,  /* decode_varint/decode_varlong: input ends */
    E_VARINT_LONG,   /* decode_varint/decode_varlong: too many bytes */
    E_NOT_CONSEC,    /* InvalidRecordError: compressed batch, offset delta != index */
    E_KEY,
    E_VALUE,
    E_HCOUNT,
    E_HKEY_NEG,
    E_HKEY,
    E_HVALUE,
    E_MISMATCH,
    E_TRAILING,      /* InvalidRecordError: bytes after the last record */
};

typedef struct {
    int code;
    int varlong;        /* varint errors: 0 = varint, 1 = varlong */
    long long index;    /* record index */
    Py_ssize_t pos;     /* position (relative to the records area) */
    long long value;    /* length, offset delta, header count, key length */
    long long extra;    /* bytes remaining / mismatch */
} walk_error;

static PyObject *CorruptRecordError = NULL;
static PyObject *InvalidRecordError = NULL;

static inline int32_t
zigzag32(uint32_t raw)
{
    return (int32_t)((raw >> 1) ^ (~(raw & 1u) + 1u));
}

/* decode_varint / decode_varlong: reads at *ppos, at most max_bytes; on success sets *raw and advances. */
static inline int
read_varint(const uint8_t *d, Py_ssize_t n, Py_ssize_t *ppos, int max_bytes, uint64_t *raw)
{
    Py_ssize_t p = *ppos;
    const Py_ssize_t start = p;
    uint64_t result = 0;
    int shift = 0;
    for (;;) {
        if (p >= n)
            return E_VARINT_TRUNC;
        uint8_t b = d[p++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *raw = result;
            *ppos = p;
            return OK;
        }
        shift += 7;
        if (p - start >= max_bytes)
            return E_VARINT_LONG;
    }
}

#define FAIL(c) do { e->code = (c); e->index = index; e->pos = pos; return (c); } while (0)
#define VARINT(maxb, out)                                                     \
    do {                                                                      \
        Py_ssize_t vp_ = pos;                                                 \
        int rc_ = read_varint(d, n, &vp_, (maxb), (out));                     \
        if (rc_) {                                                            \
            e->varlong = (maxb) == 10;                                        \
            FAIL(rc_);                                                        \
        }                                                                     \
        pos = vp_;                                                            \
    } while (0)

/* Key or value: a zig-zag varint, even = a length, odd = negative = null (any negative is null). */
#define SKIP_BYTES_FIELD()                                                    \
    do {                                                                      \
        if (pos >= n) FAIL(E_TRUNC);                                          \
        uint32_t b_ = d[pos];                                                 \
        if (b_ < 0x80) {                                                      \
            pos += 1;                                                         \
            if (!(b_ & 1)) pos += b_ >> 1;                                    \
        } else {                                                              \
            if (pos + 1 >= n) FAIL(E_TRUNC);                                  \
            if (d[pos + 1] < 0x80) {                                          \
                b_ = (b_ & 0x7F) | ((uint32_t)d[pos + 1] << 7);               \
                pos += 2;                                                     \
                if (!(b_ & 1)) pos += b_ >> 1;                                \
            } else {                                                          \
                uint64_t raw_;                                                \
                VARINT(5, &raw_);                                             \
                int32_t len_ = zigzag32((uint32_t)raw_);                      \
                if (len_ > 0) pos += len_;                                    \
            }                                                                 \
        }                                                                     \
    } while (0)

static int
walk(const uint8_t *d, Py_ssize_t n, long long count, int consecutive, walk_error *e)
{
    Py_ssize_t pos = 0;
    long long index = 0;
    uint64_t raw;

    if (count > 0 && count > n / MIN_RECORD_SIZE) {
        e->code = E_COUNT;
        e->value = count;
        e->extra = n;
        return E_COUNT;
    }
    for (index = 0; index < count; index++) {
        /* length */
        int32_t length;
        if (pos >= n) FAIL(E_TRUNC);
        uint32_t b = d[pos];
        if (b < 0x80) {
            length = zigzag32(b);
            pos += 1;
        } else {
            if (pos + 1 >= n) FAIL(E_TRUNC);
            if (d[pos + 1] < 0x80) {
                length = zigzag32((b & 0x7F) | ((uint32_t)d[pos + 1] << 7));
                pos += 2;
            } else {
                VARINT(5, &raw);
                length = zigzag32((uint32_t)raw);
            }
        }
        const Py_ssize_t end = pos + length;
        if (length < MIN_RECORD_SIZE - 1 || end > n) {
            e->value = length;
            e->extra = n - pos;
            FAIL(E_LENGTH);
        }
        /* attributes (unused), then timestampDelta: only its extent matters. length >= 6 and end <= n, so
           pos + 2 < n */
        if (d[pos + 1] < 0x80) {
            pos += 2;
        } else if (d[pos + 2] < 0x80) {
            pos += 3;
        } else {
            pos += 1;
            VARINT(10, &raw);
        }
        /* offsetDelta: only compressed batches need its value */
        if (consecutive) {
            VARINT(5, &raw);
            int32_t od = zigzag32((uint32_t)raw);
            if (od != index) {
                e->value = od;
                FAIL(E_NOT_CONSEC);
            }
        } else {
            if (pos >= n) FAIL(E_TRUNC);
            if (d[pos] < 0x80) {
                pos += 1;
            } else {
                if (pos + 1 >= n) FAIL(E_TRUNC);
                if (d[pos + 1] < 0x80)
                    pos += 2;
                else
                    VARINT(5, &raw);
            }
        }
        SKIP_BYTES_FIELD();
        if (pos > end) FAIL(E_KEY);
        SKIP_BYTES_FIELD();
        if (pos > end) FAIL(E_VALUE);
        /* headers */
        if (pos >= n) FAIL(E_TRUNC);
        b = d[pos];
        if (b == 0) {
            pos += 1;
        } else {
            int32_t hcount;
            if (b < 0x80) {
                hcount = zigzag32(b);
                pos += 1;
            } else {
                VARINT(5, &raw);
                hcount = zigzag32((uint32_t)raw);
            }
            if (hcount < 0 || 2 * (long long)hcount > (long long)(end - pos)) {
                e->value = hcount;
                FAIL(E_HCOUNT);
            }
            for (int32_t h = 0; h < hcount; h++) {
                VARINT(5, &raw);
                int32_t klen = zigzag32((uint32_t)raw);
                if (klen < 0) {
                    e->value = klen;
                    FAIL(E_HKEY_NEG);
                }
                pos += klen;
                if (pos > end) FAIL(E_HKEY);
                VARINT(5, &raw);
                int32_t vlen = zigzag32((uint32_t)raw);
                if (vlen > 0) {
                    pos += vlen;
                    if (pos > end) FAIL(E_HVALUE);
                }
            }
        }
        if (pos != end) {
            e->value = length;
            e->extra = (long long)length + (long long)(pos - end);
            FAIL(E_MISMATCH);
        }
    }
    if (pos != n) {
        e->value = count;
        e->extra = n - pos;
        FAIL(E_TRAILING);
    }
    return OK;
}

#undef FAIL
#undef VARINT
#undef SKIP_BYTES_FIELD

/* Raise the exception the Python walker raises for the error ``e`` over a records area of ``n`` bytes. */
static void
raise_error(const walk_error *e, Py_ssize_t n)
{
    const char *what = e->varlong ? "varlong" : "varint";
    switch (e->code) {
    case E_COUNT:
        PyErr_Format(InvalidRecordError,
                     "batch declares %lld records but its %zd bytes of records can hold at most %zd",
                     e->value, n, n / MIN_RECORD_SIZE);
        break;
    case E_LENGTH:
        PyErr_Format(CorruptRecordError, "record %lld at byte %zd declares length %lld, but %lld bytes remain",
                     e->index, e->pos, e->value, e->extra);
        break;
    case E_TRUNC:
        PyErr_Format(CorruptRecordError,
                     "record %lld is truncated: it runs past the end of the records (%zd bytes) near byte %zd",
                     e->index, n, e->pos);
        break;
    case E_VARINT_TRUNC:
        PyErr_Format(CorruptRecordError, "record %lld: truncated %s at position %zd: input ends at %zd",
                     e->index, what, e->pos, n);
        break;
    case E_VARINT_LONG:
        PyErr_Format(CorruptRecordError, "record %lld: %s at position %zd is longer than %d bytes", e->index,
                     what, e->pos, e->varlong ? 10 : 5);
        break;
    case E_NOT_CONSEC:
        PyErr_Format(InvalidRecordError,
                     "record %lld of a compressed batch has offset delta %lld: the inner records of a "
                     "compressed batch must have consecutive offsets from 0",
                     e->index, e->value);
        break;
    case E_KEY:
        PyErr_Format(CorruptRecordError, "record %lld: its key runs past the record's end", e->index);
        break;
    case E_VALUE:
        PyErr_Format(CorruptRecordError, "record %lld: its value runs past the record's end", e->index);
        break;
    case E_HCOUNT:
        PyErr_Format(CorruptRecordError, "record %lld: invalid header count %lld", e->index, e->value);
        break;
    case E_HKEY_NEG:
        PyErr_Format(CorruptRecordError, "record %lld: header key length %lld is negative", e->index,
                     e->value);
        break;
    case E_HKEY:
        PyErr_Format(CorruptRecordError, "record %lld: a header key runs past the record's end", e->index);
        break;
    case E_HVALUE:
        PyErr_Format(CorruptRecordError, "record %lld: a header value runs past the record's end", e->index);
        break;
    case E_MISMATCH:
        PyErr_Format(CorruptRecordError,
                     "record %lld: declared length %lld does not match its fields (%lld bytes)", e->index,
                     e->value, e->extra);
        break;
    case E_TRAILING:
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
    if (rc != OK) {
        raise_error(&e, n);
        return NULL;
    }
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef recwalk_methods[] = {
    {"check_records", (PyCFunction)(void (*)(void))check_records, METH_FASTCALL, check_records_doc},
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
    if (PyModule_AddIntConstant(m, "RELEASE_GIL_BYTES", RELEASE_GIL_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
