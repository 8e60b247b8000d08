/* tidelog.storage._segment, the leader's append fast path: PartitionLog.append_as_leader's common case on the
 * active segment's SegmentState, everything it needs passed in and returned.
 */
#include "_segment.h"

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
"PartitionLog.append_as_leader's common case on the active segment's SegmentState (see _segment_leader.c); None,\n"
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

PyMethodDef tl_segment_leader_methods[] = {
    {"append_leader_fast", (PyCFunction)(void (*)(void))append_leader_fast, METH_FASTCALL, append_leader_fast_doc},
    {NULL, NULL, 0, NULL},
};
