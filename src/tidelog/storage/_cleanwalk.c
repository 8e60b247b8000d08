/* tidelog.storage._cleanwalk: the log cleaner's per-batch record loops in C (one call per batch).
 *
 * md5(data) -> bytes: the 16-byte MD5 digest (RFC 1321), written here from the RFC; the offset map's key digest.
 *
 * put_records(digests, offsets, slots, max_entries, size, latest, data, p, n, count, base, min_delta)
 *     -> None | (size, latest, keys, probes, full)
 *   build_offset_map's per-batch work (cleaner._keys_and_deltas + OffsetMap.put_many): walks the ``count``
 *   records of the uncompressed records region data[p:n], and puts every non-null key whose offset delta is
 *   >= ``min_delta`` into the map at offset base + delta, in order. ``digests`` (bytearray, 16 bytes per slot)
 *   and ``offsets`` (array('q'), one per slot) are the OffsetMap's own buffers, changed in place. Returns the
 *   map's new size and latest offset, the keys offered and the probes made; ``full`` is 1 when a new key found
 *   the map at ``max_entries`` (the keys before it are in the map: the caller raises OverflowError).
 *
 * filter_records(digests, offsets, slots, data, p, n, count, base, expired, horizon, new_horizon, lat_time,
 *                base_timestamp) -> None | (kept, tombstones, probes, payload, new_base, max_ts)
 *   _Filter.apply's per-batch work (cleaner._scan_records + OffsetMap.get_many + the keep/drop loop +
 *   _retained_records): looks every record's key up (a null key looks up b"", as get_many does), keeps a record
 *   when its key is not null, no later offset of its key is in the map, and it is not a tombstone of an
 *   ``expired`` delete horizon. ``horizon`` is the batch's delete horizon or None, ``new_horizon`` the one a
 *   first cleaning that keeps a tombstone writes, ``lat_time`` the batch's maxTimestamp for a LogAppendTime
 *   batch or None, ``base_timestamp`` the batch's. ``payload`` is the kept records (a record whose timestampDelta
 *   relative to ``new_base`` is unchanged copied verbatim, else its length and timestampDelta re-encoded), ready
 *   for _rebuild's header (and codec); None when every record is kept and no horizon is due, or when none is
 *   kept. ``new_base`` is the rebuilt batch's baseTimestamp, ``max_ts`` the max timestamp of the kept records
 *   (``lat_time`` for a LogAppendTime batch).
 *
 * Both return None, with nothing changed, whenever anything is out of the ordinary (a framing error, a varint
 * longer than Kafka's, an int64 overflow, a count that does not match the bytes): the caller then runs the
 * pure-Python reference for that batch, which raises the exact exception and message (or handles the case).
 * The walk is stricter than the Python one, never looser, so a batch it accepts is one Python accepts the
 * same way. The map's home slot is the digest's first 8 bytes as a little-endian unsigned int modulo slots,
 * linear probing, an offset of -1 marks an empty slot (tidelog.storage.offset_map). The GIL is released while
 * working on a records region of RELEASE_GIL_BYTES or more.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../records/_recwalk.h"

#define DIGEST_SIZE 16
#define RELEASE_GIL_BYTES (64 * 1024)
#define NO_TIMESTAMP (-1LL)
#define EMPTY_SLOT (-1LL)

/* ============================================================================================= MD5 (RFC 1321) */

static uint32_t md5_t[64]; /* T[i] = floor(2^32 * |sin(i + 1)|), section 3.4 */
static uint8_t empty_digest[DIGEST_SIZE];

static inline uint32_t
rotl32(uint32_t x, int s)
{
    return (x << s) | (x >> (32 - s));
}

static inline uint32_t
le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

#define MD5_F(x, y, z) (((x) & (y)) | (~(x) & (z)))
#define MD5_G(x, y, z) (((x) & (z)) | ((y) & ~(z)))
#define MD5_H(x, y, z) ((x) ^ (y) ^ (z))
#define MD5_I(x, y, z) ((y) ^ ((x) | ~(z)))
#define MD5_STEP(f, a, b, c, d, k, s, i) (a) = (b) + rotl32((a) + f((b), (c), (d)) + x[k] + md5_t[i], (s))

/* One 64-byte block into state[4] (section 3.4, the four rounds of 16 operations). */
static void
md5_block(uint32_t state[4], const uint8_t *block)
{
    uint32_t x[16];
    for (int j = 0; j < 16; j++)
        x[j] = le32(block + 4 * j);
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];

    MD5_STEP(MD5_F, a, b, c, d, 0, 7, 0);
    MD5_STEP(MD5_F, d, a, b, c, 1, 12, 1);
    MD5_STEP(MD5_F, c, d, a, b, 2, 17, 2);
    MD5_STEP(MD5_F, b, c, d, a, 3, 22, 3);
    MD5_STEP(MD5_F, a, b, c, d, 4, 7, 4);
    MD5_STEP(MD5_F, d, a, b, c, 5, 12, 5);
    MD5_STEP(MD5_F, c, d, a, b, 6, 17, 6);
    MD5_STEP(MD5_F, b, c, d, a, 7, 22, 7);
    MD5_STEP(MD5_F, a, b, c, d, 8, 7, 8);
    MD5_STEP(MD5_F, d, a, b, c, 9, 12, 9);
    MD5_STEP(MD5_F, c, d, a, b, 10, 17, 10);
    MD5_STEP(MD5_F, b, c, d, a, 11, 22, 11);
    MD5_STEP(MD5_F, a, b, c, d, 12, 7, 12);
    MD5_STEP(MD5_F, d, a, b, c, 13, 12, 13);
    MD5_STEP(MD5_F, c, d, a, b, 14, 17, 14);
    MD5_STEP(MD5_F, b, c, d, a, 15, 22, 15);

    MD5_STEP(MD5_G, a, b, c, d, 1, 5, 16);
    MD5_STEP(MD5_G, d, a, b, c, 6, 9, 17);
    MD5_STEP(MD5_G, c, d, a, b, 11, 14, 18);
    MD5_STEP(MD5_G, b, c, d, a, 0, 20, 19);
    MD5_STEP(MD5_G, a, b, c, d, 5, 5, 20);
    MD5_STEP(MD5_G, d, a, b, c, 10, 9, 21);
    MD5_STEP(MD5_G, c, d, a, b, 15, 14, 22);
    MD5_STEP(MD5_G, b, c, d, a, 4, 20, 23);
    MD5_STEP(MD5_G, a, b, c, d, 9, 5, 24);
    MD5_STEP(MD5_G, d, a, b, c, 14, 9, 25);
    MD5_STEP(MD5_G, c, d, a, b, 3, 14, 26);
    MD5_STEP(MD5_G, b, c, d, a, 8, 20, 27);
    MD5_STEP(MD5_G, a, b, c, d, 13, 5, 28);
    MD5_STEP(MD5_G, d, a, b, c, 2, 9, 29);
    MD5_STEP(MD5_G, c, d, a, b, 7, 14, 30);
    MD5_STEP(MD5_G, b, c, d, a, 12, 20, 31);

    MD5_STEP(MD5_H, a, b, c, d, 5, 4, 32);
    MD5_STEP(MD5_H, d, a, b, c, 8, 11, 33);
    MD5_STEP(MD5_H, c, d, a, b, 11, 16, 34);
    MD5_STEP(MD5_H, b, c, d, a, 14, 23, 35);
    MD5_STEP(MD5_H, a, b, c, d, 1, 4, 36);
    MD5_STEP(MD5_H, d, a, b, c, 4, 11, 37);
    MD5_STEP(MD5_H, c, d, a, b, 7, 16, 38);
    MD5_STEP(MD5_H, b, c, d, a, 10, 23, 39);
    MD5_STEP(MD5_H, a, b, c, d, 13, 4, 40);
    MD5_STEP(MD5_H, d, a, b, c, 0, 11, 41);
    MD5_STEP(MD5_H, c, d, a, b, 3, 16, 42);
    MD5_STEP(MD5_H, b, c, d, a, 6, 23, 43);
    MD5_STEP(MD5_H, a, b, c, d, 9, 4, 44);
    MD5_STEP(MD5_H, d, a, b, c, 12, 11, 45);
    MD5_STEP(MD5_H, c, d, a, b, 15, 16, 46);
    MD5_STEP(MD5_H, b, c, d, a, 2, 23, 47);

    MD5_STEP(MD5_I, a, b, c, d, 0, 6, 48);
    MD5_STEP(MD5_I, d, a, b, c, 7, 10, 49);
    MD5_STEP(MD5_I, c, d, a, b, 14, 15, 50);
    MD5_STEP(MD5_I, b, c, d, a, 5, 21, 51);
    MD5_STEP(MD5_I, a, b, c, d, 12, 6, 52);
    MD5_STEP(MD5_I, d, a, b, c, 3, 10, 53);
    MD5_STEP(MD5_I, c, d, a, b, 10, 15, 54);
    MD5_STEP(MD5_I, b, c, d, a, 1, 21, 55);
    MD5_STEP(MD5_I, a, b, c, d, 8, 6, 56);
    MD5_STEP(MD5_I, d, a, b, c, 15, 10, 57);
    MD5_STEP(MD5_I, c, d, a, b, 6, 15, 58);
    MD5_STEP(MD5_I, b, c, d, a, 13, 21, 59);
    MD5_STEP(MD5_I, a, b, c, d, 4, 6, 60);
    MD5_STEP(MD5_I, d, a, b, c, 11, 10, 61);
    MD5_STEP(MD5_I, c, d, a, b, 2, 15, 62);
    MD5_STEP(MD5_I, b, c, d, a, 9, 21, 63);

    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
}

/* The digest of msg[0:len] into out[16] (padding and length, sections 3.1-3.2; output low byte first, 3.5). */
static void
md5(const uint8_t *msg, size_t len, uint8_t *out)
{
    uint32_t state[4] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};
    size_t whole = len & ~(size_t)63;
    for (size_t off = 0; off < whole; off += 64)
        md5_block(state, msg + off);
    uint8_t tail[128];
    size_t rest = len - whole;
    if (rest)
        memcpy(tail, msg + whole, rest);
    tail[rest] = 0x80;
    size_t tail_len = rest + 1 + 8 <= 64 ? 64 : 128;
    memset(tail + rest + 1, 0, tail_len - rest - 1);
    uint64_t bits = (uint64_t)len << 3;
    for (int j = 0; j < 8; j++)
        tail[tail_len - 8 + j] = (uint8_t)(bits >> (8 * j));
    md5_block(state, tail);
    if (tail_len == 128)
        md5_block(state, tail + 64);
    for (int j = 0; j < 4; j++) {
        out[4 * j] = (uint8_t)state[j];
        out[4 * j + 1] = (uint8_t)(state[j] >> 8);
        out[4 * j + 2] = (uint8_t)(state[j] >> 16);
        out[4 * j + 3] = (uint8_t)(state[j] >> 24);
    }
}

static void
md5_init(void)
{
    for (int i = 0; i < 64; i++)
        md5_t[i] = (uint32_t)floor(fabs(sin((double)(i + 1))) * 4294967296.0);
    md5(NULL, 0, empty_digest);
}

/* ============================================================================================= the map */

typedef struct {
    uint8_t *digests;
    int64_t *offsets;
    uint64_t slots;
} map_t;

static inline uint64_t
home_slot(const uint8_t *digest, uint64_t slots)
{
    uint64_t v = 0;
    for (int j = 7; j >= 0; j--)
        v = (v << 8) | digest[j];
    return v % slots;
}

/* Start loading a digest's home slot (its offset and digest) into the cache. A batch's lookups land on random
 * slots of a map far larger than the cache, so each would wait for memory in turn; the walkers first compute
 * every digest of the batch and announce its slot here, then probe, so the loads overlap. No effect on results. */
static inline void
map_prefetch(const map_t *m, const uint8_t *digest)
{
    uint64_t i = home_slot(digest, m->slots);
    __builtin_prefetch(m->offsets + i, 0, 1);
    __builtin_prefetch(m->digests + i * DIGEST_SIZE, 0, 1);
}

/* The slot holding ``digest`` or the empty slot where it would go; adds the probes to *probes. */
static inline uint64_t
map_find(const map_t *m, const uint8_t *digest, long long *probes)
{
    uint64_t i = home_slot(digest, m->slots);
    while (m->offsets[i] != EMPTY_SLOT && memcmp(m->digests + i * DIGEST_SIZE, digest, DIGEST_SIZE) != 0) {
        ++*probes;
        if (++i == m->slots)
            i = 0;
    }
    return i;
}

/* ============================================================================================= the record walk */

typedef tl_record rec_t;

/* The ``count`` records of d[p:n] into recs (exactly count of them, ending at n), or -1: the one record cursor
 * (records/_recwalk.h), so a records area this accepts is one the Python walk accepts. */
static int
walk_records(const uint8_t *d, Py_ssize_t p, Py_ssize_t n, long long count, rec_t *recs)
{
    tl_walk_error e;
    if (tl_check_count(p, n, count, &e))
        return -1;
    for (long long index = 0; index < count; index++) {
        if (tl_record_next(d, n, &p, index, 0, &recs[index], &e))
            return -1;
    }
    return tl_check_end(p, n, count, &e) ? -1 : 0;
}

/* ============================================================================================= argument helpers */

/* An int64 argument; 0 ok, 1 out of range (the caller falls back), -1 error set. */
static int
arg_i64(PyObject *o, int64_t *out)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow)
        return 1;
    *out = v;
    return 0;
}

static int
get_map(PyObject *digests, PyObject *offsets, PyObject *slots_obj, int writable, Py_buffer *dv, Py_buffer *ov,
        map_t *m)
{
    Py_ssize_t slots = PyLong_AsSsize_t(slots_obj);
    if (slots == -1 && PyErr_Occurred())
        return -1;
    if (slots < 1) {
        PyErr_SetString(PyExc_ValueError, "slots must be >= 1");
        return -1;
    }
    int flags = writable ? PyBUF_WRITABLE : PyBUF_SIMPLE;
    if (PyObject_GetBuffer(digests, dv, flags) < 0)
        return -1;
    if (PyObject_GetBuffer(offsets, ov, flags | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(dv);
        return -1;
    }
    if (dv->len != slots * DIGEST_SIZE || ov->len != slots * 8 || ov->itemsize != 8
        || (ov->format != NULL && strcmp(ov->format, "q") != 0)) {
        PyErr_SetString(PyExc_ValueError, "digests/offsets do not match slots (16 bytes and one 'q' per slot)");
        PyBuffer_Release(dv);
        PyBuffer_Release(ov);
        return -1;
    }
    m->digests = (uint8_t *)dv->buf;
    m->offsets = (int64_t *)ov->buf;
    m->slots = (uint64_t)slots;
    return 0;
}

/* data, p, n, count: the records region; 0 ok, 1 fall back, -1 error set. */
static int
get_region(PyObject *data, PyObject *p_obj, PyObject *n_obj, PyObject *count_obj, Py_buffer *view, Py_ssize_t *p,
           Py_ssize_t *n, long long *count)
{
    *p = PyLong_AsSsize_t(p_obj);
    if (*p == -1 && PyErr_Occurred())
        return -1;
    *n = PyLong_AsSsize_t(n_obj);
    if (*n == -1 && PyErr_Occurred())
        return -1;
    *count = PyLong_AsLongLong(count_obj);
    if (*count == -1 && PyErr_Occurred())
        return -1;
    if (PyObject_GetBuffer(data, view, PyBUF_SIMPLE) < 0)
        return -1;
    /* each record takes at least MIN_RECORD_SIZE bytes; anything else is an error the Python walk reports */
    if (*p < 0 || *n < *p || *n > view->len || *count < 0 || *count > (*n - *p) / MIN_RECORD_SIZE) {
        PyBuffer_Release(view);
        return 1;
    }
    return 0;
}

/* ============================================================================================= put_records */

PyDoc_STRVAR(md5_doc, "md5(data) -> bytes: the 16-byte MD5 digest of a buffer (RFC 1321).");

static PyObject *
md5_py(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint8_t out[DIGEST_SIZE];
    md5((const uint8_t *)view.buf, (size_t)view.len, out);
    PyBuffer_Release(&view);
    return PyBytes_FromStringAndSize((const char *)out, DIGEST_SIZE);
}

PyDoc_STRVAR(put_records_doc,
             "put_records(digests, offsets, slots, max_entries, size, latest, data, p, n, count, base, min_delta)"
             " -> None | (size, latest, keys, probes, full): the offset-map build of one batch's records "
             "(see the module docstring).");

typedef struct {
    uint8_t digest[DIGEST_SIZE];
    int64_t offset;
} keyed_t;

static PyObject *
put_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "put_records takes 12 arguments");
        return NULL;
    }
    Py_buffer dv, ov, view;
    map_t m;
    int64_t max_entries, size, latest, base, min_delta;
    int rc;
    if ((rc = arg_i64(args[3], &max_entries)) || (rc = arg_i64(args[4], &size)) || (rc = arg_i64(args[5], &latest))
        || (rc = arg_i64(args[10], &base)) || (rc = arg_i64(args[11], &min_delta))) {
        if (rc < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    Py_ssize_t p, n;
    long long count;
    rc = get_region(args[6], args[7], args[8], args[9], &view, &p, &n, &count);
    if (rc < 0)
        return NULL;
    if (rc > 0)
        Py_RETURN_NONE;
    if (get_map(args[0], args[1], args[2], 1, &dv, &ov, &m) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    rec_t *recs = NULL;
    keyed_t *keyed = NULL;
    if (count > 0) {
        recs = PyMem_RawMalloc((size_t)count * sizeof(rec_t));
        keyed = PyMem_RawMalloc((size_t)count * sizeof(keyed_t));
        if (recs == NULL || keyed == NULL) {
            PyMem_RawFree(recs);
            PyMem_RawFree(keyed);
            PyBuffer_Release(&view);
            PyBuffer_Release(&dv);
            PyBuffer_Release(&ov);
            return PyErr_NoMemory();
        }
    }
    const uint8_t *d = (const uint8_t *)view.buf;
    int ok = 0, full = 0;
    long long nkeys = 0, probes = 0;
    PyThreadState *ts = NULL;
    if (n - p >= RELEASE_GIL_BYTES)
        ts = PyEval_SaveThread();
    if (walk_records(d, p, n, count, recs) == 0) {
        ok = 1;
        /* phase 1, nothing changed yet: the digests and offsets of the keys to put */
        for (long long i = 0; i < count && ok; i++) {
            const rec_t *r = &recs[i];
            if (r->key_len < 0 || r->delta < min_delta)
                continue;
            if (__builtin_add_overflow(base, (int64_t)r->delta, &keyed[nkeys].offset))
                ok = 0;
            else {
                md5(d + r->key_pos, (size_t)r->key_len, keyed[nkeys].digest);
                map_prefetch(&m, keyed[nkeys++].digest);
            }
        }
    }
    if (ok) {
        /* phase 2: OffsetMap.put_many */
        for (long long i = 0; i < nkeys; i++) {
            const keyed_t *k = &keyed[i];
            uint64_t s = home_slot(k->digest, m.slots);
            for (;;) {
                if (m.offsets[s] == EMPTY_SLOT) {
                    if (size >= max_entries) {
                        full = 1;
                        break;
                    }
                    memcpy(m.digests + s * DIGEST_SIZE, k->digest, DIGEST_SIZE);
                    size++;
                    break;
                }
                if (memcmp(m.digests + s * DIGEST_SIZE, k->digest, DIGEST_SIZE) == 0)
                    break;
                probes++;
                if (++s == m.slots)
                    s = 0;
            }
            if (full)
                break;
            m.offsets[s] = k->offset;
            if (k->offset > latest)
                latest = k->offset;
        }
    }
    if (ts != NULL)
        PyEval_RestoreThread(ts);
    PyMem_RawFree(recs);
    PyMem_RawFree(keyed);
    PyBuffer_Release(&view);
    PyBuffer_Release(&dv);
    PyBuffer_Release(&ov);
    if (!ok)
        Py_RETURN_NONE;
    return Py_BuildValue("(LLLLi)", (long long)size, (long long)latest, nkeys, probes, full);
}

/* ============================================================================================= filter_records */

PyDoc_STRVAR(filter_records_doc,
             "filter_records(digests, offsets, slots, data, p, n, count, base, expired, horizon, new_horizon, "
             "lat_time, base_timestamp) -> None | (kept, tombstones, probes, payload, new_base, max_ts): the "
             "cleaner's filter of one batch's records (see the module docstring).");

static PyObject *
filter_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "filter_records takes 13 arguments");
        return NULL;
    }
    int64_t base, horizon = 0, new_horizon, lat_time = 0, old_base;
    int has_horizon = args[9] != Py_None, has_lat = args[11] != Py_None;
    int expired = PyObject_IsTrue(args[8]);
    if (expired < 0)
        return NULL;
    int rc;
    if ((rc = arg_i64(args[7], &base)) || (has_horizon && (rc = arg_i64(args[9], &horizon)))
        || (rc = arg_i64(args[10], &new_horizon)) || (has_lat && (rc = arg_i64(args[11], &lat_time)))
        || (rc = arg_i64(args[12], &old_base))) {
        if (rc < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    Py_buffer dv, ov, view;
    map_t m;
    Py_ssize_t p, n;
    long long count;
    rc = get_region(args[3], args[4], args[5], args[6], &view, &p, &n, &count);
    if (rc < 0)
        return NULL;
    if (rc > 0)
        Py_RETURN_NONE;
    if (get_map(args[0], args[1], args[2], 0, &dv, &ov, &m) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    rec_t *recs = NULL;
    uint8_t *out = NULL, *digests = NULL;
    /* a re-encoded record grows by at most 4 (length) + 9 (timestampDelta) bytes */
    size_t out_cap = (size_t)(n - p) + 16 * (size_t)count;
    if (count > 0) {
        recs = PyMem_RawMalloc((size_t)count * sizeof(rec_t));
        out = PyMem_RawMalloc(out_cap);
        digests = PyMem_RawMalloc((size_t)count * DIGEST_SIZE);
        if (recs == NULL || out == NULL || digests == NULL) {
            PyMem_RawFree(recs);
            PyMem_RawFree(out);
            PyMem_RawFree(digests);
            PyBuffer_Release(&view);
            PyBuffer_Release(&dv);
            PyBuffer_Release(&ov);
            return PyErr_NoMemory();
        }
    }
    const uint8_t *d = (const uint8_t *)view.buf;
    int ok = 0, tombstones = 0, rebuilt = 0;
    long long kept = 0, probes = 0;
    int64_t new_base = 0, max_ts = NO_TIMESTAMP;
    size_t out_len = 0;
    PyThreadState *ts = NULL;
    if (n - p >= RELEASE_GIL_BYTES)
        ts = PyEval_SaveThread();
    if (walk_records(d, p, n, count, recs) == 0) {
        ok = 1;
        /* the digests first (and their slots prefetched), then the lookups */
        for (long long i = 0; i < count; i++) {
            if (recs[i].key_len >= 0) {
                md5(d + recs[i].key_pos, (size_t)recs[i].key_len, digests + i * DIGEST_SIZE);
                map_prefetch(&m, digests + i * DIGEST_SIZE);
            }
        }
        /* _Filter.apply's loop; the kept records move to recs[0:kept], in order */
        for (long long i = 0; i < count; i++) {
            const rec_t *r = &recs[i];
            /* get_many looks a null key up as b"" */
            const uint8_t *dg = r->key_len >= 0 ? digests + i * DIGEST_SIZE : empty_digest;
            int64_t found = m.offsets[map_find(&m, dg, &probes)];
            if (r->key_len < 0) /* a compacted log has no use for a record without a key */
                continue;
            if (found >= 0) {
                int64_t offset;
                if (__builtin_add_overflow(base, (int64_t)r->delta, &offset)) {
                    ok = 0;
                    break;
                }
                if (offset < found)
                    continue;
            }
            if (r->value_len < 0) {
                if (expired)
                    continue;
                tombstones = 1;
            }
            if (kept != i)
                recs[kept] = *r;
            kept++;
        }
    }
    int need_horizon = !has_horizon && tombstones;
    if (ok && kept > 0 && (kept < count || need_horizon)) {
        /* _rebuild's baseTimestamp, then _retained_records */
        rebuilt = 1;
        if (need_horizon)
            new_base = new_horizon;
        else if (has_horizon)
            new_base = horizon;
        else if (has_lat)
            new_base = lat_time;
        else if (__builtin_add_overflow(old_base, recs[0].tsd, &new_base))
            ok = 0;
        for (long long i = 0; i < kept && ok; i++) {
            const rec_t *r = &recs[i];
            int64_t t = lat_time, new_tsd;
            if ((!has_lat && __builtin_add_overflow(old_base, r->tsd, &t))
                || __builtin_sub_overflow(t, new_base, &new_tsd)) {
                ok = 0;
                break;
            }
            if (t > max_ts)
                max_ts = t;
            if (new_tsd == r->tsd) {
                memcpy(out + out_len, d + r->start, (size_t)(r->end - r->start));
                out_len += (size_t)(r->end - r->start);
            } else {
                uint8_t tsd_bytes[10];
                size_t tsd_len = tl_put_uvarint(tsd_bytes, tl_zigzag_encode(new_tsd));
                size_t rest = (size_t)(r->end - r->ts_end);
                out_len += tl_put_uvarint(out + out_len, (uint64_t)(1 + tsd_len + rest) << 1);
                out[out_len++] = d[r->ts_pos - 1]; /* attributes */
                memcpy(out + out_len, tsd_bytes, tsd_len);
                out_len += tsd_len;
                memcpy(out + out_len, d + r->ts_end, rest);
                out_len += rest;
            }
        }
        if (has_lat)
            max_ts = lat_time;
    }
    if (ts != NULL)
        PyEval_RestoreThread(ts);
    PyObject *result = NULL;
    if (ok) {
        PyObject *payload = Py_None;
        if (rebuilt)
            payload = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)out_len);
        else
            Py_INCREF(Py_None);
        if (payload != NULL) {  /* "N": the tuple takes the reference */
            result = Py_BuildValue("(LiLNLL)", kept, tombstones, probes, payload, (long long)new_base,
                                   (long long)max_ts);
        }
    } else {
        result = Py_None;
        Py_INCREF(Py_None);
    }
    PyMem_RawFree(recs);
    PyMem_RawFree(out);
    PyMem_RawFree(digests);
    PyBuffer_Release(&view);
    PyBuffer_Release(&dv);
    PyBuffer_Release(&ov);
    return result;
}

static PyMethodDef cleanwalk_methods[] = {
    {"md5", (PyCFunction)md5_py, METH_O, md5_doc},
    {"put_records", (PyCFunction)(void (*)(void))put_records, METH_FASTCALL, put_records_doc},
    {"filter_records", (PyCFunction)(void (*)(void))filter_records, METH_FASTCALL, filter_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef cleanwalk_module = {
    PyModuleDef_HEAD_INIT,
    "tidelog.storage._cleanwalk",
    "The log cleaner's per-batch record loops in C (offset-map build and batch filter).",
    -1,
    cleanwalk_methods,
};

PyMODINIT_FUNC
PyInit__cleanwalk(void)
{
    md5_init();
    PyObject *m = PyModule_Create(&cleanwalk_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "RELEASE_GIL_BYTES", RELEASE_GIL_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
