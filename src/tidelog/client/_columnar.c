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
 *
 * The sink side (murmur2, assign_partitions, RecordAccumulator) is in _columnar_sink.c; both files share
 * _columnar.h and make one extension.
 */

#include "_columnar.h"

/* A growing byte buffer that is the storage of a bytes object: finish() hands the object over, shrunk to its
 * length, without copying (a copy per column and batch was a sixth of a log read's CPU time, issue 29). The first
 * allocation after a hand-over is sized from the previous column's length (``hint``), so a column of the same
 * size as the last one grows no more. */
typedef struct {
    PyObject *obj;  /* bytes of ``cap`` bytes, or NULL */
    char *p;
    Py_ssize_t len;
    Py_ssize_t cap;
    Py_ssize_t hint;
} OBuf;

static int obuf_reserve(OBuf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : (b->hint > 4096 ? b->hint : 4096);
    while (cap < b->len + extra)
        cap *= 2;
    if (!b->obj) {
        b->obj = PyBytes_FromStringAndSize(NULL, cap);
        if (!b->obj)
            return -1;
    } else if (_PyBytes_Resize(&b->obj, cap) < 0) {
        /* the old object is freed and b->obj is NULL */
        b->p = NULL;
        b->len = b->cap = 0;
        return -1;
    }
    b->p = PyBytes_AS_STRING(b->obj);
    b->cap = cap;
    return 0;
}

static void obuf_clear(OBuf *b) {
    Py_CLEAR(b->obj);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* the buffer's first ``len`` bytes as a bytes object (the storage itself); the buffer is left empty */
static PyObject *obuf_take(OBuf *b, Py_ssize_t len) {
    if (!b->obj)
        return PyBytes_FromStringAndSize("", 0);
    PyObject *o = b->obj;
    b->hint = b->len + b->len / 8;
    b->obj = NULL;
    b->p = NULL;
    b->len = b->cap = 0;
    if (_PyBytes_Resize(&o, len) < 0)
        return NULL;
    return o;
}

typedef struct {
    OBuf offsets;  /* int32, n + 1 entries (first 0) */
    OBuf data;
    Buf validity;  /* bitmap */
    Py_ssize_t nulls;
} BinCol;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    OBuf offsets;  /* int64 */
    OBuf stamps;   /* int64, microseconds */
    OBuf types;    /* int32 */
    BinCol key;
    BinCol value;
} ColumnBuilder;

static void bin_free(BinCol *c) {
    obuf_clear(&c->offsets);
    obuf_clear(&c->data);
    PyMem_Free(c->validity.p);
    memset(&c->validity, 0, sizeof(Buf));
    c->nulls = 0;
}

/* empty (after bin_free or a hand-over): the first offset, 0 */
static int bin_init(BinCol *c) {
    memset(&c->validity, 0, sizeof(Buf));
    c->nulls = 0;
    c->offsets.len = 0;
    c->data.len = 0;
    if (obuf_reserve(&c->offsets, 4))
        return -1;
    memset(c->offsets.p, 0, 4);
    c->offsets.len = 4;
    return 0;
}

static int builder_reset(ColumnBuilder *self) {
    obuf_clear(&self->offsets);
    obuf_clear(&self->stamps);
    obuf_clear(&self->types);
    bin_free(&self->key);
    bin_free(&self->value);
    self->n = 0;
    if (bin_init(&self->key) || bin_init(&self->value))
        return -1;
    return 0;
}

static void builder_dealloc(ColumnBuilder *self) {
    obuf_clear(&self->offsets);
    obuf_clear(&self->stamps);
    obuf_clear(&self->types);
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
    if (buf_reserve(&c->validity, 1) || obuf_reserve(&c->offsets, 4))
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
        if (obuf_reserve(&c->data, (Py_ssize_t)len))
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
        if (obuf_reserve(&s->offsets, 8) || obuf_reserve(&s->stamps, 8) || obuf_reserve(&s->types, 4))
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
    /* the column buffers are handed over as they are (obuf_take); on a failure the builder is reset all the same */
    PyObject *res = Py_BuildValue(
        "(nNNNNnNNNnNN)", n, obuf_take(&self->offsets, self->offsets.len),
        obuf_take(&self->stamps, self->stamps.len), obuf_take(&self->types, self->types.len), kv, self->key.nulls,
        obuf_take(&self->key.offsets, self->key.offsets.len), obuf_take(&self->key.data, self->key.data.len), vv,
        self->value.nulls, obuf_take(&self->value.offsets, self->value.offsets.len),
        obuf_take(&self->value.data, self->value.data.len));
    /* what obuf_take left empty keeps its size hint (obuf_clear and bin_free keep it too) */
    self->n = 0;
    obuf_clear(&self->offsets);
    obuf_clear(&self->stamps);
    obuf_clear(&self->types);
    bin_free(&self->key);
    bin_free(&self->value);
    if (bin_init(&self->key) || bin_init(&self->value)) {
        Py_XDECREF(res);
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

static struct PyModuleDef columnar_module = {
    PyModuleDef_HEAD_INIT, "tidelog.client._columnar", "Columnar decoding and encoding of v2 record batches.", -1, NULL,
};

PyMODINIT_FUNC PyInit__columnar(void) {
    if (PyType_Ready(&ColumnBuilderType) < 0)
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
    if (tl_columnar_add_sink(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
