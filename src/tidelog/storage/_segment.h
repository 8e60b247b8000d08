/* The storage extension's internal header (tidelog.storage._segment is compiled from several .c files, one
 * concept each; see _segment.c for the list): what they share. Not a public API: nothing here leaves the .so
 * (every non-static name is hidden).
 */
#ifndef TIDELOG_SEGMENT_H
#define TIDELOG_SEGMENT_H

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

#pragma GCC visibility push(hidden)

#define RELEASE_GIL_BYTES (64 * 1024)
#define NO_TIMESTAMP (-1LL)

/* _recwalk's bytes-only C API (CRC-32C, record walk, header tuple), imported once by PyInit__segment */
extern const tidelog_records_capi *capi;

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

/* ------------------------------------------------------------------------------------------------------------
 * the stamped write (_segment_write.c)
 */
/* what stamped_write returns instead of the length written */
#define CHECK_FAILED_AFTER_WRITE (-1)  /* the bytes are written; the caller cuts the file back */
#define WRITE_ERROR (-2)               /* a Python exception is set (OSError, or a signal handler's) */

/* the batch d[0:total] written to fd with baseOffset and partitionLeaderEpoch stamped, then the checks of
 * ``check`` (see write_stamped's doc): the length written, CHECK_FAILED_AFTER_WRITE or WRITE_ERROR */
Py_ssize_t stamped_write(int fd, const uint8_t *d, Py_ssize_t total, long long base, int32_t epoch, int check);

/* ------------------------------------------------------------------------------------------------------------
 * the append state (_segment_state.c)
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

extern PyTypeObject IndexState_Type;
extern PyTypeObject SegmentState_Type;

/* buffer one index entry (stored when pending_limit are buffered). 0, or -1 with an exception set */
int index_push(IndexState *self, long long key, long long value);

/* PyType_Ready both types and add them to the module: 0, or -1 with an exception set */
int tl_segment_add_state_types(PyObject *module);

/* ------------------------------------------------------------------------------------------------------------
 * each concept's module functions, added to the module by PyInit__segment
 */
extern PyMethodDef tl_segment_write_methods[];    /* write_stamped, preallocate (_segment_write.c) */
extern PyMethodDef tl_segment_scan_methods[];     /* scan_batches (_segment_scan.c) */
extern PyMethodDef tl_segment_leader_methods[];   /* append_leader_fast (_segment_leader.c) */
extern PyMethodDef tl_segment_follower_methods[]; /* check_follower_batches, append_follower_run
                                                   * (_segment_follower.c) */

#pragma GCC visibility pop

#endif
