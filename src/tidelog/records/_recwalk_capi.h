/* The bytes-only C API of tidelog.records._recwalk, for other tidelog extensions (tidelog.storage._segment).
 *
 * _recwalk exports one static table of function pointers as the capsule ``tidelog.records._recwalk._C_API``;
 * a user imports it once at module init (PyCapsule_Import) and checks ``version``. Functions over bytes only:
 * no I/O, no Python attribute access; ``crc32c`` and ``records_ok`` need no GIL.
 */
#ifndef TIDELOG_RECWALK_CAPI_H
#define TIDELOG_RECWALK_CAPI_H

#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#define TIDELOG_RECORDS_CAPI_NAME "tidelog.records._recwalk._C_API"
#define TIDELOG_RECORDS_CAPI_VERSION 1

typedef struct {
    int version;
    /* CRC-32C of p[0:len] continued from crc (the fastest path this CPU has) */
    uint32_t (*crc32c)(uint32_t crc, const uint8_t *p, size_t len);
    /* 1 when the records area records[0:n] of an uncompressed batch declaring ``count`` records walks cleanly
     * (tidelog.records.batch.check_record_structure's checks), else 0 */
    int (*records_ok)(const uint8_t *records, Py_ssize_t n, long long count);
    /* tidelog.records.header's HeaderTuple of the batch header at d (at least 61 bytes); GIL held */
    PyObject *(*header_tuple)(const uint8_t *d);
} tidelog_records_capi;

#endif
