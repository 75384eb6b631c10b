/* Read-only maps of byte ranges of open files, for LocalObjectStream.read_mapped.
 *
 * `map_range(fd, offset, length)` maps the bytes [offset, offset + length) of the file
 * that `fd` is open on (read only, shared with the page cache) and returns a `MappedRange`,
 * whose buffer is exactly those bytes. The map lasts as long as the object: it is
 * unmapped when the last reference goes, the last memoryview of it included. So a
 * payload read this way holds memory as a bytes object of the same bytes would, and no
 * longer.
 *
 * Unlike Python's mmap, a MappedRange holds no file descriptor (Python's duplicates the
 * one it is given): a job holds one descriptor per input stream however many payloads
 * it keeps. A range past the file's end as it is now (fstat) is a ValueError, so a file
 * cut short before it is mapped is read, and refused, by the caller's usual path; one cut
 * short in place after it is mapped ends the process with SIGBUS when the missing bytes
 * are read (LocalObjectStream.read_mapped: the store never changes a file in place).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    PyObject_HEAD
    void *base;       /* the map's first byte: page-aligned */
    size_t mapped;    /* the map's length */
    char *data;       /* the range's first byte, within the map */
    Py_ssize_t length;
} MappedRange;

static void mapped_range_dealloc(MappedRange *self) {
    if (self->base != NULL) munmap(self->base, self->mapped);
    PyObject_Free(self);
}

static int mapped_range_getbuffer(MappedRange *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->length, 1, flags);
}

static PyBufferProcs mapped_range_as_buffer = {
    (getbufferproc)mapped_range_getbuffer,
    NULL,
};

static PyTypeObject MappedRangeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "compactor.objectstore._filemap.MappedRange",
    .tp_basicsize = sizeof(MappedRange),
    .tp_dealloc = (destructor)mapped_range_dealloc,
    .tp_as_buffer = &mapped_range_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A read-only map of a byte range of a file: its buffer is the range's bytes.",
};

PyDoc_STRVAR(map_range_doc,
"map_range(fd, offset, length) -> MappedRange\n\n"
"The bytes [offset, offset + length) of the file open on `fd`, mapped read only; they\n"
"are unmapped when the object goes. ValueError for a negative offset, a length below 1,\n"
"or a range past the file's end; OSError if fstat or mmap fails.");

static PyObject *map_range(PyObject *module, PyObject *args) {
    int fd;
    long long offset;
    Py_ssize_t length;
    (void)module;
    if (!PyArg_ParseTuple(args, "iLn", &fd, &offset, &length)) return NULL;
    if (offset < 0 || length < 1) {
        PyErr_Format(PyExc_ValueError, "cannot map %zd bytes at %lld", length, offset);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    if ((long long)st.st_size < offset || (long long)st.st_size - offset < length) {
        PyErr_Format(PyExc_ValueError, "the file has %lld bytes, the range ends at %lld",
                     (long long)st.st_size, offset + (long long)length);
        return NULL;
    }
    long page = sysconf(_SC_PAGESIZE);
    long long base = offset - offset % page;
    size_t mapped = (size_t)(offset - base) + (size_t)length;
    void *addr;
    Py_BEGIN_ALLOW_THREADS
    addr = mmap(NULL, mapped, PROT_READ, MAP_SHARED, fd, (off_t)base);
    Py_END_ALLOW_THREADS
    if (addr == MAP_FAILED) return PyErr_SetFromErrno(PyExc_OSError);
    MappedRange *self = PyObject_New(MappedRange, &MappedRangeType);
    if (self == NULL) {
        munmap(addr, mapped);
        return NULL;
    }
    self->base = addr;
    self->mapped = mapped;
    self->data = (char *)addr + (offset - base);
    self->length = length;
    return (PyObject *)self;
}

static PyMethodDef methods[] = {
    {"map_range", map_range, METH_VARARGS, map_range_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_filemap",
    "Read-only maps of byte ranges of open files (LocalObjectStream.read_mapped).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__filemap(void) {
    if (PyType_Ready(&MappedRangeType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "MappedRange", (PyObject *)&MappedRangeType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
