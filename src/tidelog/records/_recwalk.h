/* The one C record cursor of tidelog: varints and the walk over the records of a v2 batch, the C twin of
 * tidelog.records.varint and tidelog.records.recwalk.walk_records (same checks, same order, same fast paths, so
 * that a records area the C walk rejects is one the Python walk rejects with the same error).
 *
 * Header only (static inline, no state): included by tidelog.records._recwalk (the produce-time check),
 * tidelog.storage._cleanwalk (the cleaner's map build and filter) and tidelog.client._columnar (the Spark-side
 * column decoder), so the per-byte work inlines into each caller's loop; see docs/decisions/0064 for why this
 * is a shared header and not a function table in the _recwalk capsule.
 *
 * A record (all varints zig-zag):
 *   length varint | attributes int8 | timestampDelta varlong | offsetDelta varint | keyLength varint | key
 *   | valueLength varint | value | headersCount varint | [hKeyLength varint | hKey | hValueLength varint | hValue]
 * The smallest record body is 6 bytes (attributes, timestampDelta 0, offsetDelta 0, key -1, value -1, 0 headers),
 * 7 with its length: Kafka's DefaultRecord cannot be shorter.
 */
#ifndef TIDELOG_RECWALK_H
#define TIDELOG_RECWALK_H

#include <Python.h>
#include <stdint.h>

#include "_bytes.h"

#define MIN_RECORD_SIZE 7 /* tidelog.records.recwalk.MIN_RECORD_SIZE */
#define MIN_RECORD_BODY 6 /* the smallest declared record length */

enum {
    TL_OK = 0,
    TL_E_COUNT,        /* InvalidRecordError: count too large for the bytes */
    TL_E_LENGTH,       /* record length out of range */
    TL_E_TRUNC,        /* an inline read ran past the end (Python: IndexError) */
    TL_E_VARINT_TRUNC, /* decode_varint/decode_varlong: input ends */
    TL_E_VARINT_LONG,  /* decode_varint/decode_varlong: too many bytes */
    TL_E_NOT_CONSEC,   /* InvalidRecordError: compressed batch, offset delta != index */
    TL_E_KEY,
    TL_E_VALUE,
    TL_E_HCOUNT,
    TL_E_HKEY_NEG,
    TL_E_HKEY,
    TL_E_HVALUE,
    TL_E_MISMATCH,
    TL_E_TRAILING,     /* InvalidRecordError: bytes after the last record */
};

typedef struct {
    int code;
    int varlong;     /* varint errors: 0 = varint, 1 = varlong */
    long long index; /* record index */
    Py_ssize_t pos;  /* position in d */
    long long value; /* length, offset delta, header count, key length */
    long long extra; /* bytes remaining / mismatch */
} tl_walk_error;

/* One record, as tl_record_next found it (positions in d). A length < 0 is null. */
typedef struct {
    Py_ssize_t start;       /* the length varint */
    Py_ssize_t end;         /* one past the record */
    Py_ssize_t ts_pos;      /* the timestampDelta varlong (after the attributes byte) */
    Py_ssize_t ts_end;      /* one past it */
    int64_t tsd;            /* timestampDelta */
    int32_t delta;          /* offsetDelta */
    Py_ssize_t key_pos;
    int32_t key_len;
    Py_ssize_t value_pos;
    int32_t value_len;
    Py_ssize_t headers_pos; /* the first header (after headersCount) */
    int32_t header_count;
} tl_record;

/* ------------------------------------------------------------------------------------------------- varints */

static inline int32_t
tl_zigzag32(uint32_t raw)
{
    return (int32_t)((raw >> 1) ^ (~(raw & 1u) + 1u));
}

static inline int64_t
tl_zigzag64(uint64_t raw)
{
    return (int64_t)((raw >> 1) ^ (~(raw & 1u) + 1u));
}

/* The raw groups of an unsigned varint of at most max_bytes (5: varint, 10: varlong) at d[*ppos:n]; bits past
 * 64 dropped. TL_OK (advances *ppos), TL_E_VARINT_TRUNC or TL_E_VARINT_LONG. */
static inline int
tl_read_uvarint(const uint8_t *d, Py_ssize_t n, Py_ssize_t *ppos, int max_bytes, uint64_t *raw)
{
    Py_ssize_t p = *ppos;
    const Py_ssize_t start = p;
    uint64_t result = 0;
    int shift = 0;
    for (;;) {
        if (p >= n)
            return TL_E_VARINT_TRUNC;
        uint8_t b = d[p++];
        if (shift < 64)
            result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *raw = result;
            *ppos = p;
            return TL_OK;
        }
        shift += 7;
        if (p - start >= max_bytes)
            return TL_E_VARINT_LONG;
    }
}

/* Kafka's writeUnsignedVarint of v into out (room for 10 bytes); returns the bytes written. */
static inline size_t
tl_put_uvarint(uint8_t *out, uint64_t v)
{
    size_t k = 0;
    while (v >= 0x80) {
        out[k++] = (uint8_t)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    out[k++] = (uint8_t)v;
    return k;
}

static inline uint64_t
tl_zigzag_encode(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline int
tl_uvarint_size(uint64_t v)
{
    int s = 1;
    while (v >= 0x80) {
        v >>= 7;
        s++;
    }
    return s;
}

/* ---------------------------------------------------------------------------------------------- the cursor */

#define TL_FAIL(c)                                                                                             \
    do {                                                                                                       \
        e->code = (c);                                                                                         \
        e->index = index;                                                                                      \
        e->pos = pos;                                                                                          \
        return (c);                                                                                            \
    } while (0)

#define TL_VARINT(maxb, out)                                                                                   \
    do {                                                                                                       \
        Py_ssize_t vp_ = pos;                                                                                  \
        int rc_ = tl_read_uvarint(d, n, &vp_, (maxb), (out));                                                  \
        if (rc_) {                                                                                             \
            e->varlong = (maxb) == 10;                                                                         \
            TL_FAIL(rc_);                                                                                      \
        }                                                                                                      \
        pos = vp_;                                                                                             \
    } while (0)

/* A zig-zag int32 with the one- and two-byte cases inline (walk_records' fast paths, same truncation errors). */
#define TL_FAST_VARINT(out)                                                                                    \
    do {                                                                                                       \
        if (pos >= n)                                                                                          \
            TL_FAIL(TL_E_TRUNC);                                                                               \
        uint32_t b_ = d[pos];                                                                                  \
        if (b_ < 0x80) {                                                                                       \
            (out) = tl_zigzag32(b_);                                                                           \
            pos += 1;                                                                                          \
        } else {                                                                                               \
            if (pos + 1 >= n)                                                                                  \
                TL_FAIL(TL_E_TRUNC);                                                                           \
            if (d[pos + 1] < 0x80) {                                                                           \
                (out) = tl_zigzag32((b_ & 0x7F) | ((uint32_t)d[pos + 1] << 7));                                \
                pos += 2;                                                                                      \
            } else {                                                                                           \
                uint64_t raw_;                                                                                 \
                TL_VARINT(5, &raw_);                                                                           \
                (out) = tl_zigzag32((uint32_t)raw_);                                                           \
            }                                                                                                  \
        }                                                                                                      \
    } while (0)

/* Key or value: a zig-zag length (any negative is null) and its bytes, skipped; *pos_out is where the bytes start.
 * Even one- and two-byte lengths are skipped straight from the raw varint (measured: a third faster than
 * decoding first). */
#define TL_BYTES_FIELD(len_out, pos_out)                                                                       \
    do {                                                                                                       \
        if (pos >= n)                                                                                          \
            TL_FAIL(TL_E_TRUNC);                                                                               \
        uint32_t f_ = d[pos];                                                                                  \
        if (f_ < 0x80) {                                                                                       \
            pos += 1;                                                                                          \
        } else {                                                                                               \
            if (pos + 1 >= n)                                                                                  \
                TL_FAIL(TL_E_TRUNC);                                                                           \
            if (d[pos + 1] < 0x80) {                                                                           \
                f_ = (f_ & 0x7F) | ((uint32_t)d[pos + 1] << 7);                                                \
                pos += 2;                                                                                      \
            } else {                                                                                           \
                uint64_t rawf_;                                                                                \
                TL_VARINT(5, &rawf_);                                                                          \
                f_ = (uint32_t)rawf_;                                                                          \
            }                                                                                                  \
        }                                                                                                      \
        (len_out) = tl_zigzag32(f_);                                                                           \
        (pos_out) = pos;                                                                                       \
        if (!(f_ & 1))                                                                                         \
            pos += f_ >> 1;                                                                                    \
    } while (0)

/* Before the first record: can ``count`` records fit n - pos bytes? */
static inline int
tl_check_count(Py_ssize_t pos, Py_ssize_t n, long long count, tl_walk_error *e)
{
    if (count > 0 && count > (n - pos) / MIN_RECORD_SIZE) {
        e->code = TL_E_COUNT;
        e->index = 0;
        e->pos = pos;
        e->value = count;
        e->extra = n - pos;
        return TL_E_COUNT;
    }
    return TL_OK;
}

/* After the last record: the records must tile d[..n] exactly. */
static inline int
tl_check_end(Py_ssize_t pos, Py_ssize_t n, long long count, tl_walk_error *e)
{
    if (pos != n) {
        e->code = TL_E_TRAILING;
        e->index = count;
        e->pos = pos;
        e->value = count;
        e->extra = n - pos;
        return TL_E_TRAILING;
    }
    return TL_OK;
}

/* Record ``index`` at d[*ppos:n]: every field read and checked (walk_records' checks), *ppos moved to its end
 * and, when r is not NULL, *r filled. ``consecutive``: the offset delta must be ``index``. TL_OK or a TL_E_* code
 * with *e filled. The fields are kept in locals and stored once at the end, so a caller passing NULL (the
 * produce-time check) pays for no stores and the compiler drops the values nobody reads. */
/* always_inline: GCC declines to inline a function this large by itself, and the produce-time check then pays
 * for the calls and for the fields it never reads (measured: 1.13 -> 0.94 us per 16 KiB batch of 100 B records). */
static inline __attribute__((always_inline)) int
tl_record_next(const uint8_t *d, Py_ssize_t n, Py_ssize_t *ppos, long long index, int consecutive, tl_record *r,
               tl_walk_error *e)
{
    Py_ssize_t pos = *ppos;
    const Py_ssize_t start = pos;
    uint64_t raw;
    int32_t length, delta, key_len, value_len, hcount = 0;
    int64_t tsd;
    TL_FAST_VARINT(length);
    const Py_ssize_t end = pos + length;
    /* Where the next record starts: ``end``, known from the length varint alone. At the bottom pos == end is
     * checked, and from then on the compiler may carry either; GCC 12 carried pos, which depends on a chain of
     * loads through every field of the record (key length, value length, header count), so the records were
     * walked one after another instead of overlapping: 0.95 instead of 0.64 us per 16 KiB batch of 100 B
     * records in the produce-time check (bench/README.md, "The record check's lost speed"). The empty asm makes
     * ``next`` a value the compiler cannot prove equal to pos, so the loop carries the short chain. */
    Py_ssize_t next = end;
    __asm__("" : "+r"(next));
    if (length < MIN_RECORD_BODY || end > n) {
        e->value = length;
        e->extra = n - pos;
        TL_FAIL(TL_E_LENGTH);
    }
    /* attributes (unused), then timestampDelta; length >= 6 and end <= n, so pos + 2 < n */
    const Py_ssize_t ts_pos = pos + 1;
    uint32_t b = d[pos + 1];
    if (b < 0x80) {
        tsd = tl_zigzag64(b);
        pos += 2;
    } else if (d[pos + 2] < 0x80) {
        tsd = tl_zigzag64((b & 0x7F) | ((uint64_t)d[pos + 2] << 7));
        pos += 3;
    } else {
        pos += 1;
        TL_VARINT(10, &raw);
        tsd = tl_zigzag64(raw);
    }
    const Py_ssize_t ts_end = pos;
    if (__builtin_expect(consecutive, 0) || r != NULL) {
        TL_FAST_VARINT(delta);
        if (consecutive && delta != index) {
            e->value = delta;
            TL_FAIL(TL_E_NOT_CONSEC);
        }
    } else { /* the check alone: only the extent of offsetDelta matters (same reads, same errors) */
        delta = 0;
        if (pos >= n)
            TL_FAIL(TL_E_TRUNC);
        if (d[pos] < 0x80) {
            pos += 1;
        } else {
            if (pos + 1 >= n)
                TL_FAIL(TL_E_TRUNC);
            if (d[pos + 1] < 0x80)
                pos += 2;
            else
                TL_VARINT(5, &raw);
        }
    }
    /* key and value: any negative length is null */
    Py_ssize_t key_pos;
    TL_BYTES_FIELD(key_len, key_pos);
    if (pos > end)
        TL_FAIL(TL_E_KEY);
    Py_ssize_t value_pos;
    TL_BYTES_FIELD(value_len, value_pos);
    if (pos > end)
        TL_FAIL(TL_E_VALUE);
    /* headers */
    if (pos >= n)
        TL_FAIL(TL_E_TRUNC);
    b = d[pos];
    if (b == 0) {
        pos += 1;
    } else {
        if (b < 0x80) {
            hcount = tl_zigzag32(b);
            pos += 1;
        } else {
            TL_VARINT(5, &raw);
            hcount = tl_zigzag32((uint32_t)raw);
        }
        if (hcount < 0 || 2 * (long long)hcount > (long long)(end - pos)) {
            e->value = hcount;
            TL_FAIL(TL_E_HCOUNT);
        }
    }
    const Py_ssize_t headers_pos = pos;
    for (int32_t h = 0; h < hcount; h++) {
        TL_VARINT(5, &raw);
        int32_t klen = tl_zigzag32((uint32_t)raw);
        if (klen < 0) {
            e->value = klen;
            TL_FAIL(TL_E_HKEY_NEG);
        }
        pos += klen;
        if (pos > end)
            TL_FAIL(TL_E_HKEY);
        TL_VARINT(5, &raw);
        int32_t vlen = tl_zigzag32((uint32_t)raw);
        if (vlen > 0) {
            pos += vlen;
            if (pos > end)
                TL_FAIL(TL_E_HVALUE);
        }
    }
    if (pos != end) {
        e->value = length;
        e->extra = (long long)length + (long long)(pos - end);
        TL_FAIL(TL_E_MISMATCH);
    }
    if (r != NULL) {
        r->start = start;
        r->end = end;
        r->ts_pos = ts_pos;
        r->ts_end = ts_end;
        r->tsd = tsd;
        r->delta = delta;
        r->key_pos = key_pos;
        r->key_len = key_len;
        r->value_pos = value_pos;
        r->value_len = value_len;
        r->headers_pos = headers_pos;
        r->header_count = hcount;
    }
    *ppos = next; /* == end == pos, but through ``next`` (see above) */
    return TL_OK;
}

#undef TL_FAIL
#undef TL_VARINT
#undef TL_FAST_VARINT
#undef TL_BYTES_FIELD

#endif
