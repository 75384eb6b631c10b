/*
 * worker.kernel._keybuffer: the compiled key buffer (docs/ARCHITECTURE.md §5).
 *
 * One fixed open-addressing hash table per worker process, allocated once and reused
 * for every partition and job, mapping SHA-512/256(key) to the key's winning record in
 * the current window. Keys are hashed straight from Arrow buffers (Arrow C data
 * interface, no per-key Python objects), on up to `threads` threads, with the GIL
 * released.
 *
 * Entries: 41 bytes each, slots = capacity_bytes / 41 (3,273,603 for 128 MiB):
 *   32 bytes  SHA-512/256 of the key
 *    4 bytes  int1: uint32 offset delta = record offset - window base offset
 *    4 bytes  int2: int32 value delta, by strategy (KIP-280):
 *                 offset     0 (unused)
 *                 timestamp  record timestamp - window's first timestamp
 *                 header     header value - window's first header value (0 if none)
 *    1 byte   flag: 0 = empty; else bit 7 set (occupied), bit 6 "has header", bits 0-5
 *             a tag: 6 more bits of the key's hash (byte 8)
 * Stored as two arrays in one allocation, all flag bytes first (ctrl[slot]) and then
 * the 40-byte rest (entry[slot]: hash, int1, int2), so still 41 bytes a slot. Why split:
 * a linear-probe run is read from the flag array, 64 slots per cache line, and an
 * entry's hash is compared only when the 6-bit tag matches (1 in 64 for other keys), so
 * a probe touches about one flag line and one entry instead of several 41-byte entries;
 * at 95% load that halves the insert's cost over the hash's. Integers are in native byte
 * order (the table never leaves the process).
 *
 * Clearing costs O(keys held): a used-slot list records the slot of every key the
 * window inserted; reset zeroes those flag bytes, or memsets the flags of the window's
 * slots (`active` bytes, 1/41 of what it used) when that writes less. The 40-byte
 * entries are never cleared: an entry only counts when its flag says so.
 *
 * Growing: a window starts on the first `active` slots of the table only, slots >> k
 * for the smallest k that makes that at most `start_slots` (ACTIVE_MIN), and doubles
 * them (k - 1, so the last step reaches exactly `slots`) whenever it holds 95% of them
 * and another record comes: the window's keys are moved in place (grow). So a window of
 * few keys touches few pages (the table is mapped lazily: what is never touched is not in
 * RSS) and probes a table that fits the caches, while the window-closing rule below, and
 * so every window's records and keep-set, is exactly that of the full table. Reset
 * starts the next window small again, unless the window it ends was full: a partition
 * too big for one window fills one after another, and each would climb the whole ladder
 * again.
 *
 * The window-closing rule: insert() consumes records in order and stops at the first
 * eligible record it cannot take: a new key when the table already holds `capacity`
 * keys ("full"), or a record whose offset delta is outside [0, 2^32) or whose value
 * delta is outside int32 ("unrepresentable"). It returns that record's index; the caller
 * closes the window there (phase 2 catches up to exactly that record), resets, and
 * goes on from it. Closing early only ever keeps more records, never fewer, so it is
 * always safe. A reset buffer always takes its first eligible record (capacity >= 1;
 * the value base is taken from the first value seen; and an empty window moves its
 * base offset to a record it could not otherwise store), so every window makes
 * progress.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#ifdef __linux__
#include <sys/mman.h>
#endif

#include "sha512_256.h"

#define ENTRY_BYTES 41 /* per slot: the flag byte + the 40-byte entry */
#define REST_BYTES 40  /* hash, int1, int2 */
#define HASH_BYTES 32
#define E_INT1 32
#define E_INT2 36
#define F_OCCUPIED 0x80
#define F_HAS_VALUE 0x40
#define F_TAG 0x3F

/* Max load 95%: linear probing's expected probe count for a miss is about
   (1 + 1/(1-a)^2)/2: ~200 slots (3 lines of flags) at the very end of a full window,
   ~10 on average over the fill. 95% of 3,273,603 slots (128 MiB) is 3,109,923 keys. */
#define LOAD_NUM 19
#define LOAD_DEN 20

/* A window's first table: at most this many slots (1.3 MiB of entries, 32 KiB of flags),
   unless the buffer is made with another `start_slots`. */
#define ACTIVE_MIN 32768

/* Hashing works in segments of SEGMENT records (the scratch holds their hashes), split
   into blocks that threads claim in order: n/32 records a block, clamped to
   [BLOCK_MIN, BLOCK_MAX], so a batch splits finely enough that a thread waiting for the
   last block idles briefly (a 128-key block is ~25 us of hashing), while claims stay
   rare. Batches of fewer than PARALLEL_MIN records are hashed by the calling thread
   alone: waking a helper would cost more than it saves. */
#define SEGMENT 65536
#define BLOCK_MIN 32
#define BLOCK_MAX 128
#define NBLOCKS_MAX (SEGMENT / BLOCK_MIN)
#define PARALLEL_MIN 512
#define MAX_THREADS 8
#define PREFETCH_AHEAD 8

enum { S_OFFSET = 0, S_TIMESTAMP = 1, S_HEADER = 2 };
enum { IMPL_PORTABLE = 0, IMPL_OPENSSL = 1, IMPL_AVX512 = 2, IMPL_AVX2 = 3 };
enum { PUT_OK = 0, PUT_FULL = 1, PUT_UNREPRESENTABLE = 2, PUT_NOMEM = 3 };
enum { ERR_NONE = 0, ERR_NULL_TIMESTAMP = 1, ERR_NULL_OFFSET = 2 };

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch((p), 1, 3)
#else
#define PREFETCH(p) ((void)(p))
#endif

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* The default: "avx512" when this build has the eight-lane path and the CPU runs it (set
   at import, x8_usable), else "avx2" likewise (x4_usable), else "openssl" when the build
   has it, else "portable". */
#ifdef KB_HAVE_OPENSSL
static int default_impl = IMPL_OPENSSL;
#else
static int default_impl = IMPL_PORTABLE;
#endif
static int x8_usable = 0;
static int x4_usable = 0;

/* The one-message compression an impl uses: "avx512" and "avx2" hash a key of more than
   KB_X8_MAX_LEN bytes, or one key alone, as "openssl" (or "portable") does. */
static kb_compress_fn compress_for(int impl) {
#ifdef KB_HAVE_OPENSSL
    if (impl != IMPL_PORTABLE) return kb_compress_openssl_st;
#endif
    (void)impl;
    return kb_compress_portable_st;
}

#ifdef KB_HAVE_X8
/* Up to eight keys of at most KB_X8_MAX_LEN bytes at once, in lanes (kb_sha512_256_x8's
   signature), or NULL for an impl that hashes one key at a time. */
typedef void (*kb_lanes_fn)(const uint8_t *const msg[8], const size_t len[8], int n,
                            uint8_t *const out[8]);

static kb_lanes_fn lanes_for(int impl) {
    return impl == IMPL_AVX512 ? kb_sha512_256_x8 : impl == IMPL_AVX2 ? kb_sha512_256_x4x2 : NULL;
}
#endif

/* "openssl" / "portable" / "avx512" / "avx2" / None (the default) -> impl code, or -1
   with an error when this build or CPU lacks it. */
static int parse_impl(PyObject *o) {
    if (o == NULL || o == Py_None) return default_impl;
    if (PyUnicode_Check(o)) {
        if (PyUnicode_CompareWithASCIIString(o, "portable") == 0) return IMPL_PORTABLE;
        if (PyUnicode_CompareWithASCIIString(o, "openssl") == 0) {
#ifdef KB_HAVE_OPENSSL
            return IMPL_OPENSSL;
#else
            PyErr_SetString(PyExc_ValueError, "this build has no OpenSSL SHA-512/256");
            return -1;
#endif
        }
        if (PyUnicode_CompareWithASCIIString(o, "avx512") == 0) {
            if (x8_usable) return IMPL_AVX512;
            PyErr_SetString(PyExc_ValueError,
                            "this build or CPU has no AVX-512 SHA-512/256 (it needs x86-64 "
                            "with AVX-512F)");
            return -1;
        }
        if (PyUnicode_CompareWithASCIIString(o, "avx2") == 0) {
            if (x4_usable) return IMPL_AVX2;
            PyErr_SetString(PyExc_ValueError,
                            "this build or CPU has no AVX2 SHA-512/256 (it needs x86-64 "
                            "with AVX2)");
            return -1;
        }
    }
    PyErr_Format(PyExc_ValueError,
                 "hash implementation must be 'openssl', 'portable', 'avx512' or 'avx2', "
                 "not %R",
                 o);
    return -1;
}

static const char *impl_name(int impl) {
    return impl == IMPL_AVX512   ? "avx512"
           : impl == IMPL_AVX2   ? "avx2"
           : impl == IMPL_OPENSSL ? "openssl"
                                  : "portable";
}

/* --- Arrow arrays through the C data interface ----------------------------------- */

#include "../../fileformat/arrow_c_abi.h"

enum { COL_NONE = 0, COL_BIN32, COL_BIN64, COL_INT64, COL_BOOL, COL_INT32 };
enum { WANT_BINARY, WANT_INT64, WANT_BOOL, WANT_INT32 };

/* A borrowed view of one Arrow array. `owner` (the (schema, array) capsule pair) keeps
   the buffers alive; the capsules release the exported structs when collected. */
typedef struct {
    PyObject *owner;
    int kind;
    int64_t length;
    int64_t offset;           /* the array's slice offset, applied to every index */
    const uint8_t *validity;  /* NULL: no nulls */
    const void *values;       /* binary: int32/int64 offsets; int64: values; bool: bits */
    const uint8_t *data;      /* binary data */
} Col;

static const uint8_t empty_bytes[1] = {0};

/* What a WANT_* asks for, with its article, for errors. */
static const char *const col_wanted[] = {"a binary or string", "an int64", "a boolean",
                                         "an int32"};

static int col_import(PyObject *obj, int want, Col *c, const char *what) {
    memset(c, 0, sizeof *c);
    if (obj == NULL || obj == Py_None) return 0;
    PyObject *pair = PyObject_CallMethod(obj, "__arrow_c_array__", NULL);
    if (pair == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s must be an Arrow array (with __arrow_c_array__), not %T",
                         what, obj);
        }
        return -1;
    }
    c->owner = pair;
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_Format(PyExc_TypeError, "%s: __arrow_c_array__ did not return a pair", what);
        return -1;
    }
    struct ArrowSchema *schema = PyCapsule_GetPointer(PyTuple_GET_ITEM(pair, 0), "arrow_schema");
    if (schema == NULL) return -1;
    struct ArrowArray *arr = PyCapsule_GetPointer(PyTuple_GET_ITEM(pair, 1), "arrow_array");
    if (arr == NULL) return -1;
    const char *f = schema->format;
    int64_t nbuf = 2;
    if (want == WANT_BINARY && (strcmp(f, "z") == 0 || strcmp(f, "u") == 0)) {
        c->kind = COL_BIN32;
        nbuf = 3;
    } else if (want == WANT_BINARY && (strcmp(f, "Z") == 0 || strcmp(f, "U") == 0)) {
        c->kind = COL_BIN64;
        nbuf = 3;
    } else if (want == WANT_INT64 && (strcmp(f, "l") == 0 || strncmp(f, "ts", 2) == 0)) {
        c->kind = COL_INT64;
    } else if (want == WANT_BOOL && strcmp(f, "b") == 0) {
        c->kind = COL_BOOL;
    } else if (want == WANT_INT32 && strcmp(f, "i") == 0) {
        c->kind = COL_INT32;
    } else {
        PyErr_Format(PyExc_TypeError, "%s must be %s array, got Arrow format '%s'", what,
                     col_wanted[want], f);
        return -1;
    }
    if (arr->n_buffers != nbuf || arr->dictionary != NULL || arr->length < 0 || arr->offset < 0) {
        PyErr_Format(PyExc_TypeError, "%s: unexpected Arrow array layout", what);
        return -1;
    }
    c->length = arr->length;
    c->offset = arr->offset;
    c->validity = arr->null_count == 0 ? NULL : (const uint8_t *)arr->buffers[0];
    c->values = arr->buffers[1];
    if (nbuf == 3) c->data = arr->buffers[2] ? (const uint8_t *)arr->buffers[2] : empty_bytes;
    if (c->values == NULL && c->length > 0) {
        PyErr_Format(PyExc_TypeError, "%s: Arrow array without a values buffer", what);
        return -1;
    }
    return 0;
}

static void col_release(Col *c) { Py_CLEAR(c->owner); }

/* col_import for an argument that must be an array, not None: TypeError naming `func`
   for None. */
static int col_require(PyObject *obj, int want, Col *c, const char *what, const char *func) {
    if (col_import(obj, want, c, what) < 0) return -1;
    if (c->kind != COL_NONE) return 0;
    PyErr_Format(PyExc_TypeError, "%s: %s must be %s array", func, what, col_wanted[want]);
    return -1;
}

static inline int bit_at(const uint8_t *bits, int64_t i) { return (bits[i >> 3] >> (i & 7)) & 1; }

static inline int col_valid(const Col *c, int64_t i) {
    return c->validity == NULL || bit_at(c->validity, c->offset + i);
}

/* A boolean column's value, nulls reading as false. */
static inline int col_true(const Col *c, int64_t i) {
    return col_valid(c, i) && bit_at((const uint8_t *)c->values, c->offset + i);
}

static inline int64_t col_i64(const Col *c, int64_t i) {
    return ((const int64_t *)c->values)[c->offset + i];
}

static inline const uint8_t *col_key(const Col *c, int64_t i, size_t *len) {
    int64_t j = c->offset + i;
    if (c->kind == COL_BIN32) {
        const int32_t *o = (const int32_t *)c->values;
        *len = (size_t)(o[j + 1] - o[j]);
        return c->data + o[j];
    }
    const int64_t *o = (const int64_t *)c->values;
    *len = (size_t)(o[j + 1] - o[j]);
    return c->data + o[j];
}

/* The columns of one insert() call. */
typedef struct {
    Col keys, offsets, values, has_value, eligible;
} Cols;

/* A record takes part iff its key is not null and the eligible mask (if any) says so. */
static inline int record_eligible(const Col *keys, const Col *eligible, int64_t i) {
    if (!col_valid(keys, i)) return 0;
    return eligible->kind == COL_NONE || col_true(eligible, i);
}

/* --- hashing a segment of keys on several threads ---------------------------------- */

/* Threads claim blocks in increasing order from `next`; `done[b]` publishes block b's
   hashes (release/acquire). The inserting thread consumes blocks in order and, while the
   next block is still being hashed, claims and hashes blocks itself, so the work
   balances without a fixed split and at most a block or two per thread is hashed past
   the point where a window closes.

   Does a second thread pay off for ~36-byte keys? Measured on the 2-core machine
   (UUID keys into a 128 MiB buffer, ns per key): 1 thread 228; 2 threads 116 in large
   batches, 123 in 8,192-record batches, 147 in 1,024-record batches (with a thread
   created per call instead of the pool: 118 / 127 / 163). Hashing is ~200 ns of the
   ~230, so it splits almost perfectly; the default is 2. */
typedef struct {
    const Col *keys;
    const Col *eligible;
    kb_compress_fn compress;
#ifdef KB_HAVE_X8
    kb_lanes_fn lanes_fn; /* short keys in lanes ("avx512", "avx2"), or NULL */
#endif
    int64_t first; /* record index of out[0] */
    int64_t n;
    int64_t block; /* records per block */
    int64_t nblocks;
    uint8_t *out; /* n * 32 bytes; all-zero hash for records that do not take part */
    atomic_llong next;
    atomic_int stop;
    atomic_uchar done[NBLOCKS_MAX];
} HashJob;

/* Hashes block b's records into j->out. With impl "avx512" or "avx2", keys of up to
   KB_X8_MAX_LEN bytes are gathered and hashed eight at a time (j->lanes_fn), in record
   order; a longer key, or any key with another impl, is hashed alone when it is reached. */
static void hash_block(HashJob *j, int64_t b) {
    int64_t lo = b * j->block, hi = lo + j->block < j->n ? lo + j->block : j->n;
#ifdef KB_HAVE_X8
    const uint8_t *lane_key[8];
    size_t lane_len[8];
    uint8_t *lane_out[8];
    int lanes = 0;
#endif
    for (int64_t i = lo; i < hi; i++) {
        uint8_t *out = j->out + (size_t)i * HASH_BYTES;
        int64_t rec = j->first + i;
        if (!record_eligible(j->keys, j->eligible, rec)) {
            memset(out, 0, HASH_BYTES);
            continue;
        }
        size_t len;
        const uint8_t *key = col_key(j->keys, rec, &len);
#ifdef KB_HAVE_X8
        if (j->lanes_fn && len <= KB_X8_MAX_LEN) {
            lane_key[lanes] = key;
            lane_len[lanes] = len;
            lane_out[lanes] = out;
            if (++lanes == 8) {
                j->lanes_fn(lane_key, lane_len, lanes, lane_out);
                lanes = 0;
            }
            continue;
        }
#endif
        kb_sha512_256(j->compress, key, len, out);
    }
#ifdef KB_HAVE_X8
    if (lanes) j->lanes_fn(lane_key, lane_len, lanes, lane_out);
#endif
}

static int claim_and_hash(HashJob *j) {
    long long b = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
    if (b >= j->nblocks) return 0;
    hash_block(j, b);
    atomic_store_explicit(&j->done[b], 1, memory_order_release);
    return 1;
}

static void *helper_main(void *arg) {
    HashJob *j = (HashJob *)arg;
    while (!atomic_load_explicit(&j->stop, memory_order_relaxed) && claim_and_hash(j)) {
    }
    return NULL;
}

static void job_init(HashJob *j, const Col *keys, const Col *eligible, int impl, int64_t first,
                     int64_t n, uint8_t *out) {
    j->keys = keys;
    j->eligible = eligible;
    j->compress = compress_for(impl);
#ifdef KB_HAVE_X8
    j->lanes_fn = lanes_for(impl);
#endif
    j->first = first;
    j->n = n;
    int64_t block = n / 32;
    j->block = block < BLOCK_MIN ? BLOCK_MIN : block > BLOCK_MAX ? BLOCK_MAX : block;
    j->nblocks = (n + j->block - 1) / j->block;
    j->out = out;
    atomic_init(&j->next, 0);
    atomic_init(&j->stop, 0);
    for (int64_t b = 0; b < j->nblocks; b++) atomic_init(&j->done[b], 0);
}

/* Starts up to threads - 1 short-lived helpers for one job (none for small jobs, or if
   pthread_create fails: the calling thread then does all the work). Returns how many
   started. hash_keys() uses these; a KeyBuffer keeps a pool instead (below). */
static int start_helpers(HashJob *j, int threads, pthread_t *tids) {
    int want = j->n < PARALLEL_MIN ? 0 : threads - 1;
    int started = 0;
    for (int t = 0; t < want; t++) {
        if (pthread_create(&tids[t], NULL, helper_main, j) != 0) break;
        started++;
    }
    return started;
}

static void stop_helpers(HashJob *j, pthread_t *tids, int started) {
    atomic_store_explicit(&j->stop, 1, memory_order_relaxed);
    for (int t = 0; t < started; t++) pthread_join(tids[t], NULL);
}

/* A KeyBuffer's helper threads, started on first use and parked on a condition variable
   between jobs: creating and joining threads per insert() call cost ~8% of the time at
   8k-record batches and ~40% at 1k. Fork-safe: a child process (the pid differs) finds
   no threads and starts its own; the parent's are never joined from the child. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t wake; /* helpers: a new job (or quit) */
    pthread_cond_t idle; /* caller: every helper is done with the job */
    HashJob *job;
    uint64_t generation; /* bumped per job */
    int active;          /* helpers not yet done with the current job */
    int nthreads;        /* helpers running */
    int ready;           /* helpers that have read the generation they start from */
    int quit;
    pid_t pid;           /* process the helpers belong to; 0: none started */
    pthread_t tids[MAX_THREADS];
} Pool;

static void *pool_main(void *arg) {
    Pool *p = (Pool *)arg;
    pthread_mutex_lock(&p->mu);
    uint64_t seen = p->generation;
    p->ready++; /* pool_ensure waits for this, so no job is published before we look */
    pthread_cond_broadcast(&p->idle);
    for (;;) {
        while (!p->quit && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit) break;
        seen = p->generation;
        HashJob *j = p->job;
        pthread_mutex_unlock(&p->mu);
        helper_main(j);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0) pthread_cond_broadcast(&p->idle);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void pool_init(Pool *p) {
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->idle, NULL);
    p->job = NULL;
    p->generation = 0;
    p->active = 0;
    p->nthreads = 0;
    p->ready = 0;
    p->quit = 0;
    p->pid = 0;
}

/* Makes sure `want` helpers run in this process (fewer if pthread_create fails). */
static void pool_ensure(Pool *p, int want) {
    pid_t pid = getpid();
    if (p->pid != pid) {
        /* Never started, or inherited through fork() without its threads (and perhaps
           with the mutex held by one of them): start over. */
        pool_init(p);
        p->pid = pid;
    }
    if (p->nthreads >= want) return;
    while (p->nthreads < want) {
        if (pthread_create(&p->tids[p->nthreads], NULL, pool_main, p) != 0) break;
        p->nthreads++;
    }
    pthread_mutex_lock(&p->mu);
    while (p->ready < p->nthreads) pthread_cond_wait(&p->idle, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* Hands the job to every helper; returns how many took it. */
static int pool_start(Pool *p, HashJob *j, int threads) {
    if (j->n < PARALLEL_MIN || threads < 2) return 0;
    pool_ensure(p, threads - 1);
    if (p->nthreads == 0) return 0;
    pthread_mutex_lock(&p->mu);
    p->job = j;
    p->generation++;
    p->active = p->nthreads;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    return p->nthreads;
}

/* Stops the job and waits until no helper touches it any more. */
static void pool_finish(Pool *p, HashJob *j, int started) {
    atomic_store_explicit(&j->stop, 1, memory_order_relaxed);
    if (!started) return;
    pthread_mutex_lock(&p->mu);
    while (p->active > 0) pthread_cond_wait(&p->idle, &p->mu);
    p->job = NULL;
    pthread_mutex_unlock(&p->mu);
}

static void pool_shutdown(Pool *p) {
    if (p->pid != getpid()) return; /* a forked child: the threads are not ours */
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int t = 0; t < p->nthreads; t++) pthread_join(p->tids[t], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->idle);
    p->nthreads = 0;
    p->pid = 0;
}

/* --- the key buffer ----------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    uint8_t *mem;       /* one allocation: ctrl, then entries */
    uint64_t mem_bytes;
    int mem_mapped;     /* mem came from mmap (else PyMem_RawCalloc) */
    uint8_t *ctrl;      /* slots flag bytes */
    uint8_t *entries;   /* slots * 40 bytes */
    uint64_t slots;
    uint64_t capacity;  /* keys a window takes before it is full */
    uint64_t active;    /* slots the window uses now: slots >> k (see grow) */
    uint64_t active_capacity; /* keys the active slots take before the window grows */
    uint64_t start_slots; /* the most slots a window starts on */
    uint64_t size;      /* keys held in the current window */
    int lost;           /* a grow failed part-way: the used list misses keys (clear all) */
    uint32_t *used;     /* the slot of every key of the window, in insertion order */
    int strategy;
    int64_t base_offset;
    int base_set;
    int64_t value_base; /* the window's first timestamp / header value */
    int value_base_set;
    uint32_t max_delta; /* highest offset delta consumed in the window */
    int threads;
    Pool pool;          /* threads - 1 hashing helpers, started on first use */
    int impl;
    int busy;           /* a call is running with the GIL released */
    uint8_t *scratch;   /* SEGMENT * 32 bytes of hashes */
    /* The keep-set, built on demand after inserts (see build_winners): either a bitmap
       over offset deltas 0..max_delta or the winning deltas sorted ascending. */
    int wvalid;
    int wbitmap;
    uint64_t wcount;
    uint64_t *wbits;    /* bitmap words */
    uint64_t wbits_cap; /* words allocated */
    uint32_t *wsorted;
    uint32_t *wtmp;
    uint64_t wsorted_cap;
    /* counters */
    uint64_t resets, full_clears, slot_clears;
    uint64_t records, new_keys, replaced, probes, grows;
    uint64_t keepset_bitmaps, keepset_sorted;
} KeyBuffer;

/* Keys `slots` slots take at the 95% load. */
static inline uint64_t load_capacity(uint64_t slots) {
    return slots - slots * (LOAD_DEN - LOAD_NUM) / LOAD_DEN;
}

/* Starts a window on the largest step of the ladder slots >> k that is at most
   `start_slots`. */
static void start_small(KeyBuffer *kb) {
    uint64_t active = kb->slots;
    while (active > kb->start_slots) active >>= 1;
    kb->active = active;
    kb->active_capacity = load_capacity(active);
}

/* The home slot: Lemire's multiply-shift maps the hash's first 64 bits onto [0, slots)
   without a division. SHA-512/256 output is uniform, so no further mixing is needed. */
static inline uint64_t home_slot(uint64_t h0, uint64_t slots) {
#ifdef __SIZEOF_INT128__
    return (uint64_t)(((unsigned __int128)h0 * slots) >> 64);
#else
    return h0 % slots;
#endif
}

static inline uint8_t *entry_at(const KeyBuffer *kb, uint64_t slot) {
    return kb->entries + slot * REST_BYTES;
}

/* Does a record (d, dv, has) beat the stored entry `e` (flag `f`) of the same key?
   (KIP-280)
     offset:    higher offset
     timestamp: higher timestamp, ties to the higher offset
     header:    a record with the header beats one without; both with: higher value,
                ties to the higher offset; both without: higher offset */
static inline int beats(int strategy, const uint8_t *e, uint8_t f, uint32_t d, int32_t dv, int has) {
    uint32_t sd;
    memcpy(&sd, e + E_INT1, 4);
    if (strategy == S_OFFSET) return d > sd;
    int32_t sv;
    memcpy(&sv, e + E_INT2, 4);
    if (strategy == S_HEADER) {
        int shas = (f & F_HAS_VALUE) != 0;
        if (has != shas) return has;
        if (!has) return d > sd;
    }
    if (dv != sv) return dv > sv;
    return d > sd;
}

/* Stores the record in `slot`: a new key (flag empty) or a winner replacing its entry. */
static inline void write_entry(KeyBuffer *kb, uint64_t slot, const uint8_t *h, uint8_t tag,
                               uint32_t d, int32_t dv, int has, int is_new) {
    uint8_t *e = entry_at(kb, slot);
    if (is_new) memcpy(e, h, HASH_BYTES);
    memcpy(e + E_INT1, &d, 4);
    memcpy(e + E_INT2, &dv, 4);
    kb->ctrl[slot] = (uint8_t)(tag | (has ? F_HAS_VALUE : 0));
}

/* The key's entry at `slot` (its tag matched): PUT_OK after applying the strategy, or -1
   if the slot holds another key. */
static inline int try_match(KeyBuffer *kb, uint64_t slot, const uint8_t *h, uint64_t h0,
                            uint8_t tag, uint32_t d, int32_t dv, int has) {
    const uint8_t *e = entry_at(kb, slot);
    uint64_t e0;
    memcpy(&e0, e, 8);
    if (e0 != h0 || memcmp(e + 8, h + 8, HASH_BYTES - 8) != 0) return -1;
    if (beats(kb->strategy, e, kb->ctrl[slot], d, dv, has)) {
        write_entry(kb, slot, h, tag, d, dv, has, 0);
        kb->replaced++;
    }
    return PUT_OK;
}

static inline int put_new(KeyBuffer *kb, uint64_t slot, const uint8_t *h, uint8_t tag,
                          uint32_t d, int32_t dv, int has) {
    if (kb->size >= kb->capacity) return PUT_FULL;
    write_entry(kb, slot, h, tag, d, dv, has, 1);
    kb->used[kb->size++] = (uint32_t)slot;
    kb->new_keys++;
    return PUT_OK;
}

/* Linear probing from the home slot over the flag bytes: stop at an empty flag (the key
   is new) or at a slot whose tag matches and whose entry holds the hash. With SSE2 the
   flags are scanned 16 at a time (one compare for "empty", one for "tag matches"): near
   95% load a run is ~10 slots, and a byte-at-a-time loop spent most of the insert's own
   time in the loop and its mispredicted exit. Groups never wrap around the table's end
   (those slots go one by one), so loads stay inside the flag array. The probe count is
   bounded by the table size: a buffer of fewer than 20 slots can be 100% full
   (capacity = slots), so a missing key may find no empty slot at all. */
static int grow(KeyBuffer *kb);

static inline int put(KeyBuffer *kb, const uint8_t *h, uint32_t d, int32_t dv, int has) {
    if (kb->size >= kb->active_capacity && kb->active < kb->slots && grow(kb) < 0)
        return PUT_NOMEM;
    uint64_t h0;
    memcpy(&h0, h, 8);
    const uint8_t tag = (uint8_t)(F_OCCUPIED | (h[8] & F_TAG));
    const uint64_t slots = kb->active;
    uint64_t slot = home_slot(h0, slots);
    uint64_t left = slots; /* slots not inspected yet */
#ifdef __SSE2__
    const __m128i zero = _mm_setzero_si128();
    const __m128i keep = _mm_set1_epi8((char)(F_OCCUPIED | F_TAG));
    const __m128i want = _mm_set1_epi8((char)tag);
#endif
    while (left > 0) {
#ifdef __SSE2__
        if (left >= 16 && slot + 16 <= slots) {
            __m128i g = _mm_loadu_si128((const __m128i *)(const void *)(kb->ctrl + slot));
            unsigned empty = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(g, zero));
            unsigned match =
                (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(g, keep), want));
            if (empty) match &= (empty & (0u - empty)) - 1; /* only lanes before the gap */
            for (; match; match &= match - 1) {
                unsigned lane = (unsigned)__builtin_ctz(match);
                if (try_match(kb, slot + lane, h, h0, tag, d, dv, has) == PUT_OK) {
                    kb->probes += slots - left + lane + 1;
                    return PUT_OK;
                }
            }
            if (empty) {
                unsigned lane = (unsigned)__builtin_ctz(empty);
                kb->probes += slots - left + lane + 1;
                return put_new(kb, slot + lane, h, tag, d, dv, has);
            }
            left -= 16;
            slot += 16;
            if (slot == slots) slot = 0;
            continue;
        }
#endif
        uint8_t f = kb->ctrl[slot];
        if (f == 0) {
            kb->probes += slots - left + 1;
            return put_new(kb, slot, h, tag, d, dv, has);
        }
        if ((f & (F_OCCUPIED | F_TAG)) == tag && try_match(kb, slot, h, h0, tag, d, dv, has) == PUT_OK) {
            kb->probes += slots - left + 1;
            return PUT_OK;
        }
        left--;
        if (++slot == slots) slot = 0;
    }
    kb->probes += slots;
    return PUT_FULL;
}

/* A key moved aside while its window grows: its flag byte and 40-byte entry. */
typedef struct {
    uint8_t flag;
    uint8_t rest[REST_BYTES];
} Moved;

/* Takes the window from `active` slots to the next step of the ladder (twice as many, or
   `slots`), moving its keys in place, without a second table:

   One pass from the last old slot down to the first. Each key is lifted out of its slot
   p and put at the first empty slot at or after its new home q, if q >= p and that slot
   is found before the end; any other key is set aside and put back, wrapping as usual,
   once the pass is done. Why this keeps every probe run whole: when slot p is reached,
   every slot after p holds a moved key or nothing (the old keys there were lifted
   already), so a key put at or after p never lands on a key yet to move, and every slot
   between a moved key's home and its slot stays occupied (a slot is only emptied when
   its old key is lifted, and the run of a key moved earlier starts after that slot). The
   multiply-shift home of a key only moves right as the table grows, about twice as far
   from the start, so the keys set aside are those of the first slots and of runs that
   would cross the end: a few hundred. The used list is rebuilt with the new slots.
   Returns -1 if the keys set aside cannot be held (the window then loses keys: `lost`). */
static int grow(KeyBuffer *kb) {
    const uint64_t old = kb->active;
    uint64_t slots = kb->slots;
    while ((slots >> 1) > old) slots >>= 1;
    kb->active = slots;
    kb->active_capacity = load_capacity(slots);
    kb->grows++;
    Moved *aside = NULL;
    uint64_t n_aside = 0, aside_cap = 0, placed = 0;
    for (uint64_t p = old; p-- > 0;) {
        const uint8_t f = kb->ctrl[p];
        if (f == 0) continue;
        kb->ctrl[p] = 0;
        const uint8_t *e = entry_at(kb, p);
        uint64_t h0;
        memcpy(&h0, e, 8);
        uint64_t q = home_slot(h0, slots);
        if (q >= p) {
            while (q < slots && kb->ctrl[q]) q++;
            if (q < slots) {
                if (q != p) memcpy(entry_at(kb, q), e, REST_BYTES);
                kb->ctrl[q] = f;
                kb->used[placed++] = (uint32_t)q;
                continue;
            }
        }
        if (n_aside == aside_cap) {
            aside_cap = aside_cap ? 2 * aside_cap : 256;
            Moved *more = PyMem_RawRealloc(aside, aside_cap * sizeof(Moved));
            if (more == NULL) {
                PyMem_RawFree(aside);
                kb->lost = 1;
                kb->size = placed;
                return -1;
            }
            aside = more;
        }
        aside[n_aside].flag = f;
        memcpy(aside[n_aside].rest, e, REST_BYTES);
        n_aside++;
    }
    for (uint64_t i = 0; i < n_aside; i++) {
        uint64_t h0;
        memcpy(&h0, aside[i].rest, 8);
        uint64_t q = home_slot(h0, slots);
        while (kb->ctrl[q])
            if (++q == slots) q = 0;
        memcpy(entry_at(kb, q), aside[i].rest, REST_BYTES);
        kb->ctrl[q] = aside[i].flag;
        kb->used[placed++] = (uint32_t)q;
    }
    PyMem_RawFree(aside);
    return 0;
}

/* Fetch the home slot's flag and entry ahead of time: with a 128 MiB table nearly every
   key's first touch is a cache miss. */
static inline void prefetch_home(const KeyBuffer *kb, const uint8_t *h) {
    uint64_t h0;
    memcpy(&h0, h, 8);
    uint64_t slot = home_slot(h0, kb->active);
    const uint8_t *e = entry_at(kb, slot);
    PREFETCH(kb->ctrl + slot);
    PREFETCH(e);
    PREFETCH(e + REST_BYTES - 1); /* an entry may straddle two cache lines */
}

/* The record's offset and value as deltas from the window's bases (taking the bases from
   this record when the window has none yet), or PUT_UNREPRESENTABLE. */
static inline int represent(KeyBuffer *kb, const Cols *c, int64_t i, uint32_t *d, int32_t *dv,
                            int *has, int *err) {
    if (!col_valid(&c->offsets, i)) {
        *err = ERR_NULL_OFFSET;
        return PUT_UNREPRESENTABLE;
    }
    int64_t off = col_i64(&c->offsets, i);
    if (!kb->base_set) {
        kb->base_offset = off;
        kb->base_set = 1;
    }
    if (off < kb->base_offset || (uint64_t)off - (uint64_t)kb->base_offset > UINT32_MAX) {
        if (kb->size != 0) return PUT_UNREPRESENTABLE;
        /* An empty window holds nothing relative to its base, so it may move it: a reset
           buffer takes its first record whatever base the caller gave. */
        kb->base_offset = off;
        kb->max_delta = 0;
    }
    *d = (uint32_t)((uint64_t)off - (uint64_t)kb->base_offset);
    *dv = 0;
    *has = 0;
    if (kb->strategy == S_TIMESTAMP) {
        if (c->values.kind == COL_NONE || !col_valid(&c->values, i)) {
            *err = ERR_NULL_TIMESTAMP;
            return PUT_UNREPRESENTABLE;
        }
    } else if (kb->strategy == S_HEADER) {
        *has = c->values.kind != COL_NONE && col_valid(&c->values, i) &&
               (c->has_value.kind == COL_NONE || col_true(&c->has_value, i));
    }
    if (kb->strategy == S_TIMESTAMP || *has) {
        int64_t v = col_i64(&c->values, i);
        if (!kb->value_base_set) {
            kb->value_base = v;
            kb->value_base_set = 1;
        }
        int64_t delta;
        if (__builtin_sub_overflow(v, kb->value_base, &delta) || delta < INT32_MIN ||
            delta > INT32_MAX)
            return PUT_UNREPRESENTABLE;
        *dv = (int32_t)delta;
    }
    if (*d > kb->max_delta) kb->max_delta = *d;
    return PUT_OK;
}

/* Inserts block b of the job's segment. Returns -1 when every record was consumed, else
   the index of the record where the window closes (or where an error was found). */
static int64_t insert_block(KeyBuffer *kb, const Cols *c, const HashJob *j, int64_t b, int *err) {
    int64_t lo = b * j->block, hi = lo + j->block < j->n ? lo + j->block : j->n;
    for (int64_t i = lo; i < lo + PREFETCH_AHEAD && i < hi; i++)
        prefetch_home(kb, j->out + (size_t)i * HASH_BYTES);
    for (int64_t i = lo; i < hi; i++) {
        if (i + PREFETCH_AHEAD < hi)
            prefetch_home(kb, j->out + (size_t)(i + PREFETCH_AHEAD) * HASH_BYTES);
        int64_t rec = j->first + i;
        if (!record_eligible(&c->keys, &c->eligible, rec)) continue;
        uint32_t d;
        int32_t dv;
        int has;
        int r = represent(kb, c, rec, &d, &dv, &has, err);
        if (r == PUT_OK) r = put(kb, j->out + (size_t)i * HASH_BYTES, d, dv, has);
        if (r == PUT_NOMEM) *err = -1;
        if (r != PUT_OK) return rec;
        kb->records++;
    }
    return -1;
}

/* Consumes records [start, end) as described at the top; runs without the GIL. */
static int64_t run_insert(KeyBuffer *kb, const Cols *c, int64_t start, int64_t end, int *err) {
    HashJob *j = PyMem_RawMalloc(sizeof(HashJob));
    if (j == NULL) {
        *err = -1;
        return start;
    }
    int64_t result = end;
    for (int64_t pos = start; pos < end; pos += SEGMENT) {
        int64_t n = end - pos < SEGMENT ? end - pos : SEGMENT;
        job_init(j, &c->keys, &c->eligible, kb->impl, pos, n, kb->scratch);
        int started = pool_start(&kb->pool, j, kb->threads);
        int64_t ins = 0, stopped = -1;
        while (ins < j->nblocks) {
            if (atomic_load_explicit(&j->done[ins], memory_order_acquire)) {
                stopped = insert_block(kb, c, j, ins, err);
                if (stopped >= 0) break;
                ins++;
            } else if (!claim_and_hash(j)) {
                cpu_relax(); /* a helper is finishing block `ins` */
            }
        }
        pool_finish(&kb->pool, j, started);
        if (stopped >= 0) {
            result = stopped;
            break;
        }
    }
    PyMem_RawFree(j);
    return result;
}

/* Empties the table: zero the flag byte of each slot the window used (`size` scattered
   byte writes into the flag array), or, when that would write more, memset the flags of
   the window's slots (`active` bytes, 1/41 of what it used; `full_clears`). A scattered
   write is counted as 16 bytes of memset. Either way the cost is O(keys held): the
   memset only happens when the window held more than active/16 keys. The 40-byte entries
   are never touched. */
static void clear_table(KeyBuffer *kb) {
    if (kb->lost) {
        memset(kb->ctrl, 0, kb->slots);
        kb->lost = 0;
        kb->full_clears++;
    } else if (kb->size * 16 <= kb->active) {
        for (uint64_t i = 0; i < kb->size; i++) kb->ctrl[kb->used[i]] = 0;
        kb->slot_clears++;
    } else {
        memset(kb->ctrl, 0, kb->active);
        kb->full_clears++;
    }
    if (kb->size < kb->capacity) start_small(kb); /* a full window's successor starts full */
    kb->size = 0;
    kb->base_set = 0;
    kb->value_base_set = 0;
    kb->max_delta = 0;
    kb->wvalid = 0;
}

/* LSD radix sort of uint32 (8-bit digits), skipping digits all values share. Result in
   `a`. */
static void radix_sort(uint32_t *a, uint32_t *tmp, uint64_t n) {
    uint64_t count[4][256];
    memset(count, 0, sizeof count);
    for (uint64_t i = 0; i < n; i++) {
        uint32_t v = a[i];
        count[0][v & 0xff]++;
        count[1][(v >> 8) & 0xff]++;
        count[2][(v >> 16) & 0xff]++;
        count[3][v >> 24]++;
    }
    uint32_t *src = a, *dst = tmp;
    for (int p = 0; p < 4; p++) {
        int shift = 8 * p;
        if (n == 0 || count[p][(src[0] >> shift) & 0xff] == n) continue;
        uint64_t pos[256], sum = 0;
        for (int b = 0; b < 256; b++) {
            pos[b] = sum;
            sum += count[p][b];
        }
        for (uint64_t i = 0; i < n; i++) dst[pos[(src[i] >> shift) & 0xff]++] = src[i];
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, n * sizeof(uint32_t));
}

/* Offset delta of the winner in used-list position i (prefetching ahead: random reads). */
static inline uint32_t winner_delta(const KeyBuffer *kb, uint64_t i) {
    if (i + 16 < kb->size) PREFETCH(entry_at(kb, kb->used[i + 16]) + E_INT1);
    uint32_t d;
    memcpy(&d, entry_at(kb, kb->used[i]) + E_INT1, 4);
    return d;
}

/* Builds the keep-set of the window (cached until the next insert or reset), reading the
   winners through the used list, or sequentially when the window fills most of the
   table: O(keys held) either way, never a sweep of a mostly empty table.
   - Dense offsets (the usual case: a window's offsets span not much more than its
     records): a bitmap over deltas 0..max_delta. Membership is one bit test and the
     sorted list falls out of a scan; no sort. Used while the bitmap is no bigger than
     max(1 MiB, 4 bytes per winner).
   - Sparse offsets: the deltas, radix-sorted; membership by galloping search.
   Runs without the GIL; returns -1 on allocation failure. */
static int build_winners(KeyBuffer *kb) {
    if (kb->wvalid) return 0;
    uint64_t k = kb->size;
    uint64_t words = ((uint64_t)kb->max_delta >> 6) + 1;
    uint64_t limit = k * 4 > (1u << 20) ? k * 4 : (1u << 20);
    if (words * 8 <= limit) {
        if (words > kb->wbits_cap) {
            uint64_t *w = PyMem_RawRealloc(kb->wbits, words * 8);
            if (w == NULL) return -1;
            kb->wbits = w;
            kb->wbits_cap = words;
        }
        memset(kb->wbits, 0, words * 8);
        if (k > kb->active / 2) {
            /* A window holding over half its slots: one sequential pass over them beats
               k random reads (15 vs 31 ms for 3 M keys in 128 MiB, measured), and is
               still O(keys held) since active < 2k. */
            for (uint64_t s = 0; s < kb->active; s++) {
                if (!kb->ctrl[s]) continue;
                uint32_t d;
                memcpy(&d, entry_at(kb, s) + E_INT1, 4);
                kb->wbits[d >> 6] |= (uint64_t)1 << (d & 63);
            }
        } else {
            for (uint64_t i = 0; i < k; i++) {
                uint32_t d = winner_delta(kb, i);
                kb->wbits[d >> 6] |= (uint64_t)1 << (d & 63);
            }
        }
        kb->wbitmap = 1;
        kb->keepset_bitmaps++;
    } else {
        if (k > kb->wsorted_cap) {
            uint32_t *a = PyMem_RawRealloc(kb->wsorted, k * sizeof(uint32_t));
            if (a == NULL) return -1;
            kb->wsorted = a;
            uint32_t *t = PyMem_RawRealloc(kb->wtmp, k * sizeof(uint32_t));
            if (t == NULL) return -1;
            kb->wtmp = t;
            kb->wsorted_cap = k;
        }
        for (uint64_t i = 0; i < k; i++) kb->wsorted[i] = winner_delta(kb, i);
        radix_sort(kb->wsorted, kb->wtmp, k);
        kb->wbitmap = 0;
        kb->keepset_sorted++;
    }
    kb->wcount = k;
    kb->wvalid = 1;
    return 0;
}

/* The first index >= j of sorted w[0..n) whose value is >= x (galloping from j). */
static inline uint64_t gallop(const uint32_t *w, uint64_t n, uint64_t j, uint32_t x) {
    if (j >= n || w[j] >= x) return j;
    uint64_t lo = j, step = 1, hi; /* invariant: w[lo] < x */
    for (;;) {
        hi = lo + step;
        if (hi >= n) {
            hi = n;
            break;
        }
        if (w[hi] >= x) break;
        lo = hi;
        step <<= 1;
    }
    while (hi - lo > 1) { /* w[lo] < x, and hi == n or w[hi] >= x */
        uint64_t mid = lo + (hi - lo) / 2;
        if (w[mid] < x) lo = mid; else hi = mid;
    }
    return hi;
}

static int kb_check_idle(KeyBuffer *kb) {
    if (kb->mem == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "KeyBuffer is not initialized");
        return -1;
    }
    if (kb->busy) {
        PyErr_SetString(PyExc_RuntimeError, "KeyBuffer is in use by another thread");
        return -1;
    }
    return 0;
}

/* The table's memory: zero-filled and untouched until keys land in it (so it enters RSS
   as it fills). On Linux, tables of 2 MiB and more are mapped anonymously and advised to
   use transparent huge pages: every probe is a random access, and with 4 KiB pages a
   128 MiB table would also miss the TLB on nearly every one. */
#define HUGE_PAGE (2u << 20)
static uint8_t *table_alloc(uint64_t bytes, int *mapped) {
    *mapped = 0;
#if defined(__linux__) && defined(MAP_ANONYMOUS)
    if (bytes >= HUGE_PAGE) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED) {
#ifdef MADV_HUGEPAGE
            (void)madvise(p, bytes, MADV_HUGEPAGE); /* advice only: failure is harmless */
#endif
            *mapped = 1;
            return p;
        }
    }
#endif
    return PyMem_RawCalloc(1, bytes);
}

static void table_free(uint8_t *mem, uint64_t bytes, int mapped) {
    if (mem == NULL) return;
#if defined(__linux__) && defined(MAP_ANONYMOUS)
    if (mapped) {
        munmap(mem, bytes);
        return;
    }
#endif
    (void)bytes;
    (void)mapped;
    PyMem_RawFree(mem);
}

static void kb_free_memory(KeyBuffer *kb) {
    table_free(kb->mem, kb->mem_bytes, kb->mem_mapped);
    PyMem_RawFree(kb->used);
    PyMem_RawFree(kb->scratch);
    PyMem_RawFree(kb->wbits);
    PyMem_RawFree(kb->wsorted);
    PyMem_RawFree(kb->wtmp);
    kb->mem = kb->ctrl = kb->entries = NULL;
    kb->used = NULL;
    kb->scratch = NULL;
    kb->wbits = NULL;
    kb->wsorted = kb->wtmp = NULL;
    kb->wbits_cap = kb->wsorted_cap = 0;
    kb->wvalid = 0;
}

static void kb_dealloc(KeyBuffer *kb) {
    pool_shutdown(&kb->pool);
    kb_free_memory(kb);
    Py_TYPE(kb)->tp_free((PyObject *)kb);
}

static int kb_init(KeyBuffer *kb, PyObject *args, PyObject *kw) {
    static char *names[] = {"capacity_bytes", "threads", "hash_impl", "start_slots", NULL};
    long long capacity_bytes = 128LL << 20;
    int threads = 2;
    PyObject *impl_obj = Py_None;
    long long start_slots = ACTIVE_MIN;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|L$iOL:KeyBuffer", names, &capacity_bytes,
                                     &threads, &impl_obj, &start_slots))
        return -1;
    if (start_slots < 1) {
        PyErr_Format(PyExc_ValueError, "start_slots must be at least 1, got %lld", start_slots);
        return -1;
    }
    if (kb->busy) {
        PyErr_SetString(PyExc_RuntimeError, "KeyBuffer is in use by another thread");
        return -1;
    }
    if (capacity_bytes < ENTRY_BYTES) {
        PyErr_Format(PyExc_ValueError,
                     "the key buffer must hold at least one %d-byte entry, got %lld bytes",
                     ENTRY_BYTES, capacity_bytes);
        return -1;
    }
    uint64_t slots = (uint64_t)capacity_bytes / ENTRY_BYTES;
    if (slots > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "the key buffer is limited to 2^32 - 1 entries");
        return -1;
    }
    if (threads < 1 || threads > MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "threads must be 1..%d, got %d", MAX_THREADS, threads);
        return -1;
    }
    int impl = parse_impl(impl_obj);
    if (impl < 0) return -1;
    uint64_t capacity = load_capacity(slots);
    kb_free_memory(kb);
    /* The flag array, padded to a cache line, then the entries. */
    uint64_t ctrl_bytes = (slots + 63) & ~(uint64_t)63;
    kb->mem_bytes = ctrl_bytes + slots * REST_BYTES;
    kb->mem = table_alloc(kb->mem_bytes, &kb->mem_mapped);
    kb->used = PyMem_RawMalloc(capacity * sizeof(uint32_t));
    kb->scratch = PyMem_RawMalloc((size_t)SEGMENT * HASH_BYTES);
    if (kb->mem == NULL || kb->used == NULL || kb->scratch == NULL) {
        kb_free_memory(kb);
        PyErr_NoMemory();
        return -1;
    }
    kb->ctrl = kb->mem;
    kb->entries = kb->mem + ctrl_bytes;
    kb->slots = slots;
    kb->capacity = capacity;
    kb->lost = 0;
    kb->start_slots = (uint64_t)start_slots;
    start_small(kb);
    kb->size = 0;
    kb->strategy = S_OFFSET;
    kb->base_set = 0;
    kb->base_offset = 0;
    kb->value_base_set = 0;
    kb->value_base = 0;
    kb->max_delta = 0;
    pool_shutdown(&kb->pool); /* re-initialized: the thread count may change */
    pool_init(&kb->pool);
    kb->threads = threads;
    kb->impl = impl;
    kb->resets = kb->full_clears = kb->slot_clears = 0;
    kb->records = kb->new_keys = kb->replaced = kb->probes = kb->grows = 0;
    kb->keepset_bitmaps = kb->keepset_sorted = 0;
    return 0;
}

static PyObject *kb_reset(KeyBuffer *kb, PyObject *args, PyObject *kw) {
    static char *names[] = {"strategy", "base_offset", NULL};
    int strategy = S_OFFSET;
    PyObject *base = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|iO:reset", names, &strategy, &base)) return NULL;
    if (kb_check_idle(kb) < 0) return NULL;
    if (strategy < S_OFFSET || strategy > S_HEADER) {
        PyErr_Format(PyExc_ValueError, "unknown strategy code %d", strategy);
        return NULL;
    }
    long long b = 0;
    if (base != Py_None) {
        b = PyLong_AsLongLong(base);
        if (b == -1 && PyErr_Occurred()) return NULL;
    }
    clear_table(kb);
    kb->strategy = strategy;
    kb->base_set = base != Py_None;
    kb->base_offset = b;
    kb->resets++;
    Py_RETURN_NONE;
}

static PyObject *kb_insert(KeyBuffer *kb, PyObject *args, PyObject *kw) {
    static char *names[] = {"keys", "offsets", "values", "has_value", "eligible", "start", "end", NULL};
    PyObject *keys, *offsets, *values = Py_None, *has_value = Py_None, *eligible = Py_None;
    PyObject *end_obj = Py_None;
    Py_ssize_t start = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOOnO:insert", names, &keys, &offsets, &values,
                                     &has_value, &eligible, &start, &end_obj))
        return NULL;
    if (kb_check_idle(kb) < 0) return NULL;
    Cols c;
    memset(&c, 0, sizeof c);
    PyObject *result = NULL;
    if (col_import(keys, WANT_BINARY, &c.keys, "keys") < 0 ||
        col_import(offsets, WANT_INT64, &c.offsets, "offsets") < 0 ||
        col_import(values, WANT_INT64, &c.values, "values") < 0 ||
        col_import(has_value, WANT_BOOL, &c.has_value, "has_value") < 0 ||
        col_import(eligible, WANT_BOOL, &c.eligible, "eligible") < 0)
        goto done;
    int64_t n = c.keys.length;
    if (c.offsets.length != n || (c.values.kind && c.values.length != n) ||
        (c.has_value.kind && c.has_value.length != n) || (c.eligible.kind && c.eligible.length != n)) {
        PyErr_SetString(PyExc_ValueError, "insert: all arrays must have the keys' length");
        goto done;
    }
    if (kb->strategy == S_TIMESTAMP && c.values.kind == COL_NONE) {
        PyErr_SetString(PyExc_ValueError, "insert: the timestamp strategy needs values (timestamps)");
        goto done;
    }
    Py_ssize_t end = n;
    if (end_obj != Py_None) {
        end = PyLong_AsSsize_t(end_obj);
        if (end == -1 && PyErr_Occurred()) goto done;
    }
    if (start < 0 || end < start || end > n) {
        PyErr_Format(PyExc_ValueError, "insert: bad record range %zd..%zd of %lld", start, end,
                     (long long)n);
        goto done;
    }
    int err = ERR_NONE;
    int64_t taken;
    kb->busy = 1;
    kb->wvalid = 0;
    Py_BEGIN_ALLOW_THREADS
    taken = run_insert(kb, &c, start, end, &err);
    Py_END_ALLOW_THREADS
    kb->busy = 0;
    if (err == -1) {
        PyErr_NoMemory();
    } else if (err == ERR_NULL_TIMESTAMP) {
        PyErr_Format(PyExc_ValueError, "insert: record %lld has a null timestamp", (long long)taken);
    } else if (err == ERR_NULL_OFFSET) {
        PyErr_Format(PyExc_ValueError, "insert: record %lld has a null offset", (long long)taken);
    } else {
        result = PyLong_FromLongLong(taken);
    }
done:
    col_release(&c.keys);
    col_release(&c.offsets);
    col_release(&c.values);
    col_release(&c.has_value);
    col_release(&c.eligible);
    return result;
}

/* Builds the keep-set with the GIL released. */
static int build_winners_nogil(KeyBuffer *kb) {
    int rc;
    kb->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = build_winners(kb);
    Py_END_ALLOW_THREADS
    kb->busy = 0;
    if (rc < 0) PyErr_NoMemory();
    return rc;
}

/* winners() -> bytes: the window's winning offsets, int64 native order, ascending. */
static PyObject *kb_winners(KeyBuffer *kb, PyObject *Py_UNUSED(ignored)) {
    if (kb_check_idle(kb) < 0 || build_winners_nogil(kb) < 0) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(kb->wcount * 8));
    if (out == NULL) return NULL;
    int64_t *o = (int64_t *)PyBytes_AS_STRING(out);
    if (kb->wbitmap) {
        uint64_t m = 0, words = ((uint64_t)kb->max_delta >> 6) + 1;
        for (uint64_t w = 0; w < words; w++) {
            for (uint64_t bits = kb->wbits[w]; bits; bits &= bits - 1)
                o[m++] = kb->base_offset + (int64_t)(w * 64 + (uint64_t)__builtin_ctzll(bits));
        }
    } else {
        for (uint64_t i = 0; i < kb->wcount; i++) o[i] = kb->base_offset + (int64_t)kb->wsorted[i];
    }
    return out;
}

/* keep_mask(offsets, eligible=None) -> bytes: an Arrow boolean bitmap (LSB first), bit i
   set iff offsets[i] is a winner of the window, or (with `eligible`) record i does not
   take part. One bit test per record with the bitmap keep-set; with the sorted one, a
   walk alongside the offsets (galloping), O(n + log k) for ascending offsets. */
static PyObject *kb_keep_mask(KeyBuffer *kb, PyObject *args, PyObject *kw) {
    static char *names[] = {"offsets", "eligible", NULL};
    PyObject *offsets, *eligible = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:keep_mask", names, &offsets, &eligible))
        return NULL;
    if (kb_check_idle(kb) < 0) return NULL;
    Col off, el;
    memset(&off, 0, sizeof off);
    memset(&el, 0, sizeof el);
    PyObject *out = NULL;
    if (col_require(offsets, WANT_INT64, &off, "offsets", "keep_mask") < 0 ||
        col_import(eligible, WANT_BOOL, &el, "eligible") < 0)
        goto done;
    if (el.kind && el.length != off.length) {
        PyErr_SetString(PyExc_ValueError, "keep_mask: eligible must have the offsets' length");
        goto done;
    }
    if (build_winners_nogil(kb) < 0) goto done;
    int64_t n = off.length;
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((n + 7) / 8));
    if (out == NULL) goto done;
    uint8_t *bits = (uint8_t *)PyBytes_AS_STRING(out);
    kb->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    memset(bits, 0, (size_t)(n + 7) / 8);
    const uint32_t *w = kb->wsorted;
    const uint64_t *wb = kb->wbits;
    const uint64_t nw = kb->wcount;
    const uint32_t maxd = kb->max_delta;
    const int bitmap = kb->wbitmap;
    uint64_t j = 0;
    uint32_t prev = 0;
    for (int64_t i = 0; i < n; i++) {
        int keep = 0;
        if (el.kind && !col_true(&el, i)) {
            keep = 1;
        } else if (kb->base_set && nw && col_valid(&off, i)) {
            int64_t o = col_i64(&off, i);
            if (o >= kb->base_offset && (uint64_t)o - (uint64_t)kb->base_offset <= maxd) {
                uint32_t x = (uint32_t)((uint64_t)o - (uint64_t)kb->base_offset);
                if (bitmap) {
                    keep = (int)((wb[x >> 6] >> (x & 63)) & 1);
                } else {
                    if (x < prev) j = 0; /* offsets went backwards: search from the start */
                    prev = x;
                    j = gallop(w, nw, j, x);
                    keep = j < nw && w[j] == x;
                }
            }
        }
        if (keep) bits[i >> 3] |= (uint8_t)(1u << (i & 7));
    }
    Py_END_ALLOW_THREADS
    kb->busy = 0;
done:
    col_release(&off);
    col_release(&el);
    return out;
}

/* The slot of a key in the current window, or -1. */
static int64_t find_slot(KeyBuffer *kb, const uint8_t *key, size_t len) {
    uint8_t h[HASH_BYTES];
    kb_sha512_256(compress_for(kb->impl), key, len, h);
    uint64_t h0;
    memcpy(&h0, h, 8);
    const uint8_t tag = (uint8_t)(F_OCCUPIED | (h[8] & F_TAG));
    uint64_t slot = home_slot(h0, kb->active);
    for (uint64_t n = 0; n < kb->active; n++) {
        uint8_t f = kb->ctrl[slot];
        if (f == 0) return -1;
        if ((f & (F_OCCUPIED | F_TAG)) == tag && memcmp(entry_at(kb, slot), h, HASH_BYTES) == 0)
            return (int64_t)slot;
        if (++slot == kb->active) slot = 0;
    }
    return -1;
}

static PyObject *kb_lookup(KeyBuffer *kb, PyObject *arg) {
    Py_buffer b;
    if (kb_check_idle(kb) < 0) return NULL;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    int64_t slot = find_slot(kb, b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    if (slot < 0) Py_RETURN_NONE;
    uint32_t d;
    memcpy(&d, entry_at(kb, (uint64_t)slot) + E_INT1, 4);
    return PyLong_FromLongLong(kb->base_offset + (int64_t)d);
}

/* lookup_entry(key) -> (offset, value | None) | None; value is the stored timestamp or
   header value (None under the offset strategy or for a record without the header). */
static PyObject *kb_lookup_entry(KeyBuffer *kb, PyObject *arg) {
    Py_buffer b;
    if (kb_check_idle(kb) < 0) return NULL;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    int64_t slot = find_slot(kb, b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    if (slot < 0) Py_RETURN_NONE;
    const uint8_t *e = entry_at(kb, (uint64_t)slot);
    uint32_t d;
    int32_t dv;
    memcpy(&d, e + E_INT1, 4);
    memcpy(&dv, e + E_INT2, 4);
    long long off = kb->base_offset + (int64_t)d;
    int has_value = kb->strategy == S_TIMESTAMP ||
                    (kb->strategy == S_HEADER && (kb->ctrl[slot] & F_HAS_VALUE));
    if (!has_value) return Py_BuildValue("(LO)", off, Py_None);
    return Py_BuildValue("(LL)", off, (long long)(kb->value_base + dv));
}

#define U64(name) PyLong_FromUnsignedLongLong(kb->name)
static PyObject *kb_stats(KeyBuffer *kb, PyObject *Py_UNUSED(ignored)) {
    uint64_t memory = kb->mem_bytes + kb->capacity * 4 + (uint64_t)SEGMENT * HASH_BYTES +
                      kb->wbits_cap * 8 + kb->wsorted_cap * 8;
    return Py_BuildValue("{sNsNsNsNsNsNsNsNsNsNsNsNsNsNsNsi}", "slots", U64(slots),
                         "active_slots", U64(active), "grows", U64(grows), "capacity",
                         U64(capacity), "size", U64(size), "resets", U64(resets), "full_clears",
                         U64(full_clears), "slot_clears", U64(slot_clears), "records", U64(records),
                         "new_keys", U64(new_keys), "replaced", U64(replaced), "probes", U64(probes),
                         "keepset_bitmaps", U64(keepset_bitmaps), "keepset_sorted",
                         U64(keepset_sorted),
                         "memory_bytes", PyLong_FromUnsignedLongLong(memory), "threads", kb->threads);
}

static PyObject *get_size(KeyBuffer *kb, void *c) { (void)c; return U64(size); }
static PyObject *get_slots(KeyBuffer *kb, void *c) { (void)c; return U64(slots); }
static PyObject *get_active_slots(KeyBuffer *kb, void *c) { (void)c; return U64(active); }
static PyObject *get_capacity(KeyBuffer *kb, void *c) { (void)c; return U64(capacity); }
static PyObject *get_full_clears(KeyBuffer *kb, void *c) { (void)c; return U64(full_clears); }
static PyObject *get_strategy(KeyBuffer *kb, void *c) { (void)c; return PyLong_FromLong(kb->strategy); }
static PyObject *get_threads(KeyBuffer *kb, void *c) { (void)c; return PyLong_FromLong(kb->threads); }
/* Threads for the next inserts: a caller that already hashes on a thread of its own beside
   other busy threads (worker.pipeline) does better with one. Helpers already started stay
   parked in the pool. */
static int set_threads(KeyBuffer *kb, PyObject *value, void *c) {
    (void)c;
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "threads cannot be deleted");
        return -1;
    }
    long threads = PyLong_AsLong(value);
    if (threads == -1 && PyErr_Occurred()) return -1;
    if (threads < 1 || threads > MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "threads must be 1..%d, got %ld", MAX_THREADS, threads);
        return -1;
    }
    if (kb_check_idle(kb) < 0) return -1;
    kb->threads = (int)threads;
    return 0;
}
static PyObject *get_hash_impl(KeyBuffer *kb, void *c) { (void)c; return PyUnicode_FromString(impl_name(kb->impl)); }
static PyObject *get_base_offset(KeyBuffer *kb, void *c) {
    (void)c;
    if (!kb->base_set) Py_RETURN_NONE;
    return PyLong_FromLongLong(kb->base_offset);
}
#undef U64

static PyGetSetDef kb_getset[] = {
    {"size", (getter)get_size, NULL, "keys held in the current window", NULL},
    {"slots", (getter)get_slots, NULL, "41-byte entries in the table", NULL},
    {"active_slots", (getter)get_active_slots, NULL, "slots the current window uses", NULL},
    {"capacity", (getter)get_capacity, NULL, "keys a window takes before it is full", NULL},
    {"full_clears", (getter)get_full_clears, NULL, "resets that memset the flag array", NULL},
    {"strategy", (getter)get_strategy, NULL, "strategy code of the current window", NULL},
    {"base_offset", (getter)get_base_offset, NULL, "the window's base offset, or None", NULL},
    {"threads", (getter)get_threads, (setter)set_threads, "threads hashing a batch", NULL},
    {"hash_impl", (getter)get_hash_impl, NULL, "'avx512', 'avx2', 'openssl' or 'portable'", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef kb_methods[] = {
    {"reset", (PyCFunction)(void (*)(void))kb_reset, METH_VARARGS | METH_KEYWORDS,
     "reset(strategy=0, base_offset=None): start a window; clearing costs O(keys held)"},
    {"insert", (PyCFunction)(void (*)(void))kb_insert, METH_VARARGS | METH_KEYWORDS,
     "insert(keys, offsets, values=None, has_value=None, eligible=None, start=0, end=None) -> "
     "index of the first record not consumed"},
    {"winners", (PyCFunction)(void (*)(void))kb_winners, METH_NOARGS,
     "winning offsets, int64, ascending"},
    {"keep_mask", (PyCFunction)(void (*)(void))kb_keep_mask, METH_VARARGS | METH_KEYWORDS,
     "keep_mask(offsets, eligible=None) -> bitmap bytes"},
    {"lookup", (PyCFunction)(void (*)(void))kb_lookup, METH_O, "the winning offset of a key, or None"},
    {"lookup_entry", (PyCFunction)(void (*)(void))kb_lookup_entry, METH_O,
     "(offset, value | None) or None"},
    {"stats", (PyCFunction)(void (*)(void))kb_stats, METH_NOARGS, "counters"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject KeyBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "worker.kernel._keybuffer.KeyBuffer",
    .tp_basicsize = sizeof(KeyBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "KeyBuffer(capacity_bytes=128 MiB, *, threads=2, hash_impl=None)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)kb_init,
    .tp_dealloc = (destructor)kb_dealloc,
    .tp_methods = kb_methods,
    .tp_getset = kb_getset,
};

/* hash_keys(keys, threads=2, hash_impl=None) -> bytes: 32 bytes per key (zeros for null
   keys), hashed with the GIL released. */
static PyObject *mod_hash_keys(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw) {
    static char *names[] = {"keys", "threads", "hash_impl", NULL};
    PyObject *keys, *impl_obj = Py_None;
    int threads = 2;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|iO:hash_keys", names, &keys, &threads, &impl_obj))
        return NULL;
    if (threads < 1 || threads > MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "threads must be 1..%d, got %d", MAX_THREADS, threads);
        return NULL;
    }
    int impl = parse_impl(impl_obj);
    if (impl < 0) return NULL;
    Col c, none;
    memset(&none, 0, sizeof none);
    if (col_import(keys, WANT_BINARY, &c, "keys") < 0) {
        col_release(&c);
        return NULL;
    }
    int64_t n = c.length;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * HASH_BYTES));
    HashJob *j = PyMem_RawMalloc(sizeof(HashJob));
    if (out == NULL || j == NULL) {
        Py_XDECREF(out);
        PyMem_RawFree(j);
        col_release(&c);
        return j == NULL ? PyErr_NoMemory() : NULL;
    }
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (int64_t pos = 0; pos < n; pos += SEGMENT) {
        int64_t m = n - pos < SEGMENT ? n - pos : SEGMENT;
        job_init(j, &c, &none, impl, pos, m, o + (size_t)pos * HASH_BYTES);
        pthread_t tids[MAX_THREADS];
        int started = start_helpers(j, threads, tids);
        while (claim_and_hash(j)) {
        }
        stop_helpers(j, tids, started);
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(j);
    col_release(&c);
    return out;
}

/* _sha512_256(data, impl=None) -> 32 bytes: one message, for tests. */
/* The first index >= j of ascending s[0..n) whose value is >= x (galloping from j). */
static inline int64_t gallop_i64(const Col *s, int64_t n, int64_t j, int64_t x) {
    if (j >= n || col_i64(s, j) >= x) return j;
    int64_t lo = j, step = 1, hi; /* invariant: s[lo] < x */
    for (;;) {
        hi = lo + step;
        if (hi >= n) {
            hi = n;
            break;
        }
        if (col_i64(s, hi) >= x) break;
        lo = hi;
        step <<= 1;
    }
    while (hi - lo > 1) { /* s[lo] < x, and hi == n or s[hi] >= x */
        int64_t mid = lo + (hi - lo) / 2;
        if (col_i64(s, mid) < x) lo = mid; else hi = mid;
    }
    return hi;
}

/* member_mask(members, offsets) -> bytes: an Arrow boolean bitmap (LSB first), bit i set
   iff offsets[i] is among `members` (int64, no nulls, strictly ascending: a window's
   keep-set; the caller checks the order once per window, this runs once per batch: out
   of order, bits may be missing, never read out of bounds). A walk alongside the
   offsets, galloping: O(n + log k) for ascending offsets; a null offset is not a member.
   Runs without the GIL. */
static PyObject *mod_member_mask(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *members_obj, *offsets_obj;
    if (!PyArg_ParseTuple(args, "OO:member_mask", &members_obj, &offsets_obj)) return NULL;
    Col mem, off;
    memset(&mem, 0, sizeof mem);
    memset(&off, 0, sizeof off);
    PyObject *out = NULL;
    if (col_require(members_obj, WANT_INT64, &mem, "members", "member_mask") < 0 ||
        col_require(offsets_obj, WANT_INT64, &off, "offsets", "member_mask") < 0)
        goto done;
    int64_t m = mem.length, n = off.length;
    if (mem.validity != NULL) {
        PyErr_SetString(PyExc_ValueError, "member_mask: members must have no nulls");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((n + 7) / 8));
    if (out == NULL) goto done;
    uint8_t *bits = (uint8_t *)PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    memset(bits, 0, (size_t)(n + 7) / 8);
    int64_t j = 0, prev = INT64_MIN;
    for (int64_t i = 0; i < n; i++) {
        if (!col_valid(&off, i)) continue;
        int64_t o = col_i64(&off, i);
        if (o < prev) j = 0; /* offsets went backwards: search from the start */
        prev = o;
        j = gallop_i64(&mem, m, j, o);
        if (j < m && col_i64(&mem, j) == o) bits[i >> 3] |= (uint8_t)(1u << (i & 7));
    }
    Py_END_ALLOW_THREADS
done:
    col_release(&mem);
    col_release(&off);
    return out;
}

/* salted_keys(keys, labels) -> (validity | None, offsets, data, large): each key (binary
   or string) followed by its row's label (int32, no nulls) as its 4 bytes in the machine's
   order, as the buffers of an Arrow binary array (int32 offsets), or of a large_binary one
   (int64 offsets, `large` true) when the bytes would not fit int32 offsets. A null key
   stays null (a zero-length slot, no label). One pass without the GIL, where Arrow's
   binary_join_element_wise makes two (a cast of the salts, the join). */
static PyObject *mod_salted_keys(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *keys_obj, *labels_obj;
    if (!PyArg_ParseTuple(args, "OO:salted_keys", &keys_obj, &labels_obj)) return NULL;
    Col keys, lab;
    memset(&keys, 0, sizeof keys);
    memset(&lab, 0, sizeof lab);
    PyObject *validity = NULL, *offsets = NULL, *data = NULL, *out = NULL;
    if (col_require(keys_obj, WANT_BINARY, &keys, "keys", "salted_keys") < 0 ||
        col_require(labels_obj, WANT_INT32, &lab, "labels", "salted_keys") < 0)
        goto done;
    if (lab.validity != NULL) {
        PyErr_SetString(PyExc_ValueError, "salted_keys: labels must have no nulls");
        goto done;
    }
    int64_t n = keys.length;
    if (lab.length != n) {
        PyErr_Format(PyExc_ValueError, "salted_keys: %lld keys but %lld labels", (long long)n,
                     (long long)lab.length);
        goto done;
    }
    int64_t total = 0, nulls = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!col_valid(&keys, i)) {
            nulls++;
            continue;
        }
        size_t len;
        col_key(&keys, i, &len);
        total += (int64_t)len + 4;
    }
    int large = total > INT32_MAX;
    size_t width = large ? 8 : 4;
    if (nulls) {
        validity = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((n + 7) / 8));
        if (validity == NULL) goto done;
    }
    offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(width * (size_t)(n + 1)));
    data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (offsets == NULL || data == NULL) goto done;
    uint8_t *bits = validity ? (uint8_t *)PyBytes_AS_STRING(validity) : NULL;
    uint8_t *off = (uint8_t *)PyBytes_AS_STRING(offsets);
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(data);
    const int32_t *labels = (const int32_t *)lab.values + lab.offset;
    Py_BEGIN_ALLOW_THREADS
    if (bits) memset(bits, 0, (size_t)(n + 7) / 8);
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        if (large) ((int64_t *)off)[i] = at;
        else ((int32_t *)off)[i] = (int32_t)at;
        if (!col_valid(&keys, i)) continue;
        if (bits) bits[i >> 3] |= (uint8_t)(1u << (i & 7));
        size_t len;
        const uint8_t *key = col_key(&keys, i, &len);
        memcpy(dst + at, key, len);
        memcpy(dst + at + len, &labels[i], 4);
        at += (int64_t)len + 4;
    }
    if (large) ((int64_t *)off)[n] = at;
    else ((int32_t *)off)[n] = (int32_t)at;
    Py_END_ALLOW_THREADS
    out = Py_BuildValue("(OOOO)", validity ? validity : Py_None, offsets, data,
                        large ? Py_True : Py_False);
done:
    Py_XDECREF(validity);
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    col_release(&keys);
    col_release(&lab);
    return out;
}

/* A new list of the `n` int64s at `v`. */
static PyObject *int64_list(const int64_t *v, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyLong_FromLongLong(v[i]);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* run_labels(ordinals, counts, partitions) -> (bytes, list[int]): the labels of a group's
   rows, taken as runs: run i is counts[i] rows of the partition whose ordinal is
   ordinals[i] (0..partitions-1; ValueError otherwise, or for a negative count). Returns
   each row's label (native int32s, run after run) and how many rows each ordinal has. */
static PyObject *mod_run_labels(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *ordinals_obj, *counts_obj;
    Py_ssize_t parts;
    if (!PyArg_ParseTuple(args, "OOn:run_labels", &ordinals_obj, &counts_obj, &parts)) return NULL;
    PyObject *ords = NULL, *cnts = NULL, *labels = NULL, *totals_list = NULL, *out = NULL;
    int64_t *totals = NULL;
    ords = PySequence_Fast(ordinals_obj, "run_labels: ordinals must be a sequence");
    cnts = PySequence_Fast(counts_obj, "run_labels: counts must be a sequence");
    if (ords == NULL || cnts == NULL) goto done;
    Py_ssize_t runs = PySequence_Fast_GET_SIZE(ords);
    if (runs != PySequence_Fast_GET_SIZE(cnts) || parts < 0 || parts > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "run_labels: as many ordinals as counts, and 0 <= partitions < 2^31");
        goto done;
    }
    totals = PyMem_Calloc((size_t)parts + 1, sizeof *totals);
    if (totals == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t rows = 0;
    for (Py_ssize_t i = 0; i < runs; i++) {
        long long o = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(ords, i));
        long long c = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(cnts, i));
        if ((o == -1 || c == -1) && PyErr_Occurred()) goto done;
        if (o < 0 || o >= parts || c < 0 || rows + c > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "run_labels: run %zd of %lld rows of ordinal %lld "
                         "(partitions: %zd)", i, c, o, parts);
            goto done;
        }
        totals[o] += c;
        rows += c;
    }
    labels = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(rows * 4));
    if (labels == NULL) goto done;
    int32_t *dst = (int32_t *)PyBytes_AS_STRING(labels);
    for (Py_ssize_t i = 0; i < runs; i++) {
        int32_t o = (int32_t)PyLong_AsLong(PySequence_Fast_GET_ITEM(ords, i));
        Py_ssize_t c = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(cnts, i));
        for (Py_ssize_t r = 0; r < c; r++) *dst++ = o;
    }
    totals_list = int64_list(totals, parts);
    if (totals_list == NULL) goto done;
    out = PyTuple_Pack(2, labels, totals_list);
done:
    Py_XDECREF(ords);
    Py_XDECREF(cnts);
    Py_XDECREF(labels);
    Py_XDECREF(totals_list);
    PyMem_Free(totals);
    return out;
}

/* survivor_order(keep, labels, partitions) -> (bytes | None, list[int]): a group's
   survivors put partition after partition. `keep` is an Arrow boolean bitmap (LSB first)
   of the group's rows, `labels` (int32, no nulls) each row's partition ordinal, each in
   0..partitions-1 (ValueError otherwise). Returns the kept rows' indices (native int32s),
   ordered by label and, within a label, by row (a counting sort: stable, O(n +
   partitions)), or None when every row is kept and the labels never descend (the rows
   are already in that order); and how many rows each label keeps. Runs without the GIL. */
static PyObject *mod_survivor_order(PyObject *Py_UNUSED(m), PyObject *args) {
    Py_buffer keep;
    PyObject *labels_obj;
    Py_ssize_t parts;
    if (!PyArg_ParseTuple(args, "y*On:survivor_order", &keep, &labels_obj, &parts)) return NULL;
    Col lab;
    memset(&lab, 0, sizeof lab);
    PyObject *order = NULL, *counts_list = NULL, *out = NULL;
    int64_t *counts = NULL, *next = NULL;
    if (col_require(labels_obj, WANT_INT32, &lab, "labels", "survivor_order") < 0) goto done;
    int64_t n = lab.length;
    if (lab.validity != NULL || parts < 0 || keep.len != (Py_ssize_t)((n + 7) / 8)) {
        PyErr_Format(PyExc_ValueError,
                     "survivor_order: %lld labels (no nulls) need a %lld-byte keep bitmap "
                     "and partitions >= 0, got %zd bytes and %zd",
                     (long long)n, (long long)((n + 7) / 8), keep.len, parts);
        goto done;
    }
    counts = PyMem_Calloc((size_t)parts + 1, sizeof *counts);
    next = PyMem_Calloc((size_t)parts + 1, sizeof *next);
    if (counts == NULL || next == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int32_t *labels = (const int32_t *)lab.values + lab.offset;
    const uint8_t *bits = keep.buf;
    int64_t kept = 0, bad = -1;
    int ascending = 1;
    Py_BEGIN_ALLOW_THREADS
    int32_t prev = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t l = labels[i];
        if (l < 0 || l >= parts) {
            bad = i;
            break;
        }
        if (!bit_at(bits, i)) continue;
        counts[l]++;
        kept++;
        if (l < prev) ascending = 0;
        prev = l;
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "survivor_order: row %lld's label %d is not in 0..%zd",
                     (long long)bad, labels[bad], parts - 1);
        goto done;
    }
    if (ascending && kept == n) {
        order = Py_NewRef(Py_None);
    } else {
        order = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(kept * 4));
        if (order == NULL) goto done;
        int32_t *dst = (int32_t *)PyBytes_AS_STRING(order);
        Py_BEGIN_ALLOW_THREADS
        int64_t at = 0;
        for (Py_ssize_t p = 0; p < parts; p++) {
            next[p] = at;
            at += counts[p];
        }
        for (int64_t i = 0; i < n; i++)
            if (bit_at(bits, i)) dst[next[labels[i]]++] = (int32_t)i;
        Py_END_ALLOW_THREADS
    }
    counts_list = int64_list(counts, parts);
    if (counts_list == NULL) goto done;
    out = PyTuple_Pack(2, order, counts_list);
done:
    Py_XDECREF(order);
    Py_XDECREF(counts_list);
    PyMem_Free(counts);
    PyMem_Free(next);
    col_release(&lab);
    PyBuffer_Release(&keep);
    return out;
}

static PyObject *mod_sha512_256(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw) {
    static char *names[] = {"data", "impl", NULL};
    Py_buffer b;
    PyObject *impl_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|O:_sha512_256", names, &b, &impl_obj)) return NULL;
    int impl = parse_impl(impl_obj);
    if (impl < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    uint8_t h[HASH_BYTES];
#ifdef KB_HAVE_X8
    kb_lanes_fn lanes_fn = lanes_for(impl);
    if (lanes_fn && (size_t)b.len <= KB_X8_MAX_LEN) {
        const uint8_t *msg[8] = {b.buf};
        size_t len[8] = {(size_t)b.len};
        uint8_t *out[8] = {h};
        lanes_fn(msg, len, 1, out);
    } else
#endif
        kb_sha512_256(compress_for(impl), b.buf, (size_t)b.len, h);
    PyBuffer_Release(&b);
    return PyBytes_FromStringAndSize((const char *)h, HASH_BYTES);
}

static PyMethodDef module_methods[] = {
    {"_sha512_256", (PyCFunction)(void (*)(void))mod_sha512_256, METH_VARARGS | METH_KEYWORDS,
     "_sha512_256(data, impl=None) -> bytes"},
    {"hash_keys", (PyCFunction)(void (*)(void))mod_hash_keys, METH_VARARGS | METH_KEYWORDS,
     "hash_keys(keys, threads=2, hash_impl=None) -> bytes"},
    {"member_mask", (PyCFunction)mod_member_mask, METH_VARARGS,
     "member_mask(members, offsets) -> bytes (an Arrow bitmap)"},
    {"salted_keys", (PyCFunction)mod_salted_keys, METH_VARARGS,
     "salted_keys(keys, labels) -> (bytes | None, bytes, bytes, bool)"},
    {"run_labels", (PyCFunction)mod_run_labels, METH_VARARGS,
     "run_labels(ordinals, counts, partitions) -> (bytes, list[int])"},
    {"survivor_order", (PyCFunction)mod_survivor_order, METH_VARARGS,
     "survivor_order(keep, labels, partitions) -> (bytes | None, list[int])"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_keybuffer",
                                    "The compiled key buffer (see _keybuffer.c).", -1,
                                    module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__keybuffer(void) {
#ifdef KB_HAVE_OPENSSL
    OPENSSL_init_crypto(0, NULL); /* CPU feature detection for the assembly paths */
#endif
#ifdef KB_HAVE_X8
    x8_usable = kb_x8_usable();
    x4_usable = kb_x4_usable();
    default_impl = x8_usable ? IMPL_AVX512 : x4_usable ? IMPL_AVX2 : default_impl;
#endif
    if (PyType_Ready(&KeyBufferType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&KeyBufferType);
    if (PyModule_AddObject(m, "KeyBuffer", (PyObject *)&KeyBufferType) < 0) {
        Py_DECREF(&KeyBufferType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "ENTRY_BYTES", ENTRY_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "START_SLOTS", ACTIVE_MIN) < 0 ||
        PyModule_AddIntConstant(m, "STRATEGY_OFFSET", S_OFFSET) < 0 ||
        PyModule_AddIntConstant(m, "STRATEGY_TIMESTAMP", S_TIMESTAMP) < 0 ||
        PyModule_AddIntConstant(m, "STRATEGY_HEADER", S_HEADER) < 0 ||
        PyModule_AddStringConstant(m, "HASH_IMPL", impl_name(default_impl)) < 0 ||
        PyModule_AddObjectRef(m, "HAVE_AVX512", x8_usable ? Py_True : Py_False) < 0 ||
        PyModule_AddObjectRef(m, "HAVE_AVX2", x4_usable ? Py_True : Py_False) < 0 ||
#ifdef KB_HAVE_OPENSSL
        PyModule_AddObjectRef(m, "HAVE_OPENSSL", Py_True) < 0
#else
        PyModule_AddObjectRef(m, "HAVE_OPENSSL", Py_False) < 0
#endif
    ) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
