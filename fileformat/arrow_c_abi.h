/* The Arrow C data interface's structs, as its specification gives them
 * (arrow/c/abi.h; https://arrow.apache.org/docs/format/CDataInterface.html): what
 * `__arrow_c_array__` exports, read by the compiled modules that take Arrow arrays
 * without pyarrow's objects (fileformat/_sections.c, worker/kernel/_keybuffer.c). */
#ifndef COMPACTOR_ARROW_C_ABI_H
#define COMPACTOR_ARROW_C_ABI_H

#include <stdint.h>

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};
struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};
#endif

#endif
