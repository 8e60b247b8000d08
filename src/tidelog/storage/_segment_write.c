/* tidelog.storage._segment, the stamped write: one v2 batch written with its baseOffset and partitionLeaderEpoch
 * replaced (a 16-byte head on the stack and the caller's buffer, one writev), checked after the write while the
 * bytes are cached; and fallocate(KEEP_SIZE), the disk block reservation of a segment's .log.
 */
#include "_segment.h"

/* write_stamped's work (GIL held on entry, released around each system call and a large CRC): the batch d[0:n]
 * written to fd with baseOffset and partitionLeaderEpoch replaced, then the checks of ``check`` (see
 * write_stamped). A batch shorter than a batch header is not written when a check is asked for. */
Py_ssize_t
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

PyMethodDef tl_segment_write_methods[] = {
    {"write_stamped", (PyCFunction)(void (*)(void))write_stamped, METH_FASTCALL, write_stamped_doc},
    {"preallocate", (PyCFunction)(void (*)(void))preallocate_py, METH_FASTCALL, preallocate_doc},
    {NULL, NULL, 0, NULL},
};
