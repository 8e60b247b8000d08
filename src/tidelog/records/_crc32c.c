/* tidelog.records._recwalk, the CRC-32C (Castagnoli) of v2 batches: slicing-by-8 tables, SSE4.2's crc32
 * instruction in three interleaved streams, and carry-less-multiply folding (PCLMULQDQ, VPCLMULQDQ) for long
 * buffers, the fastest this CPU has picked at init; and the module's functions for them (crc32c, crc32c_sw,
 * crc32c_using) and constants. The rest of the extension calls tl_crc32c (_crc32c.h).
 */

#include <limits.h>
#include <string.h>

#include "_crc32c.h"

/* ------------------------------------------------------------------------------------------ CRC-32C
 * Castagnoli CRC (reflected polynomial 0x82F63B78), as the crc32c package computes it. With SSE4.2 (checked
 * at run time with __builtin_cpu_supports) three interleaved _mm_crc32_u64 streams over blocks of LONG or
 * SHORT bytes, combined with precomputed "append n zero bytes" operators (Mark Adler's crc32c.c scheme);
 * otherwise slicing-by-8 tables. Both are checked against the crc32c package by the tests. */

#define CRC_POLY 0x82F63B78u
#define CRC_LONG 8192
#define CRC_SHORT 256

static uint32_t crc_table[8][256];
static uint32_t crc_long[4][256];
static uint32_t crc_short[4][256];
static int have_sse42 = 0;

static uint32_t
gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1)
            sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void
gf2_square(uint32_t *square, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++)
        square[n] = gf2_times(mat, mat[n]);
}

/* the operator that appends ``len`` zero bytes (a power of two) to a CRC register */
static void
crc_zeros_op(uint32_t *even, size_t len)
{
    uint32_t odd[32];
    uint32_t row = 1;
    odd[0] = CRC_POLY;
    for (int n = 1; n < 32; n++) {
        odd[n] = row;
        row <<= 1;
    }
    gf2_square(even, odd);  /* 2 zero bits */
    gf2_square(odd, even);  /* 4 zero bits */
    do {
        gf2_square(even, odd);
        len >>= 1;
        if (len == 0)
            return;
        gf2_square(odd, even);
        len >>= 1;
    } while (len);
    memcpy(even, odd, sizeof(odd));
}

static void
crc_zeros(uint32_t zeros[4][256], size_t len)
{
    uint32_t op[32];
    crc_zeros_op(op, len);
    for (uint32_t n = 0; n < 256; n++) {
        zeros[0][n] = gf2_times(op, n);
        zeros[1][n] = gf2_times(op, n << 8);
        zeros[2][n] = gf2_times(op, n << 16);
        zeros[3][n] = gf2_times(op, n << 24);
    }
}

static inline uint32_t
crc_shift(uint32_t zeros[4][256], uint32_t crc)
{
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff] ^ zeros[3][crc >> 24];
}

static void
crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC_POLY : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int k = 1; k < 8; k++) {
            c = crc_table[0][c & 0xff] ^ (c >> 8);
            crc_table[k][n] = c;
        }
    }
    crc_zeros(crc_long, CRC_LONG);
    crc_zeros(crc_short, CRC_SHORT);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2") != 0;
#endif
}

static inline uint64_t
load64le(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static uint32_t
crc32c_sw(uint32_t crc, const uint8_t *p, size_t len)
{
    uint32_t c = ~crc;
    while (len && ((uintptr_t)p & 7)) {
        c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        len--;
    }
    while (len >= 8) {
        uint64_t w = load64le(p) ^ c;
        c = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^ crc_table[5][(w >> 16) & 0xff]
            ^ crc_table[4][(w >> 24) & 0xff] ^ crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff]
            ^ crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_CRC_HW 1

__attribute__((target("sse4.2"))) static uint32_t
crc32c_hw(uint32_t crc, const uint8_t *next, size_t len)
{
    uint64_t crc0 = ~crc & 0xffffffffu, crc1, crc2;
    while (len && ((uintptr_t)next & 7)) {
        crc0 = _mm_crc32_u8((uint32_t)crc0, *next++);
        len--;
    }
    while (len >= 3 * CRC_LONG) {
        crc1 = crc2 = 0;
        const uint8_t *end = next + CRC_LONG;
        do {
            crc0 = _mm_crc32_u64(crc0, load64le(next));
            crc1 = _mm_crc32_u64(crc1, load64le(next + CRC_LONG));
            crc2 = _mm_crc32_u64(crc2, load64le(next + 2 * CRC_LONG));
            next += 8;
        } while (next < end);
        crc0 = crc_shift(crc_long, (uint32_t)crc0) ^ crc1;
        crc0 = crc_shift(crc_long, (uint32_t)crc0) ^ crc2;
        next += 2 * CRC_LONG;
        len -= 3 * CRC_LONG;
    }
    while (len >= 3 * CRC_SHORT) {
        crc1 = crc2 = 0;
        const uint8_t *end = next + CRC_SHORT;
        do {
            crc0 = _mm_crc32_u64(crc0, load64le(next));
            crc1 = _mm_crc32_u64(crc1, load64le(next + CRC_SHORT));
            crc2 = _mm_crc32_u64(crc2, load64le(next + 2 * CRC_SHORT));
            next += 8;
        } while (next < end);
        crc0 = crc_shift(crc_short, (uint32_t)crc0) ^ crc1;
        crc0 = crc_shift(crc_short, (uint32_t)crc0) ^ crc2;
        next += 2 * CRC_SHORT;
        len -= 3 * CRC_SHORT;
    }
    while (len >= 8) {
        crc0 = _mm_crc32_u64(crc0, load64le(next));
        next += 8;
        len -= 8;
    }
    while (len) {
        crc0 = _mm_crc32_u8((uint32_t)crc0, *next++);
        len--;
    }
    return ~(uint32_t)crc0;
}
#endif

/* ------------------------------------------------------------- CRC-32C by carry-less multiplication
 * Above a length threshold the CRC is computed by folding (the scheme of Intel's white paper "Fast CRC
 * Computation for Generic Polynomials Using PCLMULQDQ", with our own constants): the message is consumed in
 * 128-bit lanes, several lanes in flight at once, and each lane is moved ("folded") further along the message
 * by two carry-less multiplies and XORed into the lane of the data found there. When the data is used up, the
 * lanes are folded onto one, and the CRC of that last 16-byte lane (with the crc32 instruction, initial value
 * 0) is the CRC register of everything so far; the few bytes left go through the crc32 instruction.
 *
 * Why folding works: the message is a polynomial over GF(2), the first bit the highest power, and the CRC
 * register is (message * x^32) mod P, the initial register XORed into the first 32 bits. A lane A is loaded
 * little-endian, so its low qword H holds the earlier 8 bytes: A = H*x^64 + L. Moving A by ``bits`` bits
 * multiplies it by x^bits, and A*x^bits = H*x^(bits+64) + L*x^bits is congruent mod P to
 * H*(x^(bits+63) mod P)*x + L*(x^(bits-1) mod P)*x. The extra factor x is what a carry-less multiply of two
 * bit-reflected 64-bit numbers adds by itself: its 127-bit product lands one bit low in a reflected 128-bit
 * lane. So the multipliers of a fold by ``bits`` are (x^(bits+63) mod P, x^(bits-1) mod P), reflected and
 * placed in the high half of a qword; they are computed from CRC_POLY at module init (fold_pair).
 *
 * The carry-less multiplier and the crc32 instruction are different execution units, so both run at once:
 * the tail of the buffer is cut into three equal stretches that three crc32 streams (initial register 0)
 * checksum in the same loop that folds the head, in the ratio of the two units' throughputs (FUSE_*_STREAM
 * bytes per stream per round of vector registers). At the end the head's register is moved over each
 * stretch and that stretch's register XORed in (crc_mul_hw: one carry-less multiply by x^(8 * stretch - 33)
 * mod P and one crc32 of the 64-bit product, which multiplies by x^33), the multiplier assembled from
 * fuse_pow[] by the bits of the round count.
 *
 * Two implementations, chosen at init with __builtin_cpu_supports and compiled with gcc's target attribute so
 * that the module builds and runs anywhere: VPCLMULQDQ on 512-bit registers (FOLD_ZMM registers = 4*FOLD_ZMM
 * lanes in flight, three-way XOR in one vpternlogq) and PCLMULQDQ on 128-bit registers (FOLD_XMM lanes). Both
 * first reach an aligned address with the crc32 instruction so that no vector load straddles a cache line. */

#ifdef HAVE_CRC_HW
#include <immintrin.h>
#define HAVE_CRC_FOLD 1

#ifndef FOLD_ZMM
#define FOLD_ZMM 4
#endif
#ifndef FOLD_XMM
#define FOLD_XMM 4
#endif
/* bytes per crc32 stream per round. Zen 4 multiplies 512-bit registers at half a register per cycle (a round
 * of 256 bytes in ~16 cycles) and runs one crc32 per cycle; 32 bytes per stream (12 crc32 per round) measured
 * fastest there (75 GB/s against 59 without streams). A 128-bit round (64 bytes) takes 8 (Intel) to 16
 * (Zen 4) cycles. */
#ifndef FUSE_ZMM_STREAM
#define FUSE_ZMM_STREAM 32
#endif
#ifndef FUSE_XMM_STREAM
#define FUSE_XMM_STREAM 32
#endif
/* fewer rounds than this: no crc32 streams (the final combination would cost more than they save) */
#ifndef FUSE_MIN_ROUNDS
#define FUSE_MIN_ROUNDS 8
/* software prefetch distance of the folding loop: a batch checked right after its write is partly in L3, not
 * L2; prefetching this far ahead of the four read streams measured ~1% of a 1 MiB append's CPU time */
#define PF_DIST 2048
#endif
/* the smallest lengths the fold loops take (alignment, then one full round of registers) */
#define ZMM_MIN_LEN (63 + 64 * FOLD_ZMM)
#define XMM_MIN_LEN (15 + 16 * FOLD_XMM)

static uint64_t k_fold_zmm[2];   /* FOLD_ZMM * 512 bits: the main 512-bit loop */
static uint64_t k_fold_512[2];   /* one 512-bit register onto the next */
static uint64_t k_fold_xmm[2];   /* FOLD_XMM * 128 bits: the main 128-bit loop */
static uint64_t k_fold_128[2];   /* one lane onto the next */
static uint64_t k_fold_lanes[8]; /* lanes 0, 1, 2 of a 512-bit register onto lane 3 (384, 256, 128 bits); 0 */
/* x^(8 * FUSE_*_STREAM * 2^j - 33) mod P, reflected: the multipliers over 2^j rounds of one crc32 stream */
static uint32_t fuse_pow_zmm[64];
static uint32_t fuse_pow_xmm[64];

/* a*b mod P of two reflected residues (init only) */
static uint32_t
gf2_mulmod(uint32_t a, uint32_t b)
{
    uint32_t prod = 0;
    for (int e = 0; e < 32; e++) {  /* b runs through b*x^e */
        if (a & (0x80000000u >> e))
            prod ^= b;
        b = (b >> 1) ^ ((b & 1) ? CRC_POLY : 0);
    }
    return prod;
}

/* x^n mod P, reflected (bit 31 - e holds the coefficient of x^e); n small (init only) */
static uint32_t
xpow_mod(unsigned n)
{
    uint32_t r = 0x80000000u;  /* x^0 */
    while (n--)
        r = (r >> 1) ^ ((r & 1) ? CRC_POLY : 0);
    return r;
}

/* the two multipliers that move a lane ``bits`` bits further (see above) */
static void
fold_pair(uint64_t k[2], unsigned bits)
{
    k[0] = (uint64_t)xpow_mod(bits + 63) << 32;
    k[1] = (uint64_t)xpow_mod(bits - 1) << 32;
}

/* pow[j] = x^(8 * stream * 2^j - 33) mod P */
static void
fuse_pows(uint32_t pow[64], unsigned stream)
{
    uint32_t step = xpow_mod(8 * stream);  /* x^(8 * stream * 2^j) */
    pow[0] = xpow_mod(8 * stream - 33);
    for (int j = 1; j < 64; j++) {
        pow[j] = gf2_mulmod(pow[j - 1], step);
        step = gf2_mulmod(step, step);
    }
}

/* a*b*x^33 mod P: the 63-bit carry-less product of two reflected residues is (a*b*x) as a reflected 64-bit
 * number, and the crc32 of those 8 bytes from register 0 multiplies it by x^32 */
#define CRC_MUL_HW(a, b)                                                                                     \
    ((uint32_t)_mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(_mm_clmulepi64_si128(                           \
                                    _mm_cvtsi32_si128((int)(uint32_t)(a)), _mm_cvtsi32_si128((int)(b)), 0))))

/* x^(8 * stream * rounds - 33) mod P from pow[] (rounds >= 1) */
#define FUSE_MULTIPLIER(out, pow, rounds)                                                                    \
    do {                                                                                                     \
        size_t r_ = (rounds);                                                                                \
        int j_ = __builtin_ctzll((unsigned long long)r_);                                                    \
        (out) = (pow)[j_];                                                                                   \
        for (r_ >>= j_ + 1, j_++; r_; r_ >>= 1, j_++)                                                        \
            if (r_ & 1)                                                                                      \
                (out) = CRC_MUL_HW((out), (pow)[j_]);                                                        \
    } while (0)

/* one round of the three crc32 streams: ``stream`` bytes each */
#define FUSE_STREAMS(c, s, stream)                                                                           \
    do {                                                                                                     \
        for (int w_ = 0; w_ < (stream); w_ += 8) {                                                           \
            (c)[0] = _mm_crc32_u64((c)[0], load64le((s) + w_));                                              \
            (c)[1] = _mm_crc32_u64((c)[1], load64le((s) + (fuse_len) + w_));                                 \
            (c)[2] = _mm_crc32_u64((c)[2], load64le((s) + 2 * (fuse_len) + w_));                             \
        }                                                                                                    \
        (s) += (stream);                                                                                     \
    } while (0)

/* reg: the register after the head; move it over the three stretches, XORing in each one's register */
#define FUSE_COMBINE(reg, c, pow, rounds)                                                                    \
    do {                                                                                                     \
        if (rounds) {                                                                                        \
            uint32_t k_;                                                                                     \
            FUSE_MULTIPLIER(k_, (pow), (rounds));                                                            \
            for (int i_ = 0; i_ < 3; i_++)                                                                   \
                (reg) = CRC_MUL_HW((reg), k_) ^ (c)[i_];                                                     \
        }                                                                                                    \
    } while (0)

/* x: the folded lane(s); k: multipliers (low qword for x's low qword, high for high); d: the data there */
#define FOLD_ZMM_LANES(x, k, d)                                                                              \
    _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128((x), (k), 0x00),                                  \
                              _mm512_clmulepi64_epi128((x), (k), 0x11), (d), 0x96)
#define FOLD_XMM_LANE(x, k, d)                                                                               \
    _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128((x), (k), 0x00), _mm_clmulepi64_si128((x), (k), 0x11)), \
                  (d))

/* The last lane (p is 16-byte aligned here) and the bytes after it, up to p + len; sets reg. */
#define FOLD_FINISH(x, reg, p, len)                                                                          \
    do {                                                                                                     \
        const __m128i k1_ = _mm_loadu_si128((const __m128i *)k_fold_128);                                    \
        while ((len) >= 16) {                                                                                \
            (x) = FOLD_XMM_LANE((x), k1_, _mm_load_si128((const __m128i *)(p)));                              \
            (p) += 16;                                                                                       \
            (len) -= 16;                                                                                     \
        }                                                                                                    \
        (reg) = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));                                            \
        (reg) = _mm_crc32_u64((reg), (uint64_t)_mm_extract_epi64((x), 1));                                   \
        if ((len) >= 8) {                                                                                    \
            (reg) = _mm_crc32_u64((reg), load64le(p));                                                       \
            (p) += 8;                                                                                        \
            (len) -= 8;                                                                                      \
        }                                                                                                    \
        while ((len)--)                                                                                      \
            (reg) = _mm_crc32_u8((uint32_t)(reg), *(p)++);                                                   \
    } while (0)

/* len bytes from p (16-byte aligned once past the first loop) with the register ~crc. The last 3 * fuse_len
 * bytes are the crc32 streams' (rounds of FUSE_XMM_STREAM bytes); the head before them is folded. */
__attribute__((target("pclmul,sse4.2"))) static uint32_t
crc32c_pclmul(uint32_t crc, const uint8_t *p, size_t len)
{
    if (len < XMM_MIN_LEN)
        return crc32c_hw(crc, p, len);
    uint64_t reg = ~crc & 0xffffffffu;
    while ((uintptr_t)p & 15) {
        reg = _mm_crc32_u8((uint32_t)reg, *p++);
        len--;
    }
    size_t rounds = (len - 16 * FOLD_XMM) / (16 * FOLD_XMM + 3 * FUSE_XMM_STREAM);
    if (rounds < FUSE_MIN_ROUNDS)
        rounds = 0;
    const size_t fuse_len = rounds * FUSE_XMM_STREAM;
    const uint8_t *s = p + len - 3 * fuse_len;
    uint64_t c[3] = {0, 0, 0};
    len -= 3 * fuse_len;  /* the head */
    __m128i x[FOLD_XMM];
    for (int i = 0; i < FOLD_XMM; i++)
        x[i] = _mm_load_si128((const __m128i *)(p + 16 * i));
    x[0] = _mm_xor_si128(x[0], _mm_cvtsi32_si128((int)(uint32_t)reg));
    p += 16 * FOLD_XMM;
    len -= 16 * FOLD_XMM;
    const __m128i k = _mm_loadu_si128((const __m128i *)k_fold_xmm);
    for (size_t r = 0; r < rounds; r++) {
        for (int i = 0; i < FOLD_XMM; i++)
            x[i] = FOLD_XMM_LANE(x[i], k, _mm_load_si128((const __m128i *)(p + 16 * i)));
        FUSE_STREAMS(c, s, FUSE_XMM_STREAM);
        p += 16 * FOLD_XMM;
        len -= 16 * FOLD_XMM;
    }
    while (len >= 16 * FOLD_XMM) {
        for (int i = 0; i < FOLD_XMM; i++)
            x[i] = FOLD_XMM_LANE(x[i], k, _mm_load_si128((const __m128i *)(p + 16 * i)));
        p += 16 * FOLD_XMM;
        len -= 16 * FOLD_XMM;
    }
    const __m128i k1 = _mm_loadu_si128((const __m128i *)k_fold_128);
    for (int i = 1; i < FOLD_XMM; i++)
        x[i] = FOLD_XMM_LANE(x[i - 1], k1, x[i]);
    __m128i last = x[FOLD_XMM - 1];
    FOLD_FINISH(last, reg, p, len);
    FUSE_COMBINE(reg, c, fuse_pow_xmm, rounds);
    return ~(uint32_t)reg;
}

/* as crc32c_pclmul, on 512-bit registers: the head 64-byte aligned, FOLD_ZMM registers per round */
__attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2"))) static uint32_t
crc32c_vpclmul(uint32_t crc, const uint8_t *p, size_t len)
{
    if (len < ZMM_MIN_LEN)
        return crc32c_hw(crc, p, len);
    uint64_t reg = ~crc & 0xffffffffu;
    while ((uintptr_t)p & 7) {
        reg = _mm_crc32_u8((uint32_t)reg, *p++);
        len--;
    }
    while ((uintptr_t)p & 63) {
        reg = _mm_crc32_u64(reg, load64le(p));
        p += 8;
        len -= 8;
    }
    size_t rounds = (len - 64 * FOLD_ZMM) / (64 * FOLD_ZMM + 3 * FUSE_ZMM_STREAM);
    if (rounds < FUSE_MIN_ROUNDS)
        rounds = 0;
    const size_t fuse_len = rounds * FUSE_ZMM_STREAM;
    const uint8_t *s = p + len - 3 * fuse_len;
    uint64_t c[3] = {0, 0, 0};
    len -= 3 * fuse_len;  /* the head */
    __m512i x[FOLD_ZMM];
    for (int i = 0; i < FOLD_ZMM; i++)
        x[i] = _mm512_load_si512((const void *)(p + 64 * i));
    x[0] = _mm512_xor_si512(x[0], _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)(uint32_t)reg)));
    p += 64 * FOLD_ZMM;
    len -= 64 * FOLD_ZMM;
    const __m512i k = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)k_fold_zmm));
    for (size_t r = 0; r < rounds; r++) {
        for (int i = 0; i < FOLD_ZMM; i++)
            _mm_prefetch((const char *)(p + PF_DIST + 64 * i), _MM_HINT_T0);
        _mm_prefetch((const char *)(s + PF_DIST / 4), _MM_HINT_T0);
        _mm_prefetch((const char *)(s + fuse_len + PF_DIST / 4), _MM_HINT_T0);
        _mm_prefetch((const char *)(s + 2 * fuse_len + PF_DIST / 4), _MM_HINT_T0);
        for (int i = 0; i < FOLD_ZMM; i++)
            x[i] = FOLD_ZMM_LANES(x[i], k, _mm512_load_si512((const void *)(p + 64 * i)));
        FUSE_STREAMS(c, s, FUSE_ZMM_STREAM);
        p += 64 * FOLD_ZMM;
        len -= 64 * FOLD_ZMM;
    }
    while (len >= 64 * FOLD_ZMM) {
        for (int i = 0; i < FOLD_ZMM; i++)
            x[i] = FOLD_ZMM_LANES(x[i], k, _mm512_load_si512((const void *)(p + 64 * i)));
        p += 64 * FOLD_ZMM;
        len -= 64 * FOLD_ZMM;
    }
    const __m512i k5 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)k_fold_512));
    for (int i = 1; i < FOLD_ZMM; i++)
        x[i] = FOLD_ZMM_LANES(x[i - 1], k5, x[i]);
    __m512i z = x[FOLD_ZMM - 1];
    while (len >= 64) {
        z = FOLD_ZMM_LANES(z, k5, _mm512_load_si512((const void *)p));
        p += 64;
        len -= 64;
    }
    /* lanes 0-2 folded onto lane 3 in one step (lane 3's multipliers are 0), then the four lanes XORed */
    z = FOLD_ZMM_LANES(z, _mm512_loadu_si512((const void *)k_fold_lanes), _mm512_maskz_mov_epi64(0xC0, z));
    const __m256i h = _mm256_xor_si256(_mm512_castsi512_si256(z), _mm512_extracti64x4_epi64(z, 1));
    __m128i last = _mm_xor_si128(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    FOLD_FINISH(last, reg, p, len);
    FUSE_COMBINE(reg, c, fuse_pow_zmm, rounds);
    return ~(uint32_t)reg;
}

#undef FOLD_FINISH
#undef FUSE_STREAMS
#undef FUSE_COMBINE
#undef FUSE_MULTIPLIER
#endif /* HAVE_CRC_HW */

typedef uint32_t (*crc_fn)(uint32_t, const uint8_t *, size_t);

/* The CRC implementations this CPU can run, fastest last; crc_fold is the folding one used from
 * crc_fold_min bytes on (NULL: none). */
enum { PATH_SW, PATH_SSE42, PATH_PCLMUL, PATH_VPCLMUL, N_PATHS };
static const char *const crc_path_names[N_PATHS] = {"slicing-by-8", "sse4.2", "pclmulqdq", "vpclmulqdq"};
static int crc_paths_available[N_PATHS] = {1, 0, 0, 0};
static crc_fn crc_fold = NULL;
static size_t crc_fold_min = SIZE_MAX;
static int crc_best_path = PATH_SW;

/* Fold thresholds: the shortest lengths from which folding beat crc32c_hw on AMD EPYC (Zen 4), measured with
 * bench/storage_bench.py --crc (the 512-bit path cannot start below ZMM_MIN_LEN anyway). */
#define VPCLMUL_FROM 320
#define PCLMUL_FROM 512

static void
crc_fold_init(void)
{
#ifdef HAVE_CRC_FOLD
    fold_pair(k_fold_zmm, 512 * FOLD_ZMM);
    fold_pair(k_fold_512, 512);
    fold_pair(k_fold_xmm, 128 * FOLD_XMM);
    fold_pair(k_fold_128, 128);
    for (int lane = 0; lane < 3; lane++)
        fold_pair(k_fold_lanes + 2 * lane, 128 * (3 - lane));
    k_fold_lanes[6] = k_fold_lanes[7] = 0;
    fuse_pows(fuse_pow_zmm, FUSE_ZMM_STREAM);
    fuse_pows(fuse_pow_xmm, FUSE_XMM_STREAM);
    if (!have_sse42)
        return;
    crc_paths_available[PATH_SSE42] = 1;
    crc_best_path = PATH_SSE42;
    if (__builtin_cpu_supports("pclmul")) {
        crc_paths_available[PATH_PCLMUL] = 1;
        crc_fold = crc32c_pclmul;
        crc_fold_min = PCLMUL_FROM;
        crc_best_path = PATH_PCLMUL;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")
            && __builtin_cpu_supports("vpclmulqdq")) {
            crc_paths_available[PATH_VPCLMUL] = 1;
            crc_fold = crc32c_vpclmul;
            crc_fold_min = VPCLMUL_FROM;
            crc_best_path = PATH_VPCLMUL;
        }
    }
#endif
}

/* The CRC with one given implementation (tests and the benchmark); -1 if this CPU cannot run it. */
static int
crc32c_with(int path, uint32_t crc, const uint8_t *p, size_t len, uint32_t *out)
{
    if (path < 0 || path >= N_PATHS || !crc_paths_available[path])
        return -1;
    switch (path) {
#ifdef HAVE_CRC_FOLD
    case PATH_VPCLMUL:
        *out = crc32c_vpclmul(crc, p, len);
        return 0;
    case PATH_PCLMUL:
        *out = crc32c_pclmul(crc, p, len);
        return 0;
    case PATH_SSE42:
        *out = crc32c_hw(crc, p, len);
        return 0;
#endif
    default:
        *out = crc32c_sw(crc, p, len);
        return 0;
    }
}

/* The CRC-32C every caller uses: folding above crc_fold_min, else SSE4.2, else slicing-by-8. */
static inline uint32_t
crc32c_any(uint32_t crc, const uint8_t *p, size_t len)
{
#ifdef HAVE_CRC_HW
    if (len >= crc_fold_min)
        return crc_fold(crc, p, len);
    if (have_sse42)
        return crc32c_hw(crc, p, len);
#endif
    return crc32c_sw(crc, p, len);
}

uint32_t
tl_crc32c(uint32_t crc, const uint8_t *p, size_t len)
{
    return crc32c_any(crc, p, len);
}

PyDoc_STRVAR(crc32c_doc,
"crc32c(data, value=0, /) -> int\n\n"
"CRC-32C of the buffer ``data`` continuing from ``value`` (as crc32c.crc32c): SSE4.2 when the CPU has it,\n"
"else slicing-by-8. The GIL is released over RELEASE_GIL_BYTES.");

static PyObject *
crc32c_py(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "crc32c expected 1 or 2 arguments, got %zd", nargs);
        return NULL;
    }
    unsigned long value = 0;
    if (nargs == 2) {
        value = PyLong_AsUnsignedLong(args[1]);
        if (value == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
        if (value > 0xffffffffUL) {
            PyErr_SetString(PyExc_OverflowError, "crc32c: value must fit in 32 bits");
            return NULL;
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc;
    if (view.len > RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        crc = crc32c_any((uint32_t)value, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32c_any((uint32_t)value, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

PyDoc_STRVAR(crc32c_sw_doc, "crc32c_sw(data, /) -> int\n\nCRC-32C with the slicing-by-8 tables only (tests).");

static PyObject *
crc32c_sw_py(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = crc32c_sw(0, view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

PyDoc_STRVAR(crc32c_using_doc,
"crc32c_using(path, data, value=0, /) -> int\n\n"
"CRC-32C of ``data`` with one named implementation, for any length (tests and benchmarks): one of\n"
"CRC32C_PATHS ('slicing-by-8', 'sse4.2', 'pclmulqdq', 'vpclmulqdq' as this CPU allows). ValueError for a path\n"
"this CPU cannot run.");

static PyObject *
crc32c_using(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || nargs > 3) {
        PyErr_Format(PyExc_TypeError, "crc32c_using expected 2 or 3 arguments, got %zd", nargs);
        return NULL;
    }
    const char *name = PyUnicode_AsUTF8(args[0]);
    if (name == NULL)
        return NULL;
    int path = -1;
    for (int i = 0; i < N_PATHS; i++)
        if (strcmp(name, crc_path_names[i]) == 0)
            path = i;
    if (path < 0 || !crc_paths_available[path]) {
        PyErr_Format(PyExc_ValueError, "crc32c_using: no CRC-32C path %R on this CPU", args[0]);
        return NULL;
    }
    unsigned long value = 0;
    if (nargs == 3) {
        value = PyLong_AsUnsignedLong(args[2]);
        if (value == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
        if (value > 0xffffffffUL) {
            PyErr_SetString(PyExc_OverflowError, "crc32c_using: value must fit in 32 bits");
            return NULL;
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc = 0;
    Py_BEGIN_ALLOW_THREADS
    crc32c_with(path, (uint32_t)value, view.buf, (size_t)view.len, &crc);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef crc32c_methods[] = {
    {"crc32c", (PyCFunction)(void (*)(void))crc32c_py, METH_FASTCALL, crc32c_doc},
    {"crc32c_sw", (PyCFunction)crc32c_sw_py, METH_O, crc32c_sw_doc},
    {"crc32c_using", (PyCFunction)(void (*)(void))crc32c_using, METH_FASTCALL, crc32c_using_doc},
    {NULL, NULL, 0, NULL},
};

int
tl_crc32c_init_module(PyObject *m)
{
    crc_init();
    crc_fold_init();
    if (PyModule_AddFunctions(m, crc32c_methods) < 0
        || PyModule_AddIntConstant(m, "CRC32C_HW", have_sse42) < 0
        || PyModule_AddStringConstant(m, "CRC32C_PATH", crc_path_names[crc_best_path]) < 0
        || PyModule_AddIntConstant(m, "CRC32C_FOLD_FROM", crc_fold ? (long)crc_fold_min : -1) < 0)
        return -1;
    Py_ssize_t n_paths = 0;
    for (int i = 0; i < N_PATHS; i++)
        n_paths += crc_paths_available[i];
    PyObject *paths = PyTuple_New(n_paths);
    for (int i = 0, j = 0; paths != NULL && i < N_PATHS; i++) {
        if (!crc_paths_available[i])
            continue;
        PyObject *name = PyUnicode_FromString(crc_path_names[i]);
        if (name == NULL)
            Py_CLEAR(paths);
        else
            PyTuple_SET_ITEM(paths, j++, name);
    }
    if (paths == NULL || PyModule_AddObject(m, "CRC32C_PATHS", paths) < 0) {
        Py_XDECREF(paths);
        return -1;
    }
    return 0;
}
