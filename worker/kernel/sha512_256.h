/*
 * SHA-512/256 (FIPS 180-4 sections 5.3.6.2 and 6.7): SHA-512 with its own initial hash
 * value, output truncated to the first 256 bits.
 *
 * Two compression functions share one driver:
 *   - kb_compress_portable: plain C, always compiled (the fallback, and a test hook);
 *   - kb_compress_openssl:  OpenSSL's assembly SHA-512 block function, reached through
 *     SHA512_Transform, compiled when setup.py found the OpenSSL headers
 *     (KB_HAVE_OPENSSL).
 *
 * Why SHA512_Transform and not SHA512_Init/Update/Final or EVP: a key of up to 111
 * bytes is one padded 128-byte block, so the whole hash is one compression. Padding the
 * block ourselves and calling the block function directly skips the per-message
 * bookkeeping. Measured on this machine (36-byte keys, one core): Transform 175-180 ns,
 * Init/Update/Final 195-210 ns, EVP with a reused context 225-245 ns, this file's
 * portable compression ~250-290 ns.
 */
#ifndef KB_SHA512_256_H
#define KB_SHA512_256_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef KB_HAVE_OPENSSL
/* SHA512_Transform is deprecated in OpenSSL 3 (still exported, and what libcrypto's own
   SHA-512 uses): ask for the 1.1.1 API without deprecation warnings. */
#define OPENSSL_API_COMPAT 10101
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/crypto.h>
#include <openssl/sha.h>
#endif

static const uint64_t KB_SHA512_K[80] = {
    0x428a2f98d728ae22ULL, 0x7137449123ef65cdULL, 0xb5c0fbcfec4d3b2fULL, 0xe9b5dba58189dbbcULL,
    0x3956c25bf348b538ULL, 0x59f111f1b605d019ULL, 0x923f82a4af194f9bULL, 0xab1c5ed5da6d8118ULL,
    0xd807aa98a3030242ULL, 0x12835b0145706fbeULL, 0x243185be4ee4b28cULL, 0x550c7dc3d5ffb4e2ULL,
    0x72be5d74f27b896fULL, 0x80deb1fe3b1696b1ULL, 0x9bdc06a725c71235ULL, 0xc19bf174cf692694ULL,
    0xe49b69c19ef14ad2ULL, 0xefbe4786384f25e3ULL, 0x0fc19dc68b8cd5b5ULL, 0x240ca1cc77ac9c65ULL,
    0x2de92c6f592b0275ULL, 0x4a7484aa6ea6e483ULL, 0x5cb0a9dcbd41fbd4ULL, 0x76f988da831153b5ULL,
    0x983e5152ee66dfabULL, 0xa831c66d2db43210ULL, 0xb00327c898fb213fULL, 0xbf597fc7beef0ee4ULL,
    0xc6e00bf33da88fc2ULL, 0xd5a79147930aa725ULL, 0x06ca6351e003826fULL, 0x142929670a0e6e70ULL,
    0x27b70a8546d22ffcULL, 0x2e1b21385c26c926ULL, 0x4d2c6dfc5ac42aedULL, 0x53380d139d95b3dfULL,
    0x650a73548baf63deULL, 0x766a0abb3c77b2a8ULL, 0x81c2c92e47edaee6ULL, 0x92722c851482353bULL,
    0xa2bfe8a14cf10364ULL, 0xa81a664bbc423001ULL, 0xc24b8b70d0f89791ULL, 0xc76c51a30654be30ULL,
    0xd192e819d6ef5218ULL, 0xd69906245565a910ULL, 0xf40e35855771202aULL, 0x106aa07032bbd1b8ULL,
    0x19a4c116b8d2d0c8ULL, 0x1e376c085141ab53ULL, 0x2748774cdf8eeb99ULL, 0x34b0bcb5e19b48a8ULL,
    0x391c0cb3c5c95a63ULL, 0x4ed8aa4ae3418acbULL, 0x5b9cca4f7763e373ULL, 0x682e6ff3d6b2b8a3ULL,
    0x748f82ee5defb2fcULL, 0x78a5636f43172f60ULL, 0x84c87814a1f0ab72ULL, 0x8cc702081a6439ecULL,
    0x90befffa23631e28ULL, 0xa4506cebde82bde9ULL, 0xbef9a3f7b2c67915ULL, 0xc67178f2e372532bULL,
    0xca273eceea26619cULL, 0xd186b8c721c0c207ULL, 0xeada7dd6cde0eb1eULL, 0xf57d4f7fee6ed178ULL,
    0x06f067aa72176fbaULL, 0x0a637dc5a2c898a6ULL, 0x113f9804bef90daeULL, 0x1b710b35131c471bULL,
    0x28db77f523047d84ULL, 0x32caab7b40c72493ULL, 0x3c9ebe0a15c9bebcULL, 0x431d67c49c100d4cULL,
    0x4cc5d4becb3e42b6ULL, 0x597f299cfc657e2aULL, 0x5fcb6fab3ad6faecULL, 0x6c44198c4a475817ULL};

/* FIPS 180-4 section 5.3.6.2: the SHA-512/256 initial hash value. */
static const uint64_t KB_SHA512_256_IV[8] = {
    0x22312194FC2BF72CULL, 0x9F555FA3C84C64C2ULL, 0x2393B86B6F53B151ULL, 0x963877195940EABDULL,
    0x96283EE2A88EFFE3ULL, 0xBE5E1E2553863992ULL, 0x2B0199FC2C85B8AAULL, 0x0EB72DDC81C52CA2ULL};

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define KB_BSWAP64(v) __builtin_bswap64(v)
#elif defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define KB_BSWAP64(v) (v)
#endif

static inline uint64_t kb_load_be64(const uint8_t *p) {
#ifdef KB_BSWAP64
    uint64_t v;
    memcpy(&v, p, 8);
    return KB_BSWAP64(v);
#else
    return ((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) |
           ((uint64_t)p[3] << 32) | ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) |
           ((uint64_t)p[6] << 8) | (uint64_t)p[7];
#endif
}

static inline void kb_store_be64(uint8_t *p, uint64_t v) {
#ifdef KB_BSWAP64
    v = KB_BSWAP64(v);
    memcpy(p, &v, 8);
#else
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
#endif
}

#define KB_ROTR(x, n) (((x) >> (n)) | ((x) << (64 - (n))))
#define KB_S0(x) (KB_ROTR(x, 28) ^ KB_ROTR(x, 34) ^ KB_ROTR(x, 39))
#define KB_S1(x) (KB_ROTR(x, 14) ^ KB_ROTR(x, 18) ^ KB_ROTR(x, 41))
#define KB_s0(x) (KB_ROTR(x, 1) ^ KB_ROTR(x, 8) ^ ((x) >> 7))
#define KB_s1(x) (KB_ROTR(x, 19) ^ KB_ROTR(x, 61) ^ ((x) >> 6))
#define KB_CH(x, y, z) (((x) & ((y) ^ (z))) ^ (z))
#define KB_MAJ(x, y, z) (((x) & (y)) | ((z) & ((x) | (y))))

/* One round with the working variables renamed instead of shifted: the caller rotates
   the argument order, so eight rounds per loop iteration move no registers. */
#define KB_ROUND(a, b, c, d, e, f, g, h, k, w)                                       \
    do {                                                                             \
        uint64_t t1_ = (h) + KB_S1(e) + KB_CH(e, f, g) + (k) + (w);                  \
        (d) += t1_;                                                                  \
        (h) = t1_ + KB_S0(a) + KB_MAJ(a, b, c);                                      \
    } while (0)

/* The message schedule kept as a 16-word ring: W[t] only ever needs W[t-16..t-1]. */
#define KB_W(t) (w[(t) & 15] += KB_s1(w[((t) - 2) & 15]) + w[((t) - 7) & 15] + KB_s0(w[((t) - 15) & 15]))

static void kb_compress_portable(uint64_t state[8], const uint8_t block[128]) {
    uint64_t w[16];
    for (int i = 0; i < 16; i++) w[i] = kb_load_be64(block + 8 * i);
    uint64_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint64_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (int t = 0; t < 16; t += 8) {
        KB_ROUND(a, b, c, d, e, f, g, h, KB_SHA512_K[t + 0], w[t + 0]);
        KB_ROUND(h, a, b, c, d, e, f, g, KB_SHA512_K[t + 1], w[t + 1]);
        KB_ROUND(g, h, a, b, c, d, e, f, KB_SHA512_K[t + 2], w[t + 2]);
        KB_ROUND(f, g, h, a, b, c, d, e, KB_SHA512_K[t + 3], w[t + 3]);
        KB_ROUND(e, f, g, h, a, b, c, d, KB_SHA512_K[t + 4], w[t + 4]);
        KB_ROUND(d, e, f, g, h, a, b, c, KB_SHA512_K[t + 5], w[t + 5]);
        KB_ROUND(c, d, e, f, g, h, a, b, KB_SHA512_K[t + 6], w[t + 6]);
        KB_ROUND(b, c, d, e, f, g, h, a, KB_SHA512_K[t + 7], w[t + 7]);
    }
    for (int t = 16; t < 80; t += 8) {
        KB_ROUND(a, b, c, d, e, f, g, h, KB_SHA512_K[t + 0], KB_W(t + 0));
        KB_ROUND(h, a, b, c, d, e, f, g, KB_SHA512_K[t + 1], KB_W(t + 1));
        KB_ROUND(g, h, a, b, c, d, e, f, KB_SHA512_K[t + 2], KB_W(t + 2));
        KB_ROUND(f, g, h, a, b, c, d, e, KB_SHA512_K[t + 3], KB_W(t + 3));
        KB_ROUND(e, f, g, h, a, b, c, d, KB_SHA512_K[t + 4], KB_W(t + 4));
        KB_ROUND(d, e, f, g, h, a, b, c, KB_SHA512_K[t + 5], KB_W(t + 5));
        KB_ROUND(c, d, e, f, g, h, a, b, KB_SHA512_K[t + 6], KB_W(t + 6));
        KB_ROUND(b, c, d, e, f, g, h, a, KB_SHA512_K[t + 7], KB_W(t + 7));
    }
    state[0] += a; state[1] += b; state[2] += c; state[3] += d;
    state[4] += e; state[5] += f; state[6] += g; state[7] += h;
}

/* The chaining state, laid out so OpenSSL's block function can work on it in place:
   SHA512_Transform reads and updates only ctx->h (the struct's first member). */
typedef union {
    uint64_t h[8];
#ifdef KB_HAVE_OPENSSL
    SHA512_CTX ctx;
#endif
} kb_sha_state;

typedef void (*kb_compress_fn)(kb_sha_state *st, const uint8_t block[128]);

static void kb_compress_portable_st(kb_sha_state *st, const uint8_t block[128]) {
    kb_compress_portable(st->h, block);
}

#ifdef KB_HAVE_OPENSSL
static void kb_compress_openssl_st(kb_sha_state *st, const uint8_t block[128]) {
    SHA512_Transform(&st->ctx, block);
}
#endif

/* SHA-512/256 of msg[0..len) with the given compression function. Full blocks are
   compressed straight from the message; the tail gets FIPS 180-4 padding (0x80, zeros,
   the 128-bit big-endian bit length) in one block, or two when fewer than 17 bytes of
   the last block are free (tails of 112..127 bytes).
   Written for short keys, where this is a fifth of the cost: fixed-size zeroing and
   8-byte copies instead of variable-length memset/memcpy (which GCC turns into
   `rep movs`/`rep stos`, with a slow start, or library calls). */
static inline void kb_sha512_256(kb_compress_fn compress, const uint8_t *msg, size_t len,
                                 uint8_t out[32]) {
    kb_sha_state st;
    memcpy(st.h, KB_SHA512_256_IV, sizeof KB_SHA512_256_IV);
    size_t full = len / 128;
    for (size_t i = 0; i < full; i++) compress(&st, msg + 128 * i);
    const uint8_t *p = msg + 128 * full;
    size_t rem = len - 128 * full;
    uint64_t words[32]; /* two blocks, 8-byte aligned */
    uint8_t *tail = (uint8_t *)words;
    size_t nblocks = rem < 112 ? 1 : 2;
    memset(words, 0, 128);
    if (nblocks == 2) memset(words + 16, 0, 128);
    size_t i = 0;
    for (; i + 8 <= rem; i += 8) memcpy(tail + i, p + i, 8);
    for (; i < rem; i++) tail[i] = p[i];
    tail[rem] = 0x80;
    kb_store_be64(tail + 128 * nblocks - 16, (uint64_t)len >> 61);
    kb_store_be64(tail + 128 * nblocks - 8, (uint64_t)len << 3);
    compress(&st, tail);
    if (nblocks == 2) compress(&st, tail + 128);
    for (int w = 0; w < 4; w++) kb_store_be64(out + 8 * w, st.h[w]);
}

/* --- eight messages at once: AVX-512 ------------------------------------------------
   kb_sha512_256_x8 hashes up to eight messages of at most KB_X8_MAX_LEN bytes (one padded
   block each), one message per 64-bit lane of eight-lane registers: the state a..h and
   the schedule W[0..15] are 24 of the 32 zmm registers, and each of the round's
   three-input functions (Ch, Maj, the three-way XORs of the Sigmas) is one ternary-logic
   instruction. Keys are this short in every workload we know of; a longer one takes the
   scalar path. Measured on this machine (36-byte keys, one core, bench.kernel_bench):
   see bench/README.md, "Eight keys at once". Compiled for x86-64 with GCC or Clang; used
   only when the CPU says it has AVX-512F (kb_x8_usable); setup.py's portable build
   (COMPACTOR_KERNEL_PORTABLE_SHA=1) leaves it out (KB_NO_X8). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(KB_NO_X8)
#define KB_HAVE_X8 1
#include <immintrin.h>

#define KB_X8_MAX_LEN 111
#define KB_X8_TARGET __attribute__((target("avx512f")))

static int kb_x8_usable(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

/* The padded one-block messages of a SIMD pass, transposed: word t of lane k at
   cols[t * lanes + k], already big-endian-decoded; lanes n..lanes-1 repeat message 0. */
static inline void kb_lanes_pad(const uint8_t *const msg[], const size_t len[], int n,
                                int lanes, uint64_t *cols) {
    for (int k = 0; k < lanes; k++) {
        int src = k < n ? k : 0;
        uint64_t words[16];
        uint8_t *block = (uint8_t *)words;
        size_t m = len[src], i = 0;
        const uint8_t *p = msg[src];
        memset(words, 0, sizeof words);
        for (; i + 8 <= m; i += 8) memcpy(block + i, p + i, 8);
        for (; i < m; i++) block[i] = p[i];
        block[m] = 0x80;
        for (int t = 0; t < 15; t++) cols[t * lanes + k] = kb_load_be64(block + 8 * t);
        cols[15 * lanes + k] = (uint64_t)m << 3;
    }
}

/* The digests of a pass's first n lanes: res[q * lanes + k] is word q of lane k's final
   state, of which SHA-512/256 keeps the first four. */
static inline void kb_lanes_store(const uint64_t *res, int n, int lanes, uint8_t *const out[]) {
    for (int k = 0; k < n; k++)
        for (int q = 0; q < 4; q++) kb_store_be64(out[k] + 8 * q, res[q * lanes + k]);
}

#define X8_ROR(x, n) _mm512_ror_epi64((x), (n))
#define X8_XOR3(a, b, c) _mm512_ternarylogic_epi64((a), (b), (c), 0x96)
#define X8_S0(x) X8_XOR3(X8_ROR(x, 28), X8_ROR(x, 34), X8_ROR(x, 39))
#define X8_S1(x) X8_XOR3(X8_ROR(x, 14), X8_ROR(x, 18), X8_ROR(x, 41))
#define X8_s0(x) X8_XOR3(X8_ROR(x, 1), X8_ROR(x, 8), _mm512_srli_epi64((x), 7))
#define X8_s1(x) X8_XOR3(X8_ROR(x, 19), X8_ROR(x, 61), _mm512_srli_epi64((x), 6))
#define X8_CH(e, f, g) _mm512_ternarylogic_epi64((e), (f), (g), 0xCA) /* e ? f : g */
#define X8_MAJ(a, b, c) _mm512_ternarylogic_epi64((a), (b), (c), 0xE8)
#define X8_ADD(x, y) _mm512_add_epi64((x), (y))

#define X8_ROUND(a, b, c, d, e, f, g, h, t, w)                                              \
    do {                                                                                    \
        __m512i t1_ = X8_ADD(X8_ADD(h, X8_S1(e)),                                           \
                             X8_ADD(X8_ADD(X8_CH(e, f, g), w),                              \
                                    _mm512_set1_epi64((long long)KB_SHA512_K[t])));         \
        (d) = X8_ADD(d, t1_);                                                               \
        (h) = X8_ADD(t1_, X8_ADD(X8_S0(a), X8_MAJ(a, b, c)));                               \
    } while (0)

/* Schedule word t (t >= 16) in place in the 16-word ring; i = t mod 16 is a constant. */
#define X8_W(i)                                                                             \
    (w[i] = X8_ADD(X8_ADD(w[i], X8_s1(w[((i) + 14) & 15])),                                 \
                   X8_ADD(w[((i) + 9) & 15], X8_s0(w[((i) + 1) & 15]))))

/* Sixteen rounds from round t (a multiple of 16) with the round macro R, the working
   variables renamed rather than moved; `W` is w[i] or the schedule's next word. The
   SIMD passes' shared round order (X8_ROUND, X4_ROUND). */
#define KB_SIXTEEN(R, t, W)                                                                 \
    do {                                                                                    \
        R(a, b, c, d, e, f, g, h, (t) + 0, W(0));                                           \
        R(h, a, b, c, d, e, f, g, (t) + 1, W(1));                                           \
        R(g, h, a, b, c, d, e, f, (t) + 2, W(2));                                           \
        R(f, g, h, a, b, c, d, e, (t) + 3, W(3));                                           \
        R(e, f, g, h, a, b, c, d, (t) + 4, W(4));                                           \
        R(d, e, f, g, h, a, b, c, (t) + 5, W(5));                                           \
        R(c, d, e, f, g, h, a, b, (t) + 6, W(6));                                           \
        R(b, c, d, e, f, g, h, a, (t) + 7, W(7));                                           \
        R(a, b, c, d, e, f, g, h, (t) + 8, W(8));                                           \
        R(h, a, b, c, d, e, f, g, (t) + 9, W(9));                                           \
        R(g, h, a, b, c, d, e, f, (t) + 10, W(10));                                         \
        R(f, g, h, a, b, c, d, e, (t) + 11, W(11));                                         \
        R(e, f, g, h, a, b, c, d, (t) + 12, W(12));                                         \
        R(d, e, f, g, h, a, b, c, (t) + 13, W(13));                                         \
        R(c, d, e, f, g, h, a, b, (t) + 14, W(14));                                         \
        R(b, c, d, e, f, g, h, a, (t) + 15, W(15));                                         \
    } while (0)
#define X8_SIXTEEN(t, W) KB_SIXTEEN(X8_ROUND, t, W)
#define X8_LOADED(i) w[i]

/* SHA-512/256 of msg[k][0..len[k]) into out[k] for k < n (1 <= n <= 8), every len[k] <=
   KB_X8_MAX_LEN. Lanes n..7 hash message 0 again and are not stored. */
KB_X8_TARGET static void kb_sha512_256_x8(const uint8_t *const msg[8], const size_t len[8],
                                          int n, uint8_t *const out[8]) {
    uint64_t cols[16][8] __attribute__((aligned(64)));
    kb_lanes_pad(msg, len, n, 8, &cols[0][0]);
    __m512i w[16];
    for (int t = 0; t < 16; t++) w[t] = _mm512_load_si512((const void *)cols[t]);
    __m512i a = _mm512_set1_epi64((long long)KB_SHA512_256_IV[0]);
    __m512i b = _mm512_set1_epi64((long long)KB_SHA512_256_IV[1]);
    __m512i c = _mm512_set1_epi64((long long)KB_SHA512_256_IV[2]);
    __m512i d = _mm512_set1_epi64((long long)KB_SHA512_256_IV[3]);
    __m512i e = _mm512_set1_epi64((long long)KB_SHA512_256_IV[4]);
    __m512i f = _mm512_set1_epi64((long long)KB_SHA512_256_IV[5]);
    __m512i g = _mm512_set1_epi64((long long)KB_SHA512_256_IV[6]);
    __m512i h = _mm512_set1_epi64((long long)KB_SHA512_256_IV[7]);
    X8_SIXTEEN(0, X8_LOADED);
    X8_SIXTEEN(16, X8_W);
    X8_SIXTEEN(32, X8_W);
    X8_SIXTEEN(48, X8_W);
    X8_SIXTEEN(64, X8_W);
    /* Only the first four words are the output (SHA-512/256 truncates). */
    __m512i head[4] = {a, b, c, d};
    uint64_t res[4][8] __attribute__((aligned(64)));
    for (int q = 0; q < 4; q++)
        _mm512_store_si512((void *)res[q],
                           X8_ADD(head[q], _mm512_set1_epi64((long long)KB_SHA512_256_IV[q])));
    kb_lanes_store(&res[0][0], n, 8, out);
}

/* --- four messages at once: AVX2 ----------------------------------------------------
   kb_sha512_256_x4x2 has kb_sha512_256_x8's signature and contract, for CPUs with AVX2
   but not AVX-512 (most AMD EPYC before Zen 4, Intel client parts): the same one-block
   lanes, four to a 256-bit register, two passes for eight messages. AVX2 has no rotate
   and 16 registers, so a round costs about twice the instructions of AVX-512's: each
   rotation is two shifts and an OR (a byte shuffle for ROTR 8), and the schedule spills
   to the stack. It is still faster than one key at a time through OpenSSL; two halves
   interleaved in one pass were no faster (more spills). Measured on an AMD EPYC (Zen 3),
   36-byte keys, one core: see bench/README.md, "Four keys at once on AVX2". */
#define KB_X4_TARGET __attribute__((target("avx2")))

static int kb_x4_usable(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

#define X4_ROR(x, n) _mm256_or_si256(_mm256_srli_epi64((x), (n)), _mm256_slli_epi64((x), 64 - (n)))
#define X4_XOR(x, y) _mm256_xor_si256((x), (y))
#define X4_XOR3(a, b, c) X4_XOR(X4_XOR((a), (b)), (c))
#define X4_ADD(x, y) _mm256_add_epi64((x), (y))
/* ROTR 8 of each 64-bit lane is a byte shuffle: one instruction instead of three. */
#define X4_ROR8(x)                                                                           \
    _mm256_shuffle_epi8((x), _mm256_setr_epi8(1, 2, 3, 4, 5, 6, 7, 0, 9, 10, 11, 12, 13, 14, \
                                              15, 8, 1, 2, 3, 4, 5, 6, 7, 0, 9, 10, 11, 12,  \
                                              13, 14, 15, 8))
#define X4_S0(x) X4_XOR3(X4_ROR(x, 28), X4_ROR(x, 34), X4_ROR(x, 39))
#define X4_S1(x) X4_XOR3(X4_ROR(x, 14), X4_ROR(x, 18), X4_ROR(x, 41))
#define X4_s0(x) X4_XOR3(X4_ROR(x, 1), X4_ROR8(x), _mm256_srli_epi64((x), 7))
#define X4_s1(x) X4_XOR3(X4_ROR(x, 19), X4_ROR(x, 61), _mm256_srli_epi64((x), 6))
/* Ch(e, f, g) = g ^ (e & (f ^ g)); Maj(a, b, c) = b ^ ((a ^ b) & (b ^ c)). */
#define X4_CH(e, f, g) X4_XOR((g), _mm256_and_si256((e), X4_XOR((f), (g))))
#define X4_MAJ(a, b, c) X4_XOR((b), _mm256_and_si256(X4_XOR((a), (b)), X4_XOR((b), (c))))

#define X4_ROUND(a, b, c, d, e, f, g, h, t, w)                                              \
    do {                                                                                    \
        __m256i t1_ = X4_ADD(X4_ADD(h, X4_S1(e)),                                           \
                             X4_ADD(X4_ADD(X4_CH(e, f, g), w),                              \
                                    _mm256_set1_epi64x((long long)KB_SHA512_K[t])));        \
        (d) = X4_ADD(d, t1_);                                                               \
        (h) = X4_ADD(t1_, X4_ADD(X4_S0(a), X4_MAJ(a, b, c)));                               \
    } while (0)

#define X4_W(i)                                                                             \
    (w[i] = X4_ADD(X4_ADD(w[i], X4_s1(w[((i) + 14) & 15])),                                 \
                   X4_ADD(w[((i) + 9) & 15], X4_s0(w[((i) + 1) & 15]))))

#define X4_SIXTEEN(t, W) KB_SIXTEEN(X4_ROUND, t, W)
#define X4_LOADED(i) w[i]

/* Four lanes: msg[0..n) (1 <= n <= 4, every len <= KB_X8_MAX_LEN); lanes n..3 hash
   message 0 again and are not stored. */
KB_X4_TARGET static void kb_sha512_256_x4_lanes(const uint8_t *const msg[], const size_t len[],
                                                int n, uint8_t *const out[]) {
    uint64_t cols[16][4] __attribute__((aligned(32)));
    kb_lanes_pad(msg, len, n, 4, &cols[0][0]);
    __m256i w[16];
    for (int t = 0; t < 16; t++) w[t] = _mm256_load_si256((const __m256i *)cols[t]);
    __m256i a = _mm256_set1_epi64x((long long)KB_SHA512_256_IV[0]);
    __m256i b = _mm256_set1_epi64x((long long)KB_SHA512_256_IV[1]);
    __m256i c = _mm256_set1_epi64x((long long)KB_SHA512_256_IV[2]);
    __m256i d = _mm256_set1_epi64x((long long)KB_SHA512_256_IV[3]);
    __m256i e = _mm256_set1_epi64x((long long)KB_SHA512_256_IV[4]);
    __m256i f = _mm256_set1_epi64x((long long)KB_SHA512_256_IV[5]);
    __m256i g = _mm256_set1_epi64x((long long)KB_SHA512_256_IV[6]);
    __m256i h = _mm256_set1_epi64x((long long)KB_SHA512_256_IV[7]);
    X4_SIXTEEN(0, X4_LOADED);
    X4_SIXTEEN(16, X4_W);
    X4_SIXTEEN(32, X4_W);
    X4_SIXTEEN(48, X4_W);
    X4_SIXTEEN(64, X4_W);
    __m256i head[4] = {a, b, c, d};
    uint64_t res[4][4] __attribute__((aligned(32)));
    for (int q = 0; q < 4; q++)
        _mm256_store_si256((__m256i *)res[q],
                           X4_ADD(head[q], _mm256_set1_epi64x((long long)KB_SHA512_256_IV[q])));
    kb_lanes_store(&res[0][0], n, 4, out);
}

/* The eight-lane signature of kb_sha512_256_x8, as two passes of four. */
KB_X4_TARGET static void kb_sha512_256_x4x2(const uint8_t *const msg[8], const size_t len[8], int n,
                               uint8_t *const out[8]) {
    kb_sha512_256_x4_lanes(msg, len, n < 4 ? n : 4, out);
    if (n > 4) kb_sha512_256_x4_lanes(msg + 4, len + 4, n - 4, out + 4);
}
#endif /* x86-64 */

#endif /* KB_SHA512_256_H */
