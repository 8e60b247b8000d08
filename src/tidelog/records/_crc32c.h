/* The _recwalk extension's internal header: tidelog.records._recwalk is compiled from _recwalk.c (the record walk,
 * the whole-batch check, the capsule and the module) and _crc32c.c (the CRC-32C and its Python functions). Not a
 * public API (other extensions use _recwalk.h and the capsule of _recwalk_capi.h): every name here is hidden.
 */
#ifndef TIDELOG_CRC32C_H
#define TIDELOG_CRC32C_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* the module's functions release the GIL over buffers longer than this */
#define RELEASE_GIL_BYTES (64 * 1024)

/* The CRC-32C every caller uses: carry-less-multiply folding above a few hundred bytes where the CPU has it,
 * else SSE4.2, else slicing-by-8. Only after tl_crc32c_init_module. */
uint32_t tl_crc32c(uint32_t crc, const uint8_t *p, size_t len);

/* Compute the tables, pick the paths this CPU has and add the CRC functions (crc32c, crc32c_sw, crc32c_using)
 * and constants (CRC32C_HW, CRC32C_PATH, CRC32C_FOLD_FROM, CRC32C_PATHS) to the module: 0, or -1 with an
 * exception set. */
int tl_crc32c_init_module(PyObject *module);

#pragma GCC visibility pop

#endif
