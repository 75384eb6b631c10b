/* Raw cost of SHA-512/256 per short key in C with OpenSSL: the reference the key
 * kernel is held against (docs/ARCHITECTURE.md §9: hash + insert within 1.3x of the raw hash).
 *
 *   cc -O2 -o raw_sha512_256 raw_sha512_256.c -lcrypto
 *   ./raw_sha512_256 [keys=1000000] [key_bytes=36]
 *
 * One thread, one call sequence per key (init, update, final), over distinct keys held
 * in memory. Two ways: OpenSSL's low-level SHA-512 with the SHA-512/256 initial values
 * and a 32-byte digest (FIPS 180-4 5.3.6.2; the same compression function), and EVP with
 * EVP_sha512_256() reusing one context. Prints one JSON object, with the digest of "abc"
 * so the caller can check the low-level path really computes SHA-512/256.
 */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const SHA_LONG64 IV_512_256[8] = {
    0x22312194FC2BF72CULL, 0x9F555FA3C84C64C2ULL, 0x2393B86B6F53B151ULL,
    0x963877195940EABDULL, 0x96283EE2A88EFFE3ULL, 0xBE5E1E2553863992ULL,
    0x2B0199FC2C85B8AAULL, 0x0EB72DDC81C52CA2ULL,
};

static void sha512_256(const unsigned char *data, size_t len, unsigned char *out) {
    SHA512_CTX c;
    unsigned char full[64];
    SHA512_Init(&c);
    memcpy(c.h, IV_512_256, sizeof IV_512_256);
    SHA512_Update(&c, data, len);
    SHA512_Final(full, &c); /* md_len stays 64: take the first 32 bytes */
    memcpy(out, full, 32);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int klen = argc > 2 ? atoi(argv[2]) : 36;
    if (n < 1 || klen < 1 || klen > 4096) {
        fprintf(stderr, "usage: %s [keys >= 1] [key_bytes 1..4096]\n", argv[0]);
        return 2;
    }
    unsigned char *keys = malloc((size_t)n * (size_t)klen);
    if (keys == NULL) {
        perror("malloc");
        return 1;
    }
    for (long i = 0; i < n; i++) {
        char buf[64];
        int w = snprintf(buf, sizeof buf, "%08lx-%04lx-4%03lx-8%03lx-%012lx", i * 2654435761UL,
                         i & 0xffff, i & 0xfff, (i >> 12) & 0xfff, i * 40503UL);
        for (int j = 0; j < klen; j++) keys[(size_t)i * klen + j] = (unsigned char)buf[j % w];
    }
    unsigned char md[64];
    unsigned int mdlen = 0;
    unsigned sink = 0;

    double best_low = 1e30, best_evp = 1e30;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    const EVP_MD *m = EVP_sha512_256();
    for (int rep = 0; rep < 3; rep++) {
        double t = now();
        for (long i = 0; i < n; i++) {
            sha512_256(keys + (size_t)i * klen, (size_t)klen, md);
            sink ^= md[0];
        }
        t = now() - t;
        if (t < best_low) best_low = t;
        t = now();
        for (long i = 0; i < n; i++) {
            EVP_DigestInit_ex(ctx, m, NULL);
            EVP_DigestUpdate(ctx, keys + (size_t)i * klen, (size_t)klen);
            EVP_DigestFinal_ex(ctx, md, &mdlen);
            sink ^= md[0];
        }
        t = now() - t;
        if (t < best_evp) best_evp = t;
    }
    EVP_MD_CTX_free(ctx);
    sha512_256((const unsigned char *)"abc", 3, md);
    char hex[65];
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    printf("{\"keys\": %ld, \"key_bytes\": %d, \"lowlevel_ns_per_key\": %.1f, "
           "\"evp_ns_per_key\": %.1f, \"abc\": \"%s\", \"sink\": %u}\n",
           n, klen, best_low / (double)n * 1e9, best_evp / (double)n * 1e9, hex, sink);
    free(keys);
    return 0;
}
