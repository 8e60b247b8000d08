/* tidelog.client._columnar, the sink side: Arrow columns into the records of v2 batches (the Spark sink's
 * partitioner and record accumulator). See _columnar.h for the extension's files.
 */

#include "_columnar.h"

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

static PyMethodDef sink_methods[] = {
    {"murmur2", (PyCFunction)py_murmur2, METH_O, "Kafka's murmur2 hash (Utils.murmur2) as a signed int32"},
    {"assign_partitions", (PyCFunction)py_assign_partitions, METH_VARARGS,
     "assign_partitions(n, key, counts, topics, explicit, sticky, base) -> (slots, bad_row)"},
    {NULL, NULL, 0, NULL},
};

int tl_columnar_add_sink(PyObject *m) {
    if (PyType_Ready(&RecordAccumulatorType) < 0 || PyModule_AddFunctions(m, sink_methods) < 0)
        return -1;
    Py_INCREF(&RecordAccumulatorType);
    if (PyModule_AddObject(m, "RecordAccumulator", (PyObject *)&RecordAccumulatorType) < 0) {
        Py_DECREF(&RecordAccumulatorType);
        return -1;
    }
    return 0;
}
