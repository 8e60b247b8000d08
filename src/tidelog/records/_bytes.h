/* Big-endian reads of batch header fields and the v2 batch header sizes, shared by tidelog's C extensions
 * (tidelog.records._recwalk, tidelog.storage._segment). Header only: static inline, no state. */
#ifndef TIDELOG_BYTES_H
#define TIDELOG_BYTES_H

#include <stdint.h>

#define BATCH_HEADER 61       /* baseOffset .. recordsCount */
#define BATCH_LOG_OVERHEAD 12 /* baseOffset + batchLength */

static inline int64_t
be64(const uint8_t *p)
{
    return (int64_t)(((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40)
                     | ((uint64_t)p[3] << 32) | ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16)
                     | ((uint64_t)p[6] << 8) | (uint64_t)p[7]);
}

static inline uint32_t
be32u(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline int16_t
be16(const uint8_t *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

#endif
