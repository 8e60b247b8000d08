/* Big-endian reads of batch header fields and the v2 batch header sizes, shared by tidelog's C extensions
 * (tidelog.records._recwalk, tidelog.storage._segment). Header only: static inline, no state. */
#ifndef TIDELOG_BYTES_H
#define TIDELOG_BYTES_H

#include <stdint.h>

/* The v2 batch header layout, the C twin of tidelog.records.header (the Python names: *_OFFSET there). */
#define BATCH_HEADER 61       /* baseOffset .. recordsCount: RECORD_BATCH_OVERHEAD */
#define BATCH_LOG_OVERHEAD 12 /* baseOffset + batchLength: LOG_OVERHEAD */
#define HDR_BASE_OFFSET 0              /* int64 */
#define HDR_BATCH_LENGTH 8             /* int32 */
#define HDR_PARTITION_LEADER_EPOCH 12  /* int32, outside the CRC */
#define HDR_MAGIC 16                   /* int8 (= 2) */
#define HDR_CRC 17                     /* uint32: CRC-32C of HDR_ATTRIBUTES..end */
#define HDR_ATTRIBUTES 21              /* int16 */
#define HDR_LAST_OFFSET_DELTA 23       /* int32 */
#define HDR_BASE_TIMESTAMP 27          /* int64 */
#define HDR_MAX_TIMESTAMP 35           /* int64 */
#define HDR_PRODUCER_ID 43             /* int64 */
#define HDR_PRODUCER_EPOCH 51          /* int16 */
#define HDR_BASE_SEQUENCE 53           /* int32 */
#define HDR_RECORDS_COUNT 57           /* int32 */
#define HDR_STAMPED_HEAD 16            /* baseOffset, batchLength, partitionLeaderEpoch: what a leader stamps */
#define BATCH_MAGIC 2
#define ATTR_COMPRESSION_MASK 0x07
#define ATTR_TIMESTAMP_TYPE_MASK 0x08
#define ATTR_TRANSACTIONAL_MASK 0x10
#define ATTR_CONTROL_MASK 0x20
#define ATTR_DELETE_HORIZON_MASK 0x40

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
