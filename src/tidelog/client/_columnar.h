/* The _columnar extension's internal header: tidelog.client._columnar is compiled from _columnar.c (the source
 * side: ColumnBuilder, records into Arrow columns; and the module) and _columnar_sink.c (the sink side: murmur2,
 * assign_partitions, RecordAccumulator: Arrow columns into the records of v2 batches). Not a public API: every
 * name here is hidden.
 */
#ifndef TIDELOG_COLUMNAR_H
#define TIDELOG_COLUMNAR_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../records/_recwalk.h"

#pragma GCC visibility push(hidden)

/* a growing byte buffer (PyMem) */
typedef struct {
    char *p;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

static inline int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    char *np = PyMem_Realloc(b->p, (size_t)cap);
    if (!np) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = np;
    b->cap = cap;
    return 0;
}

/* the sink's functions (murmur2, assign_partitions) and its RecordAccumulator type added to the module: 0, or -1
 * with an exception set */
int tl_columnar_add_sink(PyObject *module);

#pragma GCC visibility pop

#endif
