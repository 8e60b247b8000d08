/* tidelog.storage._segment, the append state: the C types IndexState (one .index/.timeindex: its fd, entry counts,
 * length, last entry and the buffer of appended entries not yet stored) and SegmentState (one .log: fd, size,
 * reservation end, index counter, max and rolling timestamps, created time, roll jitter and its two IndexStates),
 * which OffsetIndex/TimeIndex and LogSegment read and set, and the append paths change in C.
 */
#include "_segment.h"

/* ------------------------------------------------------------------------------------------------------------
 * IndexState: what an append changes in one index (see storage/index.py's AbstractIndex for the buffering rule)
 */
static int
IndexState_init(IndexState *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"entry_size", "base_offset", "fd", "pending_limit", NULL};
    int entry_size, fd;
    long long base;
    Py_ssize_t limit;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iLin", kwlist, &entry_size, &base, &fd, &limit))
        return -1;
    if ((entry_size != 8 && entry_size != 12) || limit < 1) {
        PyErr_SetString(PyExc_ValueError, "IndexState: entry_size must be 8 or 12 and pending_limit >= 1");
        return -1;
    }
    self->entry_size = entry_size;
    self->base_offset = base;
    self->fd = fd;
    self->pending_limit = limit;
    self->entries = self->written = self->length = 0;
    self->last_offset = base;
    self->last_timestamp = NO_TIMESTAMP;
    self->n_pending = 0;
    Py_XSETREF(self->path, Py_NewRef(Py_None));
    return 0;
}

static void
IndexState_dealloc(IndexState *self)
{
    Py_CLEAR(self->path);
    PyMem_Free(self->keys);
    PyMem_Free(self->values);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* the buffered entries packed big-endian and written to the file after the ``written`` ones (GIL held, so that
 * no Python thread sees the buffer half moved). 0, or -1 with OSError set (nothing is dropped then) */
static int
index_materialize(IndexState *self)
{
    const Py_ssize_t k = self->n_pending;
    if (k == 0 || self->length == 0)
        return 0;
    /* Kafka's indexes keep no descriptor (the file is closed once mapped): with fd -1 the file is opened for
     * this store alone, once per pending_limit entries */
    int fd = self->fd, opened = 0;
    if (fd < 0) {
        if (self->path == NULL || !PyBytes_Check(self->path))
            return 0;
        fd = open(PyBytes_AS_STRING(self->path), O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
            PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, self->path);
            return -1;
        }
        opened = 1;
    }
    const size_t width = (size_t)self->entry_size, total = width * (size_t)k;
    uint8_t stack[8192];
    uint8_t *buf = total <= sizeof(stack) ? stack : PyMem_Malloc(total);
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        uint8_t *p = buf + width * (size_t)i;
        if (width == 8) {
            put_be32(p, (uint32_t)(int32_t)self->keys[i]);
            put_be32(p + 4, (uint32_t)self->values[i]);
        } else {
            put_be64(p, (uint64_t)self->keys[i]);
            put_be32(p + 8, (uint32_t)self->values[i]);
        }
    }
    const off_t start = (off_t)(self->written * (long long)width);
    size_t done = 0;
    while (done < total) {
        ssize_t n = pwrite(fd, buf + done, total - done, start + (off_t)done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            PyErr_SetFromErrno(PyExc_OSError);
            if (buf != stack)
                PyMem_Free(buf);
            if (opened)
                close(fd);
            return -1;
        }
        done += (size_t)n;
    }
    if (buf != stack)
        PyMem_Free(buf);
    if (opened)
        close(fd);
    self->written += k;
    self->n_pending = 0;
    return 0;
}

/* buffer one entry (entries + 1), stored when pending_limit are buffered. 0, or -1 with an exception set */
int
index_push(IndexState *self, long long key, long long value)
{
    if (self->n_pending == self->cap) {
        Py_ssize_t cap = self->cap ? self->cap * 2 : 64;
        int64_t *keys = PyMem_Realloc(self->keys, (size_t)cap * sizeof(int64_t));
        if (keys == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->keys = keys;
        int32_t *values = PyMem_Realloc(self->values, (size_t)cap * sizeof(int32_t));
        if (values == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->values = values;
        self->cap = cap;
    }
    self->keys[self->n_pending] = key;
    self->values[self->n_pending] = (int32_t)value;
    self->n_pending++;
    self->entries++;
    if (self->n_pending >= self->pending_limit && index_materialize(self) < 0) {
        /* the entries stay buffered (lookups search them) and the next store, or the flush or close that
         * must store them, tries again: an append never fails for the sake of its index entry */
        PyErr_Clear();
    }
    return 0;
}

static PyObject *
IndexState_push(IndexState *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "push expected 2 arguments, got %zd", nargs);
        return NULL;
    }
    long long key = PyLong_AsLongLong(args[0]);
    if (key == -1 && PyErr_Occurred())
        return NULL;
    long long value = PyLong_AsLongLong(args[1]);
    if (value == -1 && PyErr_Occurred())
        return NULL;
    if ((self->entry_size == 8 && (key < INT32_MIN || key > INT32_MAX)) || value < INT32_MIN || value > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "IndexState.push: the entry does not fit its fields");
        return NULL;
    }
    if (index_push(self, key, value) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
IndexState_materialize(IndexState *self, PyObject *Py_UNUSED(ignored))
{
    if (index_materialize(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
IndexState_pending_floor(IndexState *self, PyObject *arg)
{
    long long key = PyLong_AsLongLong(arg);
    if (key == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t lo = 0, hi = self->n_pending;  /* bisect_right */
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (key < self->keys[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    if (lo == 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(Li)", (long long)self->keys[lo - 1], (int)self->values[lo - 1]);
}

static PyObject *
IndexState_get_pending(IndexState *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->n_pending);
}

static PyMethodDef IndexState_methods[] = {
    {"push", (PyCFunction)(void (*)(void))IndexState_push, METH_FASTCALL,
     "push(key, value): buffer one entry (entries + 1); stored in the file once pending_limit are buffered"},
    {"materialize", (PyCFunction)IndexState_materialize, METH_NOARGS,
     "materialize(): store the buffered entries in the file (pwrite after the written ones)"},
    {"pending_floor", (PyCFunction)IndexState_pending_floor, METH_O,
     "pending_floor(key) -> (key, value) | None: the last buffered entry whose key is <= key"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef IndexState_members[] = {
    {"fd", T_INT, offsetof(IndexState, fd), 0, "the index file descriptor (-1: closed)"},
    {"entry_size", T_INT, offsetof(IndexState, entry_size), READONLY, NULL},
    {"base_offset", T_LONGLONG, offsetof(IndexState, base_offset), READONLY, NULL},
    {"entries", T_LONGLONG, offsetof(IndexState, entries), 0, "valid entries (in the file and buffered)"},
    {"written", T_LONGLONG, offsetof(IndexState, written), 0, "entries in the file"},
    {"length", T_LONGLONG, offsetof(IndexState, length), 0, "file length in bytes"},
    {"last_offset", T_LONGLONG, offsetof(IndexState, last_offset), 0, NULL},
    {"last_timestamp", T_LONGLONG, offsetof(IndexState, last_timestamp), 0, NULL},
    {"pending_limit", T_PYSSIZET, offsetof(IndexState, pending_limit), READONLY, NULL},
    {"path", T_OBJECT, offsetof(IndexState, path), 0, "the file (bytes) opened for each store while fd is -1"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef IndexState_getset[] = {
    {"pending", (getter)IndexState_get_pending, NULL, "buffered entries", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject IndexState_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tidelog.storage._segment.IndexState",
    .tp_basicsize = sizeof(IndexState),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "IndexState(entry_size, base_offset, fd, pending_limit): the append state of one segment index",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)IndexState_init,
    .tp_dealloc = (destructor)IndexState_dealloc,
    .tp_methods = IndexState_methods,
    .tp_members = IndexState_members,
    .tp_getset = IndexState_getset,
};

/* ------------------------------------------------------------------------------------------------------------
 * SegmentState: what an append changes in one segment (see storage/segment.py's LogSegment)
 */
static int
SegmentState_init(SegmentState *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"base_offset", "index_interval_bytes", "offset_index", "time_index", NULL};
    long long base, interval;
    PyObject *oi, *ti;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "LLO!O!", kwlist, &base, &interval, &IndexState_Type, &oi,
                                     &IndexState_Type, &ti))
        return -1;
    if (((IndexState *)oi)->entry_size != 8 || ((IndexState *)ti)->entry_size != 12) {
        PyErr_SetString(PyExc_ValueError, "SegmentState: an offset index (8-byte) and a time index (12-byte) state");
        return -1;
    }
    self->fd = -1;
    self->base_offset = base;
    self->index_interval = interval;
    self->size = self->prealloc_end = self->bytes_since = self->created_ms = self->roll_jitter_ms = 0;
    self->max_ts = NO_TIMESTAMP;
    self->max_ts_offset = -1;
    self->max_ts_loaded = 0;
    self->rolling_ts = NO_TIMESTAMP;
    self->rolling_loaded = 0;
    Py_INCREF(oi);
    Py_INCREF(ti);
    Py_XSETREF(self->oi, (IndexState *)oi);
    Py_XSETREF(self->ti, (IndexState *)ti);
    return 0;
}

static void
SegmentState_dealloc(SegmentState *self)
{
    Py_XDECREF(self->oi);
    Py_XDECREF(self->ti);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
SegmentState_get_max(SegmentState *self, void *Py_UNUSED(closure))
{
    if (!self->max_ts_loaded)
        Py_RETURN_NONE;
    return Py_BuildValue("(LL)", self->max_ts, self->max_ts_offset);
}

static int
SegmentState_set_max(SegmentState *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL || value == Py_None) {
        self->max_ts_loaded = 0;
        return 0;
    }
    long long ts, off;
    if (!PyArg_ParseTuple(value, "LL", &ts, &off))
        return -1;
    self->max_ts = ts;
    self->max_ts_offset = off;
    self->max_ts_loaded = 1;
    return 0;
}

static PyObject *
SegmentState_get_rolling(SegmentState *self, void *Py_UNUSED(closure))
{
    if (!self->rolling_loaded)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(self->rolling_ts);
}

static int
SegmentState_set_rolling(SegmentState *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL || value == Py_None) {
        self->rolling_loaded = 0;
        return 0;
    }
    long long ts = PyLong_AsLongLong(value);
    if (ts == -1 && PyErr_Occurred())
        return -1;
    self->rolling_ts = ts;
    self->rolling_loaded = 1;
    return 0;
}

static PyMemberDef SegmentState_members[] = {
    {"fd", T_INT, offsetof(SegmentState, fd), 0, "the .log file descriptor (-1: closed)"},
    {"base_offset", T_LONGLONG, offsetof(SegmentState, base_offset), READONLY, NULL},
    {"size", T_LONGLONG, offsetof(SegmentState, size), 0, "bytes of the .log"},
    {"prealloc_end", T_LONGLONG, offsetof(SegmentState, prealloc_end), 0, "disk blocks reserved up to here"},
    {"bytes_since_last_index_entry", T_LONGLONG, offsetof(SegmentState, bytes_since), 0, NULL},
    {"index_interval_bytes", T_LONGLONG, offsetof(SegmentState, index_interval), 0, NULL},
    {"created_ms", T_LONGLONG, offsetof(SegmentState, created_ms), 0, NULL},
    {"roll_jitter_ms", T_LONGLONG, offsetof(SegmentState, roll_jitter_ms), 0, NULL},
    {"offset_index", T_OBJECT, offsetof(SegmentState, oi), READONLY, "the IndexState of the .index"},
    {"time_index", T_OBJECT, offsetof(SegmentState, ti), READONLY, "the IndexState of the .timeindex"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef SegmentState_getset[] = {
    {"max_ts_and_offset", (getter)SegmentState_get_max, (setter)SegmentState_set_max,
     "(max timestamp so far, last offset of its batch), or None until loaded", NULL},
    {"rolling_based_ts", (getter)SegmentState_get_rolling, (setter)SegmentState_set_rolling,
     "max timestamp of the first batch, or None until loaded", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject SegmentState_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tidelog.storage._segment.SegmentState",
    .tp_basicsize = sizeof(SegmentState),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "SegmentState(base_offset, index_interval_bytes, offset_index, time_index): the append state of a segment",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)SegmentState_init,
    .tp_dealloc = (destructor)SegmentState_dealloc,
    .tp_members = SegmentState_members,
    .tp_getset = SegmentState_getset,
};

int
tl_segment_add_state_types(PyObject *module)
{
    if (PyType_Ready(&IndexState_Type) < 0 || PyType_Ready(&SegmentState_Type) < 0)
        return -1;
    Py_INCREF(&IndexState_Type);
    if (PyModule_AddObject(module, "IndexState", (PyObject *)&IndexState_Type) < 0) {
        Py_DECREF(&IndexState_Type);
        return -1;
    }
    Py_INCREF(&SegmentState_Type);
    if (PyModule_AddObject(module, "SegmentState", (PyObject *)&SegmentState_Type) < 0) {
        Py_DECREF(&SegmentState_Type);
        return -1;
    }
    return 0;
}
