/* The frames of a whole version-3 file held in memory, walked and checked in one
 * compiled pass (docs/COMPILED_PATH.md, "The module's calls", item 1: `walk`, here over
 * a whole object rather than a chunk).
 *
 * `walk` makes every check today's stream reader makes of a file without decoding a
 * batch or parsing a trailer, table or footer payload's content, in the reader's order,
 * and reports the first problem with the byte position and the words of the FormatError
 * the reader raises for it. It mirrors, by name:
 * - framing.check_file_header, check_frame_length and verify_frame (the CRC: zlib's
 *   CRC-32 of tag, little-endian length and payload, as framing.frame_crc);
 * - reader._Input.read and frame_header, for an object whose size is known (the
 *   buffer's);
 * - reader.StreamReader.units (tags, the section order by meta.section_key), _block
 *   (block.check_block_end) and _finish up to the object's end (footer.parse_tail);
 * - reader.SectionReader._advance and _end up to the section end
 *   (section.parse_section_end), section.parse_section_header.
 *
 * Left to the caller, in the units returned: each trailer payload (parse_trailer and
 * the batch index against the frames), each section table's entries beyond their keys
 * (block.parse_section_table's trailers, check_bitmaps), the footer against the
 * sections, and everything a batch's decode checks. Today's reader makes a trailer's
 * and a table's checks when it meets them, so a CRC-valid but inconsistent payload is
 * reported by it before any problem the walk finds further on.
 *
 * A block's keys are read from its table as block.parse_section_table reads them. A
 * table whose entries do not even lay out as keys and trailers, strictly sorted, is one
 * that parse_section_table rejects, with words the walk does not reproduce: the walk
 * declines the file then, as it declines versions 1 and 2, for today's reader to
 * report.
 *
 * Every field is bounds-checked against the buffer before it is read.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
/* The frame CRC (zlib's CRC-32) from ISA-L where setup.py found it (COMPACTOR_ISAL_CRC:
   folded with carry-less multiplies, as the Python reader's isal.isal_zlib.crc32; about
   2.5 times zlib's speed here), else from zlib. */
#ifdef COMPACTOR_ISAL_CRC
#include <isa-l/crc.h>
static uint32_t crc_update(uint32_t crc, const uint8_t *p, size_t n) {
    return crc32_gzip_refl(crc, p, (uint64_t)n);
}
#else
#include <zlib.h>
static uint32_t crc_update(uint32_t crc, const uint8_t *p, size_t n) {
    return (uint32_t)crc32((uLong)crc, p, (uInt)n); /* n <= MAX_FRAME_PAYLOAD */
}
#endif

#define FILE_HEADER 16
#define FRAME_HEADER 12
#define SECTION_END 8
#define FILE_TAIL 20
#define MAX_FRAME_PAYLOAD (256u << 20)
#define SHARED_VERSION 3
/* block.MIN_TABLE_ENTRY: the smallest section header payload, a trailer length and a
   trailer's fixed part. */
#define MIN_TABLE_ENTRY (2 + 1 + 4 + 4 + 64)

static const uint8_t MAGIC[8] = {0x89, 'K', 'C', 'F', '\r', '\n', 0x1a, '\n'};

#define PROBLEM 1 /* a function's result: a FormatError's position and reason are set */

typedef struct {
    const uint8_t *data;
    Py_ssize_t size;
    Py_ssize_t pos;
    Py_ssize_t at;    /* the problem's position */
    PyObject *reason; /* the problem's reason, once one is found */
    PyObject *declined;
} Walk;

/* A key of the file's order (meta.section_key): the topic's UTF-8 bytes, then the
   partition. Its bytes are the walked buffer's. */
typedef struct {
    const uint8_t *topic;
    Py_ssize_t length;
    int32_t partition;
} Key;

static int key_cmp(const Key *a, const Key *b) {
    Py_ssize_t n = a->length < b->length ? a->length : b->length;
    int c = memcmp(a->topic, b->topic, (size_t)n);
    if (c) return c;
    if (a->length != b->length) return a->length < b->length ? -1 : 1;
    return a->partition < b->partition ? -1 : a->partition > b->partition;
}

static inline uint32_t u32_at(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint16_t u16_at(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static int problem(Walk *w, Py_ssize_t at, const char *format, ...) {
    va_list args;
    va_start(args, format);
    w->reason = PyUnicode_FromFormatV(format, args);
    va_end(args);
    w->at = at;
    return w->reason == NULL ? -1 : PROBLEM;
}

static int decline(Walk *w, const char *format, ...) {
    va_list args;
    va_start(args, format);
    w->declined = PyUnicode_FromFormatV(format, args);
    va_end(args);
    return w->declined == NULL ? -1 : PROBLEM;
}

/* Python's repr() of `n` bytes, into `out` of at least 4 * n + 4 bytes. */
static const char *bytes_repr(const uint8_t *p, int n, char *out) {
    static const char hex[] = "0123456789abcdef";
    int single = 0, dbl = 0;
    for (int i = 0; i < n; i++) {
        single |= p[i] == '\'';
        dbl |= p[i] == '"';
    }
    char quote = single && !dbl ? '"' : '\'';
    char *o = out;
    *o++ = 'b';
    *o++ = quote;
    for (int i = 0; i < n; i++) {
        uint8_t c = p[i];
        if (c == (uint8_t)quote || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else if (c == '\t' || c == '\n' || c == '\r') {
            *o++ = '\\';
            *o++ = c == '\t' ? 't' : c == '\n' ? 'n' : 'r';
        } else if (c < ' ' || c >= 0x7f) {
            *o++ = '\\';
            *o++ = 'x';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        } else {
            *o++ = (char)c;
        }
    }
    *o++ = quote;
    *o = '\0';
    return out;
}

#define REPR_BYTES(n) (4 * (n) + 4)

/* framing.describe_tag. */
static const char *describe_tag(const uint8_t *tag, char *out) {
    return bytes_repr(tag, 4, out) + 1;
}

/* _Input.read's check, for a read of `n` bytes at the walk's position. */
static int need(Walk *w, Py_ssize_t n, const char *what) {
    if (n > w->size - w->pos)
        return problem(w, w->pos, "%s of %zd bytes runs past the end of the %zd-byte object",
                       what, n, w->size);
    return 0;
}

typedef struct {
    const uint8_t *tag;
    uint32_t length, crc;
    Py_ssize_t at; /* the frame's first byte; its payload is at + FRAME_HEADER */
} Frame;

/* _Input.frame_header: reads a frame header, its length checked; the position moves to
   the payload. */
static int frame_header(Walk *w, const char *what, Frame *f) {
    char header_what[64];
    snprintf(header_what, sizeof header_what, "%s frame header", what);
    int r = need(w, FRAME_HEADER, header_what);
    if (r) return r;
    const uint8_t *p = w->data + w->pos;
    f->at = w->pos;
    f->tag = p;
    f->length = u32_at(p + 4);
    f->crc = u32_at(p + 8);
    w->pos += FRAME_HEADER;
    char tag[REPR_BYTES(4)];
    if (f->length > MAX_FRAME_PAYLOAD)
        return problem(w, f->at + 4, "%s frame length %u exceeds the %u-byte cap",
                       describe_tag(f->tag, tag), f->length, MAX_FRAME_PAYLOAD);
    if ((Py_ssize_t)f->length > w->size - w->pos)
        return problem(w, f->at + 4,
                       "%s frame length %u runs past the end of the %zd-byte object",
                       describe_tag(f->tag, tag), f->length, w->size);
    return 0;
}

/* framing.verify_frame of the frame whose header frame_header just read; the position
   moves past its payload. */
static int payload(Walk *w, const Frame *f) {
    const uint8_t *p = w->data + f->at;
    uint32_t crc = crc_update(crc_update(0, p, 8), p + FRAME_HEADER, f->length);
    w->pos += f->length;
    if (crc != f->crc) {
        char tag[REPR_BYTES(4)], stored[16], computed[16];
        snprintf(stored, sizeof stored, "0x%08x", f->crc);
        snprintf(computed, sizeof computed, "0x%08x", crc);
        return problem(w, f->at, "%s frame checksum mismatch (stored %s, computed %s)",
                       describe_tag(f->tag, tag), stored, computed);
    }
    return 0;
}

static int tag_is(const Frame *f, const char *tag) { return memcmp(f->tag, tag, 4) == 0; }

/* section.parse_section_end (with `magic` "BEND": block.check_block_end's part): the
   frame length an 8-byte end at the position records. */
static int section_end(Walk *w, const char *what, const char *magic, uint32_t *recorded) {
    int r = need(w, SECTION_END, what);
    if (r) return r;
    const uint8_t *p = w->data + w->pos;
    if (memcmp(p + 4, magic, 4) != 0) {
        char found[REPR_BYTES(4)];
        return problem(w, w->pos + 4, "bad section end marker %s", bytes_repr(p + 4, 4, found));
    }
    *recorded = u32_at(p);
    return 0;
}

/* section.parse_section_header (read_topic_partition, "section header") of the payload
   of `f`: its key, and its topic as a new str. */
static int section_header(Walk *w, const Frame *f, Key *key, PyObject **topic) {
    const uint8_t *p = w->data + f->at + FRAME_HEADER;
    Py_ssize_t base = f->at + FRAME_HEADER, left = f->length;
    if (left < 2)
        return problem(w, base, "truncated section header topic length: needs 2 bytes, %zd left",
                       left);
    Py_ssize_t n = u16_at(p);
    left -= 2;
    if (n == 0) return problem(w, base, "empty topic name in section header");
    if (left < n)
        return problem(w, base + 2, "truncated section header topic: needs %zd bytes, %zd left",
                       n, left);
    *topic = PyUnicode_DecodeUTF8((const char *)p + 2, n, "strict");
    if (*topic == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -1;
        PyErr_Clear();
        return problem(w, base + 2, "section header topic is not UTF-8");
    }
    left -= n;
    Py_ssize_t at = base + 2 + n;
    int r;
    if (left < 4) {
        r = problem(w, at, "truncated section header partition: needs 4 bytes, %zd left", left);
    } else if ((int32_t)u32_at(p + 2 + n) < 0) {
        r = problem(w, at, "negative partition %d in section header", (int32_t)u32_at(p + 2 + n));
    } else if (left > 4) {
        r = problem(w, at + 4, "%zd unexpected bytes after section header", left - 4);
    } else {
        key->topic = p + 2;
        key->length = n;
        key->partition = (int32_t)u32_at(p + 2 + n);
        return 0;
    }
    Py_CLEAR(*topic);
    return r;
}

static PyObject *batch_list_add(PyObject *batches, const Frame *f) {
    PyObject *b = Py_BuildValue("(nnn)", f->at, f->at + FRAME_HEADER, (Py_ssize_t)f->length);
    if (b == NULL) return NULL;
    int r = PyList_Append(batches, b);
    Py_DECREF(b);
    return r < 0 ? NULL : batches;
}

/* A framed section whose header frame `head` was just read (StreamReader.units, then
   SectionReader._advance and _end as `skip` drives them): its unit tuple in `*unit`. */
/* StreamReader.units' order check: a unit whose first section has key `first` (topic
   `topic`), at `at`, comes strictly after the file's `previous` key, none before the
   first unit (its topic NULL: a key's topic is never empty). */
static int follows(Walk *w, const Key *first, PyObject *topic, Py_ssize_t at,
                   const Key *previous) {
    if (previous->topic != NULL && key_cmp(first, previous) <= 0)
        return problem(w, at, "section %U/%d is out of order", topic, first->partition);
    return 0;
}

static int section(Walk *w, const Frame *head, Key *previous, PyObject **unit) {
    PyObject *topic = NULL;
    Key key;
    int r = section_header(w, head, &key, &topic);
    if (r) return r;
    if ((r = follows(w, &key, topic, head->at, previous))) {
        Py_DECREF(topic);
        return r;
    }
    *previous = key;
    PyObject *batches = PyList_New(0);
    if (batches == NULL) {
        Py_DECREF(topic);
        return -1;
    }
    Frame f;
    for (;;) {
        if ((r = frame_header(w, "batch or trailer", &f))) goto done;
        if (!tag_is(&f, "BTCH") && !tag_is(&f, "STRL")) {
            char tag[REPR_BYTES(4)];
            r = problem(w, f.at, "expected a batch or trailer frame, found tag %s",
                        describe_tag(f.tag, tag));
            goto done;
        }
        if ((r = payload(w, &f))) goto done;
        if (tag_is(&f, "STRL")) break;
        if (batch_list_add(batches, &f) == NULL) {
            r = -1;
            goto done;
        }
    }
    if (PyList_GET_SIZE(batches) == 0) {
        r = problem(w, f.at, "section has no batches");
        goto done;
    }
    Py_ssize_t end_at = w->pos;
    uint32_t recorded;
    if ((r = section_end(w, "section end", "SEND", &recorded))) goto done;
    if (recorded != FRAME_HEADER + f.length) {
        r = problem(w, end_at, "section end records a %u-byte trailer, the trailer frame has %u",
                    recorded, FRAME_HEADER + f.length);
        goto done;
    }
    w->pos += SECTION_END;
    *unit = Py_BuildValue("(sOinnOnn)", "section", topic, key.partition, head->at,
                          w->pos - head->at, batches, f.at + FRAME_HEADER,
                          (Py_ssize_t)f.length);
    r = *unit == NULL ? -1 : 0;
done:
    Py_DECREF(topic);
    Py_DECREF(batches);
    return r;
}

/* The first and last keys of a section table payload `p` of `n` bytes at `base`, as
   block.parse_section_table reads them, and the first's topic as a new str. Its count is
   checked with parse_section_table's words; an entry that does not lay out, a topic not
   UTF-8, a negative partition, keys not strictly increasing or bytes after the last
   entry decline the file. */
static int table_keys(Walk *w, const uint8_t *p, Py_ssize_t n, Py_ssize_t base, Key *first,
                      Key *last, PyObject **first_topic) {
    if (n < 4)
        return problem(w, base, "truncated section table count: needs 4 bytes, %zd left", n);
    uint32_t count = u32_at(p);
    if (count < 1 || (uint64_t)count * MIN_TABLE_ENTRY > (uint64_t)(n - 4))
        return problem(w, base, "section table claims %u sections, which cannot fit", count);
    Py_ssize_t i = 4;
    Key key, previous = {NULL, 0, 0};
    for (uint32_t e = 0; e < count; e++) {
        if (n - i < 2) goto unlike;
        Py_ssize_t length = u16_at(p + i);
        if (length == 0 || n - i - 2 < length + 8) goto unlike;
        key.topic = p + i + 2;
        key.length = length;
        key.partition = (int32_t)u32_at(p + i + 2 + length);
        uint32_t trailer = u32_at(p + i + 6 + length);
        if (key.partition < 0 || (uint64_t)(n - i - 10 - length) < trailer) goto unlike;
        if (e > 0 && key_cmp(&key, &previous) <= 0) goto unlike;
        /* Strictly sorted, so a topic seen already is the previous entry's. */
        if (e == 0 || previous.length != length || memcmp(previous.topic, key.topic, length)) {
            PyObject *topic = PyUnicode_DecodeUTF8((const char *)key.topic, length, "strict");
            if (topic == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto failed;
                PyErr_Clear();
                goto unlike;
            }
            if (e == 0)
                *first_topic = topic;
            else
                Py_DECREF(topic);
        }
        if (e == 0) *first = key;
        previous = key;
        i += 10 + length + (Py_ssize_t)trailer;
    }
    if (i != n) goto unlike;
    *last = key;
    return 0;
unlike:
    Py_CLEAR(*first_topic);
    return decline(w,
                   "the section table at byte %zd is not laid out as keys and trailers in "
                   "order: today's reader reports it",
                   base - FRAME_HEADER);
failed:
    Py_CLEAR(*first_topic);
    return -1;
}

/* A shared block whose SBLK frame `batch` was just read (StreamReader._block and the
   order check of units): its unit tuple in `*unit`. */
static int block(Walk *w, const Frame *batch, Key *previous, PyObject **unit) {
    Frame table;
    int r = frame_header(w, "section table", &table);
    if (r) return r;
    if (!tag_is(&table, "STBL")) {
        char tag[REPR_BYTES(4)];
        return problem(w, table.at, "expected the shared block's section table, found tag %s",
                       describe_tag(table.tag, tag));
    }
    if ((r = payload(w, &table))) return r;
    Py_ssize_t end_at = w->pos;
    uint32_t recorded;
    if ((r = section_end(w, "block end", "BEND", &recorded))) return r;
    if (recorded != FRAME_HEADER + table.length)
        return problem(w, end_at, "block end records a %u-byte table, the table frame has %u",
                       recorded, FRAME_HEADER + table.length);
    w->pos += SECTION_END;
    Key first = {NULL, 0, 0}, last = {NULL, 0, 0};
    PyObject *first_topic = NULL;
    Py_ssize_t table_payload = table.at + FRAME_HEADER;
    r = table_keys(w, w->data + table_payload, table.length, table_payload, &first, &last,
                   &first_topic);
    if (r) return r;
    r = follows(w, &first, first_topic, batch->at, previous);
    Py_DECREF(first_topic);
    if (r) return r;
    *previous = last;
    *unit = Py_BuildValue("(snnnnnn)", "block", batch->at, w->pos - batch->at,
                          batch->at + FRAME_HEADER, (Py_ssize_t)batch->length, table_payload,
                          (Py_ssize_t)table.length);
    return *unit == NULL ? -1 : 0;
}

static int supported(uint32_t version) { return version >= 1 && version <= SHARED_VERSION; }

/* framing.check_file_header; a version other than 3 declines. */
static int file_header(Walk *w) {
    int r = need(w, FILE_HEADER, "file header");
    if (r) return r;
    const uint8_t *p = w->data;
    if (memcmp(p, MAGIC, 8) != 0) {
        char magic[REPR_BYTES(8)];
        return problem(w, 0, "bad magic %s: not a compactor file", bytes_repr(p, 8, magic));
    }
    uint32_t version = u32_at(p + 8), flags = u32_at(p + 12);
    if (!supported(version)) return problem(w, 8, "unsupported format version %u", version);
    if (flags != 0) {
        char hex[16];
        snprintf(hex, sizeof hex, "%#x", flags);
        return problem(w, 12, "unknown header flags %s", hex);
    }
    if (version != SHARED_VERSION)
        return decline(w, "format version %u: the walk reads version %d only", version,
                       SHARED_VERSION);
    w->pos = FILE_HEADER;
    return 0;
}

/* The tail after the footer frame `footer` and the object's end (StreamReader._finish,
   footer.parse_tail). */
static int tail(Walk *w, const Frame *footer) {
    Py_ssize_t at = w->pos;
    int r = need(w, FILE_TAIL, "file tail");
    if (r) return r;
    const uint8_t *p = w->data + at;
    uint32_t length = u32_at(p), crc = u32_at(p + 4), version = u32_at(p + 8);
    if (memcmp(p + 12, MAGIC, 8) != 0) {
        char magic[REPR_BYTES(8)];
        return problem(w, at + 12, "bad tail magic %s: not a compactor file",
                       bytes_repr(p + 12, 8, magic));
    }
    if (!supported(version)) return problem(w, at + 8, "unsupported format version %u", version);
    if (length != FRAME_HEADER + footer->length || crc != footer->crc)
        return problem(w, at, "file tail does not describe the footer frame");
    if (version != SHARED_VERSION)
        return problem(w, at + 8, "tail says version %u, header %d", version, SHARED_VERSION);
    w->pos += FILE_TAIL;
    if (w->pos != w->size)
        return problem(w, w->pos, "file ends before the %zd-byte object", w->size);
    return 0;
}

/* StreamReader.units over the whole file: 0 with the units in `units`, PROBLEM with the
   problem or the decline in `w`, -1 with an exception set. */
static int units(Walk *w, PyObject *units) {
    int r = file_header(w);
    if (r) return r;
    Key previous = {NULL, 0, 0}; /* none yet */
    for (;;) {
        Frame f;
        if ((r = frame_header(w, "section or footer", &f))) return r;
        int header = tag_is(&f, "SHDR"), shared = tag_is(&f, "SBLK"), footer = tag_is(&f, "FOOT");
        if (!header && !shared && !footer) {
            char tag[REPR_BYTES(4)];
            return problem(w, f.at, "expected a section or the footer, found tag %s",
                           describe_tag(f.tag, tag));
        }
        if ((r = payload(w, &f))) return r;
        if (footer) return tail(w, &f);
        PyObject *unit = NULL;
        r = header ? section(w, &f, &previous, &unit) : block(w, &f, &previous, &unit);
        if (r) return r;
        r = PyList_Append(units, unit);
        Py_DECREF(unit);
        if (r < 0) return -1;
    }
}

PyDoc_STRVAR(walk_doc,
             "walk(data, object_name) -> ('ok', units) | ('error', position, reason) | "
             "('decline', reason)\n\n"
             "The frames of the whole version-3 file `data`, checked as today's stream reader\n"
             "checks them without decoding (this file's top comment says which checks).\n"
             "A unit is ('section', topic, partition, position, length, batches,\n"
             "trailer_payload_position, trailer_payload_length), batches a list of\n"
             "(frame_position, payload_position, payload_length), or ('block', position,\n"
             "length, batch_payload_position, batch_payload_length, table_payload_position,\n"
             "table_payload_length). The first problem comes as the FormatError's position\n"
             "and reason (`object_name` is the error's, which its reason never names).\n"
             "Versions 1 and 2, and a section table not laid out as keys and trailers in\n"
             "order, are declined.");

static PyObject *walk(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    PyObject *object_name;
    if (!PyArg_ParseTuple(args, "y*U", &view, &object_name)) return NULL;
    Walk w = {view.buf, view.len, 0, 0, NULL, NULL};
    PyObject *found = PyList_New(0);
    PyObject *out = NULL;
    if (found != NULL) {
        int r = units(&w, found);
        if (r == 0)
            out = Py_BuildValue("(sO)", "ok", found);
        else if (r == PROBLEM && w.declined != NULL)
            out = Py_BuildValue("(sO)", "decline", w.declined);
        else if (r == PROBLEM)
            out = Py_BuildValue("(snO)", "error", w.at, w.reason);
    }
    Py_XDECREF(found);
    Py_XDECREF(w.reason);
    Py_XDECREF(w.declined);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, walk_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_walk",
    "The frames of a whole version-3 file, walked and checked, compiled.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__walk(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
#ifdef COMPACTOR_ISAL_CRC
    const char *crc = "isal";
#else
    const char *crc = "zlib";
#endif
    if (PyModule_AddStringConstant(m, "CRC", crc) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
