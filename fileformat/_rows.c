/* Rows picked out of a column's chunks into new buffers: one copy of the picked rows,
 * however many chunks they come from.
 *
 * Phase 2 decides about a run of small input batches at once (worker/gather.py joins
 * them as a table, uncopied). Concatenating them and then filtering copied every record
 * once and the survivors once more; these passes copy only the survivors, straight from
 * their chunks (fileformat/batches.py `pick_records`).
 *
 * A chunk is given as a tuple of its length, the slot of its first row in its buffers
 * (Arrow's array offset), its validity bitmap (None: no nulls) and its data buffers: one
 * of `width`-byte values for a fixed-width column, int32 offsets and bytes for a binary
 * one. The mask is the rows' bits, LSB first (bit i: row i of the chunks one after
 * another), as an Arrow bitmap or Python's `int.to_bytes(..., "little")` lays them out.
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

/* A private copy of the mask of the chunks' `total` rows, checked to set exactly `rows`
 * bits (a copy: the passes trust that count without the GIL, while the caller's buffer
 * could change); its bits past `total` cleared. NULL on error (PyMem_Free it after). */
static uint8_t *parse_mask(PyObject *obj, Py_ssize_t total, Py_ssize_t rows) {
    Py_buffer view;
    Py_ssize_t bytes = (total + 7) / 8;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (view.len < bytes) {
        PyErr_Format(PyExc_ValueError, "the mask holds %zd bytes, %zd rows need %zd", view.len,
                     total, bytes);
        PyBuffer_Release(&view);
        return NULL;
    }
    uint8_t *m = PyMem_Malloc(bytes ? (size_t)bytes : 1);
    if (m == NULL) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(m, view.buf, (size_t)bytes);
    PyBuffer_Release(&view);
    if (total & 7) m[bytes - 1] &= (uint8_t)((1u << (total & 7)) - 1);
    Py_ssize_t set = 0;
    for (Py_ssize_t i = 0; i < bytes; i++) set += __builtin_popcount(m[i]);
    if (set != rows) {
        PyErr_Format(PyExc_ValueError, "the mask picks %zd of %zd rows, not %zd", set, total, rows);
        PyMem_Free(m);
        return NULL;
    }
    return m;
}

/* An int32 offset, wherever its buffer starts (a memoryview need not be aligned). */
static inline int32_t offset_at(const void *offsets, Py_ssize_t i) {
    int32_t v;
    memcpy(&v, (const uint8_t *)offsets + 4 * i, 4);
    return v;
}

/* The validity of the picked rows into `out` (zeroed, `rows` bits); their nulls. */
static Py_ssize_t pick_validity(const Chunk *chunks, Py_ssize_t n, const uint8_t *mask,
                                uint8_t *out) {
    Py_ssize_t row = 0, at = 0, nulls = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Chunk *c = &chunks[i];
        const uint8_t *valid = c->has_validity ? c->validity.buf : NULL;
        Py_ssize_t slot = c->slot;
        FOR_EACH_PICKED(mask, row, c->length, r, {
            if (valid == NULL || bit_set(valid, slot + r))
                set_bit(out, at);
            else
                nulls++;
            at++;
        })
        row += c->length;
    }
    return nulls;
}

/* (validity, nulls): None and 0 when no chunk has a validity bitmap or no picked row is
 * null; else a new bitmap of `rows` bits. */
static PyObject *validity_of(const Chunk *chunks, Py_ssize_t n, const uint8_t *mask,
                             Py_ssize_t rows) {
    int any = 0;
    for (Py_ssize_t i = 0; i < n; i++) any |= chunks[i].has_validity;
    if (!any) return Py_BuildValue("(On)", Py_None, (Py_ssize_t)0);
    PyObject *bits = PyBytes_FromStringAndSize(NULL, (rows + 7) / 8);
    if (bits == NULL) return NULL;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(bits);
    memset(out, 0, (size_t)(rows + 7) / 8);
    Py_ssize_t nulls = pick_validity(chunks, n, mask, out);
    if (!nulls) {
        Py_DECREF(bits);
        return Py_BuildValue("(On)", Py_None, (Py_ssize_t)0);
    }
    return Py_BuildValue("(Nn)", bits, nulls);
}

PyDoc_STRVAR(pick_fixed_doc,
"pick_fixed(mask, rows, width, chunks) -> (data, validity, nulls)\n\n"
"The `rows` rows that `mask` picks of a fixed-width column of `width`-byte values given\n"
"as `chunks` of (length, slot, validity, data): their values, packed, and their validity\n"
"bitmap (None when none of them is null) and null count. A null row's value is copied\n"
"as its chunk holds it. ValueError for a short buffer or a mask that picks other than\n"
"`rows` rows.");

static PyObject *pick_fixed(PyObject *self, PyObject *args) {
    PyObject *mask_obj, *chunks_obj, *data = NULL, *validity = NULL, *out = NULL;
    Py_ssize_t rows, width, n, total;
    (void)self;
    if (!PyArg_ParseTuple(args, "OnnO", &mask_obj, &rows, &width, &chunks_obj)) return NULL;
    if (width < 1 || width > 16 || rows < 0) {
        PyErr_SetString(PyExc_ValueError, "width must be 1 to 16, rows not negative");
        return NULL;
    }
    Chunk *chunks = parse_chunks(chunks_obj, width, 0, &n, &total);
    if (chunks == NULL) return NULL;
    uint8_t *m = parse_mask(mask_obj, total, rows);
    if (m == NULL) {
        release_chunks(chunks, n);
        return NULL;
    }
    data = PyBytes_FromStringAndSize(NULL, rows * width);
    if (data == NULL) goto done;
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(data);
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t row = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Chunk *c = &chunks[i];
        const uint8_t *src = (const uint8_t *)c->data.buf + c->slot * width;
        if (width == 8) {
            FOR_EACH_PICKED(m, row, c->length, r, {
                memcpy(dst, src + r * 8, 8);
                dst += 8;
            })
        } else {
            FOR_EACH_PICKED(m, row, c->length, r, {
                memcpy(dst, src + r * width, (size_t)width);
                dst += width;
            })
        }
        row += c->length;
    }
    Py_END_ALLOW_THREADS
    validity = validity_of(chunks, n, m, rows);
    if (validity == NULL) goto done;
    out = Py_BuildValue("(OOO)", data, PyTuple_GET_ITEM(validity, 0),
                        PyTuple_GET_ITEM(validity, 1));

done:
    Py_XDECREF(data);
    Py_XDECREF(validity);
    PyMem_Free(m);
    release_chunks(chunks, n);
    return out;
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
    PyObject *mask_obj, *chunks_obj, *offsets = NULL, *data = NULL, *validity = NULL,
                                      *out = NULL;
    Py_ssize_t rows, n, total;
    (void)self;
    if (!PyArg_ParseTuple(args, "OnO", &mask_obj, &rows, &chunks_obj)) return NULL;
    if (rows < 0 || rows > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "rows out of range");
        return NULL;
    }
    Chunk *chunks = parse_chunks(chunks_obj, 0, 1, &n, &total);
    if (chunks == NULL) return NULL;
    uint8_t *m = parse_mask(mask_obj, total, rows);
    if (m == NULL) {
        release_chunks(chunks, n);
        return NULL;
    }
    offsets = PyBytes_FromStringAndSize(NULL, 4 * (rows + 1));
    if (offsets == NULL) goto done;
    int32_t *o = (int32_t *)PyBytes_AS_STRING(offsets);
    /* First pass: the picked values' offsets, checked against their chunk's data. */
    int64_t size = 0;
    Py_ssize_t row = 0, at = 0, bad = -1;
    Py_BEGIN_ALLOW_THREADS
    o[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Chunk *c = &chunks[i];
        int64_t limit = c->data.len, wrong = 0;
        const uint8_t *valid = c->has_validity ? c->validity.buf : NULL;
        FOR_EACH_PICKED(m, row, c->length, r, {
            int64_t start = offset_at(c->offsets.buf, c->slot + r);
            int64_t end = offset_at(c->offsets.buf, c->slot + r + 1);
            int64_t off = (start < 0) | (end < start) | (end > limit);
            int64_t null = valid != NULL && !bit_set(valid, c->slot + r);
            wrong |= off;
            /* nothing for a wrong row (it fails below) or a null one (no bytes, as Arrow) */
            size += (end - start) & ((off | null) - 1);
            o[++at] = (int32_t)size;
        })
        row += c->length;
        if (wrong) {
            bad = i;
            break;
        }
        if (size > INT32_MAX) {
            bad = n;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    if (bad == n) {
        PyErr_SetString(PyExc_OverflowError, "the picked values hold more than 2 GiB");
        goto done;
    }
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "chunk %zd's offsets run outside its data", bad);
        goto done;
    }
    data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (data == NULL) goto done;
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(data);
    /* Second pass: the bytes, each value's length and place taken from the offsets just
       made (they alone say where the output's bytes go), its start checked again. */
    int changed = 0;
    Py_BEGIN_ALLOW_THREADS
    row = 0;
    at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Chunk *c = &chunks[i];
        const uint8_t *src = c->data.buf;
        int64_t limit = c->data.len;
        FOR_EACH_PICKED(m, row, c->length, r, {
            int64_t start = offset_at(c->offsets.buf, c->slot + r), len = (int64_t)o[at + 1] - o[at];
            if (start < 0 || start > limit - len)
                changed = 1;
            else
                memcpy(dst + o[at], src + start, (size_t)len);
            at++;
        })
        row += c->length;
    }
    Py_END_ALLOW_THREADS
    if (changed) {
        PyErr_SetString(PyExc_ValueError, "a chunk's offsets changed while its rows were picked");
        goto done;
    }
    validity = validity_of(chunks, n, m, rows);
    if (validity == NULL) goto done;
    out = Py_BuildValue("(OOOO)", offsets, data, PyTuple_GET_ITEM(validity, 0),
                        PyTuple_GET_ITEM(validity, 1));

done:
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    Py_XDECREF(validity);
    PyMem_Free(m);
    release_chunks(chunks, n);
    return out;
}

static PyMethodDef methods[] = {
    {"pick_fixed", pick_fixed, METH_VARARGS, pick_fixed_doc},
    {"pick_binary", pick_binary, METH_VARARGS, pick_binary_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rows",
    "Rows picked out of a column's chunks into new buffers, one copy, compiled.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rows(void) { return PyModule_Create(&module); }
