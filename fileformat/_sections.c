/* A shared block's per-section figures (FORMAT.md section 13), in one pass over its
 * columns.
 *
 * `figures` is what a block's check and the writer's `write_sections` need of every
 * section of a block: its first and last offset, and whether the offsets strictly
 * increase within it; when the stat columns are given, also its record count,
 * tombstones, logical bytes, timestamp range and earliest tombstone delete horizon,
 * in the order of `BatchStats`'s fields (the first eight of a `TableEntry`).
 *
 * The caller passes the columns as buffers it has already sliced to the batch's rows
 * (`memoryview`s of int64 values; a validity bitmap as its buffer and the bit of row 0),
 * so this file knows nothing of Arrow's types: it checks every span and every buffer's
 * length before reading, and reads nothing else. The scan runs without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define NO_HORIZON INT64_MAX
#define FIGURES 8

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

/* One section's (start, count) from the tuple `item`'s fields `start_at` and `count_at`. */
static int read_span(PyObject *item, Py_ssize_t start_at, Py_ssize_t count_at,
                     Py_ssize_t rows, Py_ssize_t i, Py_ssize_t *start, Py_ssize_t *count) {
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) <= start_at ||
        PyTuple_GET_SIZE(item) <= count_at) {
        PyErr_Format(PyExc_TypeError, "section %zd is not a tuple with fields %zd and %zd", i,
                     start_at, count_at);
        return -1;
    }
    *start = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, start_at));
    if (*start == -1 && PyErr_Occurred()) return -1;
    *count = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, count_at));
    if (*count == -1 && PyErr_Occurred()) return -1;
    if (*start < 0 || *count < 1 || *start > rows - *count) {
        PyErr_Format(PyExc_ValueError, "section %zd spans rows %zd+%zd of a %zd-row batch", i,
                     *start, *count, rows);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(figures_doc,
"figures(sections, start_at, count_at, offsets, timestamps=None, sizes=None,\n"
"        values_validity=None, values_bit=0, horizons=None, horizons_validity=None,\n"
"        horizons_bit=0) -> (descent, figures)\n\n"
"Each section's figures, for sections given as tuples whose field `start_at` is the\n"
"section's first row and `count_at` its rows (at least one, within the batch).\n\n"
"`offsets`, `timestamps`, `sizes` (each record's logical bytes) and `horizons` are\n"
"int64 buffers of the batch's rows (`horizons` None: every one null); a validity bitmap\n"
"is a buffer and the bit of row 0 (None: no nulls). `descent` is the first row, inside a section, whose offset does not\n"
"exceed the one before it, or -1. Without `timestamps` a figure is (first offset, last\n"
"offset); with it, the eight fields of BatchStats, the horizon None when no tombstone\n"
"has one before NO_HORIZON.");

static PyObject *figures(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"sections",        "start_at",   "count_at",          "offsets",
                             "timestamps",      "sizes",      "values_validity",   "values_bit",
                             "horizons",        "horizons_validity", "horizons_bit", NULL};
    PyObject *sections, *offsets_obj;
    PyObject *ts_obj = Py_None, *sizes_obj = Py_None, *vv_obj = Py_None;
    PyObject *hz_obj = Py_None, *hv_obj = Py_None;
    Py_ssize_t start_at, count_at, values_bit = 0, horizons_bit = 0;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OnnO|OOOnOOn", kwlist, &sections, &start_at,
                                     &count_at, &offsets_obj, &ts_obj, &sizes_obj, &vv_obj,
                                     &values_bit, &hz_obj, &hv_obj, &horizons_bit))
        return NULL;
    if (start_at < 0 || count_at < 0 || values_bit < 0 || horizons_bit < 0) {
        PyErr_SetString(PyExc_ValueError, "field positions and bits must not be negative");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(sections, "sections must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Column off = {0}, ts = {0}, sz = {0}, vv = {0}, hz = {0}, hv = {0};
    Py_ssize_t *spans = NULL;
    int64_t *out = NULL;
    PyObject *result = NULL, *list = NULL;

    if (take_column(offsets_obj, &off, 0, 0, "offsets") < 0) goto done;
    Py_ssize_t rows = off.view.len / 8;
    int whole = ts_obj != Py_None;
    if (take_column(ts_obj, &ts, rows * 8, 1, "timestamps") < 0 ||
        take_column(sizes_obj, &sz, whole ? rows * 8 : 0, 1, "sizes") < 0 ||
        take_column(vv_obj, &vv, (values_bit + rows + 7) / 8, 1, "values_validity") < 0 ||
        take_column(hz_obj, &hz, whole ? rows * 8 : 0, 1, "horizons") < 0 ||
        take_column(hv_obj, &hv, (horizons_bit + rows + 7) / 8, 1, "horizons_validity") < 0)
        goto done;
    if (whole && !sz.held) {
        PyErr_SetString(PyExc_TypeError, "timestamps need sizes");
        goto done;
    }
    spans = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (n ? n : 1));
    out = PyMem_Malloc(sizeof(int64_t) * FIGURES * (n ? n : 1));
    if (spans == NULL || out == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (read_span(PySequence_Fast_GET_ITEM(seq, i), start_at, count_at, rows, i,
                      &spans[2 * i], &spans[2 * i + 1]) < 0)
            goto done;
    }

    Py_ssize_t descent = -1;
    Py_BEGIN_ALLOW_THREADS
    const int64_t *o = off.view.buf;
    const int64_t *t = whole ? ts.view.buf : NULL;
    const int64_t *s = whole ? sz.view.buf : NULL;
    const int64_t *h = hz.held ? hz.view.buf : NULL;
    const uint8_t *vbits = vv.held ? vv.view.buf : NULL;
    const uint8_t *hbits = hv.held ? hv.view.buf : NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t a = spans[2 * i], end = a + spans[2 * i + 1];
        int64_t *f = out + FIGURES * i;
        f[0] = o[a];
        f[1] = o[end - 1];
        for (Py_ssize_t r = a + 1; r < end && descent < 0; r++)
            if (o[r] <= o[r - 1]) descent = r;
        if (!whole) continue;
        int64_t tombstones = 0, bytes = 0, min_ts = t[a], max_ts = t[a], horizon = NO_HORIZON;
        for (Py_ssize_t r = a; r < end; r++) {
            bytes += s[r];
            if (t[r] < min_ts) min_ts = t[r];
            if (t[r] > max_ts) max_ts = t[r];
            if (vbits != NULL && !bit_set(vbits, values_bit + r)) {
                tombstones++;
                if (h != NULL && (hbits == NULL || bit_set(hbits, horizons_bit + r)) &&
                    h[r] < horizon)
                    horizon = h[r];
            }
        }
        f[2] = end - a;
        f[3] = tombstones;
        f[4] = bytes;
        f[5] = min_ts;
        f[6] = max_ts;
        f[7] = horizon;
    }
    Py_END_ALLOW_THREADS

    list = PyList_New(n);
    if (list == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *f = out + FIGURES * i;
        Py_ssize_t width = whole ? FIGURES : 2;
        PyObject *tuple = PyTuple_New(width);
        if (tuple == NULL) goto done;
        PyList_SET_ITEM(list, i, tuple);
        for (Py_ssize_t k = 0; k < width; k++) {
            PyObject *v;
            if (k == 7 && f[7] == NO_HORIZON) {
                v = Py_NewRef(Py_None);
            } else {
                v = PyLong_FromLongLong(f[k]);
                if (v == NULL) goto done;
            }
            PyTuple_SET_ITEM(tuple, k, v);
        }
    }
    result = Py_BuildValue("nO", descent, list);

done:
    Py_XDECREF(list);
    PyMem_Free(spans);
    PyMem_Free(out);
    release(&off);
    release(&ts);
    release(&sz);
    release(&vv);
    release(&hz);
    release(&hv);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef methods[] = {
    {"figures", (PyCFunction)(void (*)(void))figures, METH_VARARGS | METH_KEYWORDS, figures_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sections",
    "A shared block's per-section figures in one compiled pass (see figures).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__sections(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "FIGURES", FIGURES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
