/* tidelog.storage._segment, the recovery scan: LogSegment.recover's per-batch loop over one buffer of a .log
 * (the checks of every batch, the index entries of the index.interval.bytes rule, the header tuples asked for).
 */
#include "_segment.h"

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

PyMethodDef tl_segment_scan_methods[] = {
    {"scan_batches", (PyCFunction)(void (*)(void))scan_batches, METH_FASTCALL, scan_batches_doc},
    {NULL, NULL, 0, NULL},
};
