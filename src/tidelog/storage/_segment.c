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
 *
 * One extension, compiled from one file per concept sharing the internal header _segment.h:
 *   _segment.c           this module: the capsule import and PyInit__segment
 *   _segment_state.c     IndexState and SegmentState
 *   _segment_write.c     write_stamped (the stamped writev and its checks), preallocate
 *   _segment_scan.c      scan_batches (the recovery scan)
 *   _segment_leader.c    append_leader_fast
 *   _segment_follower.c  check_follower_batches, append_follower_run
 */

#include "_segment.h"

const tidelog_records_capi *capi = NULL;

static struct PyModuleDef segment_module = {
    PyModuleDef_HEAD_INIT,
    "tidelog.storage._segment",
    "The storage layer's C: a segment's append state, the append fast path, the stamped write, fallocate and "
    "the recovery scan.",
    -1,
    NULL,
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
    PyObject *m = PyModule_Create(&segment_module);
    if (m == NULL)
        return NULL;
    if (tl_segment_add_state_types(m) < 0
        || PyModule_AddFunctions(m, tl_segment_write_methods) < 0
        || PyModule_AddFunctions(m, tl_segment_scan_methods) < 0
        || PyModule_AddFunctions(m, tl_segment_leader_methods) < 0
        || PyModule_AddFunctions(m, tl_segment_follower_methods) < 0
        || PyModule_AddIntConstant(m, "RELEASE_GIL_BYTES", RELEASE_GIL_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
