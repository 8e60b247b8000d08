/* tidelog.client._columnar: decode the records of v2 batches straight into Arrow-layout columns, in C.
 *
 * ColumnBuilder() accumulates the rows of many batches:
 *
 *   add(data, count, base_offset, base_timestamp, log_append_time, ts_type, filtering, lo, hi, start_ts, end_ts)
 *       -> rows added, or -1 when the records are malformed (nothing is added; the caller then decodes the
 *          batch with tidelog.records.batch.decode_batch, which raises the exact error)
 *   finish() -> (n, offsets, timestamps_us, timestamp_types, key_validity, key_nulls, key_offsets, key_data,
 *                value_validity, value_nulls, value_offsets, value_data) and resets the builder
 *   rows, nbytes (key + value bytes so far)
 *
 * ``data`` is the uncompressed records area of one batch (any C-contiguous buffer; nothing is copied but the
 * keys and values). The walk accepts exactly what tidelog.records.batch.parse_records accepts (same checks:
 * count bound, record lengths, key/value/header bounds, header count, each record's length matching its
 * fields, no bytes after the last record; all reads bounded by the end of the records area). Rows match its
 * records: offset = base_offset + offsetDelta, timestamp = log_append_time if not None else base_timestamp +
 * timestampDelta. With ``filtering`` only records with lo <= offset < hi and (start_ts None or timestamp >=
 * start_ts) and (end_ts None or timestamp < end_ts) are kept. Timestamps are stored in microseconds
 * (x 1000, wrapping like pyarrow.compute.multiply); timestamp types as int32. Validity bitmaps are Arrow's
 * (LSB first, 1 = present) or None when the column has no nulls; offsets are int32 (the caller keeps nbytes
 * below 2 GiB).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../records/_recwalk.h"


typedef struct {
    char *p;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    char *np = PyMem_Realloc(b->p, (size_t)cap);
    if (!np) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = np;
    b->cap = cap;
    return 0;
}

typedef struct {
    Buf offsets;   /* int32, n + 1 entries (first 0) */
    Buf data;
    Buf validity;  /* bitmap */
    Py_ssize_t nulls;
} BinCol;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    Buf offsets;   /* int64 */
    Buf stamps;    /* int64, microseconds */
    Buf types;     /* int32 */
    BinCol key;
    BinCol value;
} ColumnBuilder;

static void bin_free(BinCol *c) {
    PyMem_Free(c->offsets.p);
    PyMem_Free(c->data.p);
    PyMem_Free(c->validity.p);
    memset(c, 0, sizeof(*c));
}

static int bin_init(BinCol *c) {
    memset(c, 0, sizeof(*c));
    if (buf_reserve(&c->offsets, 4))
        return -1;
    memset(c->offsets.p, 0, 4);
    c->offsets.len = 4;
    return 0;
}

static int builder_reset(ColumnBuilder *self) {
    PyMem_Free(self->offsets.p);
    PyMem_Free(self->stamps.p);
    PyMem_Free(self->types.p);
    memset(&self->offsets, 0, sizeof(Buf));
    memset(&self->stamps, 0, sizeof(Buf));
    memset(&self->types, 0, sizeof(Buf));
    bin_free(&self->key);
    bin_free(&self->value);
    self->n = 0;
    if (bin_init(&self->key) || bin_init(&self->value))
        return -1;
    return 0;
}

static void builder_dealloc(ColumnBuilder *self) {
    PyMem_Free(self->offsets.p);
    PyMem_Free(self->stamps.p);
    PyMem_Free(self->types.p);
    bin_free(&self->key);
    bin_free(&self->value);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int builder_init(ColumnBuilder *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "", kwlist))
        return -1;
    return builder_reset(self);
}

/* ----------------------------------------------------------------------------------------------- columns */

static inline void set_bit(Buf *bm, Py_ssize_t i, int v) {
    uint8_t *p = (uint8_t *)bm->p;
    if (v)
        p[i >> 3] |= (uint8_t)(1u << (i & 7));
    else
        p[i >> 3] &= (uint8_t)~(1u << (i & 7));
}

/* append one binary value (or null when len < 0) as row ``row`` */
static int bin_append(BinCol *c, Py_ssize_t row, const uint8_t *src, int64_t len) {
    if (buf_reserve(&c->validity, 1) || buf_reserve(&c->offsets, 4))
        return -1;
    Py_ssize_t need = (row >> 3) + 1;
    if (c->validity.len < need) {
        c->validity.p[need - 1] = 0;
        c->validity.len = need;
    }
    if (len < 0) {
        set_bit(&c->validity, row, 0);
        c->nulls++;
    } else {
        set_bit(&c->validity, row, 1);
        if (len > INT32_MAX - c->data.len) {
            PyErr_SetString(PyExc_OverflowError, "binary column exceeds 2 GiB");
            return -1;
        }
        if (buf_reserve(&c->data, (Py_ssize_t)len))
            return -1;
        memcpy(c->data.p + c->data.len, src, (size_t)len);
        c->data.len += (Py_ssize_t)len;
    }
    int32_t end = (int32_t)c->data.len;
    memcpy(c->offsets.p + c->offsets.len, &end, 4);
    c->offsets.len += 4;
    return 0;
}

typedef struct {
    Py_ssize_t n, offsets_len, stamps_len, types_len;
    Py_ssize_t k_off, k_data, k_valid, k_nulls, v_off, v_data, v_valid, v_nulls;
} Mark;

static void mark(ColumnBuilder *s, Mark *m) {
    m->n = s->n;
    m->offsets_len = s->offsets.len;
    m->stamps_len = s->stamps.len;
    m->types_len = s->types.len;
    m->k_off = s->key.offsets.len;
    m->k_data = s->key.data.len;
    m->k_valid = s->key.validity.len;
    m->k_nulls = s->key.nulls;
    m->v_off = s->value.offsets.len;
    m->v_data = s->value.data.len;
    m->v_valid = s->value.validity.len;
    m->v_nulls = s->value.nulls;
}

static void rollback(ColumnBuilder *s, const Mark *m) {
    s->n = m->n;
    s->offsets.len = m->offsets_len;
    s->stamps.len = m->stamps_len;
    s->types.len = m->types_len;
    s->key.offsets.len = m->k_off;
    s->key.data.len = m->k_data;
    s->key.validity.len = m->k_valid;
    s->key.nulls = m->k_nulls;
    s->value.offsets.len = m->v_off;
    s->value.data.len = m->v_data;
    s->value.validity.len = m->v_valid;
    s->value.nulls = m->v_nulls;
}

/* 0: ok; 1: malformed (no exception); -1: exception set */
static int walk(ColumnBuilder *s, const uint8_t *d, Py_ssize_t n, Py_ssize_t count, int64_t base_offset,
                int64_t base_ts, int has_lat, int64_t lat, int32_t ts_type, int filtering, int64_t lo, int64_t hi,
                int has_start, int64_t start_ts, int has_end, int64_t end_ts) {
    tl_walk_error e;
    if (tl_check_count(0, n, count, &e))
        return 1;
    Py_ssize_t pos = 0;
    tl_record r;
    for (Py_ssize_t i = 0; i < count; i++) {
        /* the one record cursor (records/_recwalk.h): every field checked as the Python walk does */
        if (tl_record_next(d, n, &pos, i, 0, &r, &e))
            return 1;
        const int64_t tsd = r.tsd, od = r.delta, klen = r.key_len, vlen = r.value_len;
        const uint8_t *kp = klen >= 0 ? d + r.key_pos : NULL;
        const uint8_t *vp = vlen >= 0 ? d + r.value_pos : NULL;
        int64_t off, ts;
        if (__builtin_add_overflow(base_offset, od, &off))
            return 1;
        if (has_lat)
            ts = lat;
        else if (__builtin_add_overflow(base_ts, tsd, &ts))
            return 1;
        if (filtering) {
            if (off < lo || off >= hi || (has_start && ts < start_ts) || (has_end && ts >= end_ts))
                continue;
        }
        if (buf_reserve(&s->offsets, 8) || buf_reserve(&s->stamps, 8) || buf_reserve(&s->types, 4))
            return -1;
        int64_t us = (int64_t)((uint64_t)ts * 1000u);
        memcpy(s->offsets.p + s->offsets.len, &off, 8);
        s->offsets.len += 8;
        memcpy(s->stamps.p + s->stamps.len, &us, 8);
        s->stamps.len += 8;
        memcpy(s->types.p + s->types.len, &ts_type, 4);
        s->types.len += 4;
        if (bin_append(&s->key, s->n, kp, klen) || bin_append(&s->value, s->n, vp, vlen))
            return -1;
        s->n++;
    }
    if (pos != n)
        return 1;
    return 0;
}

static int opt_int64(PyObject *o, int *has, int64_t *v) {
    if (o == Py_None) {
        *has = 0;
        *v = 0;
        return 0;
    }
    *has = 1;
    *v = PyLong_AsLongLong(o);
    if (*v == -1 && PyErr_Occurred())
        return -1;
    return 0;
}

static PyObject *builder_add(ColumnBuilder *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    long long base_offset, base_ts, lo, hi;
    PyObject *lat_o, *start_o, *end_o;
    int ts_type, filtering;
    if (!PyArg_ParseTuple(args, "y*nLLOipLLOO", &view, &count, &base_offset, &base_ts, &lat_o, &ts_type,
                          &filtering, &lo, &hi, &start_o, &end_o))
        return NULL;
    int has_lat, has_start, has_end;
    int64_t lat, start_ts, end_ts;
    if (opt_int64(lat_o, &has_lat, &lat) || opt_int64(start_o, &has_start, &start_ts) ||
        opt_int64(end_o, &has_end, &end_ts)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Mark m;
    mark(self, &m);
    Py_ssize_t before = self->n;
    int rc = count < 0 ? 1
                       : walk(self, (const uint8_t *)view.buf, view.len, count, base_offset, base_ts, has_lat, lat,
                              (int32_t)ts_type, filtering, lo, hi, has_start, start_ts, has_end, end_ts);
    PyBuffer_Release(&view);
    if (rc != 0) {
        rollback(self, &m);
        if (rc < 0)
            return NULL;
        return PyLong_FromLong(-1);
    }
    return PyLong_FromSsize_t(self->n - before);
}

static PyObject *bytes_of(Buf *b, Py_ssize_t len) {
    return PyBytes_FromStringAndSize(b->p ? b->p : "", len);
}

static PyObject *builder_finish(ColumnBuilder *self, PyObject *Py_UNUSED(ignored)) {
    Py_ssize_t n = self->n;
    Py_ssize_t bm = (n + 7) / 8;
    PyObject *kv = self->key.nulls ? bytes_of(&self->key.validity, bm) : Py_NewRef(Py_None);
    PyObject *vv = self->value.nulls ? bytes_of(&self->value.validity, bm) : Py_NewRef(Py_None);
    PyObject *res = Py_BuildValue(
        "(nNNNNnNNNnNN)", n, bytes_of(&self->offsets, self->offsets.len), bytes_of(&self->stamps, self->stamps.len),
        bytes_of(&self->types, self->types.len), kv, self->key.nulls,
        bytes_of(&self->key.offsets, self->key.offsets.len), bytes_of(&self->key.data, self->key.data.len), vv,
        self->value.nulls, bytes_of(&self->value.offsets, self->value.offsets.len),
        bytes_of(&self->value.data, self->value.data.len));
    if (!res)
        return NULL;
    if (builder_reset(self)) {
        Py_DECREF(res);
        return NULL;
    }
    return res;
}

static PyObject *builder_rows(ColumnBuilder *self, void *Py_UNUSED(c)) { return PyLong_FromSsize_t(self->n); }

static PyObject *builder_nbytes(ColumnBuilder *self, void *Py_UNUSED(c)) {
    return PyLong_FromSsize_t(self->key.data.len + self->value.data.len);
}

static PyMethodDef builder_methods[] = {
    {"add", (PyCFunction)builder_add, METH_VARARGS,
     "add(data, count, base_offset, base_timestamp, log_append_time, ts_type, filtering, lo, hi, start_ts, "
     "end_ts) -> rows added, or -1 (malformed records; nothing added)"},
    {"finish", (PyCFunction)builder_finish, METH_NOARGS, "the accumulated columns as bytes; resets the builder"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef builder_getset[] = {
    {"rows", (getter)builder_rows, NULL, "rows accumulated", NULL},
    {"nbytes", (getter)builder_nbytes, NULL, "key + value bytes accumulated", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ColumnBuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tidelog.client._columnar.ColumnBuilder",
    .tp_basicsize = sizeof(ColumnBuilder),
    .tp_dealloc = (destructor)builder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Accumulates the records of v2 batches as Arrow-layout columns.",
    .tp_methods = builder_methods,
    .tp_getset = builder_getset,
    .tp_init = (initproc)builder_init,
    .tp_new = PyType_GenericNew,
};

/* ============================================================================================ the sink
 *
 * The other direction: Arrow columns into the records area of v2 batches, one open batch per "slot" (a topic
 * partition of the writing task).
 *
 *   murmur2(data) -> int: Kafka's Utils.murmur2 (signed int32), the default partitioner's hash
 *   assign_partitions(n, key, counts, topics, explicit, sticky, base) -> (slots, bad_row)
 *       slots: int32[n] as bytes, slot = base[t] + partition; the partition is the row's explicit one (when
 *       ``explicit`` is not None and the row's value is not null), else (murmur2(key) & 0x7fffffff) %
 *       counts[t] for a non-null key, else sticky[t]. ``t`` is topics[i] (int32 buffer) or 0 when ``topics``
 *       is None. bad_row is the first row whose explicit partition is outside [0, counts[t]) (-1: none; then
 *       ``slots`` is undefined)
 *   RecordAccumulator(limit)
 *       add(n, slots, key, value, headers, now_ms) -> list of sealed batches
 *       finish() -> list of sealed batches (every open one); resets
 *       pending (records not sealed yet)
 *     A sealed batch is (slot, bytearray, count, base_timestamp, max_timestamp): the bytearray holds 61 zero
 *     bytes (the batch header, the caller's to fill) and then ``count`` records: attributes 0, timestamp
 *     delta = now_ms of their add - base_timestamp, offset delta = their index in the batch. A slot's batch is
 *     sealed before a record would make its records area exceed ``limit`` bytes (a record larger than the
 *     limit is a batch of its own).
 *
 * A binary column (key, value, header key, header value) is a tuple (validity or None, int32 offsets, data,
 * array offset), Arrow's layout (string and binary alike). ``headers`` is None or (list validity or None,
 * int32 list offsets, list array offset, header key column, header value column); the list offsets index the
 * header columns; a null list = no headers; a null header key is written as an empty one (the caller refuses
 * them). Every offset is checked against its buffer.
 */

#define BATCH_HEADER_SIZE BATCH_HEADER /* records/_bytes.h */

typedef struct {
    Py_buffer vb, ob, db;
    int has_v;
    const uint8_t *valid;
    const int32_t *offs;
    const uint8_t *data;
    Py_ssize_t off, noffs, ndata;
} BinIn;

static void binin_release(BinIn *b) {
    if (b->has_v)
        PyBuffer_Release(&b->vb);
    if (b->offs)
        PyBuffer_Release(&b->ob);
    if (b->data)
        PyBuffer_Release(&b->db);
    memset(b, 0, sizeof(*b));
}

/* rows [0, n) of the column must be addressable */
static int binin_get(PyObject *t, Py_ssize_t n, BinIn *b, const char *what) {
    memset(b, 0, sizeof(*b));
    PyObject *vo, *oo, *dobj;
    Py_ssize_t off;
    if (!PyTuple_Check(t) || !PyArg_ParseTuple(t, "OOOn", &vo, &oo, &dobj, &off)) {
        PyErr_Format(PyExc_TypeError, "%s: expected (validity, offsets, data, offset)", what);
        return -1;
    }
    if (off < 0) {
        PyErr_Format(PyExc_ValueError, "%s: negative array offset", what);
        return -1;
    }
    b->off = off;
    if (vo != Py_None) {
        if (PyObject_GetBuffer(vo, &b->vb, PyBUF_SIMPLE))
            goto fail;
        b->has_v = 1;
        b->valid = (const uint8_t *)b->vb.buf;
        if (b->vb.len < (off + n + 7) / 8) {
            PyErr_Format(PyExc_ValueError, "%s: validity bitmap too short", what);
            goto fail;
        }
    }
    if (PyObject_GetBuffer(oo, &b->ob, PyBUF_SIMPLE))
        goto fail;
    b->offs = (const int32_t *)b->ob.buf;
    b->noffs = b->ob.len / 4;
    if (b->noffs < off + n + 1) {
        PyErr_Format(PyExc_ValueError, "%s: offsets buffer too short", what);
        goto fail;
    }
    if (PyObject_GetBuffer(dobj, &b->db, PyBUF_SIMPLE))
        goto fail;
    b->data = (const uint8_t *)b->db.buf;
    if (!b->data)
        b->data = (const uint8_t *)"";
    b->ndata = b->db.len;
    return 0;
fail:
    binin_release(b);
    return -1;
}

/* the value of row i: 0 and p, len set (len -1 = null), or -1 (offsets out of bounds) */
static inline int binin_at(const BinIn *b, Py_ssize_t i, const uint8_t **p, int64_t *len) {
    Py_ssize_t j = b->off + i;
    if (b->valid && !((b->valid[j >> 3] >> (j & 7)) & 1)) {
        *p = NULL;
        *len = -1;
        return 0;
    }
    int32_t s = b->offs[j], e = b->offs[j + 1];
    if (s < 0 || e < s || e > b->ndata)
        return -1;
    *p = b->data + s;
    *len = e - s;
    return 0;
}

static int32_t kafka_murmur2(const uint8_t *data, Py_ssize_t length) {
    const uint32_t m = 0x5bd1e995u;
    const int r = 24;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t length4 = length / 4;
    for (Py_ssize_t i = 0; i < length4; i++) {
        const uint8_t *q = data + i * 4;
        uint32_t k = (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) | ((uint32_t)q[3] << 24);
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    const uint8_t *tail = data + (length & ~(Py_ssize_t)3);
    switch (length % 4) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)tail[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

static PyObject *py_murmur2(PyObject *Py_UNUSED(mod), PyObject *arg) {
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE))
        return NULL;
    int32_t h = kafka_murmur2((const uint8_t *)v.buf, v.len);
    PyBuffer_Release(&v);
    return PyLong_FromLong(h);
}

static int get_i32s(PyObject *o, Py_buffer *v, Py_ssize_t need, const char *what) {
    if (PyObject_GetBuffer(o, v, PyBUF_SIMPLE))
        return -1;
    if (v->len / 4 < need) {
        PyBuffer_Release(v);
        PyErr_Format(PyExc_ValueError, "%s: buffer too short", what);
        return -1;
    }
    return 0;
}

static PyObject *py_assign_partitions(PyObject *Py_UNUSED(mod), PyObject *args) {
    Py_ssize_t n;
    PyObject *key_o, *counts_o, *topics_o, *explicit_o, *sticky_o, *base_o;
    if (!PyArg_ParseTuple(args, "nOOOOOO", &n, &key_o, &counts_o, &topics_o, &explicit_o, &sticky_o, &base_o))
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "negative row count");
        return NULL;
    }
    BinIn key;
    int has_key = key_o != Py_None;
    Py_buffer counts = {0}, topics = {0}, ev = {0}, eb = {0}, sticky = {0}, base = {0};
    int has_topics = topics_o != Py_None, has_explicit = explicit_o != Py_None, has_ev = 0;
    Py_ssize_t eoff = 0;
    PyObject *out = NULL;
    memset(&key, 0, sizeof(key));
    if (has_key && binin_get(key_o, n, &key, "key"))
        return NULL;
    if (PyObject_GetBuffer(counts_o, &counts, PyBUF_SIMPLE))
        goto done;
    Py_ssize_t ntopics = counts.len / 4;
    if (get_i32s(sticky_o, &sticky, ntopics, "sticky") || get_i32s(base_o, &base, ntopics, "base"))
        goto done;
    if (has_topics && get_i32s(topics_o, &topics, n, "topics"))
        goto done;
    if (!has_topics && ntopics < 1) {
        PyErr_SetString(PyExc_ValueError, "no topic");
        goto done;
    }
    if (has_explicit) {
        PyObject *evo, *ebo;
        if (!PyArg_ParseTuple(explicit_o, "OOn", &evo, &ebo, &eoff))
            goto done;
        if (eoff < 0 || get_i32s(ebo, &eb, eoff + n, "partition"))
            goto done;
        if (evo != Py_None) {
            if (PyObject_GetBuffer(evo, &ev, PyBUF_SIMPLE))
                goto done;
            has_ev = 1;
            if (ev.len < (eoff + n + 7) / 8) {
                PyErr_SetString(PyExc_ValueError, "partition: validity bitmap too short");
                goto done;
            }
        }
    }
    out = PyBytes_FromStringAndSize(NULL, n * 4);
    if (!out)
        goto done;
    int32_t *slots = (int32_t *)PyBytes_AS_STRING(out);
    const int32_t *cnt = (const int32_t *)counts.buf, *stk = (const int32_t *)sticky.buf,
                  *bas = (const int32_t *)base.buf, *tix = has_topics ? (const int32_t *)topics.buf : NULL,
                  *exp = has_explicit ? (const int32_t *)eb.buf : NULL;
    const uint8_t *evb = has_ev ? (const uint8_t *)ev.buf : NULL;
    Py_ssize_t bad = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t t = tix ? tix[i] : 0;
        if (t < 0 || t >= ntopics) {
            PyErr_SetString(PyExc_ValueError, "topic index out of range");
            Py_CLEAR(out);
            goto done;
        }
        int32_t c = cnt[t], p;
        if (exp && (!evb || ((evb[(eoff + i) >> 3] >> ((eoff + i) & 7)) & 1))) {
            p = exp[eoff + i];
            if (p < 0 || p >= c) {
                bad = i;
                break;
            }
        } else {
            const uint8_t *kp = NULL;
            int64_t klen = -1;
            if (has_key && binin_at(&key, i, &kp, &klen)) {
                PyErr_SetString(PyExc_ValueError, "key: offsets out of bounds");
                Py_CLEAR(out);
                goto done;
            }
            if (c <= 0) {
                bad = i;
                break;
            }
            p = klen >= 0 ? (int32_t)((uint32_t)(kafka_murmur2(kp, (Py_ssize_t)klen) & 0x7fffffff) % (uint32_t)c)
                          : stk[t];
        }
        slots[i] = bas[t] + p;
    }
    if (out) {
        PyObject *res = Py_BuildValue("(Nn)", out, bad);
        out = res;
    }
done:
    if (has_key)
        binin_release(&key);
    if (counts.obj)
        PyBuffer_Release(&counts);
    if (sticky.obj)
        PyBuffer_Release(&sticky);
    if (base.obj)
        PyBuffer_Release(&base);
    if (topics.obj)
        PyBuffer_Release(&topics);
    if (eb.obj)
        PyBuffer_Release(&eb);
    if (ev.obj)
        PyBuffer_Release(&ev);
    return out;
}

/* zig-zag varint size / write (records/_recwalk.h) */
static inline int varint_size(int64_t v) { return tl_uvarint_size(tl_zigzag_encode(v)); }

static inline uint8_t *put_varint(uint8_t *p, int64_t v) { return p + tl_put_uvarint(p, tl_zigzag_encode(v)); }

typedef struct {
    Buf buf;        /* BATCH_HEADER_SIZE reserved bytes, then the records */
    Py_ssize_t count;
    int64_t base_ts, max_ts;
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    Py_ssize_t nslots;
    Py_ssize_t limit;
    Py_ssize_t pending;
} RecordAccumulator;

static void acc_free_slots(RecordAccumulator *self) {
    for (Py_ssize_t i = 0; i < self->nslots; i++)
        PyMem_Free(self->slots[i].buf.p);
    PyMem_Free(self->slots);
    self->slots = NULL;
    self->nslots = 0;
    self->pending = 0;
}

static void acc_dealloc(RecordAccumulator *self) {
    acc_free_slots(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int acc_init(RecordAccumulator *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"limit", NULL};
    Py_ssize_t limit;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", kwlist, &limit))
        return -1;
    if (limit < 1) {
        PyErr_SetString(PyExc_ValueError, "limit must be positive");
        return -1;
    }
    acc_free_slots(self);
    self->limit = limit;
    return 0;
}

static int acc_grow(RecordAccumulator *self, Py_ssize_t slot) {
    if (slot < self->nslots)
        return 0;
    Py_ssize_t n = self->nslots ? self->nslots : 8;
    while (n <= slot)
        n *= 2;
    Slot *ns = PyMem_Realloc(self->slots, (size_t)n * sizeof(Slot));
    if (!ns) {
        PyErr_NoMemory();
        return -1;
    }
    memset(ns + self->nslots, 0, (size_t)(n - self->nslots) * sizeof(Slot));
    self->slots = ns;
    self->nslots = n;
    return 0;
}

/* append (slot, bytearray, count, base_ts, max_ts) to ``out`` and empty the slot */
static int acc_seal(RecordAccumulator *self, Py_ssize_t i, PyObject *out) {
    Slot *s = &self->slots[i];
    PyObject *ba = PyByteArray_FromStringAndSize(s->buf.p, s->buf.len);
    if (!ba)
        return -1;
    PyObject *t = Py_BuildValue("(nNnLL)", i, ba, s->count, (long long)s->base_ts, (long long)s->max_ts);
    if (!t)
        return -1;
    int rc = PyList_Append(out, t);
    Py_DECREF(t);
    if (rc)
        return -1;
    self->pending -= s->count;
    s->buf.len = 0;
    s->count = 0;
    /* give a large buffer back; keep a normal one for the next batch */
    if (s->buf.cap > 2 * (self->limit + BATCH_HEADER_SIZE)) {
        PyMem_Free(s->buf.p);
        memset(&s->buf, 0, sizeof(Buf));
    }
    return 0;
}

static PyObject *acc_add(RecordAccumulator *self, PyObject *args) {
    Py_ssize_t n;
    PyObject *slots_o, *key_o, *value_o, *headers_o;
    long long now;
    if (!PyArg_ParseTuple(args, "nOOOOL", &n, &slots_o, &key_o, &value_o, &headers_o, &now))
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "negative row count");
        return NULL;
    }
    Py_buffer slots_b;
    BinIn key, value, hkey, hval;
    memset(&key, 0, sizeof(key));
    memset(&value, 0, sizeof(value));
    memset(&hkey, 0, sizeof(hkey));
    memset(&hval, 0, sizeof(hval));
    Py_buffer lv = {0}, lo = {0};
    Py_ssize_t loff = 0;
    int has_key = key_o != Py_None, has_headers = headers_o != Py_None;
    PyObject *out = NULL;
    if (get_i32s(slots_o, &slots_b, n, "slots"))
        return NULL;
    if (has_key && binin_get(key_o, n, &key, "key"))
        goto done;
    if (binin_get(value_o, n, &value, "value"))
        goto done;
    if (has_headers) {
        PyObject *lvo, *loo, *hko, *hvo;
        if (!PyArg_ParseTuple(headers_o, "OOnOO", &lvo, &loo, &loff, &hko, &hvo))
            goto done;
        if (loff < 0 || get_i32s(loo, &lo, loff + n + 1, "header list offsets"))
            goto done;
        if (lvo != Py_None) {
            if (PyObject_GetBuffer(lvo, &lv, PyBUF_SIMPLE))
                goto done;
            if (lv.len < (loff + n + 7) / 8) {
                PyErr_SetString(PyExc_ValueError, "headers: validity bitmap too short");
                goto done;
            }
        }
        /* the header columns must cover every index the list offsets name */
        const int32_t *lof = (const int32_t *)lo.buf;
        int32_t hmax = 0;
        for (Py_ssize_t i = 0; i <= n; i++) {
            int32_t v = lof[loff + i];
            if (v < 0 || (i > 0 && v < lof[loff + i - 1])) {
                PyErr_SetString(PyExc_ValueError, "headers: bad list offsets");
                goto done;
            }
            if (v > hmax)
                hmax = v;
        }
        if (binin_get(hko, hmax, &hkey, "header key") || binin_get(hvo, hmax, &hval, "header value"))
            goto done;
    }
    out = PyList_New(0);
    if (!out)
        goto done;
    const int32_t *slots = (const int32_t *)slots_b.buf;
    const int32_t *lof = has_headers ? (const int32_t *)lo.buf : NULL;
    const uint8_t *lvb = lv.obj ? (const uint8_t *)lv.buf : NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t si = slots[i];
        if (si < 0) {
            PyErr_SetString(PyExc_ValueError, "negative slot");
            goto fail;
        }
        if (acc_grow(self, si))
            goto fail;
        const uint8_t *kp = NULL, *vp = NULL;
        int64_t klen = -1, vlen = -1;
        if ((has_key && binin_at(&key, i, &kp, &klen)) || binin_at(&value, i, &vp, &vlen)) {
            PyErr_SetString(PyExc_ValueError, "key/value: offsets out of bounds");
            goto fail;
        }
        int32_t h0 = 0, h1 = 0;
        if (lof && (!lvb || ((lvb[(loff + i) >> 3] >> ((loff + i) & 7)) & 1))) {
            h0 = lof[loff + i];
            h1 = lof[loff + i + 1];
        }
        Slot *s = &self->slots[si];
        if (s->count && (now > s->max_ts ? now : s->max_ts) - s->base_ts > INT32_MAX) {
            if (acc_seal(self, si, out)) /* keep timestamp deltas small */
                goto fail;
        }
        /* the record after its offset delta: key, value, headers */
        int64_t payload = varint_size(klen) + (klen > 0 ? klen : 0) + varint_size(vlen) + (vlen > 0 ? vlen : 0) +
                          varint_size(h1 - h0);
        for (int32_t h = h0; h < h1; h++) {
            const uint8_t *hkp, *hvp;
            int64_t hkl, hvl;
            if (binin_at(&hkey, h, &hkp, &hkl) || binin_at(&hval, h, &hvp, &hvl)) {
                PyErr_SetString(PyExc_ValueError, "headers: offsets out of bounds");
                goto fail;
            }
            if (hkl < 0)
                hkl = 0;
            payload += varint_size(hkl) + hkl + varint_size(hvl) + (hvl > 0 ? hvl : 0);
        }
        if (payload > INT32_MAX - 64) {
            PyErr_SetString(PyExc_OverflowError, "record larger than 2 GiB");
            goto fail;
        }
        int64_t tsd = s->count ? now - s->base_ts : 0;
        int64_t od = s->count;
        int64_t body = 1 + varint_size(tsd) + varint_size(od) + payload;
        if (s->count && s->buf.len - BATCH_HEADER_SIZE + varint_size(body) + body > self->limit) {
            if (acc_seal(self, si, out))
                goto fail;
            tsd = 0;
            od = 0;
            body = 3 + payload;
        }
        if (s->count == 0) {
            s->base_ts = now;
            s->max_ts = now;
            if (buf_reserve(&s->buf, BATCH_HEADER_SIZE))
                goto fail;
            memset(s->buf.p, 0, BATCH_HEADER_SIZE);
            s->buf.len = BATCH_HEADER_SIZE;
        }
        int64_t rsize;
        rsize = varint_size(body) + body;
        if (buf_reserve(&s->buf, (Py_ssize_t)rsize))
            goto fail;
        uint8_t *p = (uint8_t *)s->buf.p + s->buf.len;
        p = put_varint(p, body);
        *p++ = 0; /* attributes */
        p = put_varint(p, tsd);
        p = put_varint(p, od);
        p = put_varint(p, klen);
        if (klen > 0) {
            memcpy(p, kp, (size_t)klen);
            p += klen;
        }
        p = put_varint(p, vlen);
        if (vlen > 0) {
            memcpy(p, vp, (size_t)vlen);
            p += vlen;
        }
        p = put_varint(p, h1 - h0);
        for (int32_t h = h0; h < h1; h++) {
            const uint8_t *hkp, *hvp;
            int64_t hkl, hvl;
            binin_at(&hkey, h, &hkp, &hkl);
            binin_at(&hval, h, &hvp, &hvl);
            if (hkl < 0)
                hkl = 0;
            p = put_varint(p, hkl);
            if (hkl) {
                memcpy(p, hkp, (size_t)hkl);
                p += hkl;
            }
            p = put_varint(p, hvl);
            if (hvl > 0) {
                memcpy(p, hvp, (size_t)hvl);
                p += hvl;
            }
        }
        s->buf.len += (Py_ssize_t)rsize;
        s->count++;
        self->pending++;
        if (now > s->max_ts)
            s->max_ts = now;
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    PyBuffer_Release(&slots_b);
    if (key.offs || key.has_v)
        binin_release(&key);
    if (value.offs || value.has_v)
        binin_release(&value);
    if (hkey.offs || hkey.has_v)
        binin_release(&hkey);
    if (hval.offs || hval.has_v)
        binin_release(&hval);
    if (lo.obj)
        PyBuffer_Release(&lo);
    if (lv.obj)
        PyBuffer_Release(&lv);
    return out;
}

static PyObject *acc_finish(RecordAccumulator *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    for (Py_ssize_t i = 0; i < self->nslots; i++) {
        if (self->slots[i].count && acc_seal(self, i, out)) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyObject *acc_pending(RecordAccumulator *self, void *Py_UNUSED(c)) { return PyLong_FromSsize_t(self->pending); }

static PyMethodDef acc_methods[] = {
    {"add", (PyCFunction)acc_add, METH_VARARGS,
     "add(n, slots, key, value, headers, now_ms) -> sealed batches [(slot, bytearray, count, base_ts, max_ts)]"},
    {"finish", (PyCFunction)acc_finish, METH_NOARGS, "seal every open batch; returns them"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef acc_getset[] = {
    {"pending", (getter)acc_pending, NULL, "records added and not sealed yet", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RecordAccumulatorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tidelog.client._columnar.RecordAccumulator",
    .tp_basicsize = sizeof(RecordAccumulator),
    .tp_dealloc = (destructor)acc_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Encodes Arrow columns as the records of v2 batches, one open batch per slot.",
    .tp_methods = acc_methods,
    .tp_getset = acc_getset,
    .tp_init = (initproc)acc_init,
    .tp_new = PyType_GenericNew,
};

static PyMethodDef module_methods[] = {
    {"murmur2", (PyCFunction)py_murmur2, METH_O, "Kafka's murmur2 hash (Utils.murmur2) as a signed int32"},
    {"assign_partitions", (PyCFunction)py_assign_partitions, METH_VARARGS,
     "assign_partitions(n, key, counts, topics, explicit, sticky, base) -> (slots, bad_row)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef columnar_module = {
    PyModuleDef_HEAD_INIT, "tidelog.client._columnar", "Columnar decoding and encoding of v2 record batches.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__columnar(void) {
    if (PyType_Ready(&ColumnBuilderType) < 0 || PyType_Ready(&RecordAccumulatorType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&columnar_module);
    if (!m)
        return NULL;
    Py_INCREF(&ColumnBuilderType);
    if (PyModule_AddObject(m, "ColumnBuilder", (PyObject *)&ColumnBuilderType) < 0) {
        Py_DECREF(&ColumnBuilderType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&RecordAccumulatorType);
    if (PyModule_AddObject(m, "RecordAccumulator", (PyObject *)&RecordAccumulatorType) < 0) {
        Py_DECREF(&RecordAccumulatorType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
