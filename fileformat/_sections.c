/* A shared block's section table and per-section figures (FORMAT.md section 13), in
 * compiled passes.
 *
 * `usual_entries` parses a section table's entries as this system writes them, into
 * `TableEntry` tuples, stopping at the first it cannot take (block.py parses that one
 * field by field, with its error if it is wrong, then calls back).
 *
 * `batch_figures` is what a block's check and the writer's `write_sections` need of every
 * section of a block: its first and last offset, whether the offsets strictly increase
 * within it, its record count, tombstones, logical bytes, timestamp range and earliest
 * tombstone delete horizon, in the order of `BatchStats`'s fields (the first eight of a
 * `TableEntry`). It reads the batch in place, as Arrow's C data interface exports it
 * (`arrow_c_abi.h`), as `checked_figures` does for one batch; `figures` reads only the
 * offsets, from a buffer.
 *
 * This file checks every span, every exported array's layout and every buffer's
 * length before reading, and reads nothing else. The scan runs without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#define NO_HORIZON INT64_MAX
#define FIGURES 8
#define RECORD_OVERHEAD 16

typedef struct {
    Py_buffer view;
    int held;
} Column;

static void release(Column *c) {
    if (c->held) {
        PyBuffer_Release(&c->view);
        c->held = 0;
    }
}

/* `obj` as a buffer of at least `min_bytes` bytes; None (when allowed) as no buffer. */
static int take_column(PyObject *obj, Column *c, Py_ssize_t min_bytes, int optional,
                       const char *name) {
    c->held = 0;
    if (obj == Py_None) {
        if (optional) return 0;
        PyErr_Format(PyExc_TypeError, "%s is required", name);
        return -1;
    }
    if (PyObject_GetBuffer(obj, &c->view, PyBUF_SIMPLE) < 0) return -1;
    c->held = 1;
    if (c->view.len < min_bytes) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, %zd needed", name, c->view.len,
                     min_bytes);
        release(c);
        return -1;
    }
    return 0;
}

static inline int bit_set(const uint8_t *bits, Py_ssize_t i) {
    return (bits[i >> 3] >> (i & 7)) & 1;
}

static inline int64_t span_of(const int32_t *offsets, Py_ssize_t i) {
    return (int64_t)offsets[i + 1] - offsets[i];
}

/* The bytes of the non-null values among rows [a, end) of int32 `offsets` (row r's at
   r), row r valid where bit `bit` + r of `bits` is set (NULL: every row). Wraps rather
   than overflows on corrupt offsets. */
static uint64_t valid_span_bytes(const int32_t *offsets, const uint8_t *bits, Py_ssize_t bit,
                                 Py_ssize_t a, Py_ssize_t end) {
    if (bits == NULL) return (uint64_t)((int64_t)offsets[end] - offsets[a]);
    uint64_t total = 0;
    for (Py_ssize_t r = a; r < end; r++)
        if (bit_set(bits, bit + r)) total += (uint64_t)span_of(offsets, r);
    return total;
}

/* Whether the fields `fields` (-1 ends the list) of the tuple `e` are exact ints (None
 * allowed where `none_at` says): reading them runs no Python code, so a borrowed entry
 * stays alive while it is read. */
static int int_fields(PyObject *e, const int *fields, int none_at) {
    for (const int *k = fields; *k >= 0; k++) {
        if (*k >= PyTuple_GET_SIZE(e)) return 0;
        PyObject *v = PyTuple_GET_ITEM(e, *k);
        if (!PyLong_CheckExact(v) && !(*k == none_at && v == Py_None)) return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------------------------
 * A block's table entries, packed (SectionEntries).
 *
 * Every job reads every entry of every input's tables, once in each pointer, but almost
 * never one entry as an object. A TableEntry (block.py) holds its fifteen fields as a
 * dozen objects, and making and freeing them was most of a table's parse. A
 * SectionEntries holds each entry as one C struct (Entry) and makes its TableEntry only
 * when one is asked for (`entries[i]`). The passes below that read a table's entries
 * (footer_entries, unsettled, table_columns, figures' compare, and the writer's
 * table_payload and index_entries) take either one or a list of TableEntries (a
 * writer's), through entry_at.
 * ------------------------------------------------------------------------------------ */

#define ENTRY_FIELDS 15

/* Whether each of a TableEntry's stats (BatchStats's fields) is signed in the format. */
static const int STAT_SIGNED[FIGURES] = {1, 1, 0, 0, 0, 1, 1, 1};

/* One table entry: a TableEntry's fields as C values. */
typedef struct {
    uint64_t stats[FIGURES]; /* fields 0-7, as stored (a signed one's two's complement) */
    int no_horizon;          /* field 7 is None (stats[7] is then NO_HORIZON) */
    PyObject *topic, *raw;   /* field 8 (str) and the raw topic, the key's first item */
    PyObject *key;           /* a TableEntry's key (field 10); NULL in a SectionEntries */
    int64_t partition, start, kind, from, to; /* fields 9, 11, 12, 13, 14 */
} Entry;

typedef struct {
    PyObject_HEAD
    Entry *items; /* each holds a reference to its topic and raw topic */
    Py_ssize_t n, cap;
    PyTypeObject *entry_type; /* TableEntry: what entries[i] makes */
} SectionEntries;

static PyTypeObject SectionEntriesType;
#define SectionEntries_Check(o) Py_IS_TYPE((o), &SectionEntriesType)

/* A new instance of the tuple subclass `type` (a NamedTuple) holding `items`, stolen. */
static PyObject *new_entry(PyTypeObject *type, PyObject **items) {
    PyObject *entry = type->tp_alloc(type, ENTRY_FIELDS);
    if (entry == NULL) {
        for (int k = 0; k < ENTRY_FIELDS; k++) Py_XDECREF(items[k]);
        return NULL;
    }
    for (int k = 0; k < ENTRY_FIELDS; k++) PyTuple_SET_ITEM(entry, k, items[k]);
    return entry;
}

/* Whether `type` is one new_entry can make: a tuple subclass with no fields of its own (a
 * NamedTuple); TypeError otherwise. */
static int check_entry_type(PyTypeObject *type) {
    if (!PyType_IsSubtype(type, &PyTuple_Type) ||
        type->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "entry_type must be a NamedTuple");
        return -1;
    }
    return 0;
}

/* The int `v` as a 64-bit value, signed or not as the format has its field
 * (OverflowError for a value out of that range). */
static int field64(PyObject *v, int is_signed, uint64_t *out) {
    if (is_signed) {
        long long x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred()) return -1;
        *out = (uint64_t)x;
    } else {
        unsigned long long x = PyLong_AsUnsignedLongLong(v);
        if (x == (unsigned long long)-1 && PyErr_Occurred()) return -1;
        *out = x;
    }
    return 0;
}

/* The TableEntry tuple `e` (entry `i` of a list) as an Entry whose objects are borrowed
 * from it; -1 with TypeError if it is not one, OverflowError for a field out of its
 * range. */
static int entry_from_tuple(PyObject *e, Py_ssize_t i, Entry *out) {
    static const int ints[] = {0, 1, 2, 3, 4, 5, 6, 7, 9, 11, 12, 13, 14, -1};
    static const int other_at[5] = {9, 11, 12, 13, 14};
    PyObject *key = PyTuple_Check(e) && PyTuple_GET_SIZE(e) == ENTRY_FIELDS
                        ? PyTuple_GET_ITEM(e, 10)
                        : NULL;
    if (key == NULL || !int_fields(e, ints, 7) || !PyUnicode_Check(PyTuple_GET_ITEM(e, 8)) ||
        !PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 2 ||
        !PyBytes_Check(PyTuple_GET_ITEM(key, 0))) {
        PyErr_Format(PyExc_TypeError, "entry %zd is not a TableEntry", i);
        return -1;
    }
    out->no_horizon = PyTuple_GET_ITEM(e, 7) == Py_None;
    for (int k = 0; k < FIGURES; k++) {
        if (k == 7 && out->no_horizon) {
            out->stats[7] = (uint64_t)NO_HORIZON;
        } else if (field64(PyTuple_GET_ITEM(e, k), STAT_SIGNED[k], &out->stats[k]) < 0) {
            return -1;
        }
    }
    int64_t *other[5] = {&out->partition, &out->start, &out->kind, &out->from, &out->to};
    for (int j = 0; j < 5; j++) {
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(e, other_at[j]));
        if (v == -1 && PyErr_Occurred()) return -1;
        *other[j] = v;
    }
    out->topic = PyTuple_GET_ITEM(e, 8);
    out->raw = PyTuple_GET_ITEM(key, 0);
    out->key = key;
    return 0;
}

/* How many entries `entries` holds, a SectionEntries or a list (of TableEntries); -1
 * with TypeError for anything else. */
static Py_ssize_t entries_count(PyObject *entries) {
    if (SectionEntries_Check(entries)) return ((SectionEntries *)entries)->n;
    if (PyList_Check(entries)) return PyList_GET_SIZE(entries);
    PyErr_SetString(PyExc_TypeError, "entries must be a SectionEntries or a list");
    return -1;
}

/* Entry `i` of `entries` (entries_count accepted it, 0 <= i < its count): a
 * SectionEntries' own, or a TableEntry's read into `scratch`, whose objects are borrowed
 * (valid while no Python code runs); NULL with an error set. */
static const Entry *entry_at(PyObject *entries, Py_ssize_t i, Entry *scratch) {
    if (SectionEntries_Check(entries)) return &((SectionEntries *)entries)->items[i];
    if (entry_from_tuple(PyList_GET_ITEM(entries, i), i, scratch) < 0) return NULL;
    return scratch;
}

/* Field `k` of a TableEntry, for the fields that are ints; 1 (no error set) for another
 * field, a None horizon or a stat past int64. */
static int entry_int(const Entry *e, Py_ssize_t k, int64_t *v) {
    if (k >= 0 && k < FIGURES) {
        if ((k == 7 && e->no_horizon) || (!STAT_SIGNED[k] && e->stats[k] > INT64_MAX)) return 1;
        *v = (int64_t)e->stats[k];
        return 0;
    }
    switch (k) {
    case 9: *v = e->partition; return 0;
    case 11: *v = e->start; return 0;
    case 12: *v = e->kind; return 0;
    case 13: *v = e->from; return 0;
    case 14: *v = e->to; return 0;
    default: return 1;
    }
}

/* Appends a copy of `e`, taking a reference to its topic and raw topic (not its key). */
static int entries_push(SectionEntries *self, const Entry *e) {
    if (self->n == self->cap) {
        Py_ssize_t cap = self->cap ? 2 * self->cap : 64;
        Entry *grown = PyMem_Realloc(self->items, (size_t)cap * sizeof(Entry));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->items = grown;
        self->cap = cap;
    }
    Entry *slot = &self->items[self->n++];
    *slot = *e;
    slot->key = NULL;
    Py_INCREF(slot->topic);
    Py_INCREF(slot->raw);
    return 0;
}

/* Entry `i`'s TableEntry, made now. */
static PyObject *entry_object(SectionEntries *self, Py_ssize_t i) {
    const Entry *e = &self->items[i];
    PyObject *items[ENTRY_FIELDS];
    for (int k = 0; k < FIGURES; k++) {
        items[k] = k == 7 && e->no_horizon ? Py_NewRef(Py_None)
                   : STAT_SIGNED[k]        ? PyLong_FromLongLong((int64_t)e->stats[k])
                                           : PyLong_FromUnsignedLongLong(e->stats[k]);
    }
    items[8] = Py_NewRef(e->topic);
    items[9] = PyLong_FromLongLong(e->partition);
    items[10] = items[9] == NULL ? NULL : PyTuple_Pack(2, e->raw, items[9]);
    items[11] = PyLong_FromLongLong(e->start);
    items[12] = PyLong_FromLongLong(e->kind);
    items[13] = PyLong_FromLongLong(e->from);
    items[14] = PyLong_FromLongLong(e->to);
    for (int k = 0; k < ENTRY_FIELDS; k++) {
        if (items[k] == NULL) {
            for (int j = 0; j < ENTRY_FIELDS; j++) Py_XDECREF(items[j]);
            return NULL;
        }
    }
    return new_entry(self->entry_type, items);
}

static PyObject *SectionEntries_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyTypeObject *entry_type;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "SectionEntries takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!:SectionEntries", &PyType_Type, &entry_type)) return NULL;
    if (check_entry_type(entry_type) < 0) return NULL;
    SectionEntries *self = (SectionEntries *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->entry_type = (PyTypeObject *)Py_NewRef(entry_type);
    return (PyObject *)self;
}

static void SectionEntries_dealloc(SectionEntries *self) {
    for (Py_ssize_t i = 0; i < self->n; i++) {
        Py_DECREF(self->items[i].topic);
        Py_DECREF(self->items[i].raw);
    }
    PyMem_Free(self->items);
    Py_XDECREF(self->entry_type);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t SectionEntries_len(SectionEntries *self) { return self->n; }

/* 0 if `i` is an entry's index (IndexError otherwise). */
static int entries_check_index(SectionEntries *self, Py_ssize_t i) {
    if (i >= 0 && i < self->n) return 0;
    PyErr_SetString(PyExc_IndexError, "SectionEntries index out of range");
    return -1;
}

/* The entry index `index` (an int, negative from the end) as an index, or -1 with an
 * error set. */
static Py_ssize_t entries_index(SectionEntries *self, PyObject *index) {
    Py_ssize_t i = PyNumber_AsSsize_t(index, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred()) return -1;
    if (i < 0) i += self->n;
    return entries_check_index(self, i) < 0 ? -1 : i;
}

static PyObject *SectionEntries_item(SectionEntries *self, Py_ssize_t i) {
    return entries_check_index(self, i) < 0 ? NULL : entry_object(self, i);
}

static PyObject *SectionEntries_subscript(SectionEntries *self, PyObject *index) {
    if (PySlice_Check(index)) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(index, &start, &stop, &step) < 0) return NULL;
        Py_ssize_t n = PySlice_AdjustIndices(self->n, &start, &stop, step);
        PyObject *out = PyList_New(n);
        if (out == NULL) return NULL;
        for (Py_ssize_t j = 0, i = start; j < n; j++, i += step) {
            PyObject *e = entry_object(self, i);
            if (e == NULL) {
                Py_DECREF(out);
                return NULL;
            }
            PyList_SET_ITEM(out, j, e);
        }
        return out;
    }
    Py_ssize_t i = entries_index(self, index);
    return i < 0 ? NULL : entry_object(self, i);
}

static PyObject *SectionEntries_append(SectionEntries *self, PyObject *entry) {
    Entry e;
    if (entry_from_tuple(entry, self->n, &e) < 0) return NULL;
    if (entries_push(self, &e) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *SectionEntries_start(SectionEntries *self, PyObject *index) {
    Py_ssize_t i = entries_index(self, index);
    return i < 0 ? NULL : PyLong_FromLongLong(self->items[i].start);
}

static PyMethodDef SectionEntries_methods[] = {
    {"append", (PyCFunction)SectionEntries_append, METH_O,
     "append(entry)\n\nAppends the TableEntry `entry` (TypeError for anything else)."},
    {"start", (PyCFunction)SectionEntries_start, METH_O,
     "start(i)\n\nEntry i's first row (its TableEntry's start), without making the entry."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods SectionEntries_as_sequence = {
    .sq_length = (lenfunc)SectionEntries_len,
    .sq_item = (ssizeargfunc)SectionEntries_item,
};

static PyMappingMethods SectionEntries_as_mapping = {
    .mp_length = (lenfunc)SectionEntries_len,
    .mp_subscript = (binaryfunc)SectionEntries_subscript,
};

static PyTypeObject SectionEntriesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_sections.SectionEntries",
    .tp_basicsize = sizeof(SectionEntries),
    .tp_dealloc = (destructor)SectionEntries_dealloc,
    .tp_as_sequence = &SectionEntries_as_sequence,
    .tp_as_mapping = &SectionEntries_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "SectionEntries(entry_type)\n\n"
              "A block's section table entries, packed: each as C values, made a TableEntry\n"
              "(`entry_type`) only when asked for (entries[i]; a slice gives a list). Filled\n"
              "by usual_entries and append; read by the passes over a table's entries.",
    .tp_methods = SectionEntries_methods,
    .tp_new = SectionEntries_new,
};

static int check_span(Py_ssize_t rows, Py_ssize_t i, Py_ssize_t start, Py_ssize_t count);

/* One section's (start, count) from the tuple `item`'s fields `start_at` and `count_at`. */
static int read_span(PyObject *item, Py_ssize_t start_at, Py_ssize_t count_at,
                     Py_ssize_t rows, Py_ssize_t i, Py_ssize_t *start, Py_ssize_t *count) {
    const int fields[3] = {(int)start_at, (int)count_at, -1};
    if (!PyTuple_Check(item) || start_at > INT_MAX || count_at > INT_MAX ||
        !int_fields(item, fields, -1)) {
        PyErr_Format(PyExc_TypeError, "section %zd is not a tuple of ints at %zd and %zd", i,
                     start_at, count_at);
        return -1;
    }
    *start = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, start_at));
    if (*start == -1 && PyErr_Occurred()) return -1;
    *count = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, count_at));
    if (*count == -1 && PyErr_Occurred()) return -1;
    return check_span(rows, i, *start, *count);
}

/* That a section's rows, `count` from `start`, are at least one and within the batch. */
static int check_span(Py_ssize_t rows, Py_ssize_t i, Py_ssize_t start, Py_ssize_t count) {
    if (start < 0 || count < 1 || start > rows - count) {
        PyErr_Format(PyExc_ValueError, "section %zd spans rows %zd+%zd of a %zd-row batch", i,
                     start, count, rows);
        return -1;
    }
    return 0;
}

/* The first of the `n` section tuples of `seq` whose first `width` fields are not the
 * figures `out` computed for it, or -1; -2 with an error set. */
static Py_ssize_t first_disagreeing(PyObject *seq, const int64_t *out, Py_ssize_t n,
                                   Py_ssize_t width) {
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i); /* a tuple: read_span checked */
        const int64_t *f = out + FIGURES * i;
        if (PyTuple_GET_SIZE(item) < width) return i;
        for (Py_ssize_t k = 0; k < width; k++) {
            PyObject *v = PyTuple_GET_ITEM(item, k);
            if (k == 7 && f[7] == NO_HORIZON) {
                if (v != Py_None) return i;
                continue;
            }
            if (!PyLong_CheckExact(v)) return i;
            int overflow;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (x == -1 && PyErr_Occurred()) return -2;
            if (overflow || x != f[k]) return i;
        }
    }
    return -1;
}

/* read_span for entry `i` of a SectionEntries: its TableEntry fields `start_at` and
 * `count_at`. */
static int entry_span(const Entry *e, Py_ssize_t start_at, Py_ssize_t count_at,
                      Py_ssize_t rows, Py_ssize_t i, Py_ssize_t *start, Py_ssize_t *count) {
    int64_t s, c;
    if (entry_int(e, start_at, &s) != 0 || entry_int(e, count_at, &c) != 0 ||
        s > PY_SSIZE_T_MAX || c > PY_SSIZE_T_MAX) {
        PyErr_Format(PyExc_TypeError, "section %zd is not a tuple of ints at %zd and %zd", i,
                     start_at, count_at);
        return -1;
    }
    *start = (Py_ssize_t)s;
    *count = (Py_ssize_t)c;
    return check_span(rows, i, *start, *count);
}

/* first_disagreeing for the entries of a SectionEntries, read as TableEntries would be. */
static Py_ssize_t first_disagreeing_entry(const SectionEntries *entries, const int64_t *out,
                                          Py_ssize_t n, Py_ssize_t width) {
    for (Py_ssize_t i = 0; i < n; i++) {
        const Entry *e = &entries->items[i];
        const int64_t *f = out + FIGURES * i;
        for (Py_ssize_t k = 0; k < width; k++) {
            if (k == 7) {
                if (f[7] == NO_HORIZON ? !e->no_horizon
                                       : e->no_horizon || (int64_t)e->stats[7] != f[7])
                    return i;
                continue;
            }
            if ((!STAT_SIGNED[k] && e->stats[k] > INT64_MAX) || (int64_t)e->stats[k] != f[k])
                return i;
        }
    }
    return -1;
}

/* A batch's columns as the figures read them, row r at index r: offsets, timestamps
   (NULL: only the first and last offsets are wanted), the values' validity bitmap (NULL:
   no nulls) and the bit of row 0, the delete horizons and their validity. */
typedef struct {
    const int64_t *o, *t;
    const uint8_t *vbits;
    Py_ssize_t vbit;
    const int64_t *h;
    const uint8_t *hbits;
    Py_ssize_t hbit;
} RowColumns;

/* The figures of rows [a, end) (at least one) into f: first and last offsets, then, with
   timestamps, the rest of BatchStats's fields but the logical bytes (0 here; the caller
   sums them from the binary columns), the horizon NO_HORIZON when no tombstone has one.
   `*descent` becomes the first row whose offset does not exceed the one before it, if it
   is still -1 and there is one. */
static void span_figures(const RowColumns *c, Py_ssize_t a, Py_ssize_t end, int64_t *f,
                         Py_ssize_t *descent) {
    const int64_t *o = c->o, *t = c->t, *h = c->h;
    f[0] = o[a];
    f[1] = o[end - 1];
    for (Py_ssize_t r = a + 1; r < end && *descent < 0; r++)
        if (o[r] <= o[r - 1]) *descent = r;
    if (t == NULL) return;
    int64_t tombstones = 0, min_ts = t[a], max_ts = t[a], horizon = NO_HORIZON;
    for (Py_ssize_t r = a; r < end; r++) {
        if (t[r] < min_ts) min_ts = t[r];
        if (t[r] > max_ts) max_ts = t[r];
        if (c->vbits != NULL && !bit_set(c->vbits, c->vbit + r)) {
            tombstones++;
            if ((c->hbits == NULL || bit_set(c->hbits, c->hbit + r)) && h[r] < horizon)
                horizon = h[r];
        }
    }
    f[2] = end - a;
    f[3] = tombstones;
    f[4] = 0;
    f[5] = min_ts;
    f[6] = max_ts;
    f[7] = horizon;
}

/* The sections a figures call measures: their spans in a `rows`-row batch, read from
   tuples (fields `start_at` and `count_at`) or from a SectionEntries, and room for each
   one's figures. */
typedef struct {
    PyObject *seq; /* the tuples as a fast sequence, or the SectionEntries (a reference) */
    const SectionEntries *packed;
    Py_ssize_t n;
    Py_ssize_t *spans; /* start and count of each */
    int64_t *out;      /* FIGURES of each */
} Spans;

static void spans_free(Spans *sp) {
    Py_CLEAR(sp->seq);
    PyMem_Free(sp->spans);
    PyMem_Free(sp->out);
    sp->spans = NULL;
    sp->out = NULL;
}

/* Reads every section's span (each at least one row, within the batch); -1 with an error
   set (spans_free still to be called). */
static int spans_read(Spans *sp, PyObject *sections, Py_ssize_t start_at, Py_ssize_t count_at,
                      Py_ssize_t rows) {
    *sp = (Spans){0};
    if (start_at < 0 || count_at < 0) {
        PyErr_SetString(PyExc_ValueError, "field positions out of range");
        return -1;
    }
    sp->packed = SectionEntries_Check(sections) ? (const SectionEntries *)sections : NULL;
    sp->seq = sp->packed != NULL ? Py_NewRef(sections)
                                 : PySequence_Fast(sections, "sections must be a sequence");
    if (sp->seq == NULL) return -1;
    Py_ssize_t n = sp->n = sp->packed != NULL ? sp->packed->n : PySequence_Fast_GET_SIZE(sp->seq);
    sp->spans = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (n ? n : 1));
    sp->out = PyMem_Malloc(sizeof(int64_t) * FIGURES * (n ? n : 1));
    if (sp->spans == NULL || sp->out == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t *s = &sp->spans[2 * i];
        if ((sp->packed != NULL
                 ? entry_span(&sp->packed->items[i], start_at, count_at, rows, i, s, s + 1)
                 : read_span(PySequence_Fast_GET_ITEM(sp->seq, i), start_at, count_at, rows, i,
                             s, s + 1)) < 0)
            return -1;
    }
    return 0;
}

/* What a figures call returns once the figures are in: (descent, the first section that
   disagrees or -1) with `compare`, else (descent, a list of each section's first `width`
   figures as a tuple, the horizon None where it is NO_HORIZON). */
static PyObject *spans_result(const Spans *sp, Py_ssize_t descent, Py_ssize_t width,
                              int compare) {
    if (compare) {
        Py_ssize_t bad = sp->packed != NULL
                             ? first_disagreeing_entry(sp->packed, sp->out, sp->n, width)
                             : first_disagreeing(sp->seq, sp->out, sp->n, width);
        if (bad == -2) return NULL;
        return Py_BuildValue("nn", descent, bad);
    }
    PyObject *list = PyList_New(sp->n);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < sp->n; i++) {
        const int64_t *f = sp->out + FIGURES * i;
        PyObject *tuple = PyTuple_New(width);
        if (tuple == NULL) goto fail;
        PyList_SET_ITEM(list, i, tuple);
        for (Py_ssize_t k = 0; k < width; k++) {
            PyObject *v = k == 7 && f[7] == NO_HORIZON ? Py_NewRef(Py_None)
                                                      : PyLong_FromLongLong(f[k]);
            if (v == NULL) goto fail;
            PyTuple_SET_ITEM(tuple, k, v);
        }
    }
    return Py_BuildValue("nN", descent, list);
fail:
    Py_DECREF(list);
    return NULL;
}

PyDoc_STRVAR(figures_doc,
"figures(sections, start_at, count_at, offsets, compare=False) -> (descent, figures)\n\n"
"Each section's first and last offset, for sections given as tuples whose field\n"
"`start_at` is the section's first row and `count_at` its rows (at least one, within\n"
"the batch), or as a SectionEntries (read as its TableEntries); `offsets` is an int64\n"
"buffer of the batch's rows. `descent` is the first row, inside a section, whose offset\n"
"does not exceed the one before it, or -1.\n\n"
"With `compare` true, `figures` is instead the first section whose tuple does not begin\n"
"with its two offsets (exact ints), or -1. `batch_figures` measures a whole batch's\n"
"sections.");

static PyObject *figures(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"sections", "start_at", "count_at", "offsets", "compare", NULL};
    PyObject *sections, *offsets_obj;
    Py_ssize_t start_at, count_at;
    int compare = 0;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OnnO|p", kwlist, &sections, &start_at,
                                     &count_at, &offsets_obj, &compare))
        return NULL;
    Column off = {0};
    Spans sp = {0};
    PyObject *result = NULL;
    if (take_column(offsets_obj, &off, 0, 0, "offsets") < 0 ||
        spans_read(&sp, sections, start_at, count_at, off.view.len / 8) < 0)
        goto done;
    Py_ssize_t descent = -1;
    Py_BEGIN_ALLOW_THREADS
    const RowColumns c = {.o = off.view.buf};
    for (Py_ssize_t i = 0; i < sp.n; i++)
        span_figures(&c, sp.spans[2 * i], sp.spans[2 * i] + sp.spans[2 * i + 1],
                     sp.out + FIGURES * i, &descent);
    Py_END_ALLOW_THREADS
    result = spans_result(&sp, descent, 2, compare);
done:
    spans_free(&sp);
    release(&off);
    return result;
}


#include "arrow_c_abi.h"

/* One exported array of a batch, its slots [0, length) at `at` in its buffers (its own
   offset plus its struct parents'). */
typedef struct {
    const struct ArrowArray *a;
    int64_t at;
} Slots;

/* Whether `arr` has the format and layout RECORD_SCHEMA gives it. */
static int layout_is(const struct ArrowSchema *schema, const struct ArrowArray *arr,
                     const char *format, int64_t buffers, int64_t children) {
    return strcmp(schema->format, format) == 0 && schema->n_children == children &&
           arr->n_buffers == buffers && arr->n_children == children &&
           arr->dictionary == NULL && arr->offset >= 0 && arr->length >= 0 &&
           (buffers < 2 || arr->length == 0 || arr->buffers[1] != NULL);
}

/* Whether any of slots [a, end) of `s` is null. */
static int any_null(Slots s, int64_t a, int64_t end) {
    const uint8_t *bits = s.a->buffers[0];
    if (s.a->null_count == 0 || bits == NULL) return 0;
    for (int64_t r = a; r < end; r++)
        if (!bit_set(bits, s.at + r)) return 1;
    return 0;
}

/* The bytes of the non-null values of slots [a, end) of binary or string array `s`. */
static uint64_t value_bytes(Slots s, int64_t a, int64_t end) {
    return valid_span_bytes((const int32_t *)s.a->buffers[1] + s.at,
                            s.a->null_count == 0 ? NULL : s.a->buffers[0], s.at, a, end);
}

/* A batch of RECORD_SCHEMA as Arrow's C data interface exports it, read in place: its
   rows, its six columns, the headers' items and their key and value, and the headers'
   list offsets (row r's items at [lists[r], lists[r + 1]) of `item`). */
typedef struct {
    int64_t n;
    Slots col[6], item, item_key, item_value;
    const int32_t *lists;
} RecordSlots;

/* `pair` (a batch's `__arrow_c_array__()`, at least one row, no nulls in its struct) as
   RecordSlots: TypeError for another layout, ValueError for headers' offsets outside
   their items. */
static int record_slots(PyObject *pair, RecordSlots *b) {
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_TypeError, "arrays must be an (ArrowSchema, ArrowArray) pair");
        return -1;
    }
    const struct ArrowSchema *schema =
        PyCapsule_GetPointer(PyTuple_GET_ITEM(pair, 0), "arrow_schema");
    if (schema == NULL) return -1;
    const struct ArrowArray *batch =
        PyCapsule_GetPointer(PyTuple_GET_ITEM(pair, 1), "arrow_array");
    if (batch == NULL) return -1;
    static const char *const formats[6] = {"l", "l", "z", "z", "+l", "l"};
    static const int64_t buffers[6] = {2, 2, 3, 3, 2, 2};
    int fits = layout_is(schema, batch, "+s", 1, 6) && batch->length >= 1 &&
               batch->null_count == 0;
    for (int i = 0; fits && i < 6; i++)
        fits = layout_is(schema->children[i], batch->children[i], formats[i], buffers[i],
                         i == 4) &&
               batch->children[i]->length >= batch->offset + batch->length;
    const struct ArrowSchema *item_schema = fits ? schema->children[4]->children[0] : NULL;
    const struct ArrowArray *items = fits ? batch->children[4]->children[0] : NULL;
    fits = fits && layout_is(item_schema, items, "+s", 1, 2) &&
           layout_is(item_schema->children[0], items->children[0], "u", 3, 0) &&
           layout_is(item_schema->children[1], items->children[1], "z", 3, 0) &&
           items->children[0]->length >= items->offset + items->length &&
           items->children[1]->length >= items->offset + items->length;
    if (!fits) {
        PyErr_SetString(PyExc_TypeError, "arrays must be a batch of RECORD_SCHEMA");
        return -1;
    }
    int64_t n = b->n = batch->length;
    for (int i = 0; i < 6; i++)
        b->col[i] = (Slots){batch->children[i], batch->children[i]->offset + batch->offset};
    b->item = (Slots){items, items->offset};
    b->item_key = (Slots){items->children[0], items->children[0]->offset + items->offset};
    b->item_value = (Slots){items->children[1], items->children[1]->offset + items->offset};
    b->lists = (const int32_t *)b->col[4].a->buffers[1] + b->col[4].at;
    if (b->lists[0] < 0 || b->lists[n] < b->lists[0] || b->lists[n] > items->length) {
        PyErr_SetString(PyExc_ValueError, "the headers' offsets lie outside their items");
        return -1;
    }
    return 0;
}

/* The columns span_figures reads, of a batch's RecordSlots. */
static RowColumns record_columns(const RecordSlots *b) {
    const struct ArrowArray *values = b->col[3].a, *horizons = b->col[5].a;
    return (RowColumns){
        .o = (const int64_t *)b->col[0].a->buffers[1] + b->col[0].at,
        .t = (const int64_t *)b->col[1].a->buffers[1] + b->col[1].at,
        .vbits = values->null_count == 0 ? NULL : values->buffers[0],
        .vbit = b->col[3].at,
        .h = (const int64_t *)horizons->buffers[1] + b->col[5].at,
        .hbits = horizons->null_count == 0 ? NULL : horizons->buffers[0],
        .hbit = b->col[5].at,
    };
}

/* The logical bytes of rows [a, end) (FORMAT.md, "Logical size"), summed from the
   columns' offsets (the headers' offsets of those rows in order: lists_in_order). */
static int64_t logical_bytes(const RecordSlots *b, int64_t a, int64_t end) {
    int32_t first = b->lists[a], last = b->lists[end];
    uint64_t bytes = (uint64_t)RECORD_OVERHEAD * (uint64_t)(end - a) +
                     value_bytes(b->col[2], a, end) + value_bytes(b->col[3], a, end);
    if (first < last) /* else the items' offsets may be absent */
        bytes += value_bytes(b->item_key, first, last) + value_bytes(b->item_value, first, last);
    return (int64_t)bytes; /* wraps rather than overflows on corrupt offsets */
}

/* Whether the headers of rows [a, end) lie in order inside the batch's (record_slots
   checked the batch's first and last). */
static int lists_in_order(const RecordSlots *b, int64_t a, int64_t end) {
    return b->lists[0] <= b->lists[a] && b->lists[a] <= b->lists[end] &&
           b->lists[end] <= b->lists[b->n];
}

/* What batches.decoded_problem refuses in a batch, in its words, but the order of its
   offsets: a null offset or timestamp, a null headers list, a null header or header key;
   or NULL. */
static const char *null_problem(const RecordSlots *b) {
    const int64_t n = b->n;
    const int32_t *lists = b->lists;
    if (any_null(b->col[0], 0, n) || any_null(b->col[1], 0, n)) return "null offset or timestamp";
    if (any_null(b->col[4], 0, n)) return "null headers list";
    if (lists[0] < lists[n] &&
        (any_null(b->item, lists[0], lists[n]) || any_null(b->item_key, lists[0], lists[n])))
        return "null header or header key";
    return NULL;
}

PyDoc_STRVAR(checked_figures_doc,
"checked_figures(arrays, ordered) -> tuple | str\n\n"
"A batch of RECORD_SCHEMA, given as its `__arrow_c_array__()` pair (a struct array of\n"
"its six columns, at least one row), checked and measured in one pass: the eight\n"
"fields of BatchStats (the horizon None when no tombstone has one before NO_HORIZON),\n"
"its logical bytes summed from its columns' offsets; or, for a batch that\n"
"batches.decoded_problem refuses, the same words: a null offset or timestamp, a null\n"
"headers list, a null header or header key, or (if `ordered`) offsets that do not\n"
"strictly increase. TypeError for another layout.");

static PyObject *checked_figures(PyObject *self, PyObject *args) {
    PyObject *pair;
    int ordered;
    RecordSlots b;
    (void)self;
    if (!PyArg_ParseTuple(args, "Op", &pair, &ordered) || record_slots(pair, &b) < 0)
        return NULL;
    const char *problem = NULL;
    int64_t f[FIGURES] = {0}; /* all set below; zeroed for the compiler, which cannot see it */
    Py_ssize_t descent = -1;
    Py_BEGIN_ALLOW_THREADS
    problem = null_problem(&b);
    if (problem == NULL) {
        const RowColumns c = record_columns(&b);
        span_figures(&c, 0, b.n, f, &descent);
        if (ordered && descent >= 0) problem = "offsets do not strictly increase";
        f[4] = logical_bytes(&b, 0, b.n);
    }
    Py_END_ALLOW_THREADS
    if (problem != NULL) return PyUnicode_FromString(problem);
    return Py_BuildValue("LLLLLLLN", (long long)f[0], (long long)f[1], (long long)f[2],
                         (long long)f[3], (long long)f[4], (long long)f[5], (long long)f[6],
                         f[7] == NO_HORIZON ? Py_NewRef(Py_None) : PyLong_FromLongLong(f[7]));
}

PyDoc_STRVAR(batch_figures_doc,
"batch_figures(arrays, sections, start_at, count_at, compare=False) -> (descent, figures)\n\n"
"`figures`, with the eight fields of BatchStats for each section (the horizon None when\n"
"no tombstone has one before NO_HORIZON, the logical bytes summed from the columns'\n"
"offsets), of a batch of RECORD_SCHEMA given as its `__arrow_c_array__()` pair (as\n"
"`checked_figures` takes it: one pass over its buffers, no column made). With `compare`\n"
"true, the first section whose tuple does not begin with its eight figures (exact ints,\n"
"the horizon None where it is NO_HORIZON), or -1: a block's check then makes no object\n"
"per section. TypeError for another layout; ValueError for a span outside the batch or\n"
"headers' offsets out of order.\n\n"
"With `checked` true, the batch is first checked for the nulls `checked_figures`\n"
"refuses, and their words returned (a str) instead: a whole block's decode then reads\n"
"its buffers once.");

static PyObject *batch_figures(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"arrays",  "sections", "start_at", "count_at",
                             "compare", "checked",  NULL};
    PyObject *pair, *sections;
    Py_ssize_t start_at, count_at;
    int compare = 0, checked = 0;
    RecordSlots b;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOnn|pp", kwlist, &pair, &sections,
                                     &start_at, &count_at, &compare, &checked) ||
        record_slots(pair, &b) < 0)
        return NULL;
    Spans sp = {0};
    PyObject *result = NULL;
    if (spans_read(&sp, sections, start_at, count_at, b.n) < 0) goto done;
    Py_ssize_t descent = -1;
    int disordered = 0;
    const char *problem = NULL;
    Py_BEGIN_ALLOW_THREADS
    const RowColumns c = record_columns(&b);
    if (checked) problem = null_problem(&b);
    for (Py_ssize_t i = 0; i < sp.n && !disordered && problem == NULL; i++) {
        int64_t a = sp.spans[2 * i], end = a + sp.spans[2 * i + 1], *f = sp.out + FIGURES * i;
        disordered = !lists_in_order(&b, a, end);
        span_figures(&c, a, end, f, &descent);
        if (!disordered) f[4] = logical_bytes(&b, a, end);
    }
    Py_END_ALLOW_THREADS
    if (problem != NULL) {
        result = PyUnicode_FromString(problem);
        goto done;
    }
    if (disordered) {
        PyErr_SetString(PyExc_ValueError, "the headers' offsets are out of order");
        goto done;
    }
    result = spans_result(&sp, descent, FIGURES, compare);
done:
    spans_free(&sp);
    return result;
}


static inline uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The trailer of a shared section up to its bitmap (block.py's _USUAL_TRAILER): the fixed
 * fields (FORMAT.md 6.2: "<qqQQQqqIBB2x"), the delete horizon, one batch index entry. */
#define TRAILER_FIXED 64
#define USUAL_TRAILER (TRAILER_FIXED + 24)
#define FLAG_HORIZON 1
#define KIND_ROARING32 1
#define KIND_ROARING64 2

/* The order of two section keys (raw topic, partition) in a file's order
 * (meta.section_key): <0, 0 or >0. Topic bytes first, a prefix before what it prefixes,
 * then partition. */
static int key_order(const void *a, Py_ssize_t a_len, int64_t a_partition, const void *b,
                     Py_ssize_t b_len, int64_t b_partition) {
    if (a != b || a_len != b_len) { /* the same topic is most often the same bytes object */
        int order = memcmp(a, b, a_len < b_len ? a_len : b_len);
        if (order != 0) return order;
        if (a_len != b_len) return a_len < b_len ? -1 : 1;
    }
    return (a_partition > b_partition) - (a_partition < b_partition);
}

/* Whether the section key (raw, partition) comes strictly after (prev, prev_partition). */
static int key_follows(const void *raw, Py_ssize_t len, int64_t partition, const void *prev,
                       Py_ssize_t prev_len, int64_t prev_partition) {
    return key_order(raw, len, partition, prev, prev_len, prev_partition) > 0;
}

/* The section key `key` (meta.section_key's (raw topic, partition)) as its parts: 0; 1
 * (no error set: the caller says what it wanted) unless it is a pair of bytes and an
 * int (exactly an int where `exact`); -1 with an error set for a partition past int64. */
static int key_parts(PyObject *key, int exact, const char **raw, Py_ssize_t *len,
                     int64_t *partition) {
    if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 2 ||
        !PyBytes_Check(PyTuple_GET_ITEM(key, 0)))
        return 1;
    PyObject *p = PyTuple_GET_ITEM(key, 1);
    if (exact ? !PyLong_CheckExact(p) : !PyLong_Check(p)) return 1;
    *raw = PyBytes_AS_STRING(PyTuple_GET_ITEM(key, 0));
    *len = PyBytes_GET_SIZE(PyTuple_GET_ITEM(key, 0));
    *partition = PyLong_AsLongLong(p);
    return *partition == -1 && PyErr_Occurred() ? -1 : 0;
}

/* A layout-2 trailer's fields before its batch index (FORMAT.md 6.2: "<qqQQQqqIBB2x", then
 * the delete horizon). */
typedef struct {
    int64_t first, last;
    uint64_t records, tombstones, bytes;
    int64_t min_ts, max_ts, horizon;
    uint32_t batches;
    uint8_t kind;
} TrailerHead;

/* Reads the TRAILER_FIXED + 8 bytes at `t` into `h`; returns whether they are as this
 * system writes them and section.parse_trailer_head accepts: the horizon flag alone, the
 * reserved bytes zero, possible stats (section.stats_problem) and the bitmap kind the
 * offsets' span asks for. The batch count and index are the caller's to check. */
static int usual_trailer_head(const uint8_t *t, TrailerHead *h) {
    h->first = (int64_t)le64(t);
    h->last = (int64_t)le64(t + 8);
    h->records = le64(t + 16);
    h->tombstones = le64(t + 24);
    h->bytes = le64(t + 32);
    h->min_ts = (int64_t)le64(t + 40);
    h->max_ts = (int64_t)le64(t + 48);
    h->batches = le32(t + 56);
    h->kind = t[60];
    h->horizon = (int64_t)le64(t + TRAILER_FIXED);
    if (h->last < h->first) return 0;
    uint64_t span = (uint64_t)h->last - (uint64_t)h->first; /* without overflow */
    return t[61] == FLAG_HORIZON && t[62] == 0 && t[63] == 0 && h->records >= 1 &&
           h->records - 1 <= span && h->tombstones <= h->records &&
           h->records <= h->bytes / RECORD_OVERHEAD && h->min_ts <= h->max_ts &&
           (h->horizon == NO_HORIZON || h->tombstones > 0) &&
           h->kind == (span < ((uint64_t)1 << 32) ? KIND_ROARING32 : KIND_ROARING64);
}

PyDoc_STRVAR(usual_entries_doc,
"usual_entries(payload, offset, count, topics, previous, start, entries)\n"
"    -> (offset, start)\n\n"
"Appends to `entries` (a SectionEntries) the table entries of `payload` from `offset` that are as this\n"
"system writes them, until `entries` holds `count` or an entry is not one: its topic\n"
"not a key of `topics` (raw bytes to str), its key (raw topic, partition) not after\n"
"`previous` (or the entry before), or its trailer not a layout-2 one with one index\n"
"entry at (first offset, 0) that passes block.py's checks. `start` is the next entry's\n"
"first row; returns where and at which row the parse stopped.");

static PyObject *usual_entries(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t offset, count, start;
    PyObject *topics, *previous, *start_obj;
    SectionEntries *entries;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnO!OO!O!", &view, &offset, &count, &PyDict_Type, &topics,
                          &previous, &PyLong_Type, &start_obj, &SectionEntriesType, &entries))
        return NULL;
    int big = 0;
    start = (Py_ssize_t)PyLong_AsLongLongAndOverflow(start_obj, &big);
    if (big || start < 0) { /* a row past any batch: the field-by-field parse says so */
        PyBuffer_Release(&view);
        return Py_BuildValue("nO", offset, start_obj);
    }
    PyObject *raw = NULL, *topic = NULL, *result = NULL;
    const uint8_t *data = view.buf;
    const char *prev = NULL;
    Py_ssize_t size = view.len, prev_len = 0;
    int64_t prev_partition = 0;
    if (offset < 0 || offset > size) {
        PyErr_Format(PyExc_ValueError, "offset %zd outside a %zd-byte payload", offset, size);
        goto done;
    }
    if (previous != Py_None) {
        int got = key_parts(previous, 1, &prev, &prev_len, &prev_partition);
        if (got > 0) PyErr_SetString(PyExc_TypeError, "previous must be (bytes, int) or None");
        if (got != 0) goto done;
    }
    while (entries->n < count) {
        Py_ssize_t o = offset;
        if (o + 2 > size) break;
        Py_ssize_t topic_len = (Py_ssize_t)data[o] | (Py_ssize_t)data[o + 1] << 8;
        const uint8_t *topic_at = data + o + 2;
        Py_ssize_t trailer_at = o + 2 + topic_len + 8;
        if (trailer_at > size) break;
        if (raw == NULL || PyBytes_GET_SIZE(raw) != topic_len ||
            memcmp(PyBytes_AS_STRING(raw), topic_at, topic_len) != 0) {
            PyObject *candidate = PyBytes_FromStringAndSize((const char *)topic_at, topic_len);
            if (candidate == NULL) goto done;
            PyObject *found = PyDict_GetItemWithError(topics, candidate);
            if (found == NULL || !PyUnicode_CheckExact(found)) {
                Py_DECREF(candidate);
                if (PyErr_Occurred()) goto done;
                break;
            }
            Py_XSETREF(raw, candidate);
            Py_XSETREF(topic, Py_NewRef(found));
        }
        const uint8_t *at = data + o + 2 + topic_len;
        int64_t partition = (int32_t)le32(at);
        Py_ssize_t length = (Py_ssize_t)le32(at + 4);
        Py_ssize_t end = trailer_at + length;
        if (partition < 0 || length < USUAL_TRAILER || end > size) break;
        if (prev != NULL &&
            !key_follows(topic_at, topic_len, partition, prev, prev_len, prev_partition))
            break;
        const uint8_t *t = data + trailer_at;
        TrailerHead h;
        int64_t index_offset = (int64_t)le64(t + TRAILER_FIXED + 8);
        uint64_t index_position = le64(t + TRAILER_FIXED + 16);
        if (!usual_trailer_head(t, &h) || (uint64_t)(PY_SSIZE_T_MAX - start) < h.records ||
            !(h.batches == 1 && index_offset == h.first && index_position == 0))
            break;
        Entry entry = {
            .stats = {(uint64_t)h.first, (uint64_t)h.last, h.records, h.tombstones, h.bytes,
                      (uint64_t)h.min_ts, (uint64_t)h.max_ts, (uint64_t)h.horizon},
            .no_horizon = h.horizon == NO_HORIZON,
            .topic = topic,
            .raw = raw,
            .key = NULL,
            .partition = partition,
            .start = start,
            .kind = h.kind,
            .from = trailer_at + USUAL_TRAILER,
            .to = end,
        };
        if (entries_push(entries, &entry) < 0) goto done;
        prev = (const char *)topic_at;
        prev_len = topic_len;
        prev_partition = partition;
        start += (Py_ssize_t)h.records;
        offset = end;
    }
    result = Py_BuildValue("nn", offset, start);

done:
    Py_XDECREF(raw);
    Py_XDECREF(topic);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(framed_trailer_doc,
"framed_trailer(payload, positions, firsts) -> ((figures), kind, bitmap_at) | None\n\n"
"A framed section's trailer payload checked up to its bitmap, where it is as this system\n"
"writes it (layout 2) and agrees with what its reader saw: its index lists exactly the\n"
"batch frames at `positions` (relative to the section), and its first offsets begin with\n"
"`firsts` (the batches decoded so far). Returns the trailer's figures (BatchStats' eight\n"
"fields, the delete horizon None for NO_HORIZON), its bitmap's kind and where the bitmap\n"
"starts in `payload`;\n"
"None for anything else, which section.parse_trailer_head then reads and names: this\n"
"accepts only what that accepts (FORMAT.md 6.2), and makes no error of its own.");

static PyObject *framed_trailer(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *positions, *firsts;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O!O!", &view, &PyList_Type, &positions, &PyList_Type, &firsts))
        return NULL;
    PyObject *result = NULL;
    const uint8_t *t = view.buf;
    Py_ssize_t size = view.len, batches_seen = PyList_GET_SIZE(positions);
    if (size < TRAILER_FIXED + 8 || batches_seen < 1 || PyList_GET_SIZE(firsts) > batches_seen)
        goto usual_not;
    TrailerHead h;
    if (!usual_trailer_head(t, &h) || (Py_ssize_t)h.batches != batches_seen ||
        h.batches > h.records)
        goto usual_not;
    Py_ssize_t index_at = TRAILER_FIXED + 8;
    if ((size - index_at) / 16 < (Py_ssize_t)h.batches) goto usual_not;
    int64_t previous_offset = 0;
    uint64_t previous_position = 0;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)h.batches; i++) {
        const uint8_t *e = t + index_at + 16 * i;
        int64_t offset = (int64_t)le64(e);
        uint64_t position = le64(e + 8);
        if (i == 0 ? offset != h.first
                   : !(offset > previous_offset && position > previous_position))
            goto usual_not;
        if (offset > h.last) goto usual_not;
        int overflow = 0;
        long long seen = PyLong_AsLongLongAndOverflow(PyList_GET_ITEM(positions, i), &overflow);
        if (seen == -1 && PyErr_Occurred()) goto done;
        if (overflow || seen < 0 || (uint64_t)seen != position) goto usual_not;
        if (i < PyList_GET_SIZE(firsts)) {
            seen = PyLong_AsLongLongAndOverflow(PyList_GET_ITEM(firsts, i), &overflow);
            if (seen == -1 && PyErr_Occurred()) goto done;
            if (overflow || seen != offset) goto usual_not;
        }
        previous_offset = offset;
        previous_position = position;
    }
    PyObject *no_horizon =
        h.horizon == NO_HORIZON ? Py_NewRef(Py_None) : PyLong_FromLongLong(h.horizon);
    if (no_horizon == NULL) goto done;
    result = Py_BuildValue("(LLKKKLLN)in", (long long)h.first, (long long)h.last,
                           (unsigned long long)h.records, (unsigned long long)h.tombstones,
                           (unsigned long long)h.bytes, (long long)h.min_ts,
                           (long long)h.max_ts, no_horizon, (int)h.kind,
                           index_at + 16 * (Py_ssize_t)h.batches);
    goto done;
usual_not:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return result;
}


static inline void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

#define FOOTER_ENTRY_HEAD 84 /* "<iQQqqQQQqqq" (footer.py's FOOTER_ENTRY_HEAD) */

PyDoc_STRVAR(footer_entries_doc,
"footer_entries(entries, position, length) -> bytes\n\n"
"The version-2 footer entries (footer.footer_entry) of the table entries (a\n"
"SectionEntries or a list of TableEntries) of a block at\n"
"`position`, `length` bytes long, one after another: each its topic length, raw topic,\n"
"FOOTER_ENTRY_HEAD. OverflowError for a value out of its field's range (struct.error in\n"
"footer_entry).");

/* Entry `i` of `entries` (entry_at), checked for what a footer entry holds of it: a
 * topic of at most 0xFFFF bytes and an int32 partition; NULL with an error set. */
static const Entry *entry_head(PyObject *entries, Py_ssize_t i, Entry *scratch) {
    const Entry *e = entry_at(entries, i, scratch);
    if (e == NULL) return NULL;
    if (PyBytes_GET_SIZE(e->raw) > 0xFFFF) {
        PyErr_Format(PyExc_OverflowError, "entry %zd: a %zd-byte topic", i,
                     PyBytes_GET_SIZE(e->raw));
        return NULL;
    }
    if (e->partition < INT32_MIN || e->partition > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "entry %zd: partition %lld", i,
                     (long long)e->partition);
        return NULL;
    }
    return e;
}

/* The stats of `e` (TableEntry fields 0-7) at `p`, 8 bytes each, in the order `order`
 * gives (field numbers), the delete horizon NO_HORIZON when it is None. */
static void put_stats(uint8_t *p, const Entry *e, const int *order, int n) {
    for (int j = 0; j < n; j++) put64(p + 8 * j, e->stats[order[j]]);
}

/* A topic's length and raw bytes at `p`; returns the bytes written. */
static Py_ssize_t put_topic(uint8_t *p, PyObject *raw) {
    Py_ssize_t n = PyBytes_GET_SIZE(raw);
    p[0] = (uint8_t)n;
    p[1] = (uint8_t)(n >> 8);
    memcpy(p + 2, PyBytes_AS_STRING(raw), n);
    return 2 + n;
}

static inline void put32(uint8_t *p, uint32_t v) {
    for (int b = 0; b < 4; b++) p[b] = (uint8_t)(v >> (8 * b));
}

/* What a footer entry and an offset index entry both start with: the topic's length and
 * raw bytes, the partition (i32), and the section's position and length (u64 each);
 * returns the bytes written. */
static Py_ssize_t put_placed(uint8_t *p, PyObject *raw, int64_t partition,
                             unsigned long long position, unsigned long long length) {
    Py_ssize_t n = put_topic(p, raw);
    put32(p + n, (uint32_t)(int32_t)partition);
    put64(p + n + 4, position);
    put64(p + n + 12, length);
    return n + 20;
}

static const int ALL_STATS[8] = {0, 1, 2, 3, 4, 5, 6, 7};

static PyObject *footer_entries(PyObject *self, PyObject *args) {
    PyObject *entries, *position_obj, *length_obj;
    Entry scratch;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!O!", &entries, &PyLong_Type, &position_obj, &PyLong_Type,
                          &length_obj))
        return NULL;
    unsigned long long position = PyLong_AsUnsignedLongLong(position_obj);
    if (position == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    unsigned long long length = PyLong_AsUnsignedLongLong(length_obj);
    if (length == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = entries_count(entries), total = 0;
    if (n < 0) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Entry *e = entry_head(entries, i, &scratch);
        if (e == NULL) return NULL;
        total += 2 + PyBytes_GET_SIZE(e->raw) + FOOTER_ENTRY_HEAD;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) return NULL;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out);
    /* entry fields 0-7 are the stats, in the footer's order */
    for (Py_ssize_t i = 0; i < n; i++) {
        const Entry *e = entry_head(entries, i, &scratch); /* no Python code ran since */
        if (e == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        p += put_placed(p, e->raw, e->partition, position, length);
        put_stats(p, e, ALL_STATS, 8);
        p += FOOTER_ENTRY_HEAD - 20;
    }
    return out;
}

#define INDEX_ENTRY_FIXED 48 /* "<iQQqqIB3sI" (offset_index.py's _ENTRY_FIXED) */
#define INDEX_BATCH 24       /* "<qQq" (offset_index.py's _BATCH) */

/* Entry `i`'s head (entry_head) and its bitmap `bitmaps[i]`; NULL with an error set if
 * they are not what a writer's shared section has (a bitmap's kind, field 12). */
static const Entry *shared_head(PyObject *entries, PyObject *bitmaps, Py_ssize_t i,
                                Entry *scratch, PyObject **bitmap) {
    const Entry *e = entry_head(entries, i, scratch);
    if (e == NULL) return NULL;
    *bitmap = PyList_GET_ITEM(bitmaps, i);
    if (!PyBytes_Check(*bitmap)) {
        PyErr_Format(PyExc_TypeError, "entry %zd: a bitmap not bytes", i);
        return NULL;
    }
    if (e->kind != KIND_ROARING32 && e->kind != KIND_ROARING64) {
        PyErr_Format(PyExc_ValueError, "entry %zd: bitmap kind %lld", i, (long long)e->kind);
        return NULL;
    }
    if (PyBytes_GET_SIZE(*bitmap) > 0x7FFFFFFF - USUAL_TRAILER) {
        PyErr_Format(PyExc_OverflowError, "entry %zd: a %zd-byte bitmap", i,
                     PyBytes_GET_SIZE(*bitmap));
        return NULL;
    }
    return e;
}

/* The lists `entries` and `bitmaps` as table_payload and index_entries take them: of one
 * length, each entry passing shared_head; the bytes each needs beyond its topic and
 * bitmap are `fixed`, in all `*total` (with `head` bytes before the first). */
static Py_ssize_t shared_sizes(PyObject *entries, PyObject *bitmaps, Py_ssize_t head,
                               Py_ssize_t fixed, Py_ssize_t *total) {
    Py_ssize_t n = entries_count(entries);
    if (n < 0) return -1;
    if (PyList_GET_SIZE(bitmaps) != n) {
        PyErr_Format(PyExc_ValueError, "%zd entries but %zd bitmaps", n,
                     PyList_GET_SIZE(bitmaps));
        return -1;
    }
    *total = head;
    Entry scratch;
    PyObject *bitmap;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Entry *e = shared_head(entries, bitmaps, i, &scratch, &bitmap);
        if (e == NULL) return -1;
        *total += 2 + PyBytes_GET_SIZE(e->raw) + fixed + PyBytes_GET_SIZE(bitmap);
    }
    return n;
}

PyDoc_STRVAR(table_payload_doc,
"table_payload(entries, bitmaps) -> bytes\n\n"
"The STBL payload (block.encode_section_table) of a block whose sections are the\n"
"table entries `entries` (a SectionEntries or a list of TableEntries), the i-th's offset bitmap `bitmaps[i]` (serialized, of the kind\n"
"its entry names): each entry's topic, partition and version-2 trailer (section.\n"
"encode_trailer) with one batch index entry, at (its first offset, 0). OverflowError\n"
"for a value out of its field's range.");

static PyObject *table_payload(PyObject *self, PyObject *args) {
    PyObject *entries, *bitmaps, *bitmap;
    Py_ssize_t total;
    Entry scratch;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!", &entries, &PyList_Type, &bitmaps)) return NULL;
    Py_ssize_t n = shared_sizes(entries, bitmaps, 4, 4 + 4 + USUAL_TRAILER, &total);
    if (n < 0) return NULL;
    if (n > 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_OverflowError, "too many entries for one table");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) return NULL;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out);
    put32(p, (uint32_t)n);
    p += 4;
    static const int trailer_stats[7] = {0, 1, 2, 3, 4, 5, 6};
    for (Py_ssize_t i = 0; i < n; i++) {
        /* no Python code ran since shared_sizes checked every entry */
        const Entry *e = shared_head(entries, bitmaps, i, &scratch, &bitmap);
        if (e == NULL) goto fail;
        Py_ssize_t nbitmap = PyBytes_GET_SIZE(bitmap);
        p += put_topic(p, e->raw);
        put32(p, (uint32_t)(int32_t)e->partition);
        put32(p + 4, (uint32_t)(USUAL_TRAILER + nbitmap));
        p += 8;
        put_stats(p, e, trailer_stats, 7);
        put32(p + 56, 1); /* one batch */
        p[60] = (uint8_t)e->kind;
        p[61] = FLAG_HORIZON;
        p[62] = p[63] = 0;
        static const int horizon_then_first[2] = {7, 0};
        put_stats(p + TRAILER_FIXED, e, horizon_then_first, 2);
        put64(p + TRAILER_FIXED + 16, 0); /* the batch's position in the section */
        memcpy(p + USUAL_TRAILER, PyBytes_AS_STRING(bitmap), nbitmap);
        p += USUAL_TRAILER + nbitmap;
    }
    return out;

fail:
    Py_DECREF(out);
    return NULL;
}

PyDoc_STRVAR(index_entries_doc,
"index_entries(entries, bitmaps, position, length) -> bytes\n\n"
"The offset index entries (offset_index.py, FORMAT.md section 12) of the sections of a\n"
"block at `position`, `length` bytes long, whose table entries are `entries` and offset\n"
"bitmaps `bitmaps` (as table_payload takes them), one after another: each its topic,\n"
"the fixed fields, its bitmap and its one batch (its first offset, at 0, and its\n"
"largest timestamp). OverflowError for a value out of its field's range.");

static PyObject *index_entries(PyObject *self, PyObject *args) {
    PyObject *entries, *bitmaps, *bitmap, *position_obj, *length_obj;
    Py_ssize_t total;
    Entry scratch;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!O!O!", &entries, &PyList_Type, &bitmaps, &PyLong_Type,
                          &position_obj, &PyLong_Type, &length_obj))
        return NULL;
    unsigned long long position = PyLong_AsUnsignedLongLong(position_obj);
    if (position == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    unsigned long long length = PyLong_AsUnsignedLongLong(length_obj);
    if (length == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = shared_sizes(entries, bitmaps, 0, INDEX_ENTRY_FIXED + INDEX_BATCH, &total);
    if (n < 0) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) return NULL;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out);
    static const int first_last[2] = {0, 1};
    static const int first[1] = {0};
    static const int latest[1] = {6};
    for (Py_ssize_t i = 0; i < n; i++) {
        const Entry *e = shared_head(entries, bitmaps, i, &scratch, &bitmap);
        if (e == NULL) goto fail;
        Py_ssize_t nbitmap = PyBytes_GET_SIZE(bitmap);
        p += put_placed(p, e->raw, e->partition, position, length);
        put_stats(p, e, first_last, 2);
        put32(p + 16, 1); /* one batch */
        p[20] = (uint8_t)e->kind;
        p[21] = p[22] = p[23] = 0;
        put32(p + 24, (uint32_t)nbitmap);
        p += INDEX_ENTRY_FIXED - 20;
        memcpy(p, PyBytes_AS_STRING(bitmap), nbitmap);
        p += nbitmap;
        put_stats(p, e, first, 1);
        put64(p + 8, 0);
        put_stats(p + 16, e, latest, 1);
        p += INDEX_BATCH;
    }
    return out;

fail:
    Py_DECREF(out);
    return NULL;
}

static inline unsigned le16(const uint8_t *p) { return (unsigned)p[0] | ((unsigned)p[1] << 8); }

#define ROARING_NO_RUNS 12346 /* RoaringFormatSpec's SERIAL_COOKIE_NO_RUNCONTAINER */
#define ROARING_RUNS 12347    /* SERIAL_COOKIE */
#define ARRAY_MAX 4096        /* a container of more values is a bitmap container */

/* Whether p[0..n) is a portable 32-bit roaring bitmap of one container, key 0, of the
   array or run kind, whose values are exactly `count` of them, the least 0 and the
   greatest `top`: what a section of count offsets from first to first + top < 2^16
   carries when its bitmap agrees with its stats (TrailerHead.offsets' checks). Only the
   canonical layout is settled here (the one offset-header entry pointing right past the
   headers, values strictly increasing, runs neither overlapping nor touching, no stray
   flag bits or bytes); 0 for anything else, which the caller then checks in full. */
static int one_container_agrees(const uint8_t *p, Py_ssize_t n, uint64_t top, uint64_t count) {
    if (n < 8 || count < 1 || count > 65536 || top > 65535) return 0;
    const uint8_t *body;
    int run;
    if (le32(p) == ROARING_NO_RUNS) {
        if (n < 16 || le32(p + 4) != 1 || le16(p + 8) != 0 || le32(p + 12) != 16) return 0;
        run = 0;
        body = p + 16;
        if (le16(p + 10) + 1u != count) return 0;
    } else if (le16(p) == ROARING_RUNS) {
        if (n < 9 || le16(p + 2) != 0 || (p[4] & ~1u) != 0 || le16(p + 5) != 0) return 0;
        run = p[4] & 1;
        body = p + 9;
        if (le16(p + 7) + 1u != count) return 0;
    } else {
        return 0;
    }
    const uint8_t *end = p + n;
    if (!run) {
        if (count > ARRAY_MAX || end - body != (Py_ssize_t)(2 * count)) return 0;
        long prev = -1;
        for (uint64_t i = 0; i < count; i++) {
            long v = (long)le16(body + 2 * i);
            if (v <= prev) return 0;
            prev = v;
        }
        return le16(body) == 0 && (uint64_t)prev == top;
    }
    if (end - body < 2) return 0;
    unsigned runs = le16(body);
    if (runs < 1 || end - body != 2 + 4 * (Py_ssize_t)runs) return 0;
    uint64_t seen = 0;
    long prev_end = -2;
    for (unsigned r = 0; r < runs; r++) {
        long start = (long)le16(body + 2 + 4 * r), last = start + (long)le16(body + 4 + 4 * r);
        if (start <= prev_end + 1 || last > 65535) return 0;
        seen += (uint64_t)(last - start + 1);
        prev_end = last;
    }
    return le16(body + 2) == 0 && (uint64_t)prev_end == top && seen == count;
}

PyDoc_STRVAR(unsettled_doc,
"unsettled(entries, payload, dense) -> list[int]\n\n"
"The indices of the table entries (a SectionEntries or a list of TableEntries) whose\n"
"bitmap this pass cannot settle: an entry\n"
"parsed field by field (bitmap_from -1), or one whose bytes payload[bitmap_from:\n"
"bitmap_to] are neither dense(count), the bitmap the writer makes of a dense section\n"
"(section.is_dense_bitmap), nor a canonical one-container bitmap of kind\n"
"KIND_ROARING32 that agrees with the entry's first and last offset and count. The\n"
"caller checks those in full (TrailerHead.check_bitmap).");

static PyObject *unsettled(PyObject *self, PyObject *args) {
    PyObject *entries, *dense;
    Py_buffer view;
    Entry scratch;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oy*O", &entries, &view, &dense)) return NULL;
    PyObject *result = PyList_New(0), *cached = NULL;
    long long cached_count = -1;
    if (result == NULL) goto done;
    for (Py_ssize_t i = 0;; i++) {
        Py_ssize_t n = entries_count(entries); /* again: dense() may change a list */
        if (n < 0) goto fail;
        if (i >= n) break;
        const Entry *e = entry_at(entries, i, &scratch);
        if (e == NULL) goto fail;
        int64_t first = (int64_t)e->stats[0], last = (int64_t)e->stats[1];
        int64_t kind = e->kind, from = e->from, to = e->to;
        int big = e->stats[2] > INT64_MAX; /* a count past int64: not settled here */
        int64_t count = (int64_t)e->stats[2];
        int settled = 0;
        if (!big && from >= 0 && from <= to && to <= view.len && kind == KIND_ROARING32 &&
            last >= first && count >= 1) {
            const uint8_t *bitmap = (const uint8_t *)view.buf + from;
            uint64_t top = (uint64_t)last - (uint64_t)first;
            if (top == (uint64_t)count - 1) {
                if (count != cached_count) {
                    PyObject *made = PyObject_CallFunction(dense, "L", count);
                    if (made == NULL) goto fail;
                    if (!PyBytes_Check(made)) {
                        Py_DECREF(made);
                        PyErr_SetString(PyExc_TypeError, "dense(count) must return bytes");
                        goto fail;
                    }
                    Py_XSETREF(cached, made);
                    cached_count = count;
                }
                settled = PyBytes_GET_SIZE(cached) == to - from &&
                          memcmp(PyBytes_AS_STRING(cached), bitmap, to - from) == 0;
            }
            if (!settled) settled = one_container_agrees(bitmap, to - from, top, (uint64_t)count);
        }
        if (!settled) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(result, index) < 0) {
                Py_XDECREF(index);
                goto fail;
            }
            Py_DECREF(index);
        }
    }
    goto done;

fail:
    Py_CLEAR(result);
done:
    Py_XDECREF(cached);
    PyBuffer_Release(&view);
    return result;
}


/* `obj` as int32 offsets: at least `min_count` of them (None: none, when `min_count` is 0). */
static int take_offsets(PyObject *obj, Column *c, Py_ssize_t min_count, const char *name) {
    return take_column(obj, c, 4 * min_count, min_count == 0, name);
}


PyDoc_STRVAR(record_sizes_doc,
"record_sizes(rows, key_offsets, key_validity, key_bit, value_offsets, value_validity,\n"
"             value_bit, header_offsets, item_key_offsets, item_value_offsets,\n"
"             item_value_validity, item_value_bit) -> bytes\n\n"
"Each record's logical size (RECORD_OVERHEAD, its key's and value's bytes, and each\n"
"header's key and value bytes; a null counts 0) as `rows` little-endian int64s, from\n"
"the int32 offsets of the columns (`rows` + 1 of them, from the row 0's) and of the\n"
"header items (`header_offsets` index them; None when there are none) and validity\n"
"bitmaps given as a buffer (None: no nulls) and the bit of slot 0.");

static PyObject *record_sizes(PyObject *self, PyObject *args) {
    Py_ssize_t rows, key_bit, value_bit, item_value_bit;
    PyObject *ko_obj, *kv_obj, *vo_obj, *vv_obj, *ho_obj, *iko_obj, *ivo_obj, *ivv_obj;
    (void)self;
    if (!PyArg_ParseTuple(args, "nOOnOOnOOOOn", &rows, &ko_obj, &kv_obj, &key_bit, &vo_obj,
                          &vv_obj, &value_bit, &ho_obj, &iko_obj, &ivo_obj, &ivv_obj,
                          &item_value_bit))
        return NULL;
    if (rows < 0 || rows > PY_SSIZE_T_MAX / 16 || key_bit < 0 || value_bit < 0 ||
        item_value_bit < 0 || key_bit > PY_SSIZE_T_MAX / 2 || value_bit > PY_SSIZE_T_MAX / 2 ||
        item_value_bit > PY_SSIZE_T_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "rows and bits out of range");
        return NULL;
    }
    Column ko = {0}, kv = {0}, vo = {0}, vv = {0}, ho = {0}, iko = {0}, ivo = {0}, ivv = {0};
    PyObject *out = NULL;
    Py_ssize_t items = 0;
    if (take_offsets(ko_obj, &ko, rows + 1, "key_offsets") < 0 ||
        take_column(kv_obj, &kv, (key_bit + rows + 7) / 8, 1, "key_validity") < 0 ||
        take_offsets(vo_obj, &vo, rows + 1, "value_offsets") < 0 ||
        take_column(vv_obj, &vv, (value_bit + rows + 7) / 8, 1, "value_validity") < 0 ||
        take_offsets(ho_obj, &ho, rows + 1, "header_offsets") < 0 ||
        take_offsets(iko_obj, &iko, 0, "item_key_offsets") < 0 ||
        take_offsets(ivo_obj, &ivo, 0, "item_value_offsets") < 0)
        goto done;
    if (iko.held && ivo.held) {
        items = (iko.view.len < ivo.view.len ? iko.view.len : ivo.view.len) / 4 - 1;
        if (items < 0) items = 0;
    }
    if (take_column(ivv_obj, &ivv, (item_value_bit + items + 7) / 8, 1,
                    "item_value_validity") < 0)
        goto done;
    out = PyBytes_FromStringAndSize(NULL, 8 * rows);
    if (out == NULL) goto done;
    Py_ssize_t bad = -1;
    Py_BEGIN_ALLOW_THREADS
    const int32_t *k = ko.view.buf, *v = vo.view.buf, *h = ho.view.buf;
    const int32_t *hk = iko.held ? iko.view.buf : NULL, *hv = ivo.held ? ivo.view.buf : NULL;
    const uint8_t *kbits = kv.held ? kv.view.buf : NULL, *vbits = vv.held ? vv.view.buf : NULL;
    const uint8_t *hvbits = ivv.held ? ivv.view.buf : NULL;
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t r = 0; r < rows; r++) {
        uint64_t size = RECORD_OVERHEAD; /* wraps rather than overflows on corrupt offsets */
        if (kbits == NULL || bit_set(kbits, key_bit + r)) size += (uint64_t)span_of(k, r);
        if (vbits == NULL || bit_set(vbits, value_bit + r)) size += (uint64_t)span_of(v, r);
        int64_t h0 = h[r], h1 = h[r + 1];
        if (h0 < 0 || h1 < h0 || h1 > items) {
            bad = r;
            break;
        }
        for (int64_t j = h0; j < h1; j++) {
            size += (uint64_t)span_of(hk, j);
            if (hvbits == NULL || bit_set(hvbits, item_value_bit + j))
                size += (uint64_t)span_of(hv, j);
        }
        put64(dst + 8 * r, size);
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "record %zd's headers are outside the %zd items", bad,
                     items);
        Py_CLEAR(out);
    }

done:
    release(&ko);
    release(&kv);
    release(&vo);
    release(&vv);
    release(&ho);
    release(&iko);
    release(&ivo);
    release(&ivv);
    return out;
}


PyDoc_STRVAR(relative_offsets_doc,
"relative_offsets(offsets, base, wide) -> bytes\n\n"
"Each int64 of `offsets` less `base`, as native uint32s (array.array 'I'), or uint64s\n"
"('Q', modulo 2^64) when `wide`: a section's offsets as its bitmap holds them\n"
"(bitmap.OffsetSetBuilder).\n"
"ValueError for a uint32 out of range.");

static PyObject *relative_offsets(PyObject *self, PyObject *args) {
    Column off = {0};
    PyObject *offsets_obj, *out = NULL;
    long long base;
    int wide;
    (void)self;
    if (!PyArg_ParseTuple(args, "OLp", &offsets_obj, &base, &wide)) return NULL;
    if (take_column(offsets_obj, &off, 0, 0, "offsets") < 0) return NULL;
    Py_ssize_t n = off.view.len / 8, width = wide ? 8 : 4, bad = -1;
    out = PyBytes_FromStringAndSize(NULL, n * width);
    if (out == NULL) goto done;
    Py_BEGIN_ALLOW_THREADS
    const int64_t *o = off.view.buf;
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t rel = (uint64_t)o[i] - (uint64_t)base;
        if (wide) {
            memcpy(dst + 8 * i, &rel, 8);
        } else if (o[i] < base || rel > UINT32_MAX) {
            bad = i;
            break;
        } else {
            uint32_t narrow = (uint32_t)rel;
            memcpy(dst + 4 * i, &narrow, 4);
        }
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "offset %lld is not within 2^32 above %lld",
                     (long long)((const int64_t *)off.view.buf)[bad], base);
        Py_CLEAR(out);
    }

done:
    release(&off);
    return out;
}


static inline void put16(uint8_t *p, unsigned v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

PyDoc_STRVAR(small_bitmap_doc,
"small_bitmap(offsets, base) -> bytes | None\n\n"
"The bitmap (kind KIND_ROARING32) of a section's `offsets` (int64, as a buffer), each\n"
"less `base`: byte for byte what bitmap.OffsetSetBuilder(base).add_column(offsets) and\n"
"OffsetSet.serialize make, when they strictly increase from `base` on and are 1 to 4096\n"
"within 2^16 of it (one container); None for any other offsets. The container is the\n"
"one CRoaring's run_optimize leaves: offsets that are one run (the builder's add_range)\n"
"become a run container unless an array is smaller; others (its array) become one\n"
"unless that is not strictly smaller.");

/* small_bitmap's bitmap of the `n` offsets at `o`, less `base`: bytes, or None when they
 * are not one small container; NULL with an error set. */
static PyObject *make_small_bitmap(const int64_t *o, Py_ssize_t n, int64_t base) {
    Py_ssize_t runs = 1;
    int fits = n >= 1 && n <= ARRAY_MAX && o[0] == base;
    for (Py_ssize_t i = 1; fits && i < n; i++) {
        if (o[i] <= o[i - 1] || (uint64_t)o[i] - (uint64_t)base > 65535) fits = 0;
        else runs += o[i] != o[i - 1] + 1;
    }
    if (!fits) return Py_NewRef(Py_None);
    int as_run = runs == 1 ? 6 <= 2 * n : 2 + 4 * runs < 2 * n;
    PyObject *out = PyBytes_FromStringAndSize(NULL, as_run ? 11 + 4 * runs : 16 + 2 * n);
    if (out == NULL) return NULL;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out);
    if (as_run) {
        put16(p, ROARING_RUNS);
        put16(p + 2, 0); /* containers - 1 */
        p[4] = 1;        /* container 0 is a run container */
        put16(p + 5, 0); /* its key */
        put16(p + 7, (unsigned)(n - 1));
        put16(p + 9, (unsigned)runs);
        uint8_t *r = p + 11;
        Py_ssize_t start = 0;
        for (Py_ssize_t i = 1; i <= n; i++) {
            if (i == n || o[i] != o[i - 1] + 1) {
                put16(r, (unsigned)(o[start] - base));
                put16(r + 2, (unsigned)(i - 1 - start));
                r += 4;
                start = i;
            }
        }
    } else {
        put16(p, ROARING_NO_RUNS);
        put16(p + 2, 0);
        put16(p + 4, 1); /* containers, a uint32 */
        put16(p + 6, 0);
        put16(p + 8, 0); /* the key */
        put16(p + 10, (unsigned)(n - 1));
        put16(p + 12, 16); /* the container's place, a uint32 */
        put16(p + 14, 0);
        for (Py_ssize_t i = 0; i < n; i++) put16(p + 16 + 2 * i, (unsigned)(o[i] - base));
    }
    return out;
}

static PyObject *small_bitmap(PyObject *self, PyObject *args) {
    Column off = {0};
    PyObject *offsets_obj;
    long long base;
    (void)self;
    if (!PyArg_ParseTuple(args, "OL", &offsets_obj, &base)) return NULL;
    if (take_column(offsets_obj, &off, 0, 0, "offsets") < 0) return NULL;
    PyObject *out = make_small_bitmap(off.view.buf, off.view.len / 8, base);
    release(&off);
    return out;
}

PyDoc_STRVAR(small_sections_doc,
"small_sections(items, figures, offsets, headers_at, previous, entry_type)\n"
"    -> (entries, bitmaps, weights) | None\n\n"
"What a writer keeps of each of the small sections `items` ((topic, partition, first\n"
"row, rows) tuples of one batch of records, whose figures are `figures`), when every\n"
"one's topic and partition are valid (section.encode_section_header) and they come in\n"
"strictly increasing (raw topic, partition) order after `previous` (a key or None);\n"
"None otherwise. `offsets` is the batch's offset column (int64 values) and\n"
"`headers_at` its headers' list offsets (int32, one more than its rows). For each\n"
"section: an `entry_type` (TableEntry) of its figures, topic, partition and key, its\n"
"start -1 and kind KIND_ROARING32, its bitmap's place -1; its offsets' bitmap as\n"
"small_bitmap makes it (None where that makes none: the entry's kind is then the\n"
"caller's to set); and its batching weight (logical bytes, 8 per header).");

#define MAX_TOPIC_BYTES 0xFFFF

/* The raw bytes of `topic` if it is a topic a section may have; NULL otherwise (no error
 * left set: the caller's answer is None). */
static PyObject *valid_topic(PyObject *topic) {
    if (!PyUnicode_Check(topic) || PyUnicode_GET_LENGTH(topic) == 0) return NULL;
    PyObject *raw = PyUnicode_AsUTF8String(topic);
    if (raw == NULL) {
        PyErr_Clear(); /* a lone surrogate: not a topic */
        return NULL;
    }
    if (PyBytes_GET_SIZE(raw) > MAX_TOPIC_BYTES) {
        Py_DECREF(raw);
        return NULL;
    }
    return raw;
}

static PyObject *small_sections(PyObject *self, PyObject *args) {
    PyObject *items, *figures, *offsets_obj, *headers_obj, *previous;
    PyTypeObject *type;
    Column off = {0}, hdr = {0};
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!OOOO!", &PyList_Type, &items, &PyList_Type, &figures,
                          &offsets_obj, &headers_obj, &previous, &PyType_Type, &type))
        return NULL;
    if (check_entry_type(type) < 0) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (PyList_GET_SIZE(figures) != n) {
        PyErr_Format(PyExc_ValueError, "%zd sections but %zd figures", n,
                     PyList_GET_SIZE(figures));
        return NULL;
    }
    if (take_column(offsets_obj, &off, 0, 0, "offsets") < 0) return NULL;
    if (take_column(headers_obj, &hdr, 4, 0, "headers_at") < 0) {
        release(&off);
        return NULL;
    }
    const int64_t *o = off.view.buf;
    const int32_t *h = hdr.view.buf;
    Py_ssize_t rows = off.view.len / 8;
    if (hdr.view.len / 4 < rows + 1) rows = hdr.view.len / 4 - 1;
    PyObject *entries = PyList_New(n), *bitmaps = PyList_New(n), *weights = PyList_New(n);
    PyObject *result = NULL, *raw = NULL, *prev_raw = NULL, *last_topic = NULL;
    PyObject *minus = PyLong_FromLong(-1);
    PyObject *kind = PyLong_FromLong(KIND_ROARING32);
    const char *prev = NULL;
    Py_ssize_t prev_len = 0;
    int64_t prev_partition = -1;
    if (entries == NULL || bitmaps == NULL || weights == NULL || minus == NULL || kind == NULL)
        goto done;
    if (previous != Py_None) {
        int got = key_parts(previous, 0, &prev, &prev_len, &prev_partition);
        if (got > 0)
            PyErr_SetString(PyExc_TypeError, "previous must be a (bytes, int) key or None");
        if (got != 0) goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i), *f = PyList_GET_ITEM(figures, i);
        static const int span[3] = {2, 3, -1};
        static const int stats[9] = {0, 1, 2, 3, 4, 5, 6, 7, -1};
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 4 || !int_fields(item, span, -1) ||
            !PyTuple_Check(f) || PyTuple_GET_SIZE(f) != FIGURES || !int_fields(f, stats, 7)) {
            PyErr_Format(PyExc_TypeError, "section %zd: not a (topic, partition, row, rows) "
                         "tuple with its figures", i);
            goto done;
        }
        PyObject *topic = PyTuple_GET_ITEM(item, 0), *part = PyTuple_GET_ITEM(item, 1);
        if (topic != last_topic) {
            Py_XDECREF(raw);
            raw = valid_topic(topic);
            last_topic = topic;
            if (raw == NULL) {
                result = Py_NewRef(Py_None);
                goto done;
            }
        }
        int big = 0;
        long long p = PyLong_CheckExact(part) ? PyLong_AsLongLongAndOverflow(part, &big) : -1;
        if (big || p < 0 || p > INT32_MAX) {
            if (PyErr_Occurred()) goto done;
            result = Py_NewRef(Py_None);
            goto done;
        }
        Py_ssize_t raw_len = PyBytes_GET_SIZE(raw);
        const char *raw_at = PyBytes_AS_STRING(raw);
        if (prev != NULL && !key_follows(raw_at, raw_len, p, prev, prev_len, prev_partition)) {
            result = Py_NewRef(Py_None); /* out of order */
            goto done;
        }
        if (prev_raw != raw) {
            Py_XSETREF(prev_raw, Py_NewRef(raw)); /* keeps `prev` alive */
        }
        prev = raw_at;
        prev_len = raw_len;
        prev_partition = p;
        Py_ssize_t start = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 2));
        Py_ssize_t count = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 3));
        if ((start == -1 || count == -1) && PyErr_Occurred()) goto done;
        if (start < 0 || count < 1 || start > rows - count) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        long long first = PyLong_AsLongLong(PyTuple_GET_ITEM(f, 0));
        long long logical = PyLong_AsLongLong(PyTuple_GET_ITEM(f, 4));
        if ((first == -1 || logical == -1) && PyErr_Occurred()) goto done;
        PyObject *bitmap = make_small_bitmap(o + start, count, first);
        if (bitmap == NULL) goto done;
        PyList_SET_ITEM(bitmaps, i, bitmap);
        PyObject *w = PyLong_FromLongLong(logical + 8 * (long long)(h[start + count] - h[start]));
        if (w == NULL) goto done;
        PyList_SET_ITEM(weights, i, w);
        PyObject *key = PyTuple_Pack(2, raw, part);
        if (key == NULL) goto done;
        PyObject *fields[ENTRY_FIELDS];
        for (int k = 0; k < FIGURES; k++) fields[k] = Py_NewRef(PyTuple_GET_ITEM(f, k));
        fields[8] = Py_NewRef(topic);
        fields[9] = Py_NewRef(part);
        fields[10] = key;
        fields[11] = Py_NewRef(minus);
        fields[12] = Py_NewRef(kind);
        fields[13] = Py_NewRef(minus);
        fields[14] = Py_NewRef(minus);
        PyObject *entry = new_entry(type, fields);
        if (entry == NULL) goto done;
        PyList_SET_ITEM(entries, i, entry);
    }
    result = PyTuple_Pack(3, entries, bitmaps, weights);

done:
    Py_XDECREF(raw);
    Py_XDECREF(prev_raw);
    Py_XDECREF(minus);
    Py_XDECREF(kind);
    Py_XDECREF(entries);
    Py_XDECREF(bitmaps);
    Py_XDECREF(weights);
    release(&off);
    release(&hdr);
    return result;
}


PyDoc_STRVAR(valid_bytes_doc,
"valid_bytes(offsets, validity, bit) -> int\n\n"
"The total length of the non-null values of a binary or string column, from its int32\n"
"`offsets` (one more than its slots) and its validity bitmap (a buffer and the bit of\n"
"slot 0; None: no nulls): a null slot may span bytes, which belong to no value.");

static PyObject *valid_bytes(PyObject *self, PyObject *args) {
    PyObject *off_obj, *valid_obj;
    Py_ssize_t bit;
    Column off = {0}, valid = {0};
    (void)self;
    if (!PyArg_ParseTuple(args, "OOn", &off_obj, &valid_obj, &bit)) return NULL;
    if (bit < 0 || bit > PY_SSIZE_T_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "bit out of range");
        return NULL;
    }
    if (take_offsets(off_obj, &off, 1, "offsets") < 0) return NULL;
    Py_ssize_t n = off.view.len / 4 - 1;
    if (take_column(valid_obj, &valid, (bit + n + 7) / 8, 1, "validity") < 0) {
        release(&off);
        return NULL;
    }
    uint64_t total;
    Py_BEGIN_ALLOW_THREADS
    total = valid_span_bytes(off.view.buf, valid.held ? valid.view.buf : NULL, bit, 0, n);
    Py_END_ALLOW_THREADS
    release(&off);
    release(&valid);
    return PyLong_FromLongLong((int64_t)total);
}


/* --- an Arrow RecordBatch message's encapsulation and metadata (ipc._check_message) ---
   A flatbuffer read from untrusted bytes: every read is bounds-checked against the
   metadata's `len` bytes; any read out of bounds, or any check failing, makes the whole
   answer "not usual" (the caller then runs the Python check, which names the problem). */

typedef struct {
    const uint8_t *p;
    Py_ssize_t len;
} Fb;

static int fb_read(const Fb *fb, int64_t pos, int size, uint64_t *out) {
    if (pos < 0 || pos > fb->len - size) return -1;
    uint64_t v = 0;
    for (int i = size - 1; i >= 0; i--) v = (v << 8) | fb->p[pos + i];
    *out = v;
    return 0;
}

static int64_t sext(uint64_t v, int size) { /* a little-endian signed value of `size` bytes */
    int shift = 64 - 8 * size;
    return shift ? (int64_t)(v << shift) >> shift : (int64_t)v;
}

typedef struct {
    int64_t pos;
    int64_t vt;
    int64_t slots; /* field count */
} FbTable;

static int fb_table(const Fb *fb, int64_t pos, FbTable *t) {
    uint64_t off, size;
    if (fb_read(fb, pos, 4, &off) < 0) return -1;
    int64_t vt = pos - sext(off, 4);
    if (fb_read(fb, vt, 2, &size) < 0) return -1;
    if (size < 4 || size % 2 || vt > fb->len - (int64_t)size) return -1;
    t->pos = pos;
    t->vt = vt;
    t->slots = ((int64_t)size - 4) / 2;
    return 0;
}

/* The position of field `index` of table `t`, 0 when absent. */
static int64_t fb_field(const Fb *fb, const FbTable *t, int index) {
    if (index >= t->slots) return 0;
    int64_t at = t->vt + 4 + 2 * (int64_t)index;
    unsigned s = (unsigned)fb->p[at] | ((unsigned)fb->p[at + 1] << 8);
    return s ? t->pos + s : 0;
}

static int fb_scalar(const Fb *fb, const FbTable *t, int index, int size, int is_signed,
                     int64_t dflt, int64_t *out) {
    int64_t pos = fb_field(fb, t, index);
    if (!pos) {
        *out = dflt;
        return 0;
    }
    uint64_t v;
    if (fb_read(fb, pos, size, &v) < 0) return -1;
    *out = is_signed ? sext(v, size) : (int64_t)v;
    return 0;
}

static int fb_ref(const Fb *fb, const FbTable *t, int index, int64_t *out) {
    int64_t pos = fb_field(fb, t, index);
    uint64_t v;
    if (!pos) {
        *out = 0;
        return 0;
    }
    if (fb_read(fb, pos, 4, &v) < 0) return -1;
    *out = pos + (int64_t)v;
    return 0;
}

static int fb_vector(const Fb *fb, const FbTable *t, int index, int elem, int64_t *at,
                     int64_t *count) {
    int64_t pos;
    uint64_t n;
    if (fb_ref(fb, t, index, &pos) < 0) return -1;
    if (!pos) {
        *at = *count = 0;
        return 0;
    }
    if (fb_read(fb, pos, 4, &n) < 0) return -1;
    if ((int64_t)n > (fb->len - pos - 4) / elem || pos + 4 + (int64_t)n * elem > fb->len)
        return -1;
    *at = pos + 4;
    *count = (int64_t)n;
    return 0;
}

#define NOT_USUAL -1

/* What an Arrow RecordBatch message of RECORD_SCHEMA (or its version 1) says of itself,
   as ipc.py names them (METADATA_V5, HEADER_RECORD_BATCH, FIELD_NODES, BUFFERS,
   FIELD_NODES_V1, BUFFERS_V1, CODEC_LZ4_FRAME, CODEC_ZSTD); the module exports them and
   a test holds the two sides equal. A batch's rows are at most MAX_DECODED_BATCH /
   MIN_ROW_BYTES (ipc.MIN_ROW_BYTES). */
#define METADATA_V5 4
#define HEADER_RECORD_BATCH 3
#define FIELD_NODES 9
#define BUFFERS 21
#define FIELD_NODES_V1 8
#define BUFFERS_V1 19
#define CODEC_LZ4_FRAME 0
#define CODEC_ZSTD 1
#define MIN_ROW_BYTES 16

/* What check_message finds of a message it accepts; positions from the payload's start. */
typedef struct {
    int64_t rows;
    int64_t decoded; /* the body's bytes once decompressed */
    int64_t codec;   /* CODEC_LZ4_FRAME, CODEC_ZSTD, or -1 for none */
    int64_t nodes;   /* field nodes */
    int64_t buffers;
    int64_t buffers_at;     /* the buffers' (offset, length) pairs */
    int64_t body_length_at; /* the Message's bodyLength; 8 where the field is absent */
    int64_t body_start;
    int64_t nodes_at; /* the field nodes' (length, null count) pairs */
    /* Each buffer as checked, read once (the payload may be a map of a file): its offset
       in the body, its length, and the size its prefix declares (0 where the body is not
       compressed or the buffer is empty; -1: stored as it is). */
    int64_t off[BUFFERS], len[BUFFERS], declared[BUFFERS];
} MessageShape;

/* The checks of ipc._check_message on `payload` (n bytes); 0 with `shape` filled when all
 * pass, NOT_USUAL when any fails. */
static int check_message(const uint8_t *payload, Py_ssize_t n, int check_expansion,
                         int64_t max_decoded, int64_t max_expansion, MessageShape *shape) {
    if (n < 8) return NOT_USUAL;
    uint32_t marker = (uint32_t)le64(payload) & 0xFFFFFFFFu; /* le64 reads 8 bytes */
    int64_t meta_len = sext((le64(payload) >> 32) & 0xFFFFFFFFu, 4);
    if (marker != 0xFFFFFFFFu || meta_len <= 0 || meta_len > n - 8) return NOT_USUAL;
    int64_t body_start = 8 + meta_len;
    Fb fb = {payload + 8, meta_len};
    uint64_t root;
    FbTable message, batch;
    int64_t version, header_type, body_len, batch_at, rows, nodes, nodes_at, buffers_at,
        buffers, variadic_at, variadic, compression_at;
    if (fb_read(&fb, 0, 4, &root) < 0 || fb_table(&fb, (int64_t)root, &message) < 0 ||
        fb_scalar(&fb, &message, 0, 2, 1, 0, &version) < 0 || version != METADATA_V5 ||
        fb_scalar(&fb, &message, 1, 1, 0, 0, &header_type) < 0 ||
        header_type != HEADER_RECORD_BATCH ||
        fb_scalar(&fb, &message, 3, 8, 1, 0, &body_len) < 0 || body_len != n - body_start ||
        fb_ref(&fb, &message, 2, &batch_at) < 0 || !batch_at ||
        fb_table(&fb, batch_at, &batch) < 0 || fb_scalar(&fb, &batch, 0, 8, 1, 0, &rows) < 0 ||
        rows < 1 || rows > max_decoded / MIN_ROW_BYTES ||
        fb_vector(&fb, &batch, 1, 16, &nodes_at, &nodes) < 0 ||
        fb_vector(&fb, &batch, 2, 16, &buffers_at, &buffers) < 0 ||
        !((nodes == FIELD_NODES && buffers == BUFFERS) ||
          (nodes == FIELD_NODES_V1 && buffers == BUFFERS_V1)) ||
        fb_vector(&fb, &batch, 4, 8, &variadic_at, &variadic) < 0 || variadic ||
        fb_ref(&fb, &batch, 3, &compression_at) < 0)
        return NOT_USUAL;
    int64_t codec = -1;
    if (compression_at) {
        FbTable compression;
        int64_t method;
        if (fb_table(&fb, compression_at, &compression) < 0 ||
            fb_scalar(&fb, &compression, 0, 1, 1, CODEC_LZ4_FRAME, &codec) < 0 ||
            fb_scalar(&fb, &compression, 1, 1, 1, 0, &method) < 0 ||
            (codec != CODEC_LZ4_FRAME && codec != CODEC_ZSTD) || method != 0)
            return NOT_USUAL;
    }
    int64_t decoded = 0; /* at most max_decoded, so no sum below overflows */
    for (int64_t i = 0; i < buffers; i++) {
        int64_t off = (int64_t)le64(fb.p + buffers_at + 16 * i);
        int64_t length = (int64_t)le64(fb.p + buffers_at + 16 * i + 8);
        if (off < 0 || length < 0 || off > body_len || length > body_len - off) return NOT_USUAL;
        int64_t adds = length, declared = 0;
        if (compression_at && length != 0) {
            if (length < 8) return NOT_USUAL;
            declared = (int64_t)le64(payload + body_start + off);
            if (declared < -1) return NOT_USUAL;
            adds = declared == -1 ? length - 8 : declared;
        }
        if (adds > max_decoded - decoded) return NOT_USUAL; /* the Python fails too */
        decoded += adds;
        shape->off[i] = off;
        shape->len[i] = length;
        shape->declared[i] = declared;
    }
    if (check_expansion && decoded > max_expansion * (int64_t)n) return NOT_USUAL;
    shape->rows = rows;
    shape->decoded = decoded;
    shape->codec = codec;
    shape->nodes = nodes;
    shape->buffers = buffers;
    shape->buffers_at = 8 + buffers_at;
    shape->body_length_at = 8 + fb_field(&fb, &message, 3);
    shape->body_start = body_start;
    shape->nodes_at = 8 + nodes_at;
    return 0;
}

PyDoc_STRVAR(usual_message_doc,
"usual_message(payload, check_expansion, max_decoded, max_expansion)\n"
"    -> (rows, decoded, codec, field_nodes) | None\n\n"
"What ipc._check_message finds of an Arrow RecordBatch message it accepts, found in one\n"
"compiled pass (codec: None, or Arrow's CompressionType, 0 for LZ4_FRAME and 1 for\n"
"ZSTD); None where any of its checks fails (the caller then runs it, and its error\n"
"names what is wrong).");

static PyObject *usual_message(PyObject *self, PyObject *args) {
    Py_buffer view;
    int check_expansion;
    long long max_decoded, max_expansion;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*pLL", &view, &check_expansion, &max_decoded, &max_expansion))
        return NULL;
    MessageShape m;
    int found = max_decoded > 0 && max_expansion > 0 && max_expansion < INT64_MAX / (view.len + 1)
                    ? check_message(view.buf, view.len, check_expansion, max_decoded,
                                    max_expansion, &m)
                    : NOT_USUAL;
    PyBuffer_Release(&view);
    if (found == NOT_USUAL) Py_RETURN_NONE;
    if (m.codec < 0)
        return Py_BuildValue("LLOL", (long long)m.rows, (long long)m.decoded, Py_None,
                             (long long)m.nodes);
    return Py_BuildValue("LLLL", (long long)m.rows, (long long)m.decoded, (long long)m.codec,
                         (long long)m.nodes);
}

/* --- a zstd message's buffers decompressed by one kept context (ipc.read_compressed) ---
   Arrow's reader decompresses each zstd buffer with ZSTD_decompress, which makes and frees
   a context a call, and making one runs zstd's CPU feature test (`cpuid`), a trap to the
   hypervisor on a virtual machine: about 15 µs a buffer, a dozen buffers a batch
   (bench.codec_calls). Here each thread keeps one decompression context (freed when the
   thread ends), and the message is rewritten with each wanted buffer decompressed and
   stored as it is (length prefix -1, FORMAT.md 6.2): Arrow's reader then slices those
   buffers out of the new body and decompresses nothing. The metadata is the message's
   own, with only its buffers' (offset, length) pairs and its body length changed.

   Invariants: the rewrite decodes to what Arrow decodes from the original, or is not
   made. So it declines what Arrow would refuse for the rewrite's sake alone (a wanted
   buffer not 8-aligned in the body) and what would misalign the new arrays (a body not
   8-aligned in the payload); every size is read once, by check_message (`MessageShape`:
   the payload may be a map of a file), and bounded by max_decoded, at most a quarter of
   INT64_MAX, so no sum wraps;
   and the new metadata is parsed again and must say what the old said (`says_the_same`). */

#ifdef COMPACTOR_KEPT_ZSTD
#include <pthread.h>
#include <zstd.h>

static pthread_key_t dctx_key;

static void free_dctx(void *dctx) { ZSTD_freeDCtx((ZSTD_DCtx *)dctx); }

/* This thread's context, made the first time it asks; NULL if none can be made. */
static ZSTD_DCtx *thread_dctx(void) {
    ZSTD_DCtx *dctx = (ZSTD_DCtx *)pthread_getspecific(dctx_key);
    if (dctx == NULL && (dctx = ZSTD_createDCtx()) != NULL &&
        pthread_setspecific(dctx_key, dctx) != 0) {
        ZSTD_freeDCtx(dctx);
        dctx = NULL;
    }
    return dctx;
}

static inline int64_t pad8(int64_t n) { return (n + 7) & ~(int64_t)7; }

/* Buffer i's bytes in the new body: where wanted, its declared size and prefix (or all of
 * it, stored as it is already); else 0. */
static int64_t stored_length(const MessageShape *m, uint64_t wanted, int64_t i) {
    if (!(wanted >> i & 1) || !m->len[i]) return 0;
    return m->declared[i] == -1 ? m->len[i] : 8 + m->declared[i];
}

/* The new body's size (check_message bounded the declared sizes' sum by max_decoded, at
 * most a quarter of INT64_MAX, so it does not wrap), or -1 where a wanted buffer does not
 * start 8-aligned in the body: Arrow refuses it, and the caller's fallback says so. */
static int64_t body_size(const MessageShape *m, uint64_t wanted) {
    int64_t size = 0;
    for (int64_t i = 0; i < m->buffers; i++) {
        if (wanted >> i & 1 && m->off[i] % 8) return -1;
        size += pad8(stored_length(m, wanted, i));
    }
    return size;
}

/* Writes the new body after the metadata copied to `q`; 0, or -1 where a buffer does not
 * decompress to exactly its declared size (or no context can be made). No GIL needed. */
static int write_stored(const uint8_t *p, const MessageShape *m, uint64_t wanted,
                        uint8_t *q) {
    ZSTD_DCtx *dctx = thread_dctx();
    if (dctx == NULL) return -1;
    int64_t at = 0;
    for (int64_t i = 0; i < m->buffers; i++) {
        int64_t stored = stored_length(m, wanted, i), len = m->len[i];
        if (stored) {
            const uint8_t *src = p + m->body_start + m->off[i];
            uint8_t *dst = q + m->body_start + at;
            if (m->declared[i] == -1) {
                memcpy(dst, src, (size_t)len);
                put64(dst, UINT64_MAX); /* -1, whatever the source says by now */
            } else {
                put64(dst, UINT64_MAX); /* -1: stored as it is */
                size_t got = ZSTD_decompressDCtx(dctx, dst + 8, (size_t)(stored - 8), src + 8,
                                                 (size_t)(len - 8));
                if (ZSTD_isError(got) || (int64_t)got != stored - 8) return -1;
            }
            memset(dst + stored, 0, (size_t)(pad8(stored) - stored));
        }
        put64(q + m->buffers_at + 16 * i, (uint64_t)at);
        put64(q + m->buffers_at + 16 * i + 8, (uint64_t)stored);
        at += pad8(stored);
    }
    put64(q + m->body_length_at, (uint64_t)at);
    return 0;
}

/* Whether the rewritten message `q` (n bytes) says what the original `p` said, less the
 * spans and body length written: the same rows, field nodes and codec, and the spans
 * read back as written (metadata whose vectors or fields overlap would make the writes
 * change something else; check_message holds the body length to the n bytes). */
static int says_the_same(const uint8_t *p, const MessageShape *m, uint64_t wanted,
                         const uint8_t *q, Py_ssize_t n, int64_t max_decoded) {
    MessageShape o;
    if (check_message(q, n, 0, max_decoded, 1, &o) == NOT_USUAL) return 0;
    if (o.rows != m->rows || o.nodes != m->nodes || o.codec != m->codec ||
        o.buffers != m->buffers || o.buffers_at != m->buffers_at ||
        o.body_length_at != m->body_length_at || o.nodes_at != m->nodes_at ||
        o.body_start != m->body_start)
        return 0;
    int64_t at = 0;
    for (int64_t i = 0; i < m->buffers; i++) {
        int64_t stored = stored_length(m, wanted, i);
        if (o.off[i] != at || o.len[i] != stored) return 0;
        at += pad8(stored);
    }
    return memcmp(p + m->nodes_at, q + o.nodes_at, (size_t)(16 * m->nodes)) == 0;
}
#endif

PyDoc_STRVAR(zstd_stored_as_is_doc,
"zstd_stored_as_is(payload, wanted, max_decoded) -> bytes | None\n\n"
"A zstd batch message's payload rewritten with each buffer of `wanted` (a bit mask of\n"
"buffer indices) decompressed by this thread's kept zstd context and stored as it is\n"
"(length prefix -1), every other buffer empty: Arrow's reader, asked for the fields of\n"
"those buffers, decodes the same arrays from it without a zstd context per buffer.\n"
"None where the payload is not a zstd message ipc._check_message accepts (at most\n"
"`max_decoded` bytes decoded), where a wanted buffer does not start 8-aligned in the body\n"
"or the body in the payload, where a buffer does not decompress to its declared size, or\n"
"where the build had no libzstd (KEPT_ZSTD_CONTEXT): the caller then gives Arrow the\n"
"payload, and Arrow's error names any problem. Decompresses without the GIL.");

static PyObject *zstd_stored_as_is(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned long long wanted;
    long long max_decoded;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*KL", &view, &wanted, &max_decoded)) return NULL;
#ifndef COMPACTOR_KEPT_ZSTD
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
#else
    const uint8_t *p = (const uint8_t *)view.buf;
    MessageShape m;
    PyObject *out = NULL;
    int64_t size;
    if (max_decoded <= 0 || max_decoded > INT64_MAX / 4 ||
        check_message(p, view.len, 0, max_decoded, 1, &m) == NOT_USUAL ||
        m.codec != CODEC_ZSTD || m.body_length_at == 8 /* absent: an empty body */ ||
        m.body_start % 8 || (size = body_size(&m, wanted)) < 0)
        goto none;
    size += m.body_start;
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    uint8_t *q = (uint8_t *)PyBytes_AS_STRING(out);
    int written;
    Py_BEGIN_ALLOW_THREADS
    memcpy(q, p, (size_t)m.body_start);
    written = write_stored(p, &m, wanted, q) == 0 &&
              says_the_same(p, &m, wanted, q, size, max_decoded);
    Py_END_ALLOW_THREADS
    if (!written) goto none;
    PyBuffer_Release(&view);
    return out;
none:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
#endif
}

/* A job's walk over its inputs' blocks (worker/merge.py): a block's table as the columns
 * the walk reads, and the partitions of several inputs' pending runs merged in key order
 * with their weights summed. */

/* Section keys (raw topic, partition) that table_columns made, kept for the tables after:
 * a job's inputs hold the same partitions, block after block and file after file, so a
 * key is made once, not once a table. By raw topic, a list indexed by partition. Only
 * partitions below KEY_CACHE_PARTITIONS are kept, and the lists hold at most
 * KEY_CACHE_SLOTS slots in all (about 8 bytes a slot and 90 a key): a key that does not
 * fit is made as it would be without the cache, and the cache is emptied before the
 * next table, to hold that table's keys. */
#define KEY_CACHE_PARTITIONS 65536
#define KEY_CACHE_SLOTS (1 << 17)
static PyObject *key_cache; /* dict: bytes -> list of keys (None where none is made yet) */
static Py_ssize_t key_cache_slots;
static int key_cache_full; /* a key did not fit */

static PyObject *new_key(PyObject *raw, int64_t partition) {
    PyObject *p = PyLong_FromLongLong(partition);
    if (p == NULL) return NULL;
    PyObject *key = PyTuple_Pack(2, raw, p);
    Py_DECREF(p);
    if (key != NULL) PyObject_GC_UnTrack(key); /* (bytes, int): in no cycle */
    return key;
}

/* `e`'s key: the cached one, made and kept if none is. `*raw_seen` and `*keys` are the
 * last topic looked up and its list (borrowed from the cache), NULL at first. */
static PyObject *cached_key(const Entry *e, PyObject **raw_seen, PyObject **keys) {
    if (e->partition < 0 || e->partition >= KEY_CACHE_PARTITIONS)
        return new_key(e->raw, e->partition);
    if (e->raw != *raw_seen) {
        PyObject *list = PyDict_GetItemWithError(key_cache, e->raw);
        if (list == NULL) {
            if (PyErr_Occurred()) return NULL;
            list = PyList_New(0);
            if (list == NULL) return NULL;
            int added = PyDict_SetItem(key_cache, e->raw, list);
            Py_DECREF(list); /* the cache holds it */
            if (added < 0) return NULL;
        }
        *raw_seen = e->raw;
        *keys = list;
    }
    PyObject *list = *keys;
    Py_ssize_t p = (Py_ssize_t)e->partition, size = PyList_GET_SIZE(list);
    if (p >= size) {
        if (key_cache_slots + (p + 1 - size) > KEY_CACHE_SLOTS) {
            key_cache_full = 1;
            return new_key(e->raw, e->partition);
        }
        for (; size <= p; size++) {
            if (PyList_Append(list, Py_None) < 0) return NULL;
            key_cache_slots++;
        }
    }
    PyObject *key = PyList_GET_ITEM(list, p);
    if (key == Py_None) {
        key = new_key(e->raw, e->partition);
        if (key == NULL) return NULL;
        if (PyList_SetItem(list, p, key) < 0) return NULL; /* takes `key`, drops None */
    }
    return Py_NewRef(key);
}

PyDoc_STRVAR(table_columns_doc,
"table_columns(entries) -> (keys, counts, sizes)\n\n"
"A block's table entries (a SectionEntries or a list of TableEntries) as the columns\n"
"a job's walk reads of every section: each entry's key, record count and logical\n"
"bytes. One pass; TypeError for an entry that is no TableEntry. A TableEntry's key is\n"
"its own; a packed entry's is made once for all tables (a cache of keys, bounded).");

static PyObject *table_columns(PyObject *self, PyObject *args) {
    PyObject *entries;
    Entry scratch;
    (void)self;
    if (!PyArg_ParseTuple(args, "O", &entries)) return NULL;
    Py_ssize_t n = entries_count(entries);
    if (n < 0) return NULL;
    if (key_cache_full) {
        PyDict_Clear(key_cache);
        key_cache_slots = 0;
        key_cache_full = 0;
    }
    PyObject *raw_seen = NULL, *topic_keys = NULL;
    PyObject *keys = PyList_New(n), *counts = PyList_New(n), *sizes = PyList_New(n);
    if (keys == NULL || counts == NULL || sizes == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Entry *e = entry_at(entries, i, &scratch);
        if (e == NULL) goto fail;
        PyObject *key = e->key != NULL ? Py_NewRef(e->key)
                                       : cached_key(e, &raw_seen, &topic_keys);
        if (key == NULL) goto fail;
        PyList_SET_ITEM(keys, i, key);
        PyObject *count = PyLong_FromUnsignedLongLong(e->stats[2]);
        if (count == NULL) goto fail;
        PyList_SET_ITEM(counts, i, count);
        PyObject *size = PyLong_FromUnsignedLongLong(e->stats[4]);
        if (size == NULL) goto fail;
        PyList_SET_ITEM(sizes, i, size);
    }
    PyObject *out = PyTuple_Pack(3, keys, counts, sizes);
    Py_DECREF(keys);
    Py_DECREF(counts);
    Py_DECREF(sizes);
    return out;

fail:
    Py_XDECREF(keys);
    Py_XDECREF(counts);
    Py_XDECREF(sizes);
    return NULL;
}

/* One span of span_weights: an input's pending entries keys[at:end] and their sizes; the
 * key of the one at `at` as its raw topic and partition. */
typedef struct {
    PyObject *keys, *sizes;
    Py_ssize_t at, end;
    const char *raw;
    Py_ssize_t len;
    int64_t partition;
} Span;

/* Reads span `s`'s key at `s->at`: -1 with TypeError unless it is a (bytes, int) pair. */
static int span_key(Span *s) {
    int got = key_parts(PyList_GET_ITEM(s->keys, s->at), 0, &s->raw, &s->len, &s->partition);
    if (got > 0) PyErr_Format(PyExc_TypeError, "key %zd of a span is not (bytes, int)", s->at);
    return got == 0 ? 0 : -1;
}

/* Span `i` of the list `spans` into `s`: -1 with an error set unless it is (keys, sizes,
 * at, end) with 0 <= at and end <= both lists' lengths. */
static int take_span(PyObject *spans, Py_ssize_t i, Span *s) {
    PyObject *t = PyList_GET_ITEM(spans, i);
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 4 || !PyList_Check(PyTuple_GET_ITEM(t, 0)) ||
        !PyList_Check(PyTuple_GET_ITEM(t, 1)) || !PyLong_Check(PyTuple_GET_ITEM(t, 2)) ||
        !PyLong_Check(PyTuple_GET_ITEM(t, 3))) {
        PyErr_Format(PyExc_TypeError, "span %zd is not (keys, sizes, at, end)", i);
        return -1;
    }
    s->keys = PyTuple_GET_ITEM(t, 0);
    s->sizes = PyTuple_GET_ITEM(t, 1);
    s->at = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 2));
    s->end = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 3));
    if ((s->at == -1 || s->end == -1) && PyErr_Occurred()) return -1;
    if (s->at < 0 || s->end > PyList_GET_SIZE(s->keys) || s->end > PyList_GET_SIZE(s->sizes)) {
        PyErr_Format(PyExc_ValueError, "span %zd: entries %zd..%zd of %zd keys and %zd sizes",
                     i, s->at, s->end, PyList_GET_SIZE(s->keys), PyList_GET_SIZE(s->sizes));
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(span_weights_doc,
"span_weights(spans, budget) -> (keys, weights)\n\n"
"The keys of several inputs' pending entries merged in key order (meta.section_key's),\n"
"each once, with each key's weight: its sizes summed over the spans that hold it. Up\n"
"to and including the first key at which the weights so far reach `budget`, or all.\n"
"A span is (keys, sizes, at, end): an input's entries keys[at:end], strictly\n"
"increasing section keys (bytes, int), entry j weighing sizes[j] (an int >= 0).\n"
"ValueError for a span out of its lists' range or whose keys do not increase.");

static PyObject *span_weights(PyObject *self, PyObject *args) {
    PyObject *spans_obj, *keys = NULL, *weights = NULL;
    long long budget, reached = 0;
    Span *spans = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!L", &PyList_Type, &spans_obj, &budget)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(spans_obj), live = 0;
    if ((spans = PyMem_New(Span, n > 0 ? n : 1)) == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        if (take_span(spans_obj, i, &spans[live]) < 0) goto fail;
        if (spans[live].at >= spans[live].end) continue;
        if (span_key(&spans[live]) < 0) goto fail;
        live++;
    }
    if ((keys = PyList_New(0)) == NULL || (weights = PyList_New(0)) == NULL) goto fail;
    while (live > 0 && (PyList_GET_SIZE(keys) == 0 || reached < budget)) {
        /* the least key among the spans' heads; a few spans, so a scan beats a heap */
        Span *least = &spans[0];
        for (Py_ssize_t i = 1; i < live; i++)
            if (key_follows(least->raw, least->len, least->partition, spans[i].raw,
                            spans[i].len, spans[i].partition))
                least = &spans[i];
        const char *raw = least->raw;
        Py_ssize_t len = least->len;
        int64_t partition = least->partition;
        long long weight = 0;
        if (PyList_Append(keys, PyList_GET_ITEM(least->keys, least->at)) < 0) goto fail;
        for (Py_ssize_t i = 0; i < live;) {
            Span *s = &spans[i];
            if (s->len != len || s->partition != partition || memcmp(s->raw, raw, len) != 0) {
                i++;
                continue;
            }
            PyObject *size_obj = PyList_GET_ITEM(s->sizes, s->at);
            long long size = PyLong_Check(size_obj) ? PyLong_AsLongLong(size_obj) : -1;
            if (size == -1 && PyErr_Occurred()) goto fail;
            if (size < 0 || size > LLONG_MAX - weight) {
                PyErr_Format(PyExc_ValueError, "entry %zd of a span: size %R", s->at, size_obj);
                goto fail;
            }
            weight += size;
            if (++s->at == s->end) { /* this span is done: the last live one takes its place */
                *s = spans[--live];
                continue;
            }
            if (span_key(s) < 0) goto fail;
            if (!key_follows(s->raw, s->len, s->partition, raw, len, partition)) {
                PyErr_Format(PyExc_ValueError, "a span's keys do not increase at entry %zd",
                             s->at);
                goto fail;
            }
            i++;
        }
        reached = weight > LLONG_MAX - reached ? LLONG_MAX : reached + weight;
        PyObject *sum = PyLong_FromLongLong(weight);
        if (sum == NULL || PyList_Append(weights, sum) < 0) {
            Py_XDECREF(sum);
            goto fail;
        }
        Py_DECREF(sum);
    }
    PyMem_Free(spans);
    PyObject *out = PyTuple_Pack(2, keys, weights);
    Py_DECREF(keys);
    Py_DECREF(weights);
    return out;

fail:
    PyMem_Free(spans);
    Py_XDECREF(keys);
    Py_XDECREF(weights);
    return NULL;
}

/* Item `i` of the sequence `seq` (a list or tuple) as a key's parts: -1 with TypeError
 * unless it is a (bytes, int) pair, naming `what`. */
static int item_key(PyObject *seq, Py_ssize_t i, const char *what, const char **raw,
                    Py_ssize_t *len, int64_t *partition) {
    int got = key_parts(PySequence_Fast_GET_ITEM(seq, i), 0, raw, len, partition);
    if (got > 0) PyErr_Format(PyExc_TypeError, "%s %zd is not (bytes, int)", what, i);
    return got == 0 ? 0 : -1;
}

PyDoc_STRVAR(key_ranks_doc,
"key_ranks(among, keys, at, end) -> list[int]\n\n"
"Each key of keys[at:end] as its index in `among`: a group's partitions' section keys\n"
"(bytes, int), strictly increasing, and keys[at:end] strictly increasing too (a block's\n"
"table). One binary search for the first, then one walk forward: no hashing. An index\n"
"is given only for an equal key: KeyError with the first key `among` does not hold (or\n"
"any key out of order), TypeError for a key that is not (bytes, int), ValueError for\n"
"at..end outside `keys`.");

static PyObject *key_ranks(PyObject *self, PyObject *args) {
    PyObject *among_obj, *keys_obj, *among = NULL, *keys = NULL, *out = NULL;
    Py_ssize_t at, end;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOnn", &among_obj, &keys_obj, &at, &end)) return NULL;
    if ((among = PySequence_Fast(among_obj, "among must be a list or tuple")) == NULL ||
        (keys = PySequence_Fast(keys_obj, "keys must be a list or tuple")) == NULL)
        goto done;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(among);
    if (at < 0 || end < at || end > PySequence_Fast_GET_SIZE(keys)) {
        PyErr_Format(PyExc_ValueError, "keys %zd..%zd of %zd", at, end,
                     PySequence_Fast_GET_SIZE(keys));
        goto done;
    }
    if ((out = PyList_New(end - at)) == NULL) goto done;
    Py_ssize_t j = 0;
    for (Py_ssize_t i = at; i < end; i++) {
        const char *raw, *g_raw;
        Py_ssize_t len, g_len;
        int64_t partition, g_partition;
        if (item_key(keys, i, "key", &raw, &len, &partition) < 0) goto fail;
        int order = 1;
        if (i == at) { /* the first key: a binary search for the least key not before it */
            Py_ssize_t lo = 0, hi = m;
            while (lo < hi) {
                Py_ssize_t mid = lo + (hi - lo) / 2;
                if (item_key(among, mid, "group key", &g_raw, &g_len, &g_partition) < 0)
                    goto fail;
                if (key_order(g_raw, g_len, g_partition, raw, len, partition) < 0)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            j = lo;
        }
        while (j < m) {
            if (item_key(among, j, "group key", &g_raw, &g_len, &g_partition) < 0) goto fail;
            order = key_order(g_raw, g_len, g_partition, raw, len, partition);
            if (order >= 0) break;
            j++;
        }
        if (order != 0) {
            PyObject *missing = PyTuple_Pack(1, PySequence_Fast_GET_ITEM(keys, i));
            if (missing != NULL) PyErr_SetObject(PyExc_KeyError, missing); /* args: (key,) */
            Py_XDECREF(missing);
            goto fail;
        }
        PyObject *rank = PyLong_FromSsize_t(j);
        if (rank == NULL) goto fail;
        PyList_SET_ITEM(out, i - at, rank);
        j++; /* the next key is strictly greater: it cannot be this one */
    }
    goto done;

fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(among);
    Py_XDECREF(keys);
    return out;
}

PyDoc_STRVAR(joined_read_doc,
"joined_read(head, n, readinto) -> bytes\n\n"
"A new bytes object of n bytes: `head` (a buffer of at most n bytes), then what\n"
"`readinto` (a stream's readinto) writes into the rest of the object's own storage;\n"
"one copy of the stream's bytes where head + read(n - len(head)) makes two. Shorter if\n"
"`readinto` fills less (the stream ended). The view `readinto` is handed is released\n"
"before the bytes is returned: BufferError if `readinto` still holds its buffer (the\n"
"storage is then never freed, since it holds it). Like CPython's own buffered reader,\n"
"this trusts `readinto` not to keep a slice of the view.");

static PyObject *joined_read(PyObject *self, PyObject *args) {
    Py_buffer head;
    Py_ssize_t n;
    PyObject *readinto, *out = NULL, *view = NULL, *got_obj = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nO", &head, &n, &readinto)) return NULL;
    if (n < head.len) {
        PyErr_Format(PyExc_ValueError, "a read of %zd bytes after a head of %zd", n, head.len);
        PyBuffer_Release(&head);
        return NULL;
    }
    Py_ssize_t ahead = head.len;
    out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL) {
        PyBuffer_Release(&head);
        return NULL;
    }
    char *p = PyBytes_AS_STRING(out);
    memcpy(p, head.buf, (size_t)ahead);
    PyBuffer_Release(&head);
    if ((view = PyMemoryView_FromMemory(p + ahead, n - ahead, PyBUF_WRITE)) == NULL) goto fail;
    got_obj = PyObject_CallOneArg(readinto, view);
    PyObject *type, *value, *traceback; /* readinto's error, if any, while the view goes */
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *released = PyObject_CallMethod(view, "release", NULL);
    Py_CLEAR(view);
    if (released == NULL && type != NULL) PyErr_Clear(); /* readinto's error says more */
    if (type != NULL) PyErr_Restore(type, value, traceback);
    if (released == NULL) {
        /* readinto still holds the view's buffer, which is `out`'s storage: `out` is left
           alive (leaked), not freed under whoever holds it */
        Py_XDECREF(got_obj);
        return NULL;
    }
    Py_DECREF(released);
    if (got_obj == NULL) goto fail;
    Py_ssize_t got = PyLong_Check(got_obj) ? PyLong_AsSsize_t(got_obj) : -1;
    if (got == -1 && PyErr_Occurred()) goto fail;
    if (got < 0 || got > n - ahead) {
        PyErr_Format(PyExc_ValueError, "readinto of %zd bytes returned %R", n - ahead, got_obj);
        goto fail;
    }
    Py_DECREF(got_obj);
    if (got < n - ahead) { /* the stream ended: the bytes it gave, as a bytes of their own */
        PyObject *short_out = PyBytes_FromStringAndSize(p, ahead + got);
        Py_DECREF(out);
        return short_out;
    }
    return out;

fail:
    Py_XDECREF(got_obj);
    Py_XDECREF(view);
    Py_DECREF(out);
    return NULL;
}

PyDoc_STRVAR(entry_metas_doc,
"entry_metas(cls, entries, position, length) -> list\n\n"
"Each TableEntry of `entries` (a list) as a `cls` (SectionMeta) of a block at `position`,\n"
"`length` bytes long: what block.entry_meta makes of each, its fields set directly in\n"
"the instance's slots rather than through the frozen dataclass's __init__ (a call and\n"
"twelve object.__setattr__s each). TypeError unless `cls` is a class whose fields are\n"
"object slots of SectionMeta's names and each entry a TableEntry.");

static PyObject *entry_metas(PyObject *self, PyObject *args) {
    static const char *names[] = {"topic",          "partition",     "first_offset",
                                  "last_offset",    "record_count",  "uncompressed_bytes",
                                  "min_timestamp",  "max_timestamp", "tombstones",
                                  "position",       "length",        "min_delete_horizon"};
    /* Each field's place in a TableEntry; -1 for the block's position, -2 its length. */
    static const int from[] = {8, 9, 0, 1, 2, 4, 5, 6, 3, -1, -2, 7};
    enum { FIELDS = 12, ENTRY_WIDTH = 15 };
    PyTypeObject *type;
    PyObject *entries, *pos, *len;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!O!", &PyType_Type, &type, &PyList_Type, &entries,
                          &PyLong_Type, &pos, &PyLong_Type, &len))
        return NULL;
    Py_ssize_t slot_at[FIELDS];
    for (int k = 0; k < FIELDS; k++) {
        PyObject *d = type->tp_dict == NULL ? NULL
                                            : PyDict_GetItemString(type->tp_dict, names[k]);
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX ||
            (((PyMemberDescrObject *)d)->d_member->flags & READONLY)) {
            PyErr_Format(PyExc_TypeError, "entry_metas: %s has no object slot %s", type->tp_name,
                         names[k]);
            return NULL;
        }
        slot_at[k] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    Py_ssize_t n = PyList_GET_SIZE(entries);
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyList_GET_ITEM(entries, i);
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != ENTRY_WIDTH) {
            PyErr_Format(PyExc_TypeError, "entry_metas: entry %zd is no TableEntry", i);
            goto fail;
        }
        PyObject *meta = type->tp_alloc(type, 0);
        if (meta == NULL) goto fail;
        for (int k = 0; k < FIELDS; k++) {
            PyObject *v = from[k] == -1 ? pos : from[k] == -2 ? len : PyTuple_GET_ITEM(e, from[k]);
            *(PyObject **)((char *)meta + slot_at[k]) = Py_NewRef(v);
        }
        PyList_SET_ITEM(out, i, meta);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

PyDoc_STRVAR(json_rows_doc,
"json_rows(objects, names, quote, quoted) -> bytes\n\n"
"The JSON array (as json.dumps writes it with separators (',', ':')) of one array per\n"
"object of `objects`, a list: its attributes `names` (a tuple of str), in order. An\n"
"attribute is an int (exactly), None or a str (exactly); a str is written as\n"
"`quote(s)` gives it (json.encoder.encode_basestring_ascii), each distinct one quoted\n"
"once and kept in the dict `quoted`. TypeError for any other value.");

/* Appends `n`'s decimal digits (and sign) at `out`; returns the end. */
static char *put_int64(char *out, long long n) {
    char digits[24];
    int k = 0;
    unsigned long long u = n < 0 ? 0ULL - (unsigned long long)n : (unsigned long long)n;
    do {
        digits[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (n < 0) *out++ = '-';
    while (k) *out++ = digits[--k];
    return out;
}

/* Room for `need` more bytes in `*buf` (of `*cap`, `len` used); 0, or -1 with an error. */
static int json_room(char **buf, Py_ssize_t *cap, Py_ssize_t len, Py_ssize_t need) {
    if (len + need <= *cap) return 0;
    Py_ssize_t want = 2 * *cap + need;
    char *grown = PyMem_Realloc(*buf, (size_t)want);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *buf = grown;
    *cap = want;
    return 0;
}

static PyObject *json_rows(PyObject *self, PyObject *args) {
    PyObject *objects, *names, *quote, *quoted;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!OO!", &PyList_Type, &objects, &PyTuple_Type, &names, &quote,
                          &PyDict_Type, &quoted))
        return NULL;
    Py_ssize_t rows = PyList_GET_SIZE(objects), width = PyTuple_GET_SIZE(names);
    Py_ssize_t cap = 64 + rows * (3 + width * 8), len = 0;
    char *buf = PyMem_Malloc((size_t)cap);
    if (buf == NULL) return PyErr_NoMemory();
    buf[len++] = '[';
    for (Py_ssize_t r = 0; r < rows; r++) {
        PyObject *obj = PyList_GET_ITEM(objects, r);
        if (json_room(&buf, &cap, len, 2) < 0) goto fail;
        if (r) buf[len++] = ',';
        buf[len++] = '[';
        for (Py_ssize_t c = 0; c < width; c++) {
            PyObject *v = PyObject_GetAttr(obj, PyTuple_GET_ITEM(names, c));
            if (v == NULL) goto fail;
            PyObject *q = NULL; /* a quoted str's bytes, borrowed from `quoted` */
            char text[24];
            Py_ssize_t text_len = 0;
            if (PyLong_CheckExact(v)) {
                int overflow = 0;
                long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
                if (overflow || (n == -1 && PyErr_Occurred())) {
                    Py_DECREF(v);
                    if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_TypeError, "json_rows: an int past 64 bits");
                    goto fail;
                }
                text_len = put_int64(text, n) - text;
            } else if (v == Py_None) {
                memcpy(text, "null", 4);
                text_len = 4;
            } else if (PyUnicode_CheckExact(v)) {
                q = PyDict_GetItemWithError(quoted, v);
                if (q == NULL && !PyErr_Occurred()) {
                    PyObject *str = PyObject_CallOneArg(quote, v);
                    PyObject *made = str == NULL ? NULL : PyUnicode_AsASCIIString(str);
                    Py_XDECREF(str);
                    if (made != NULL && PyDict_SetItem(quoted, v, made) == 0) q = made;
                    Py_XDECREF(made); /* the dict holds it */
                }
                if (q != NULL && !PyBytes_Check(q)) {
                    PyErr_SetString(PyExc_TypeError, "json_rows: quoted must map str to bytes");
                    q = NULL;
                }
                if (q == NULL) {
                    Py_DECREF(v);
                    goto fail;
                }
                text_len = PyBytes_GET_SIZE(q);
            } else {
                PyErr_Format(PyExc_TypeError, "json_rows: attribute %R is a %s",
                             PyTuple_GET_ITEM(names, c), Py_TYPE(v)->tp_name);
                Py_DECREF(v);
                goto fail;
            }
            Py_DECREF(v); /* a quoted str's bytes stay in `quoted` */
            if (json_room(&buf, &cap, len, 1 + text_len) < 0) goto fail;
            if (c) buf[len++] = ',';
            memcpy(buf + len, q == NULL ? text : PyBytes_AS_STRING(q), (size_t)text_len);
            len += text_len;
        }
        if (json_room(&buf, &cap, len, 1) < 0) goto fail;
        buf[len++] = ']';
    }
    if (json_room(&buf, &cap, len, 1) < 0) goto fail;
    buf[len++] = ']';
    PyObject *out = PyBytes_FromStringAndSize(buf, len);
    PyMem_Free(buf);
    return out;
fail:
    PyMem_Free(buf);
    return NULL;
}

static PyMethodDef methods[] = {
    {"figures", (PyCFunction)(void (*)(void))figures, METH_VARARGS | METH_KEYWORDS, figures_doc},
    {"checked_figures", checked_figures, METH_VARARGS, checked_figures_doc},
    {"batch_figures", (PyCFunction)(void (*)(void))batch_figures, METH_VARARGS | METH_KEYWORDS,
     batch_figures_doc},
    {"usual_entries", usual_entries, METH_VARARGS, usual_entries_doc},
    {"framed_trailer", framed_trailer, METH_VARARGS, framed_trailer_doc},
    {"footer_entries", footer_entries, METH_VARARGS, footer_entries_doc},
    {"table_payload", table_payload, METH_VARARGS, table_payload_doc},
    {"index_entries", index_entries, METH_VARARGS, index_entries_doc},
    {"unsettled", unsettled, METH_VARARGS, unsettled_doc},
    {"record_sizes", record_sizes, METH_VARARGS, record_sizes_doc},
    {"relative_offsets", relative_offsets, METH_VARARGS, relative_offsets_doc},
    {"small_bitmap", small_bitmap, METH_VARARGS, small_bitmap_doc},
    {"small_sections", small_sections, METH_VARARGS, small_sections_doc},
    {"valid_bytes", valid_bytes, METH_VARARGS, valid_bytes_doc},
    {"usual_message", usual_message, METH_VARARGS, usual_message_doc},
    {"zstd_stored_as_is", zstd_stored_as_is, METH_VARARGS, zstd_stored_as_is_doc},
    {"table_columns", table_columns, METH_VARARGS, table_columns_doc},
    {"span_weights", span_weights, METH_VARARGS, span_weights_doc},
    {"key_ranks", key_ranks, METH_VARARGS, key_ranks_doc},
    {"joined_read", joined_read, METH_VARARGS, joined_read_doc},
    {"json_rows", json_rows, METH_VARARGS, json_rows_doc},
    {"entry_metas", entry_metas, METH_VARARGS, entry_metas_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sections",
    "A shared block's section table and per-section figures, compiled.", -1, methods,
    NULL, NULL, NULL, NULL,
};

static int add_int64(PyObject *m, const char *name, int64_t value) {
    PyObject *v = PyLong_FromLongLong(value);
    int added = PyModule_AddObjectRef(m, name, v);
    Py_XDECREF(v);
    return added;
}

PyMODINIT_FUNC PyInit__sections(void) {
    if (PyType_Ready(&SectionEntriesType) < 0) return NULL;
    if (key_cache == NULL && (key_cache = PyDict_New()) == NULL) return NULL;
#ifdef COMPACTOR_KEPT_ZSTD
    static int dctx_key_made;
    if (!dctx_key_made) {
        if (pthread_key_create(&dctx_key, free_dctx) != 0) {
            PyErr_SetString(PyExc_OSError, "no thread-specific key for zstd's contexts");
            return NULL;
        }
        dctx_key_made = 1;
    }
    PyObject *kept_zstd = Py_True;
#else
    PyObject *kept_zstd = Py_False;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    /* Whether zstd messages are decompressed by one kept context a thread (the build
       found libzstd: setup.py). */
    if (PyModule_AddObjectRef(m, "KEPT_ZSTD_CONTEXT", kept_zstd) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "SectionEntries", (PyObject *)&SectionEntriesType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "FIGURES", FIGURES) < 0 ||
        PyModule_AddIntConstant(m, "USUAL_TRAILER", USUAL_TRAILER) < 0 ||
        PyModule_AddIntConstant(m, "TRAILER_FIXED", TRAILER_FIXED) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_HORIZON", FLAG_HORIZON) < 0 ||
        PyModule_AddIntConstant(m, "KIND_ROARING32", KIND_ROARING32) < 0 ||
        PyModule_AddIntConstant(m, "KIND_ROARING64", KIND_ROARING64) < 0 ||
        PyModule_AddIntConstant(m, "RECORD_OVERHEAD", RECORD_OVERHEAD) < 0 ||
        PyModule_AddIntConstant(m, "FOOTER_ENTRY_HEAD", FOOTER_ENTRY_HEAD) < 0 ||
        PyModule_AddIntConstant(m, "INDEX_ENTRY_FIXED", INDEX_ENTRY_FIXED) < 0 ||
        PyModule_AddIntConstant(m, "INDEX_BATCH", INDEX_BATCH) < 0 ||
        PyModule_AddIntConstant(m, "METADATA_V5", METADATA_V5) < 0 ||
        PyModule_AddIntConstant(m, "HEADER_RECORD_BATCH", HEADER_RECORD_BATCH) < 0 ||
        PyModule_AddIntConstant(m, "FIELD_NODES", FIELD_NODES) < 0 ||
        PyModule_AddIntConstant(m, "BUFFERS", BUFFERS) < 0 ||
        PyModule_AddIntConstant(m, "FIELD_NODES_V1", FIELD_NODES_V1) < 0 ||
        PyModule_AddIntConstant(m, "BUFFERS_V1", BUFFERS_V1) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_LZ4_FRAME", CODEC_LZ4_FRAME) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_ZSTD", CODEC_ZSTD) < 0 ||
        PyModule_AddIntConstant(m, "MIN_ROW_BYTES", MIN_ROW_BYTES) < 0 ||
        add_int64(m, "NO_HORIZON", NO_HORIZON) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
