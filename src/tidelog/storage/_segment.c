/* tidelog.storage._segment: the storage layer's C, the I/O half of the produce and recovery hot paths.
 *
 * tidelog.records._recwalk keeps the bytes-only code (record walk, CRC-32C, header checks); this module owns what
 * touches files, and the state of a segment that the append fast path changes:
 *
 *   IndexState    the append state of one .index/.timeindex: the file descriptor, entry count, entries already in
 *                 the file, file length, last entry, and the buffer of appended entries not yet stored (packed
 *                 big-endian and written with pwrite, PENDING_LIMIT at a time). OffsetIndex/TimeIndex
 *                 (storage/index.py) read and set these fields; they keep the mapping, lookups and resizes.
 *   SegmentState  the append state of one segment's .log: fd, size, end of the reserved disk blocks, bytes since
 *                 the last index entry, index interval, the max timestamp so far and the rolling timestamp (None
 *                 until loaded), created time and roll jitter, and its two IndexStates. LogSegment
 *                 (storage/segment.py) reads and sets them through properties.
 *   append_leader_fast(state, batch, base_offset, leader_epoch, now_ms, limits)
 *                 PartitionLog.append_as_leader's common case on the active segment, everything it needs passed
 *                 in and returned: no Python attribute is read or written by name.
 *   write_stamped, preallocate, scan_batches
 *                 the stamped writev of one batch, fallocate(KEEP_SIZE), LogSegment.recover's batch loop.
 *   check_follower_batches, append_follower_run
 *                 PartitionLog.append_as_follower's checks of a fetched buffer and its runs of batches written
 *                 as they are, with the segment's bookkeeping, in one write each (issue 30).
 *
 * The CRC-32C and the record walk come from _recwalk's capsule (records/_recwalk_capi.h), imported once at init.
 * storage/segment_state.py holds the pure-Python twins of both types (TIDELOG_PURE_PYTHON=1, or no compiler).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../records/_bytes.h"
#include "../records/_recwalk_capi.h"

#define RELEASE_GIL_BYTES (64 * 1024)
#define NO_TIMESTAMP (-1LL)

static const tidelog_records_capi *capi = NULL;

static inline void
put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void
put_be64(uint8_t *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

static inline long long
sat_add(long long a, long long b)
{
    long long r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? LLONG_MAX : LLONG_MIN;
    return r;
}

static inline long long
sat_sub(long long a, long long b)
{
    long long r;
    if (__builtin_sub_overflow(a, b, &r))
        return b > 0 ? LLONG_MIN : LLONG_MAX;
    return r;
}

/* what stamped_write returns instead of the length written */
#define CHECK_FAILED_AFTER_WRITE (-1)  /* the bytes are written; the caller cuts the file back */
#define WRITE_ERROR (-2)               /* a Python exception is set (OSError, or a signal handler's) */

/* write_stamped's work (GIL held on entry, released around each system call and a large CRC): the batch d[0:n]
 * written to fd with baseOffset and partitionLeaderEpoch replaced, then the checks of ``check`` (see
 * write_stamped). A batch shorter than a batch header is not written when a check is asked for. */
static Py_ssize_t
stamped_write(int fd, const uint8_t *d, Py_ssize_t total, long long base, int32_t epoch, int check)
{
    if (check && total < BATCH_HEADER)
        return CHECK_FAILED_AFTER_WRITE;
    uint8_t head[HDR_STAMPED_HEAD];
    uint64_t b = (uint64_t)base;
    for (int i = 0; i < 8; i++)
        head[i] = (uint8_t)(b >> (56 - 8 * i));
    memcpy(head + HDR_BATCH_LENGTH, d + HDR_BATCH_LENGTH, 4);
    uint32_t ep = (uint32_t)epoch;
    head[HDR_PARTITION_LEADER_EPOCH] = (uint8_t)(ep >> 24);
    head[HDR_PARTITION_LEADER_EPOCH + 1] = (uint8_t)(ep >> 16);
    head[HDR_PARTITION_LEADER_EPOCH + 2] = (uint8_t)(ep >> 8);
    head[HDR_PARTITION_LEADER_EPOCH + 3] = (uint8_t)ep;
    Py_ssize_t done = 0;
    Py_ssize_t crc_pos = HDR_ATTRIBUTES;  /* the CRC covers attributes..end */
    uint32_t crc = 0;
    while (done < total) {
        ssize_t n;
        int err;
        Py_BEGIN_ALLOW_THREADS
        if (done < HDR_STAMPED_HEAD) {
            struct iovec iov[2];
            iov[0].iov_base = head + done;
            iov[0].iov_len = (size_t)(HDR_STAMPED_HEAD - done);
            iov[1].iov_base = (uint8_t *)d + HDR_STAMPED_HEAD;
            iov[1].iov_len = (size_t)(total - HDR_STAMPED_HEAD);
            n = writev(fd, iov, total > HDR_STAMPED_HEAD ? 2 : 1);
        } else {
            n = write(fd, d + done, (size_t)(total - done));
        }
        err = errno;
        /* the CRC of what was just written, while it is in the cache (GIL still released) */
        if (n > 0 && check && done + n > crc_pos) {
            crc = capi->crc32c(crc, d + crc_pos, (size_t)(done + n - crc_pos));
            crc_pos = done + n;
        }
        Py_END_ALLOW_THREADS
        if (n < 0) {
            if (err == EINTR) {
                if (PyErr_CheckSignals() < 0)
                    return WRITE_ERROR;
                continue;
            }
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            return WRITE_ERROR;
        }
        done += n;
    }
    if (check) {
        if (crc != be32u(d + HDR_CRC))
            return CHECK_FAILED_AFTER_WRITE;
        if (check == 2 && (be16(d + HDR_ATTRIBUTES) & 0x07) == 0) {
            int ok;
            /* only the caller's buffer is read: other threads (the network loop) run meanwhile */
            if (total > RELEASE_GIL_BYTES) {
                Py_BEGIN_ALLOW_THREADS
                ok = capi->records_ok(d + BATCH_HEADER, total - BATCH_HEADER, (int32_t)be32u(d + HDR_RECORDS_COUNT));
                Py_END_ALLOW_THREADS
            } else {
                ok = capi->records_ok(d + BATCH_HEADER, total - BATCH_HEADER, (int32_t)be32u(d + HDR_RECORDS_COUNT));
            }
            if (!ok)
                return CHECK_FAILED_AFTER_WRITE;
        }
    }
    return total;
}

PyDoc_STRVAR(write_stamped_doc,
"write_stamped(fd, batch, base_offset, partition_leader_epoch, check=0, /) -> int\n\n"
"Write the whole v2 batch ``batch`` (a buffer of at least 16 bytes, not copied or changed) to ``fd`` with its\n"
"baseOffset and partitionLeaderEpoch (bytes 0-7 and 12-15, both outside the CRC) replaced: one writev of a\n"
"16-byte head built on the stack and the rest of the caller's buffer, short writes continued, EINTR retried\n"
"(after running signal handlers), the GIL released around each system call as os.writev does. Returns\n"
"len(batch); raises OSError (bytes may then have been written: the caller truncates).\n\n"
"``check`` (``batch`` then is one v2 batch whose header and sizes were validated): 1 (or True) verifies the\n"
"batch's CRC-32C after the write, while the bytes are still in the CPU cache; 2 also walks the records of an\n"
"uncompressed batch as validate_single_batch does. Returns -1 when a check fails: the bytes are written (but\n"
"nothing is written when ``batch`` is shorter than a batch header), and the caller cuts the file back and lets\n"
"the Python checks raise the exact error. (Writing a large batch in pieces, each checked right after its\n"
"write while it is in the core's L2 cache, was measured slower: 128 KiB pieces of a 1 MiB batch cost 20-30%\n"
"more CPU time than one write, more than the CRC saved.)");

static PyObject *
write_stamped(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 4 || nargs > 5) {
        PyErr_Format(PyExc_TypeError, "write_stamped expected 4 or 5 arguments, got %zd", nargs);
        return NULL;
    }
    long check = 0;
    if (nargs == 5) {
        check = PyLong_AsLong(args[4]);
        if (check == -1 && PyErr_Occurred())
            return NULL;
        if (check < 0 || check > 2) {
            PyErr_SetString(PyExc_ValueError, "write_stamped: check must be 0, 1 or 2");
            return NULL;
        }
    }
    long fdl = PyLong_AsLong(args[0]);
    if (fdl == -1 && PyErr_Occurred())
        return NULL;
    if (fdl < 0 || fdl > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "write_stamped: bad file descriptor");
        return NULL;
    }
    const int fd = (int)fdl;
    long long base = PyLong_AsLongLong(args[2]);
    if (base == -1 && PyErr_Occurred())
        return NULL;
    long epoch = PyLong_AsLong(args[3]);
    if (epoch == -1 && PyErr_Occurred())
        return NULL;
    if (epoch < INT32_MIN || epoch > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "write_stamped: partition leader epoch out of int32 range");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (view.len < 16) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "write_stamped: a batch has at least 16 bytes");
        return NULL;
    }
    const uint8_t *d = (const uint8_t *)view.buf;
    Py_ssize_t total = stamped_write(fd, d, view.len, base, (int32_t)epoch, (int)check);
    PyBuffer_Release(&view);
    if (total == WRITE_ERROR)
        return NULL;
    return PyLong_FromSsize_t(total);
}

PyDoc_STRVAR(preallocate_doc,
"preallocate(fd, offset, length, /) -> int\n\n"
"fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length): reserve the file's disk blocks in [offset, offset+length)\n"
"without changing its size or contents. Returns 0, or the errno of the failure (EOPNOTSUPP where the file system\n"
"cannot, ENOSPC, ...): nothing is raised. The GIL is released around the call.");

static PyObject *
preallocate_py(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "preallocate expected 3 arguments, got %zd", nargs);
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    long long offset = PyLong_AsLongLong(args[1]);
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    long long length = PyLong_AsLongLong(args[2]);
    if (length == -1 && PyErr_Occurred())
        return NULL;
    if (fd < 0 || fd > INT_MAX || offset < 0 || length <= 0) {
        PyErr_SetString(PyExc_ValueError, "preallocate: bad file descriptor, offset or length");
        return NULL;
    }
    int err = 0;
#if defined(__linux__) && defined(FALLOC_FL_KEEP_SIZE)
    Py_BEGIN_ALLOW_THREADS
    if (fallocate((int)fd, FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)length) != 0)
        err = errno;
    Py_END_ALLOW_THREADS
#else
    err = EOPNOTSUPP;
#endif
    return PyLong_FromLong(err);
}

/* ------------------------------------------------------------------------------------------------------------
 * scan_batches: LogSegment.recover's per-batch loop over one buffer of the .log, in C
 */
#define SCAN_NEED_MORE 0  /* the next batch is not whole in the buffer (but may be in the file): refill */
#define SCAN_INVALID 1    /* the next batch is invalid: recovery truncates here */
#define SCAN_END 2        /* fewer than 12 bytes are left in the file */

static int
append_ll(PyObject *list, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL)
        return -1;
    int rc = PyList_Append(list, v);
    Py_DECREF(v);
    return rc;
}

PyDoc_STRVAR(scan_batches_doc,
"scan_batches(buf, pos, file_remaining, max_size, position, last_index_entry, max_ts, max_ts_offset,\n"
"             last_time_ts, expected_min, base_offset, index_interval, off_rel, off_pos, time_ts, time_rel,\n"
"             headers, /) -> (consumed, status, last_index_entry, max_ts, max_ts_offset, last_time_ts,\n"
"             expected_min)\n\n"
"LogSegment.recover's loop over the whole batches of buf[pos:] (``position``: the file position of buf[pos];\n"
"``file_remaining``: the file's bytes from there): each batch must have magic 2, sane sizes (batchLength >= 49,\n"
"size <= max_size unless -1, within the file, lastOffsetDelta and recordsCount >= 0), a matching CRC-32C, a base\n"
"offset >= expected_min and a last offset that fits relative to base_offset, exactly as the Python loop checks.\n"
"For every valid batch the index entries follow the append rule (appended to the four lists) and, when\n"
"``headers`` is a list, (position, header tuple) is appended to it. status: 0 the next batch is not whole in\n"
"buf (refill and call again), 1 the next batch is invalid (truncate there), 2 fewer than 12 bytes remain.");

static PyObject *
scan_batches(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 17) {
        PyErr_Format(PyExc_TypeError, "scan_batches expected 17 arguments, got %zd", nargs);
        return NULL;
    }
    long long a[11];
    for (int i = 0; i < 11; i++) {
        a[i] = PyLong_AsLongLong(args[i + 1]);
        if (a[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    long long pos = a[0], file_remaining = a[1], max_size = a[2], position = a[3], last_index_entry = a[4];
    long long max_ts = a[5], max_ts_offset = a[6], last_time_ts = a[7], expected_min = a[8], base = a[9];
    const long long interval = a[10];
    PyObject *off_rel = args[12], *off_pos = args[13], *time_ts = args[14], *time_rel = args[15];
    PyObject *headers = args[16] == Py_None ? NULL : args[16];
    if (!PyList_Check(off_rel) || !PyList_Check(off_pos) || !PyList_Check(time_ts) || !PyList_Check(time_rel)
        || (headers != NULL && !PyList_Check(headers))) {
        PyErr_SetString(PyExc_TypeError, "scan_batches: the index entries and headers must be lists");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    if (pos < 0 || pos > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scan_batches: position outside the buffer");
        return NULL;
    }
    long long consumed = 0;
    int status;
    for (;;) {
        const long long remaining = file_remaining - consumed;
        if (remaining < BATCH_LOG_OVERHEAD) {
            status = SCAN_END;
            break;
        }
        const uint8_t *d = buf + pos + consumed;
        const long long have = view.len - (pos + consumed);
        if (have < BATCH_LOG_OVERHEAD) {
            status = SCAN_NEED_MORE;
            break;
        }
        const long long batch_length = (int32_t)be32u(d + HDR_BATCH_LENGTH);
        const long long size = batch_length + BATCH_LOG_OVERHEAD;
        if (have < BATCH_HEADER || have < size) {
            /* a header cut short by the end of the file, or a batch declared past it, fails validate_batch_tuple;
             * else the rest is in the file, not yet in the buffer */
            if (remaining < BATCH_HEADER || (have >= BATCH_HEADER && size > remaining))
                status = SCAN_INVALID;
            else
                status = SCAN_NEED_MORE;
            break;
        }
        const long long last_delta = (int32_t)be32u(d + HDR_LAST_OFFSET_DELTA);
        const long long count = (int32_t)be32u(d + HDR_RECORDS_COUNT);
        if (d[HDR_MAGIC] != BATCH_MAGIC || batch_length < BATCH_HEADER - BATCH_LOG_OVERHEAD || (max_size >= 0 && size > max_size)
            || size > remaining || last_delta < 0 || count < 0) {
            status = SCAN_INVALID;
            break;
        }
        uint32_t crc;
        if (size > RELEASE_GIL_BYTES) {
            Py_BEGIN_ALLOW_THREADS
            crc = capi->crc32c(0, d + HDR_ATTRIBUTES, (size_t)(size - HDR_ATTRIBUTES));
            Py_END_ALLOW_THREADS
        } else {
            crc = capi->crc32c(0, d + HDR_ATTRIBUTES, (size_t)(size - HDR_ATTRIBUTES));
        }
        const long long first = be64(d);
        const long long last = first + last_delta;
        if (crc != be32u(d + HDR_CRC) || first < expected_min || last - base > INT32_MAX) {
            status = SCAN_INVALID;
            break;
        }
        const long long batch_max_ts = be64(d + HDR_MAX_TIMESTAMP);
        if (batch_max_ts > max_ts) {
            max_ts = batch_max_ts;
            max_ts_offset = last;
        }
        const long long at = position + consumed;
        if (at - last_index_entry > interval) {
            if (append_ll(off_rel, last - base) < 0 || append_ll(off_pos, at) < 0)
                goto error;
            if (max_ts > last_time_ts) {
                if (append_ll(time_ts, max_ts) < 0 || append_ll(time_rel, max_ts_offset - base) < 0)
                    goto error;
                last_time_ts = max_ts;
            }
            last_index_entry = at;
        }
        if (headers != NULL) {
            PyObject *t = capi->header_tuple(d);
            PyObject *p = t ? PyLong_FromLongLong(at) : NULL;
            PyObject *pair = p ? PyTuple_Pack(2, p, t) : NULL;
            Py_XDECREF(t);
            Py_XDECREF(p);
            if (pair == NULL || PyList_Append(headers, pair) < 0) {
                Py_XDECREF(pair);
                goto error;
            }
            Py_DECREF(pair);
        }
        consumed += size;
        expected_min = last + 1;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(LiLLLLL)", consumed, status, last_index_entry, max_ts, max_ts_offset, last_time_ts,
                         expected_min);
error:
    PyBuffer_Release(&view);
    return NULL;
}


/* ------------------------------------------------------------------------------------------------------------
 * IndexState: what an append changes in one index (see storage/index.py's AbstractIndex for the buffering rule)
 */
typedef struct {
    PyObject_HEAD
    int fd;                    /* the index file (-1: closed) */
    int entry_size;            /* 8 (.index: relative offset int32, position int32) or 12 (.timeindex: int64, int32) */
    long long base_offset;
    long long entries;         /* valid entries: in the file and buffered */
    long long written;         /* entries in the file (the mapping) */
    long long length;          /* file (and mapping) length in bytes */
    long long last_offset;     /* .index: the last entry's offset (base when empty); .timeindex: the last entry's */
    long long last_timestamp;  /* .timeindex: the last entry's timestamp (-1 when empty) */
    Py_ssize_t pending_limit;  /* buffered entries that make an append store them */
    Py_ssize_t n_pending, cap;
    int64_t *keys;             /* buffered entries, oldest first: relative offset or timestamp */
    int32_t *values;           /* position or relative offset */
    PyObject *path;            /* bytes: the file, opened for each store while fd is -1 (None: closed) */
} IndexState;

static PyTypeObject IndexState_Type;

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
static int
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

static PyTypeObject IndexState_Type = {
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
typedef struct {
    PyObject_HEAD
    int fd;                     /* the .log (-1: closed) */
    long long base_offset;
    long long size;             /* bytes of the .log */
    long long prealloc_end;     /* disk blocks reserved up to here (LogSegment._reserve) */
    long long bytes_since;      /* bytes appended since the last index entry */
    long long index_interval;   /* index.interval.bytes */
    long long created_ms, roll_jitter_ms;
    long long max_ts, max_ts_offset;  /* max timestamp so far and the last offset of its batch */
    int max_ts_loaded;
    long long rolling_ts;       /* max timestamp of the first batch (segment.ms counts from it) */
    int rolling_loaded;
    IndexState *oi, *ti;
} SegmentState;

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

static PyTypeObject SegmentState_Type = {
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

/* ------------------------------------------------------------------------------------------------------------
 * append_leader_fast(state, batch, base_offset, leader_epoch, now_ms, limits[, with_producer])
 *     -> (last_offset, max_timestamp, record_count, size) | None
 *
 * PartitionLog.append_as_leader's common case on the active segment (an uncompressed CreateTime client batch
 * without producer id that fits it without a roll), with LogSegment.append_leader_batch's steps (_should_roll,
 * append_parts) on ``state``. The log passes what is its own: ``base_offset`` (its log end offset),
 * ``leader_epoch``, ``now_ms`` and ``limits`` = (max.message.bytes, message.timestamp.before.max.ms,
 * message.timestamp.after.max.ms, segment.bytes, segment.ms); it then moves its log end offset, producer state
 * and epoch cache itself from what is returned. None, having changed nothing, as soon as anything else holds: a
 * header or client check fails or needs the exact error, the batch is compressed or carries a producer id (unless
 * ``with_producer``: an idempotent batch whose producer-state check the caller made, and whose producer state it
 * updates after) or a timestamp-type, transactional or control bit, the segment is closed, empty, must roll or reserve more disk
 * blocks first, or a lazily loaded value is not loaded yet. After the write, the CRC-32C and the record walk are
 * checked (stamped_write's check 2); when one fails the file is cut back and None is returned (the Python path
 * then raises the exact error).
 *
 * Locking: the caller holds the log's lock, which every change of the active segment holds as well; every
 * change of ``state`` happens with the GIL held, in one uninterrupted sequence after the write.
 */
PyDoc_STRVAR(append_leader_fast_doc,
"append_leader_fast(state, batch, base_offset, leader_epoch, now_ms, limits, with_producer=False, /)\n"
"    -> (last_offset, max_timestamp, record_count, size) | None\n\n"
"PartitionLog.append_as_leader's common case on the active segment's SegmentState (see _segment.c); None,\n"
"having changed nothing, whenever the Python path must take the batch. ``limits``: (max_message_bytes,\n"
"timestamp_before_max_ms, timestamp_after_max_ms, segment_bytes, segment_ms).");

static PyObject *
append_leader_fast(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 && nargs != 7) {
        PyErr_Format(PyExc_TypeError, "append_leader_fast expected 6 or 7 arguments, got %zd", nargs);
        return NULL;
    }
    /* the 7th: a batch with a producer id may be taken (its producer-state check passed in the caller) */
    int with_producer = 0;
    if (nargs == 7 && (with_producer = PyObject_IsTrue(args[6])) < 0)
        return NULL;
    if (!PyObject_TypeCheck(args[0], &SegmentState_Type)) {
        PyErr_SetString(PyExc_TypeError, "append_leader_fast: state must be a SegmentState");
        return NULL;
    }
    SegmentState *st = (SegmentState *)args[0];
    IndexState *oi = st->oi, *ti = st->ti;
    long long v[8];  /* base_offset, leader_epoch, now_ms, then the five limits */
    PyObject *limits = args[5];
    if (!PyTuple_Check(limits) || PyTuple_GET_SIZE(limits) != 5) {
        PyErr_SetString(PyExc_TypeError, "append_leader_fast: limits must be a tuple of 5 ints");
        return NULL;
    }
    for (int i = 0; i < 8; i++) {
        PyObject *o = i < 3 ? args[i == 0 ? 2 : i == 1 ? 3 : 4] : PyTuple_GET_ITEM(limits, i - 3);
        int overflow = 0;
        v[i] = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (v[i] == -1 && PyErr_Occurred())
            return NULL;
        if (overflow)
            Py_RETURN_NONE;  /* Python's unbounded ints decide */
    }
    const long long base = v[0], epoch = v[1], now = v[2];
    const long long max_bytes = v[3], before = v[4], after = v[5], segment_bytes = v[6], segment_ms = v[7];
    if (epoch < INT32_MIN || epoch > INT32_MAX)
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();  /* the Python path reports what is wrong with it */
        Py_RETURN_NONE;
    }
    PyObject *result = NULL;
    const uint8_t *d = (const uint8_t *)view.buf;
    const Py_ssize_t n = view.len;
#define BAIL() do { result = Py_None; Py_INCREF(result); goto done; } while (0)

    /* the header: the checks of validate_single_batch without CRC and walk, and the client checks */
    if (n < BATCH_HEADER || d[HDR_MAGIC] != BATCH_MAGIC)
        BAIL();
    const long long batch_length = (int32_t)be32u(d + HDR_BATCH_LENGTH);
    const long long size = batch_length + BATCH_LOG_OVERHEAD;
    const int attributes = be16(d + HDR_ATTRIBUTES);
    const long long last_delta = (int32_t)be32u(d + HDR_LAST_OFFSET_DELTA);
    const long long base_ts = be64(d + HDR_BASE_TIMESTAMP);
    const long long max_ts = be64(d + HDR_MAX_TIMESTAMP);
    const long long pid = be64(d + HDR_PRODUCER_ID);
    const long long count = (int32_t)be32u(d + HDR_RECORDS_COUNT);
    if (batch_length < BATCH_HEADER - BATCH_LOG_OVERHEAD || size != n || last_delta < 0 || count <= 0
        || count != last_delta + 1 || (pid >= 0 && !with_producer)
        || (attributes & 0x3f))  /* compression, ts type, txn, control */
        BAIL();
    if (size > max_bytes)
        BAIL();
    const long long low = sat_sub(now, before), high = sat_add(now, after);
    if ((base_ts != -1 && (base_ts < low || base_ts > high)) || (max_ts != -1 && (max_ts < low || max_ts > high)))
        BAIL();
    const long long last = base + last_delta;

    /* the active segment: Kafka's roll conditions (LogSegment._should_roll's) */
    const long long position = st->size;
    if (st->fd < 0 || position <= 0 || position > segment_bytes - size)
        BAIL();
    if (position + size > st->prealloc_end)
        BAIL();  /* the Python path reserves the next stretch of disk blocks first */
    if (!st->rolling_loaded || !st->max_ts_loaded)
        BAIL();  /* not loaded yet */
    /* saturating, so that extreme client timestamps decide as Python's unbounded ints do */
    if ((st->rolling_ts >= 0 ? sat_sub(max_ts, st->rolling_ts) : sat_sub(now, st->created_ms))
        > sat_sub(segment_ms, st->roll_jitter_ms))
        BAIL();
    if (oi->entries >= oi->length / 8 || ti->entries >= ti->length / 12 - 1)
        BAIL();
    const long long rel = last - st->base_offset;
    if (rel < 0 || rel > INT32_MAX)
        BAIL();
    if (oi->entries && last <= oi->last_offset)
        BAIL();  /* the Python path raises */

    /* the write, then the CRC and the record walk while the bytes are cached */
    const int fd = st->fd;
    Py_ssize_t total = stamped_write(fd, d, n, base, (int32_t)epoch, 2);
    if (total < 0) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);  /* an OSError survives the cut-back */
        int cut, cut_err;
        Py_BEGIN_ALLOW_THREADS
        cut = ftruncate(fd, (off_t)position);
        cut_err = errno;
        Py_END_ALLOW_THREADS
        if (cut < 0 && et == NULL) {
            errno = cut_err;
            PyErr_SetFromErrno(PyExc_OSError);
            goto done;
        }
        PyErr_Restore(et, ev, tb);
        if (total == WRITE_ERROR)
            goto done;
        BAIL();  /* a check failed: the Python path raises the exact error, nothing was kept */
    }

    /* the segment's bookkeeping (LogSegment.append_parts') */
    st->size = position + total;
    if (max_ts > st->max_ts) {
        st->max_ts = max_ts;
        st->max_ts_offset = last;
    }
    if (st->bytes_since <= st->index_interval) {
        st->bytes_since += total;
    } else {
        st->bytes_since = total;
        if (index_push(oi, rel, position) < 0)
            goto done;
        oi->last_offset = last;
        if (st->max_ts > ti->last_timestamp) {
            if (index_push(ti, st->max_ts, st->max_ts_offset - st->base_offset) < 0)
                goto done;
            ti->last_timestamp = st->max_ts;
            ti->last_offset = st->max_ts_offset;
        }
    }
    result = Py_BuildValue("(LLLL)", last, max_ts, count, size);
done:
#undef BAIL
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------------------------------------------
 * The follower's append (issue 30): PartitionLog.append_as_follower's batches as the leader sent them, in two
 * calls. check_follower_batches checks every batch of a fetched buffer before anything is written (the checks
 * of records.header.validate_batch: magic 2, sizes, CRC-32C; and base offsets that never go back);
 * append_follower_run then writes the longest run of them that fits the active segment without a roll, in one
 * write, with LogSegment.append's bookkeeping per batch (max timestamp, the index.interval.bytes rule). No
 * Python object per batch unless the caller asks for it: the header tuples of the batches that carry a producer
 * id (producer state) or of all of them, and the (epoch, base offset) where the partition leader epoch grows.
 */
PyDoc_STRVAR(check_follower_batches_doc,
"check_follower_batches(buf, expected_min, /) -> int\n\n"
"Check every v2 batch of ``buf`` as validate_batch does (magic 2, batchLength >= 49, the batch within buf,\n"
"lastOffsetDelta and recordsCount >= 0, the CRC-32C) and that each base offset is >= ``expected_min`` and >=\n"
"the previous batch's last offset + 1. Returns the number of batches, or -1 when something fails (the Python\n"
"checks then raise the exact error). The GIL is released around the CRCs of a large buffer.");

static PyObject *
check_follower_batches(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "check_follower_batches expected 2 arguments, got %zd", nargs);
        return NULL;
    }
    long long expected = PyLong_AsLongLong(args[1]);
    if (expected == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t total = view.len;
    long long n = 0;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS  /* only the caller's buffer is read */
    Py_ssize_t pos = 0;
    while (pos < total) {
        const Py_ssize_t have = total - pos;
        const uint8_t *d = buf + pos;
        if (have < BATCH_HEADER || d[HDR_MAGIC] != BATCH_MAGIC) {
            bad = 1;
            break;
        }
        const long long batch_length = (int32_t)be32u(d + HDR_BATCH_LENGTH);
        const long long size = batch_length + BATCH_LOG_OVERHEAD;
        const long long last_delta = (int32_t)be32u(d + HDR_LAST_OFFSET_DELTA);
        const long long count = (int32_t)be32u(d + HDR_RECORDS_COUNT);
        if (batch_length < BATCH_HEADER - BATCH_LOG_OVERHEAD || size > have || last_delta < 0 || count < 0) {
            bad = 1;
            break;
        }
        if (capi->crc32c(0, d + HDR_ATTRIBUTES, (size_t)(size - HDR_ATTRIBUTES)) != be32u(d + HDR_CRC)) {
            bad = 1;
            break;
        }
        const long long first = be64(d);
        if (first < expected || first > LLONG_MAX - last_delta - 1) {
            bad = 1;
            break;
        }
        expected = first + last_delta + 1;
        pos += (Py_ssize_t)size;
        n++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(bad ? -1 : n);
}

PyDoc_STRVAR(append_follower_run_doc,
"append_follower_run(state, buf, start, now_ms, segment_bytes, segment_ms, latest_epoch, headers, all_headers,\n"
"                    epochs, /) -> (consumed, last_offset, latest_epoch)\n\n"
"Write the batches of buf[start:] (checked by check_follower_batches) that fit the active segment's\n"
"SegmentState ``state`` without a roll (LogSegment._should_roll's conditions, batch by batch) and without\n"
"reserving more disk blocks, as they are (no stamping), in one write; then LogSegment.append's bookkeeping for\n"
"each (size, max timestamp and its offset, the offset and time index entries of index.interval.bytes).\n"
"``headers`` (a list) gets (position in buf, header tuple) of every batch when ``all_headers``, else of those\n"
"with a producer id; ``epochs`` (a list) gets (epoch, base offset) where the partitionLeaderEpoch (>= 0) grows\n"
"past ``latest_epoch``. consumed is 0 when the first batch needs the Python path (a roll, a reservation, an\n"
"empty or closed segment, a value not loaded yet). Raises OSError (the file cut back, nothing changed).");

static PyObject *
append_follower_run(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "append_follower_run expected 10 arguments, got %zd", nargs);
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], &SegmentState_Type)) {
        PyErr_SetString(PyExc_TypeError, "append_follower_run: state must be a SegmentState");
        return NULL;
    }
    SegmentState *st = (SegmentState *)args[0];
    IndexState *oi = st->oi, *ti = st->ti;
    long long v[5];  /* start, now_ms, segment_bytes, segment_ms, latest_epoch */
    for (int i = 0; i < 5; i++) {
        v[i] = PyLong_AsLongLong(args[i + 2]);
        if (v[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    const long long start = v[0], now = v[1], segment_bytes = v[2], segment_ms = v[3];
    long long latest = v[4];
    PyObject *headers = args[7], *epochs = args[9];
    const int all_headers = PyObject_IsTrue(args[8]);
    if (all_headers < 0)
        return NULL;
    if (!PyList_Check(headers) || !PyList_Check(epochs)) {
        PyErr_SetString(PyExc_TypeError, "append_follower_run: headers and epochs must be lists");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t total = view.len;
    if (start < 0 || start > total) {
        PyErr_SetString(PyExc_ValueError, "append_follower_run: start outside the buffer");
        goto done;
    }

    /* 1. the run: batches while none needs a roll first (simulating the index entries the run adds) */
    const long long position = st->size;
    long long run = 0, last = -1;
    if (st->fd >= 0 && position > 0 && st->rolling_loaded && st->max_ts_loaded) {
        long long seg_size = position, bytes_since = st->bytes_since;
        long long oi_entries = oi->entries, ti_entries = ti->entries, oi_last = oi->last_offset;
        long long mts = st->max_ts, ti_last_ts = ti->last_timestamp;
        const long long oi_cap = oi->length / 8, ti_cap = ti->length / 12 - 1;
        while (start + run < total) {
            const uint8_t *d = buf + start + run;
            const long long size = (long long)(int32_t)be32u(d + HDR_BATCH_LENGTH) + BATCH_LOG_OVERHEAD;
            const long long b_last = be64(d) + (int32_t)be32u(d + HDR_LAST_OFFSET_DELTA);
            const long long b_max_ts = be64(d + HDR_MAX_TIMESTAMP);
            const long long rel = b_last - st->base_offset;
            if (seg_size > segment_bytes - size || seg_size + size > st->prealloc_end)
                break;
            if ((st->rolling_ts >= 0 ? sat_sub(b_max_ts, st->rolling_ts) : sat_sub(now, st->created_ms))
                > sat_sub(segment_ms, st->roll_jitter_ms))
                break;
            if (oi_entries >= oi_cap || ti_entries >= ti_cap || rel < 0 || rel > INT32_MAX)
                break;
            if (bytes_since <= st->index_interval) {
                bytes_since += size;
            } else {
                if (oi_entries && b_last <= oi_last)
                    break;  /* the Python path raises */
                bytes_since = size;
                oi_entries++;
                oi_last = b_last;
                if ((b_max_ts > mts ? b_max_ts : mts) > ti_last_ts) {
                    ti_entries++;
                    ti_last_ts = b_max_ts > mts ? b_max_ts : mts;
                }
            }
            if (b_max_ts > mts)
                mts = b_max_ts;
            seg_size += size;
            run += size;
            last = b_last;
        }
    }
    if (run == 0) {
        result = Py_BuildValue("(LLL)", 0LL, -1LL, latest);
        goto done;
    }

    /* 2. the write: the fetched bytes as they are */
    const int fd = st->fd;
    long long done_bytes = 0;
    while (done_bytes < run) {
        ssize_t n;
        int err;
        Py_BEGIN_ALLOW_THREADS
        n = write(fd, buf + start + done_bytes, (size_t)(run - done_bytes));
        err = errno;
        Py_END_ALLOW_THREADS
        if (n < 0) {
            if (err == EINTR && PyErr_CheckSignals() == 0)
                continue;
            if (err != EINTR) {
                errno = err;
                PyErr_SetFromErrno(PyExc_OSError);
            }
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            int cut;
            Py_BEGIN_ALLOW_THREADS
            cut = ftruncate(fd, (off_t)position);
            Py_END_ALLOW_THREADS
            (void)cut;
            PyErr_Restore(et, ev, tb);
            goto done;
        }
        done_bytes += n;
    }

    /* 3. the segment's bookkeeping per batch (LogSegment.append_parts'), the headers and epochs asked for */
    long long at = 0;
    while (at < run) {
        const uint8_t *d = buf + start + at;
        const long long size = (long long)(int32_t)be32u(d + HDR_BATCH_LENGTH) + BATCH_LOG_OVERHEAD;
        const long long base = be64(d);
        const long long b_last = base + (int32_t)be32u(d + HDR_LAST_OFFSET_DELTA);
        const long long b_max_ts = be64(d + HDR_MAX_TIMESTAMP);
        const long long pid = be64(d + HDR_PRODUCER_ID);
        const long long epoch = (int32_t)be32u(d + HDR_PARTITION_LEADER_EPOCH);
        const long long file_pos = position + at;
        if (b_max_ts > st->max_ts) {
            st->max_ts = b_max_ts;
            st->max_ts_offset = b_last;
        }
        if (st->bytes_since <= st->index_interval) {
            st->bytes_since += size;
        } else {
            st->bytes_since = size;
            if (index_push(oi, b_last - st->base_offset, file_pos) < 0)
                goto fail_after_write;
            oi->last_offset = b_last;
            if (st->max_ts > ti->last_timestamp) {
                if (index_push(ti, st->max_ts, st->max_ts_offset - st->base_offset) < 0)
                    goto fail_after_write;
                ti->last_timestamp = st->max_ts;
                ti->last_offset = st->max_ts_offset;
            }
        }
        st->size = file_pos + size;
        if (all_headers || pid >= 0) {
            PyObject *t = capi->header_tuple(d);
            PyObject *pair = t ? Py_BuildValue("(LN)", start + at, t) : NULL;
            if (pair == NULL || PyList_Append(headers, pair) < 0) {
                Py_XDECREF(pair);
                goto fail_after_write;
            }
            Py_DECREF(pair);
        }
        if (epoch >= 0 && epoch > latest) {
            PyObject *pair = Py_BuildValue("(LL)", epoch, base);
            if (pair == NULL || PyList_Append(epochs, pair) < 0) {
                Py_XDECREF(pair);
                goto fail_after_write;
            }
            Py_DECREF(pair);
            latest = epoch;
        }
        at += size;
    }
    result = Py_BuildValue("(LLL)", run, last, latest);
    goto done;
fail_after_write:
    /* only a memory error gets here; the segment then holds what was accounted so far (st->size), and the
     * rest of the write is cut off so that the file and the state agree */
    {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        int cut;
        Py_BEGIN_ALLOW_THREADS
        cut = ftruncate(fd, (off_t)st->size);
        Py_END_ALLOW_THREADS
        (void)cut;
        PyErr_Restore(et, ev, tb);
    }
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef segment_methods[] = {
    {"append_leader_fast", (PyCFunction)(void (*)(void))append_leader_fast, METH_FASTCALL, append_leader_fast_doc},
    {"write_stamped", (PyCFunction)(void (*)(void))write_stamped, METH_FASTCALL, write_stamped_doc},
    {"preallocate", (PyCFunction)(void (*)(void))preallocate_py, METH_FASTCALL, preallocate_doc},
    {"scan_batches", (PyCFunction)(void (*)(void))scan_batches, METH_FASTCALL, scan_batches_doc},
    {"check_follower_batches", (PyCFunction)(void (*)(void))check_follower_batches, METH_FASTCALL,
     check_follower_batches_doc},
    {"append_follower_run", (PyCFunction)(void (*)(void))append_follower_run, METH_FASTCALL,
     append_follower_run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef segment_module = {
    PyModuleDef_HEAD_INIT,
    "tidelog.storage._segment",
    "The storage layer's C: a segment's append state, the append fast path, the stamped write, fallocate and "
    "the recovery scan.",
    -1,
    segment_methods,
};

PyMODINIT_FUNC
PyInit__segment(void)
{
    PyObject *recwalk = PyImport_ImportModule("tidelog.records._recwalk");  /* PyCapsule_Import needs it loaded */
    if (recwalk == NULL)
        return NULL;
    Py_DECREF(recwalk);
    capi = (const tidelog_records_capi *)PyCapsule_Import(TIDELOG_RECORDS_CAPI_NAME, 0);
    if (capi == NULL)
        return NULL;
    if (capi->version != TIDELOG_RECORDS_CAPI_VERSION) {
        PyErr_Format(PyExc_ImportError, "tidelog.records._recwalk has C API version %d, %d expected", capi->version,
                     TIDELOG_RECORDS_CAPI_VERSION);
        return NULL;
    }
    if (PyType_Ready(&IndexState_Type) < 0 || PyType_Ready(&SegmentState_Type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&segment_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&IndexState_Type);
    Py_INCREF(&SegmentState_Type);
    if (PyModule_AddObject(m, "IndexState", (PyObject *)&IndexState_Type) < 0
        || PyModule_AddObject(m, "SegmentState", (PyObject *)&SegmentState_Type) < 0
        || PyModule_AddIntConstant(m, "RELEASE_GIL_BYTES", RELEASE_GIL_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
