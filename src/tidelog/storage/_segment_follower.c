/* tidelog.storage._segment, the follower's append: the checks of a fetched buffer of batches and the runs of
 * them written as they are, with the segment's bookkeeping (issue 30).
 */
#include "_segment.h"

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

PyMethodDef tl_segment_follower_methods[] = {
    {"check_follower_batches", (PyCFunction)(void (*)(void))check_follower_batches, METH_FASTCALL,
     check_follower_batches_doc},
    {"append_follower_run", (PyCFunction)(void (*)(void))append_follower_run, METH_FASTCALL,
     append_follower_run_doc},
    {NULL, NULL, 0, NULL},
};
