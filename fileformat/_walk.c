/* The frames of a version-3 file walked and checked in one compiled pass
 * (docs/COMPILED_PATH.md, "The module's calls", item 1): `walk` over a whole object held
 * in memory, and `Walker` over one object's stream fed chunk by chunk.
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
 * A `Walker` makes the same checks with the same helpers, from the byte after the file
 * header (which Python reads and checks) of a version-3 object whose size is known, on
 * the chunks its caller reads (reader._Input's read-ahead), and keeps its place between
 * them. It leaves the section order and each table's keys to its caller too: it reports
 * what it finds as events (a section's header, each batch, a trailer once its section
 * end is checked, a block once its block end is, the footer once the tail and the
 * object's end are, or the first problem), from which Python checks the rest. A batch's
 * or a block's payload longer than its `long` and not in the chunk
 * (reader._Input.batch_payload) it leaves to its caller to read, or map, and to hand
 * back (`payload`).
 *
 * Every field is bounds-checked against the bytes held before it is read.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>
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
#define WAIT 2    /* a function's result: the item at the position is not all held yet */

/* The bytes walked: an object's bytes `base` to `end` (all of them for `walk`, a chunk
   for a Walker), of an object of `size` bytes. */
typedef struct {
    const uint8_t *data; /* the object's byte `base` */
    Py_ssize_t base, end, size;
    Py_ssize_t pos;
    int eof;             /* no bytes will follow `end`: the whole object, or a source ended */
    Py_ssize_t unlocked; /* a payload longer than this has its CRC computed without the GIL */
    Py_ssize_t want;     /* with WAIT: the bytes from the position the next chunk must hold */
    Py_ssize_t at;       /* the problem's position */
    PyObject *reason;    /* the problem's reason, once one is found */
    PyObject *declined;
} Walk;

/* The held byte at the object's position `pos`. */
static inline const uint8_t *held(const Walk *w, Py_ssize_t pos) {
    return w->data + (pos - w->base);
}

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

/* _Input.read's checks, for a read of `n` bytes at the walk's position: the object has
   them, and they are held; else, once the source has ended, the read's shortfall, or
   WAIT for a chunk that holds them. */
static int need(Walk *w, Py_ssize_t n, const char *what) {
    if (n > w->size - w->pos)
        return problem(w, w->pos, "%s of %zd bytes runs past the end of the %zd-byte object",
                       what, n, w->size);
    Py_ssize_t have = w->end - w->pos;
    if (n <= have) return 0;
    if (w->eof)
        return problem(w, w->pos, "truncated %s: the object ends after %zd of %zd bytes", what,
                       have, n);
    w->want = n;
    return WAIT;
}

typedef struct {
    const uint8_t *tag; /* the header's bytes: tag, length, crc */
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
    const uint8_t *p = held(w, w->pos);
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

/* Where a frame is read, the tags it may have (4 bytes each), what the reader's error
   says it expected instead, and what its header read is of. */
typedef struct {
    const char *tags, *expected, *what;
} Grammar;

/* StreamReader.units' frames. */
static const Grammar TOP = {"SHDRSBLKFOOT", "expected a section or the footer",
                            "section or footer"};
/* SectionReader._advance's. */
static const Grammar BATCHES = {"BTCHSTRL", "expected a batch or trailer frame",
                                "batch or trailer"};
/* StreamReader._block's, after the SBLK frame. */
static const Grammar TABLE = {"STBL", "expected the shared block's section table",
                              "section table"};

static int tag_is(const Frame *f, const char *tag) { return memcmp(f->tag, tag, 4) == 0; }

/* The next frame's header (frame_header) and its tag, checked where `g` reads it. */
static int next_frame(Walk *w, const Grammar *g, Frame *f) {
    int r = frame_header(w, g->what, f);
    if (r) return r;
    for (const char *t = g->tags; *t; t += 4)
        if (tag_is(f, t)) return 0;
    char tag[REPR_BYTES(4)];
    return problem(w, f->at, "%s, found tag %s", g->expected, describe_tag(f->tag, tag));
}

/* framing.verify_frame of the frame `f` whose header frame_header just read, its payload
   the held bytes after it; the position moves past its payload. */
static int payload(Walk *w, const Frame *f) {
    const uint8_t *p = held(w, f->at + FRAME_HEADER);
    uint32_t crc;
    if ((Py_ssize_t)f->length > w->unlocked) {
        Py_BEGIN_ALLOW_THREADS
        crc = crc_update(crc_update(0, f->tag, 8), p, f->length);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc_update(crc_update(0, f->tag, 8), p, f->length);
    }
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

/* An 8-byte end: what it is, its magic, and the frame before it whose length it records. */
typedef struct {
    const char *what, *magic, *frame;
} End;

static const End SECTION_ENDS = {"section end", "SEND", "trailer"};
static const End BLOCK_ENDS = {"block end", "BEND", "table"};

/* section.parse_section_end and SectionReader._end's check of the length it records
   (for a block, block.check_block_end): the end at the position, after a frame with a
   `length`-byte payload; the position moves past it. */
static int unit_end(Walk *w, const End *e, uint32_t length) {
    Py_ssize_t at = w->pos;
    int r = need(w, SECTION_END, e->what);
    if (r) return r;
    const uint8_t *p = held(w, at);
    if (memcmp(p + 4, e->magic, 4) != 0) {
        char found[REPR_BYTES(4)];
        return problem(w, at + 4, "bad section end marker %s", bytes_repr(p + 4, 4, found));
    }
    uint32_t recorded = u32_at(p);
    if (recorded != FRAME_HEADER + length)
        return problem(w, at, "%s records a %u-byte %s, the %s frame has %u", e->what, recorded,
                       e->frame, e->frame, FRAME_HEADER + length);
    w->pos += SECTION_END;
    return 0;
}

#define NO_BATCHES "section has no batches" /* SectionReader._end's */

/* section.parse_section_header (read_topic_partition, "section header") of the payload
   of `f`: its key, and its topic as a new str. */
static int section_header(Walk *w, const Frame *f, Key *key, PyObject **topic) {
    Py_ssize_t base = f->at + FRAME_HEADER, left = f->length;
    const uint8_t *p = held(w, base);
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

/* StreamReader.units' order check: a unit whose first section has key `first` (topic
   `topic`), at `at`, comes strictly after the file's `previous` key, none before the
   first unit (its topic NULL: a key's topic is never empty). */
static int follows(Walk *w, const Key *first, PyObject *topic, Py_ssize_t at,
                   const Key *previous) {
    if (previous->topic != NULL && key_cmp(first, previous) <= 0)
        return problem(w, at, "section %U/%d is out of order", topic, first->partition);
    return 0;
}

/* A framed section whose header frame `head` was just read (StreamReader.units, then
   SectionReader._advance and _end as `skip` drives them): its unit tuple in `*unit`. */
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
        if ((r = next_frame(w, &BATCHES, &f))) goto done;
        if ((r = payload(w, &f))) goto done;
        if (tag_is(&f, "STRL")) break;
        if (batch_list_add(batches, &f) == NULL) {
            r = -1;
            goto done;
        }
    }
    if (PyList_GET_SIZE(batches) == 0) {
        r = problem(w, f.at, NO_BATCHES);
        goto done;
    }
    if ((r = unit_end(w, &SECTION_ENDS, f.length))) goto done;
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
    int r = next_frame(w, &TABLE, &table);
    if (r) return r;
    if ((r = payload(w, &table))) return r;
    if ((r = unit_end(w, &BLOCK_ENDS, table.length))) return r;
    Key first = {NULL, 0, 0}, last = {NULL, 0, 0};
    PyObject *first_topic = NULL;
    Py_ssize_t table_payload = table.at + FRAME_HEADER;
    r = table_keys(w, held(w, table_payload), table.length, table_payload, &first, &last,
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
    const uint8_t *p = held(w, 0);
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

/* The tail after a footer frame of `footer_length` payload bytes and CRC `footer_crc`,
   and the object's end (StreamReader._finish, footer.parse_tail). */
static int tail(Walk *w, uint32_t footer_length, uint32_t footer_crc) {
    Py_ssize_t at = w->pos;
    int r = need(w, FILE_TAIL, "file tail");
    if (r) return r;
    const uint8_t *p = held(w, at);
    uint32_t length = u32_at(p), crc = u32_at(p + 4), version = u32_at(p + 8);
    if (memcmp(p + 12, MAGIC, 8) != 0) {
        char magic[REPR_BYTES(8)];
        return problem(w, at + 12, "bad tail magic %s: not a compactor file",
                       bytes_repr(p + 12, 8, magic));
    }
    if (!supported(version)) return problem(w, at + 8, "unsupported format version %u", version);
    if (length != FRAME_HEADER + footer_length || crc != footer_crc)
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
        if ((r = next_frame(w, &TOP, &f))) return r;
        if ((r = payload(w, &f))) return r;
        if (tag_is(&f, "FOOT")) return tail(w, f.length, f.crc);
        PyObject *unit = NULL;
        r = tag_is(&f, "SHDR") ? section(w, &f, &previous, &unit)
                               : block(w, &f, &previous, &unit);
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
    Walk w = {.data = view.buf, .base = 0, .end = view.len, .size = view.len, .eof = 1,
              .unlocked = PY_SSIZE_T_MAX};
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

/* ---- Walker: the same walk, chunk by chunk, from the frame after the file header ---- */

/* What a Walker reads next. */
typedef enum {
    AT_TOP,         /* StreamReader.units' next frame */
    IN_SECTION,     /* SectionReader._advance's next frame */
    AT_SECTION_END, /* SectionReader._end's section end, after the trailer frame */
    AT_TABLE,       /* StreamReader._block's table frame, after the SBLK frame */
    AT_BLOCK_END,   /* _block's block end */
    AT_TAIL,        /* _finish's tail, after the footer frame */
    IN_PAYLOAD,     /* a long frame's payload, from `payload` */
    OVER,           /* the walk is over: the object's end checked, or a problem found */
    BROKEN,         /* a call raised (its events are lost) */
} Next;

typedef struct {
    PyObject_HEAD
    PyObject *object_name;
    Py_ssize_t size, position, unlocked;
    Next next;
    int busy; /* in a call, which may let the GIL go */
    Py_ssize_t batches; /* the framed section's, so far */
    /* The frame whose payload `payload` brings (IN_PAYLOAD): its header's bytes, its
       position. */
    uint8_t header[FRAME_HEADER];
    Py_ssize_t header_at;
    /* The frame whose unit's event waits for its end or tail: a trailer's, an SBLK's or
       the footer's; and a block's table frame. */
    Py_ssize_t frame_at;
    uint32_t frame_length, frame_crc;
    PyObject *frame_payload; /* bytes; an SBLK's, a view */
    Py_ssize_t table_at;
    uint32_t table_length;
    PyObject *table_payload;
} Walker;

/* A call's bytes: a chunk fed (`source` the object fed), or the payload handed to
   `payload` (`given`: `source` is it). */
typedef struct {
    Walk w;
    PyObject *source;
    int given;
    PyObject *events;
} Fed;

static int emit(Fed *c, PyObject *event) {
    if (event == NULL) return -1;
    int r = PyList_Append(c->events, event);
    Py_DECREF(event);
    return r;
}

static PyObject *payload_bytes(const Walk *w, const Frame *f) {
    return PyBytes_FromStringAndSize((const char *)held(w, f->at + FRAME_HEADER), f->length);
}

/* A batch payload as reader._Input.batch_payload gives it: the view handed to `payload`
   (a long payload, mapped or read on its own), or a copy of the fed bytes, as a read from
   the reader's read-ahead is (a reader's second-read memo keeps bytes only, and a shared
   block held ahead holds its own bytes, not the whole chunk it came in). */
static PyObject *payload_view(Fed *c, const Frame *f) {
    if (c->given) return Py_NewRef(c->source);
    return payload_bytes(&c->w, f);
}

/* The frame `f`, its payload checked, where the Walker is: its event, or what it holds
   for its unit's, and what it reads next. */
static int checked(Walker *self, Fed *c, const Frame *f) {
    Walk *w = &c->w;
    if (tag_is(f, "SHDR")) { /* StreamReader.units */
        Key key;
        PyObject *topic = NULL;
        int r = section_header(w, f, &key, &topic);
        if (r) return r;
        r = emit(c, Py_BuildValue("(snOi)", "section", f->at, topic, key.partition));
        Py_DECREF(topic);
        self->batches = 0;
        self->next = IN_SECTION;
        return r;
    }
    if (tag_is(f, "BTCH")) { /* SectionReader._advance */
        PyObject *view = payload_view(c, f);
        if (view == NULL) return -1;
        int r = emit(c, Py_BuildValue("(snkO)", "batch", f->at, (unsigned long)f->crc, view));
        Py_DECREF(view);
        self->batches++;
        return r;
    }
    if (tag_is(f, "STRL") && self->batches == 0) return problem(w, f->at, NO_BATCHES);
    if (tag_is(f, "STBL")) { /* StreamReader._block */
        Py_XSETREF(self->table_payload, payload_bytes(w, f));
        if (self->table_payload == NULL) return -1;
        self->table_at = f->at;
        self->table_length = f->length;
        self->next = AT_BLOCK_END;
        return 0;
    }
    /* STRL (SectionReader._end), SBLK (StreamReader._block), FOOT (_finish): held for
       the event made once their end or the tail is checked. */
    Py_XSETREF(self->frame_payload, tag_is(f, "SBLK") ? payload_view(c, f) : payload_bytes(w, f));
    if (self->frame_payload == NULL) return -1;
    self->frame_at = f->at;
    self->frame_length = f->length;
    self->frame_crc = f->crc;
    self->next = tag_is(f, "STRL") ? AT_SECTION_END : tag_is(f, "SBLK") ? AT_TABLE : AT_TAIL;
    return 0;
}

/* The frame `f` whose header next_frame just read: its payload checked if it is held
   (_Input.frame_payload, batch_payload); that of a batch or a block's (`batch`) longer
   than `unlocked` and not held is left to `payload`, the header consumed; else WAIT for
   the whole frame, the position back at its header. */
static int framed(Walker *self, Fed *c, const Frame *f, int batch) {
    Walk *w = &c->w;
    Py_ssize_t have = w->end - w->pos;
    if ((Py_ssize_t)f->length > have) {
        if (w->eof) {
            char tag[REPR_BYTES(4)];
            return problem(w, w->pos,
                           "truncated %s frame payload: the object ends after %zd of %u bytes",
                           describe_tag(f->tag, tag), have, f->length);
        }
        if (batch && (Py_ssize_t)f->length > self->unlocked) {
            memcpy(self->header, f->tag, FRAME_HEADER);
            self->header_at = f->at;
            self->next = IN_PAYLOAD;
            w->want = -(Py_ssize_t)f->length;
            return WAIT;
        }
        w->pos = f->at;
        w->want = FRAME_HEADER + (Py_ssize_t)f->length;
        return WAIT;
    }
    int r = payload(w, f);
    return r ? r : checked(self, c, f);
}

/* The next item at the position (a frame, an end, the tail), whole or not at all: 0
   with the position past it, WAIT with the position where the next chunk starts. */
static int item(Walker *self, Fed *c) {
    Walk *w = &c->w;
    Frame f;
    int r;
    switch (self->next) {
    case AT_TOP:
        if ((r = next_frame(w, &TOP, &f))) return r;
        return framed(self, c, &f, tag_is(&f, "SBLK"));
    case IN_SECTION:
        if ((r = next_frame(w, &BATCHES, &f))) return r;
        return framed(self, c, &f, tag_is(&f, "BTCH"));
    case AT_TABLE:
        if ((r = next_frame(w, &TABLE, &f))) return r;
        return framed(self, c, &f, 0);
    case AT_SECTION_END:
        if ((r = unit_end(w, &SECTION_ENDS, self->frame_length))) return r;
        r = emit(c, Py_BuildValue("(snnO)", "trailer", self->frame_at,
                                  (Py_ssize_t)self->frame_length, self->frame_payload));
        Py_CLEAR(self->frame_payload);
        self->next = AT_TOP;
        return r;
    case AT_BLOCK_END:
        if ((r = unit_end(w, &BLOCK_ENDS, self->table_length))) return r;
        r = emit(c, Py_BuildValue("(snOnnO)", "block", self->frame_at, self->frame_payload,
                                  self->table_at, (Py_ssize_t)self->table_length,
                                  self->table_payload));
        Py_CLEAR(self->frame_payload);
        Py_CLEAR(self->table_payload);
        self->next = AT_TOP;
        return r;
    case AT_TAIL:
        if ((r = tail(w, self->frame_length, self->frame_crc))) return r;
        r = emit(c, Py_BuildValue("(snnkO)", "footer", self->frame_at,
                                  (Py_ssize_t)self->frame_length, (unsigned long)self->frame_crc,
                                  self->frame_payload));
        Py_CLEAR(self->frame_payload);
        self->next = OVER;
        return r;
    default: /* IN_PAYLOAD, OVER, BROKEN: the calls never get here */
        PyErr_SetString(PyExc_SystemError, "_walk.Walker: no item to read");
        return -1;
    }
}

/* Items while there are whole ones, from a call whose first item `first` may already
   be read (`payload`'s frame): (consumed, events, want), with a problem as the last
   event. */
static PyObject *run(Walker *self, Fed *c, int first) {
    Py_ssize_t start = self->position;
    int r = first;
    while (r == 0 && self->next != OVER) {
        r = item(self, c);
        if (r == 0 || r == WAIT) self->position = c->w.pos;
    }
    Py_ssize_t want = r == WAIT ? c->w.want : 0;
    if (r == PROBLEM) {
        self->next = OVER;
        Py_CLEAR(self->frame_payload);
        Py_CLEAR(self->table_payload);
        r = emit(c, Py_BuildValue("(snO)", "error", c->w.at, c->w.reason));
    }
    Py_CLEAR(c->w.reason);
    if (r < 0) {
        self->next = BROKEN;
        return NULL;
    }
    return Py_BuildValue("(nOn)", self->position - start, c->events, want);
}

/* Whether the Walker can take a call: not while another runs (one may have let the GIL
   go), nor after one raised. */
static int ready(Walker *self) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "_walk.Walker: already in a call");
        return 0;
    }
    if (self->next == BROKEN) {
        PyErr_SetString(PyExc_RuntimeError, "_walk.Walker: an earlier call failed");
        return 0;
    }
    return 1;
}

static PyObject *walker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"object_name", "size", "start", "long", NULL};
    PyObject *object_name;
    Py_ssize_t size, start, unlocked;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Unnn", kwlist, &object_name, &size, &start,
                                     &unlocked))
        return NULL;
    if (size < 0 || start < 0 || start > size || unlocked < 0) {
        PyErr_Format(PyExc_ValueError,
                     "_walk.Walker: needs 0 <= start <= size and long >= 0, not start %zd, size "
                     "%zd, long %zd",
                     start, size, unlocked);
        return NULL;
    }
    Walker *self = (Walker *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->object_name = Py_NewRef(object_name);
    self->size = size;
    self->position = start;
    self->unlocked = unlocked;
    self->next = AT_TOP;
    return (PyObject *)self;
}

static int walker_traverse(Walker *self, visitproc visit, void *arg) {
    Py_VISIT(self->object_name);
    Py_VISIT(self->frame_payload);
    Py_VISIT(self->table_payload);
    return 0;
}

static int walker_clear(Walker *self) {
    Py_CLEAR(self->object_name);
    Py_CLEAR(self->frame_payload);
    Py_CLEAR(self->table_payload);
    return 0;
}

static void walker_dealloc(Walker *self) {
    PyObject_GC_UnTrack(self);
    walker_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(feed_doc,
             "feed(data, eof) -> (consumed, events, want)\n\n"
             "The whole items in `data` (a frame, a section or block end, the tail), whose\n"
             "first byte is the object's byte `position`, walked and checked in order:\n"
             "how many bytes they took, the events they made, and what the walk wants next.\n"
             "`want` > 0: the bytes from the new position the next feed must hold (the next\n"
             "item's); < 0: a long batch's or block's payload of -want bytes, whose header\n"
             "was consumed, for `payload`; 0: the walk is over (its last event the footer's\n"
             "or an error). `eof`: no bytes follow `data` (the source ended before the\n"
             "object's size): an item not held is then the read's truncation. A payload in\n"
             "an event is a read-only view of `data`, which must not change while it is\n"
             "held.");

static PyObject *walker_feed(Walker *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"", "eof", NULL};
    Py_buffer data;
    int eof;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*p", kwlist, &data, &eof)) return NULL;
    PyObject *out = NULL;
    if (!ready(self)) goto done;
    if (self->next == IN_PAYLOAD) {
        PyErr_Format(PyExc_RuntimeError,
                     "_walk.Walker: a %u-byte payload is pending: give it to payload()",
                     u32_at(self->header + 4));
        goto done;
    }
    PyObject *events = PyList_New(0);
    if (events == NULL) goto done;
    if (self->next == OVER) {
        out = Py_BuildValue("(nOn)", (Py_ssize_t)0, events, (Py_ssize_t)0);
    } else {
        Fed c = {.w = {.data = data.buf, .base = self->position,
                       .end = self->position + data.len, .size = self->size,
                       .pos = self->position, .eof = eof, .unlocked = self->unlocked},
                 .source = data.obj, .events = events};
        self->busy = 1;
        out = run(self, &c, 0);
        self->busy = 0;
    }
    Py_DECREF(events);
done:
    PyBuffer_Release(&data);
    return out;
}

PyDoc_STRVAR(payload_doc,
             "payload(view) -> (events, want)\n\n"
             "The payload of the long frame whose header the last feed consumed (want < 0),\n"
             "exactly -want bytes: its CRC checked, then the walk goes on as `feed`'s, with\n"
             "no bytes held (so `want` >= 0). The frame's event holds `view` itself.");

static PyObject *walker_payload(Walker *self, PyObject *view) {
    if (!ready(self)) return NULL;
    if (self->next != IN_PAYLOAD) {
        PyErr_SetString(PyExc_RuntimeError, "_walk.Walker: no payload is pending");
        return NULL;
    }
    Py_buffer b;
    if (PyObject_GetBuffer(view, &b, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = NULL, *events = NULL;
    Frame f = {self->header, u32_at(self->header + 4), u32_at(self->header + 8),
               self->header_at};
    if (b.len != (Py_ssize_t)f.length) {
        PyErr_Format(PyExc_ValueError,
                     "_walk.Walker: a payload of %zd bytes given for the pending %u-byte one",
                     b.len, f.length);
        goto done;
    }
    if ((events = PyList_New(0)) == NULL) goto done;
    Fed c = {.w = {.data = b.buf, .base = self->position, .end = self->position + b.len,
                   .size = self->size, .pos = self->position, .unlocked = self->unlocked},
             .source = view, .given = 1, .events = events};
    self->busy = 1;
    self->next = tag_is(&f, "BTCH") ? IN_SECTION : AT_TOP;
    int r = payload(&c.w, &f);
    if (r == 0) r = checked(self, &c, &f);
    if (r == 0) self->position = c.w.pos;
    PyObject *result = run(self, &c, r);
    self->busy = 0;
    if (result != NULL) {
        out = PyTuple_Pack(2, PyTuple_GET_ITEM(result, 1), PyTuple_GET_ITEM(result, 2));
        Py_DECREF(result);
    }
done:
    Py_XDECREF(events);
    PyBuffer_Release(&b);
    return out;
}

static PyMethodDef walker_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))walker_feed, METH_VARARGS | METH_KEYWORDS, feed_doc},
    {"payload", (PyCFunction)walker_payload, METH_O, payload_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef walker_members[] = {
    {"position", T_PYSSIZET, offsetof(Walker, position), READONLY,
     "The object's byte the walk reads next: the first of the next feed's data."},
    {"object_name", T_OBJECT, offsetof(Walker, object_name), READONLY,
     "The object walked (its FormatErrors', which their reasons never name)."},
    {NULL, 0, 0, 0, NULL},
};

PyDoc_STRVAR(walker_doc,
             "Walker(object_name, size, start, long)\n\n"
             "The walk of one version-3 object of `size` bytes from its byte `start` (the\n"
             "frame after the file header), on chunks of its stream (`feed`): the checks of\n"
             "`walk` but the section order and the tables' keys, reported as events:\n"
             "('section', position, topic, partition), ('batch', position, crc, payload),\n"
             "('trailer', position, length, payload) once its section end is checked,\n"
             "('block', position, payload, table_position, table_length, table_payload) once\n"
             "its block end is, ('footer', position, length, crc, payload) once the tail and\n"
             "the object's end are, or ('error', position, reason), the last. A batch's or\n"
             "block's payload longer than `long` bytes and not in a chunk is left to the\n"
             "caller to read (`payload`), and a CRC of a payload longer than `long` is\n"
             "computed without the GIL.");

static PyTypeObject WalkerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "compactor.fileformat._walk.Walker",
    .tp_basicsize = sizeof(Walker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = walker_doc,
    .tp_new = walker_new,
    .tp_dealloc = (destructor)walker_dealloc,
    .tp_traverse = (traverseproc)walker_traverse,
    .tp_clear = (inquiry)walker_clear,
    .tp_methods = walker_methods,
    .tp_members = walker_members,
};

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, walk_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_walk",
    "The frames of a version-3 file, walked and checked, compiled: a whole object's, or "
    "one object's stream chunk by chunk.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__walk(void) {
    if (PyType_Ready(&WalkerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
#ifdef COMPACTOR_ISAL_CRC
    const char *crc = "isal";
#else
    const char *crc = "zlib";
#endif
    if (PyModule_AddStringConstant(m, "CRC", crc) < 0 ||
        PyModule_AddObjectRef(m, "Walker", (PyObject *)&WalkerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
