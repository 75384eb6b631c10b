/* Rows selected out of a column's chunks into new buffers: one copy of the selected rows,
 * however many chunks they come from.
 *
 * Phase 2 decides about a run of small input batches at once (worker/gather.py joins
 * them as a table, uncopied). Concatenating them and then filtering copied every record
 * once and the survivors once more; these passes copy only the survivors, straight from
 * their chunks (fileformat/picked.py). Two ways to select rows:
 *   - pick_*: a mask, the rows whose bit is set, in row order (a gathered run's survivors);
 *   - take_*: rows in any order (a group's survivors put partition after partition,
 *     worker/group.py), each given as its chunk and its row there: `locate` finds them
 *     from row numbers once for all the columns that share a chunking (a search that
 *     first tries the chunk of the row before and the one after it).
 *
 * A chunk is given as a tuple of its length, the slot of its first row in its buffers
 * (Arrow's array offset), its validity bitmap (None: no nulls) and its data buffers: one
 * of `width`-byte values for a fixed-width column, int32 offsets and bytes for a binary
 * one. Row i is row i of the chunks one after another. The mask is the rows' bits, LSB
 * first, as an Arrow bitmap or Python's `int.to_bytes(..., "little")` lays them out;
 * row numbers and (chunk, row) pairs are native int32s, each checked to be a row.
 * This file knows nothing of Arrow's types: every buffer's length, and each picked
 * value's offsets, are checked before they are read. The copies run without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_CHUNKS 65536

typedef struct {
    Py_ssize_t length, slot;
    Py_buffer validity, data, offsets;
    int has_validity, has_data, has_offsets;
} Chunk;

static void release_chunks(Chunk *chunks, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (chunks[i].has_validity) PyBuffer_Release(&chunks[i].validity);
        if (chunks[i].has_data) PyBuffer_Release(&chunks[i].data);
        if (chunks[i].has_offsets) PyBuffer_Release(&chunks[i].offsets);
    }
    PyMem_Free(chunks);
}

static inline int bit_set(const uint8_t *bits, Py_ssize_t i) { return (bits[i >> 3] >> (i & 7)) & 1; }

static inline void set_bit(uint8_t *bits, Py_ssize_t i) { bits[i >> 3] |= (uint8_t)(1u << (i & 7)); }

/* The 64 mask bits from row `row` on (fewer past `end`: the rest read as 0). */
static inline uint64_t mask_word(const uint8_t *mask, Py_ssize_t row, Py_ssize_t end) {
    Py_ssize_t byte = row >> 3, shift = row & 7, last = (end + 7) >> 3;
    uint8_t raw[16] = {0};
    Py_ssize_t take = last - byte < 9 ? last - byte : 9;
    memcpy(raw, mask + byte, (size_t)take);
    uint64_t lo, hi;
    memcpy(&lo, raw, 8);
    hi = raw[8];
    uint64_t word = shift ? (lo >> shift) | (hi << (64 - shift)) : lo;
    Py_ssize_t left = end - row;
    return left >= 64 ? word : word & ((UINT64_C(1) << left) - 1);
}

/* Runs `body` with `r` set to each row in [0, length) of a chunk whose first row is the
 * mask's row `first` and whose bit is set, in order (the body is the last argument). */
#define FOR_EACH_PICKED(mask, first, length, r, ...)                               \
    for (Py_ssize_t base_ = 0; base_ < (length); base_ += 64) {                     \
        uint64_t word_ = mask_word((mask), (first) + base_, (first) + (length));     \
        while (word_) {                                                             \
            Py_ssize_t r = base_ + __builtin_ctzll(word_);                          \
            word_ &= word_ - 1;                                                     \
            __VA_ARGS__                                                             \
        }                                                                           \
    }

static int get_buffer(PyObject *obj, Py_buffer *view, int *held, Py_ssize_t min_bytes,
                      const char *name, Py_ssize_t chunk) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    *held = 1;
    if (view->len < min_bytes) {
        PyErr_Format(PyExc_ValueError, "chunk %zd's %s holds %zd bytes, %zd needed", chunk, name,
                     view->len, min_bytes);
        return -1;
    }
    return 0;
}

/* The chunks of `seq`, each (length, slot, validity, data) or, when `binary`,
 * (length, slot, validity, offsets, data); their total length in `*total`. NULL on error,
 * with an exception set. */
static Chunk *parse_chunks(PyObject *seq, Py_ssize_t width, int binary, Py_ssize_t *count,
                           Py_ssize_t *total) {
    PyObject *fast = PySequence_Fast(seq, "chunks must be a sequence");
    if (fast == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > MAX_CHUNKS) {
        PyErr_Format(PyExc_ValueError, "%zd chunks, at most %d", n, MAX_CHUNKS);
        Py_DECREF(fast);
        return NULL;
    }
    Chunk *chunks = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Chunk));
    if (chunks == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    *total = 0;
    Py_ssize_t i = 0;
    for (; i < n; i++) {
        Chunk *c = &chunks[i];
        PyObject *validity, *data, *offsets = NULL;
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        int parsed = binary ? PyArg_ParseTuple(item, "nnOOO", &c->length, &c->slot, &validity,
                                               &offsets, &data)
                            : PyArg_ParseTuple(item, "nnOO", &c->length, &c->slot, &validity,
                                               &data);
        if (!parsed) goto fail;
        if (c->length < 0 || c->slot < 0 || c->length > PY_SSIZE_T_MAX / 64 ||
            c->slot > PY_SSIZE_T_MAX / 64 || *total > PY_SSIZE_T_MAX / 4 - c->length) {
            PyErr_Format(PyExc_ValueError, "chunk %zd's length or slot is out of range", i);
            goto fail;
        }
        Py_ssize_t end = c->slot + c->length;
        if (validity != Py_None &&
            get_buffer(validity, &c->validity, &c->has_validity, (end + 7) / 8, "validity", i) < 0)
            goto fail;
        if (binary) {
            if (get_buffer(offsets, &c->offsets, &c->has_offsets, 4 * (end + 1), "offsets", i) < 0)
                goto fail;
            if (get_buffer(data, &c->data, &c->has_data, 0, "data", i) < 0) goto fail;
        } else if (get_buffer(data, &c->data, &c->has_data, width * end, "data", i) < 0) {
            goto fail;
        }
        *total += c->length;
    }
    Py_DECREF(fast);
    *count = n;
    return chunks;

fail:
    Py_DECREF(fast);
    release_chunks(chunks, n);
    return NULL;
}

/* Which rows a pass copies, in what order: a mask's set rows in row order, or located
 * rows as listed (each as its chunk and its row in that chunk: `locate` finds them once
 * for all the columns that share a chunking). Both are private copies, checked where
 * they are parsed: the passes trust them without the GIL, while the caller's buffers
 * could change. */
typedef struct {
    uint8_t *mask;    /* the mask, or NULL for located rows */
    int32_t *located; /* (chunk, row) pairs, when there is no mask */
    Py_ssize_t rows;  /* how many rows are selected */
} Selection;

static void release_selection(Selection *sel) {
    PyMem_Free(sel->mask);
    PyMem_Free(sel->located);
}

/* A private copy of the mask of the chunks' `total` rows, checked to set exactly `rows`
 * bits; its bits past `total` cleared. -1 on error. */
static int parse_mask(PyObject *obj, Py_ssize_t total, Py_ssize_t rows, Selection *sel) {
    Py_buffer view;
    Py_ssize_t bytes = (total + 7) / 8;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return -1;
    if (view.len < bytes) {
        PyErr_Format(PyExc_ValueError, "the mask holds %zd bytes, %zd rows need %zd", view.len,
                     total, bytes);
        PyBuffer_Release(&view);
        return -1;
    }
    uint8_t *m = PyMem_Malloc(bytes ? (size_t)bytes : 1);
    if (m == NULL) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(m, view.buf, (size_t)bytes);
    PyBuffer_Release(&view);
    if (total & 7) m[bytes - 1] &= (uint8_t)((1u << (total & 7)) - 1);
    Py_ssize_t set = 0;
    for (Py_ssize_t i = 0; i < bytes; i++) set += __builtin_popcount(m[i]);
    if (set != rows) {
        PyErr_Format(PyExc_ValueError, "the mask picks %zd of %zd rows, not %zd", set, total, rows);
        PyMem_Free(m);
        return -1;
    }
    sel->mask = m;
    sel->rows = rows;
    return 0;
}

/* A private copy of located rows ((chunk, row) pairs of native int32s, `locate`'s), each
 * checked to be a row of one of the `n` chunks. -1 on error. */
static int parse_located(PyObject *obj, const Chunk *chunks, Py_ssize_t n, Selection *sel) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return -1;
    if (view.len % 8 || view.len / 8 > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%zd bytes are not located rows (int32 pairs)", view.len);
        PyBuffer_Release(&view);
        return -1;
    }
    Py_ssize_t rows = view.len / 8;
    sel->located = PyMem_Malloc(rows ? (size_t)rows * 8 : 1);
    if (sel->located == NULL) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(sel->located, view.buf, (size_t)rows * 8);
    PyBuffer_Release(&view);
    sel->rows = rows;
    for (Py_ssize_t k = 0; k < rows; k++) {
        int32_t chunk = sel->located[2 * k], row = sel->located[2 * k + 1];
        if (chunk < 0 || chunk >= n || row < 0 || row >= chunks[chunk].length) {
            PyErr_Format(PyExc_ValueError, "row %d of chunk %d is not one of the chunks' rows",
                         row, chunk);
            return -1;
        }
    }
    return 0;
}

/* Runs the body (the last argument) with `c` (const Chunk *) and `r` set to each selected
 * row's chunk and its row in that chunk, in the selection's order. */
#define FOR_EACH_SELECTED(sel, chunks, n, c, r, ...)                                        \
    do {                                                                                    \
        if ((sel)->mask != NULL) {                                                          \
            Py_ssize_t row_ = 0;                                                            \
            for (Py_ssize_t i_ = 0; i_ < (n); i_++) {                                       \
                const Chunk *c = &(chunks)[i_];                                             \
                FOR_EACH_PICKED((sel)->mask, row_, c->length, r, __VA_ARGS__)               \
                row_ += c->length;                                                          \
            }                                                                               \
        } else {                                                                            \
            for (Py_ssize_t k_ = 0; k_ < (sel)->rows; k_++) {                               \
                const Chunk *c = &(chunks)[(sel)->located[2 * k_]];                         \
                Py_ssize_t r = (sel)->located[2 * k_ + 1];                                  \
                __VA_ARGS__                                                                 \
            }                                                                               \
        }                                                                                   \
    } while (0)

/* An int32 offset, wherever its buffer starts (a memoryview need not be aligned). */
static inline int32_t offset_at(const void *offsets, Py_ssize_t i) {
    int32_t v;
    memcpy(&v, (const uint8_t *)offsets + 4 * i, 4);
    return v;
}

/* The validity of the selected rows into `out` (zeroed, `rows` bits); their nulls. */
static Py_ssize_t select_validity(const Chunk *chunks, Py_ssize_t n, const Selection *sel,
                                  uint8_t *out) {
    Py_ssize_t at = 0, nulls = 0;
    FOR_EACH_SELECTED(sel, chunks, n, c, r, {
        if (!c->has_validity || bit_set(c->validity.buf, c->slot + r))
            set_bit(out, at);
        else
            nulls++;
        at++;
    });
    return nulls;
}

/* (validity, nulls): None and 0 when no chunk has a validity bitmap or no selected row
 * is null; else a new bitmap of the selection's rows. */
static PyObject *validity_of(const Chunk *chunks, Py_ssize_t n, const Selection *sel) {
    int any = 0;
    for (Py_ssize_t i = 0; i < n; i++) any |= chunks[i].has_validity;
    if (!any) return Py_BuildValue("(On)", Py_None, (Py_ssize_t)0);
    Py_ssize_t rows = sel->rows;
    PyObject *bits = PyBytes_FromStringAndSize(NULL, (rows + 7) / 8);
    if (bits == NULL) return NULL;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(bits);
    memset(out, 0, (size_t)(rows + 7) / 8);
    Py_ssize_t nulls = select_validity(chunks, n, sel, out);
    if (!nulls) {
        Py_DECREF(bits);
        return Py_BuildValue("(On)", Py_None, (Py_ssize_t)0);
    }
    return Py_BuildValue("(Nn)", bits, nulls);
}

/* The selected rows of a fixed-width column: (data, validity, nulls). */
static PyObject *select_fixed(const Chunk *chunks, Py_ssize_t n, const Selection *sel,
                              Py_ssize_t width) {
    PyObject *data = PyBytes_FromStringAndSize(NULL, sel->rows * width), *validity, *out;
    if (data == NULL) return NULL;
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(data);
    Py_BEGIN_ALLOW_THREADS
    if (width == 8) {
        FOR_EACH_SELECTED(sel, chunks, n, c, r, {
            memcpy(dst, (const uint8_t *)c->data.buf + (c->slot + r) * 8, 8);
            dst += 8;
        });
    } else {
        FOR_EACH_SELECTED(sel, chunks, n, c, r, {
            memcpy(dst, (const uint8_t *)c->data.buf + (c->slot + r) * width, (size_t)width);
            dst += width;
        });
    }
    Py_END_ALLOW_THREADS
    validity = validity_of(chunks, n, sel);
    if (validity == NULL) {
        Py_DECREF(data);
        return NULL;
    }
    out = Py_BuildValue("(NOO)", data, PyTuple_GET_ITEM(validity, 0), PyTuple_GET_ITEM(validity, 1));
    Py_DECREF(validity);
    return out;
}

/* The selected rows of a binary column: (offsets, data, validity, nulls). */
static PyObject *select_binary(const Chunk *chunks, Py_ssize_t n, const Selection *sel) {
    PyObject *offsets = NULL, *data = NULL, *validity = NULL, *out = NULL;
    if (sel->rows > INT32_MAX - 1) {
        PyErr_SetString(PyExc_ValueError, "rows out of range");
        return NULL;
    }
    offsets = PyBytes_FromStringAndSize(NULL, 4 * (sel->rows + 1));
    if (offsets == NULL) return NULL;
    int32_t *o = (int32_t *)PyBytes_AS_STRING(offsets);
    /* First pass: the selected values' offsets, checked against their chunk's data. The
       first error in the selection's order is the one reported: a row outside its data
       (its chunk named), or the values passing 2 GiB. */
    int64_t size = 0;
    Py_ssize_t at = 0, bad = -1;
    int over_first = 0;
    Py_BEGIN_ALLOW_THREADS
    o[0] = 0;
    FOR_EACH_SELECTED(sel, chunks, n, c, r, {
        int64_t start = offset_at(c->offsets.buf, c->slot + r);
        int64_t end = offset_at(c->offsets.buf, c->slot + r + 1);
        int64_t off = (start < 0) | (end < start) | (end > (int64_t)c->data.len);
        int64_t null = c->has_validity && !bit_set(c->validity.buf, c->slot + r);
        if (__builtin_expect(off, 0) && bad < 0) {
            bad = c - chunks;
            over_first = size > INT32_MAX;
        }
        /* nothing for a wrong row (it fails below) or a null one (no bytes, as Arrow) */
        size += (end - start) & ((off | null) - 1);
        o[++at] = (int32_t)size; /* wrong past 2 GiB, which fails below */
    });
    Py_END_ALLOW_THREADS
    if (bad >= 0 && !over_first) {
        PyErr_Format(PyExc_ValueError, "chunk %zd's offsets run outside its data", bad);
        goto done;
    }
    if (size > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "the picked values hold more than 2 GiB");
        goto done;
    }
    data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (data == NULL) goto done;
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(data);
    /* Second pass: the bytes, each value's length and place taken from the offsets just
       made (they alone say where the output's bytes go), its start checked again. */
    int changed = 0;
    Py_BEGIN_ALLOW_THREADS
    at = 0;
    FOR_EACH_SELECTED(sel, chunks, n, c, r, {
        int64_t start = offset_at(c->offsets.buf, c->slot + r), len = (int64_t)o[at + 1] - o[at];
        if (start < 0 || start > (int64_t)c->data.len - len)
            changed = 1;
        else
            memcpy(dst + o[at], (const uint8_t *)c->data.buf + start, (size_t)len);
        at++;
    });
    Py_END_ALLOW_THREADS
    if (changed) {
        PyErr_SetString(PyExc_ValueError, "a chunk's offsets changed while its rows were picked");
        goto done;
    }
    validity = validity_of(chunks, n, sel);
    if (validity == NULL) goto done;
    out = Py_BuildValue("(OOOO)", offsets, data, PyTuple_GET_ITEM(validity, 0),
                        PyTuple_GET_ITEM(validity, 1));

done:
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    Py_XDECREF(validity);
    return out;
}

/* The entry points' common part: parse the chunks and the selection (a mask of `rows`
 * picked rows, or located rows when `rows` is -1), run the pass (a binary column's when
 * `width` is 0, else a fixed-width column's, `fixed_width` checked), release both. */
static PyObject *selected(PyObject *sel_obj, Py_ssize_t rows, Py_ssize_t width,
                          PyObject *chunks_obj) {
    Py_ssize_t n, total;
    int binary = width == 0;
    Chunk *chunks = parse_chunks(chunks_obj, width, binary, &n, &total);
    if (chunks == NULL) return NULL;
    Selection sel = {NULL, NULL, 0};
    PyObject *out = NULL;
    int parsed = rows < 0 ? parse_located(sel_obj, chunks, n, &sel)
                          : parse_mask(sel_obj, total, rows, &sel);
    if (parsed == 0) out = binary ? select_binary(chunks, n, &sel) : select_fixed(chunks, n, &sel, width);
    release_selection(&sel);
    release_chunks(chunks, n);
    return out;
}

PyDoc_STRVAR(pick_fixed_doc,
"pick_fixed(mask, rows, width, chunks) -> (data, validity, nulls)\n\n"
"The `rows` rows that `mask` picks of a fixed-width column of `width`-byte values given\n"
"as `chunks` of (length, slot, validity, data): their values, packed, and their validity\n"
"bitmap (None when none of them is null) and null count. A null row's value is copied\n"
"as its chunk holds it. ValueError for a short buffer or a mask that picks other than\n"
"`rows` rows.");

/* Whether a fixed-width pass takes values of `width` bytes; ValueError if not. */
static int fixed_width(Py_ssize_t width) {
    if (width >= 1 && width <= 16) return 1;
    PyErr_SetString(PyExc_ValueError, "width must be 1 to 16");
    return 0;
}

static PyObject *pick_fixed(PyObject *self, PyObject *args) {
    PyObject *mask, *chunks;
    Py_ssize_t rows, width;
    (void)self;
    if (!PyArg_ParseTuple(args, "OnnO", &mask, &rows, &width, &chunks)) return NULL;
    if (!fixed_width(width)) return NULL;
    if (rows < 0) {
        PyErr_SetString(PyExc_ValueError, "rows out of range");
        return NULL;
    }
    return selected(mask, rows, width, chunks);
}

PyDoc_STRVAR(pick_binary_doc,
"pick_binary(mask, rows, chunks) -> (offsets, data, validity, nulls)\n\n"
"The `rows` rows that `mask` picks of a binary column (int32 offsets) given as `chunks`\n"
"of (length, slot, validity, offsets, data): new int32 offsets from 0 (`rows` + 1 of\n"
"them), the picked values' bytes one after another (none for a null row), and their\n"
"validity bitmap (None when none of them is null)\n"
"and null count. ValueError for a short buffer, a picked row's offsets outside its\n"
"data, a mask that picks other than `rows` rows, or picked bytes beyond int32 offsets.");

static PyObject *pick_binary(PyObject *self, PyObject *args) {
    PyObject *mask, *chunks;
    Py_ssize_t rows;
    (void)self;
    if (!PyArg_ParseTuple(args, "OnO", &mask, &rows, &chunks)) return NULL;
    if (rows < 0 || rows > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "rows out of range");
        return NULL;
    }
    return selected(mask, rows, 0, chunks);
}

/* The chunk that holds row g of the rows `starts` divides (starts[i]: chunk i's first
 * row, starts[n]: all the rows; g is one of them): `hint` (the row before's chunk) or the
 * one after it if either does, which is how a group's partitions walk their inputs; else
 * the last chunk that starts at or before g, by a binary search (an empty chunk starts
 * where the next one does, so it is never the one). */
static inline Py_ssize_t chunk_of(const Py_ssize_t *starts, Py_ssize_t n, Py_ssize_t g,
                                  Py_ssize_t hint) {
    if (starts[hint] <= g && g < starts[hint + 1]) return hint;
    if (hint + 1 < n && starts[hint + 1] <= g && g < starts[hint + 2]) return hint + 1;
    Py_ssize_t lo = 0, hi = n; /* starts[lo] <= g < starts[hi] */
    while (hi - lo > 1) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (starts[mid] <= g)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

PyDoc_STRVAR(locate_doc,
"locate(order, lengths) -> bytes\n\n"
"The rows `order` lists (native int32 row numbers, in any order, repeats allowed) of\n"
"chunks of `lengths` rows one after another, each as its chunk and its row in that chunk:\n"
"native int32 pairs, the selection take_fixed and take_binary copy. ValueError for a row\n"
"that is not one of the chunks'.");

static PyObject *locate(PyObject *self, PyObject *args) {
    PyObject *lengths_obj, *out = NULL;
    Py_buffer order;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O", &order, &lengths_obj)) return NULL;
    PyObject *fast = PySequence_Fast(lengths_obj, "lengths must be a sequence");
    Py_ssize_t *starts = NULL;
    if (fast == NULL) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast), rows = order.len / 4;
    if (order.len % 4 || n > MAX_CHUNKS) {
        PyErr_Format(PyExc_ValueError, "an order of %zd bytes of %zd chunks' rows", order.len, n);
        goto done;
    }
    starts = PyMem_Malloc((size_t)(n + 1) * sizeof(Py_ssize_t));
    if (starts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    starts[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t length = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (length == -1 && PyErr_Occurred()) goto done;
        if (length < 0 || length > INT32_MAX - starts[i]) {
            PyErr_Format(PyExc_ValueError, "chunk %zd's length %zd is out of range", i, length);
            goto done;
        }
        starts[i + 1] = starts[i] + length;
    }
    out = PyBytes_FromStringAndSize(NULL, 8 * rows);
    if (out == NULL) goto done;
    int32_t *pairs = (int32_t *)PyBytes_AS_STRING(out);
    Py_ssize_t bad = -1, total = starts[n];
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t chunk = 0;
    for (Py_ssize_t k = 0; k < rows; k++) {
        int32_t g;
        memcpy(&g, (const uint8_t *)order.buf + 4 * k, 4);
        if (g < 0 || g >= total) {
            bad = k;
            break;
        }
        chunk = chunk_of(starts, n, g, chunk);
        pairs[2 * k] = (int32_t)chunk;
        pairs[2 * k + 1] = (int32_t)(g - starts[chunk]);
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        int32_t g;
        memcpy(&g, (const uint8_t *)order.buf + 4 * bad, 4);
        PyErr_Format(PyExc_ValueError, "the order's row %d is not one of the %zd rows", g, total);
        Py_CLEAR(out);
    }

done:
    PyMem_Free(starts);
    Py_XDECREF(fast);
    PyBuffer_Release(&order);
    return out;
}

PyDoc_STRVAR(take_fixed_doc,
"take_fixed(located, width, chunks) -> (data, validity, nulls)\n\n"
"pick_fixed's result for the rows `located` lists (locate's (chunk, row) pairs), in that\n"
"order. ValueError for a pair that is not a row of the chunks.");

static PyObject *take_fixed(PyObject *self, PyObject *args) {
    PyObject *located, *chunks;
    Py_ssize_t width;
    (void)self;
    if (!PyArg_ParseTuple(args, "OnO", &located, &width, &chunks)) return NULL;
    if (!fixed_width(width)) return NULL;
    return selected(located, -1, width, chunks);
}

PyDoc_STRVAR(take_binary_doc,
"take_binary(located, chunks) -> (offsets, data, validity, nulls)\n\n"
"pick_binary's result for the rows `located` lists (locate's (chunk, row) pairs), in\n"
"that order. ValueError for a pair that is not a row of the chunks.");

static PyObject *take_binary(PyObject *self, PyObject *args) {
    PyObject *located, *chunks;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO", &located, &chunks)) return NULL;
    return selected(located, -1, 0, chunks);
}

static PyMethodDef methods[] = {
    {"pick_fixed", pick_fixed, METH_VARARGS, pick_fixed_doc},
    {"pick_binary", pick_binary, METH_VARARGS, pick_binary_doc},
    {"locate", locate, METH_VARARGS, locate_doc},
    {"take_fixed", take_fixed, METH_VARARGS, take_fixed_doc},
    {"take_binary", take_binary, METH_VARARGS, take_binary_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rows",
    "Rows selected out of a column's chunks into new buffers, one copy, compiled.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rows(void) { return PyModule_Create(&module); }
