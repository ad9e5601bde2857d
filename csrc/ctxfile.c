/*
 * Verifying reader for InferenceContext FlatBuffers files. See ctxfile.h.
 *
 * FlatBuffers layout facts used here (little-endian throughout):
 *   - the buffer starts with a uoffset (u32) to the root table;
 *   - a table starts with an soffset (i32); table_pos - soffset is its vtable;
 *   - a vtable is u16 vtable_size, u16 object_size, then one u16 per field:
 *     the field's offset inside the table, 0 when absent;
 *   - offset fields (strings, vectors, tables) hold a u32 relative to their
 *     own position;
 *   - vectors and strings start with a u32 element count; strings are
 *     followed by a NUL byte.
 * Every read below goes through a check that it lies inside the buffer; all
 * position arithmetic is done in uint64_t so it cannot wrap.
 */
#include "ctxfile.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PATH 64
#define DEFAULT_MAX_DEPTH 32u
#define DEFAULT_MAX_TABLES 1000000u
#define DEFAULT_MEMORY_BASE (16u * 1024u * 1024u)
#define DEFAULT_MEMORY_PER_BYTE 32u
/* FlatBuffers offsets are 32-bit; upstream caps buffers below 2 GiB. */
#define MAX_BUFFER ((uint64_t)0x7fffffff)

/* ---------------------------------------------------------------- arena */

typedef struct block {
    struct block *next;
    size_t used;
    size_t cap;
    /* data follows, 16-byte aligned (header padded below) */
} block;

#define BLOCK_HEADER ((sizeof(block) + 15u) & ~(size_t)15u)
#define BLOCK_MIN (64u * 1024u)

struct dlg_context {
    block *blocks;
    uint64_t memory;
    uint64_t tables;
    const dlg_inference_context *root;
};

static void free_blocks(block *b) {
    while (b) {
        block *next = b->next;
        free(b);
        b = next;
    }
}

/* ---------------------------------------------------------------- reader */

typedef struct path_entry {
    const char *name;
    int64_t index; /* -1: not a vector element */
} path_entry;

typedef struct reader {
    const uint8_t *buf;
    uint64_t len;
    dlg_limits lim;
    dlg_context *ctx;
    dlg_error *err;
    path_entry path[MAX_PATH];
    uint32_t depth;
} reader;

typedef struct table {
    uint64_t pos;
    uint64_t vt;
    uint32_t vt_size;
    uint32_t obj_size;
} table;

typedef int (*table_fn)(reader *r, uint64_t pos, void *out);

static uint16_t rd_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static int32_t rd_i32(const uint8_t *p) {
    uint32_t u = rd_u32(p);
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static float rd_f32(const uint8_t *p) {
    uint32_t u = rd_u32(p);
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static size_t append_path(const reader *r, char *out, size_t cap) {
    size_t n = (size_t)snprintf(out, cap, "InferenceContext");
    for (uint32_t i = 0; i < r->depth && n < cap; i++) {
        const path_entry *e = &r->path[i];
        int w;
        if (e->name && e->index >= 0)
            w = snprintf(out + n, cap - n, ".%s[%lld]", e->name, (long long)e->index);
        else if (e->name)
            w = snprintf(out + n, cap - n, ".%s", e->name);
        else
            w = snprintf(out + n, cap - n, "[%lld]", (long long)e->index);
        if (w < 0) break;
        n += (size_t)w;
    }
    return n < cap ? n : cap - 1;
}

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static int fail(reader *r, int code, uint64_t offset, const char *fmt, ...) {
    dlg_error *e = r->err;
    e->code = code;
    e->offset = offset;
    size_t n = append_path(r, e->message, sizeof e->message);
    if (n + 2 < sizeof e->message) {
        e->message[n++] = ':';
        e->message[n++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->message + n, sizeof e->message - n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int push(reader *r, const char *name, int64_t index) {
    if (r->depth >= r->lim.max_depth || r->depth >= MAX_PATH)
        return fail(r, DLG_ERR_LIMIT, 0, "nesting deeper than %u levels", r->lim.max_depth);
    r->path[r->depth].name = name;
    r->path[r->depth].index = index;
    r->depth++;
    return 0;
}

static void pop(reader *r) { r->depth--; }

static void *alloc(reader *r, size_t size, uint64_t count) {
    if (count == 0 || size == 0) return NULL;
    uint64_t bytes = (uint64_t)size * count; /* count <= 2^31, size small: no wrap */
    bytes = (bytes + 15u) & ~(uint64_t)15u;
    dlg_context *c = r->ctx;
    if (c->memory + bytes > r->lim.max_memory) {
        fail(r, DLG_ERR_LIMIT, 0,
             "decoding needs more than %llu bytes of memory (limit); the file is corrupt or hostile",
             (unsigned long long)r->lim.max_memory);
        return NULL;
    }
    block *b = c->blocks;
    if (!b || b->cap - b->used < bytes) {
        size_t cap = bytes > BLOCK_MIN ? (size_t)bytes : BLOCK_MIN;
        b = malloc(BLOCK_HEADER + cap);
        if (!b) {
            fail(r, DLG_ERR_NOMEM, 0, "out of memory allocating %zu bytes", cap);
            return NULL;
        }
        b->next = c->blocks;
        b->used = 0;
        b->cap = cap;
        c->blocks = b;
    }
    void *p = (uint8_t *)b + BLOCK_HEADER + b->used;
    b->used += (size_t)bytes;
    c->memory += bytes;
    memset(p, 0, (size_t)bytes);
    return p;
}

/* Is [pos, pos + size) inside the buffer? */
static int in_bounds(const reader *r, uint64_t pos, uint64_t size) {
    return pos <= r->len && size <= r->len - pos;
}

static int open_table(reader *r, uint64_t pos, table *t) {
    if (pos % 4)
        return fail(r, DLG_ERR_FORMAT, pos, "table offset %llu is not 4-byte aligned",
                    (unsigned long long)pos);
    if (!in_bounds(r, pos, 4))
        return fail(r, DLG_ERR_FORMAT, pos, "table at byte %llu is outside the %llu-byte buffer",
                    (unsigned long long)pos, (unsigned long long)r->len);
    if (++r->ctx->tables > r->lim.max_tables)
        return fail(r, DLG_ERR_LIMIT, pos, "more than %llu tables (limit); offsets are shared in a loop-like way",
                    (unsigned long long)r->lim.max_tables);
    int64_t vt = (int64_t)pos - (int64_t)rd_i32(r->buf + pos);
    if (vt < 0 || (uint64_t)vt > r->len || !in_bounds(r, (uint64_t)vt, 4))
        return fail(r, DLG_ERR_FORMAT, pos, "vtable of table at byte %llu points outside the buffer",
                    (unsigned long long)pos);
    if (vt % 2)
        return fail(r, DLG_ERR_FORMAT, (uint64_t)vt, "vtable at byte %lld is not 2-byte aligned",
                    (long long)vt);
    t->pos = pos;
    t->vt = (uint64_t)vt;
    t->vt_size = rd_u16(r->buf + vt);
    t->obj_size = rd_u16(r->buf + vt + 2);
    if (t->vt_size < 4 || t->vt_size % 2 || !in_bounds(r, t->vt, t->vt_size))
        return fail(r, DLG_ERR_FORMAT, t->vt, "vtable at byte %llu has invalid size %u",
                    (unsigned long long)t->vt, t->vt_size);
    if (t->obj_size < 4 || !in_bounds(r, pos, t->obj_size))
        return fail(r, DLG_ERR_FORMAT, pos, "table at byte %llu declares size %u past the end of the buffer",
                    (unsigned long long)pos, t->obj_size);
    return 0;
}

/* Locate field `id` of `size` bytes: 0 = absent, 1 = present at *at, -1 = error. */
static int field(reader *r, const table *t, unsigned id, unsigned size, uint64_t *at) {
    uint64_t slot = 4u + 2u * (uint64_t)id;
    if (slot + 2 > t->vt_size) return 0;
    uint32_t off = rd_u16(r->buf + t->vt + slot);
    if (off == 0) return 0;
    if (off < 4 || (uint64_t)off + size > t->obj_size)
        return fail(r, DLG_ERR_FORMAT, t->vt + slot,
                    "field offset %u is outside its %u-byte table", off, t->obj_size);
    *at = t->pos + off;
    if (*at % size)
        return fail(r, DLG_ERR_FORMAT, *at, "%u-byte field at byte %llu is misaligned", size,
                    (unsigned long long)*at);
    return 1;
}

/* Follow the uoffset stored at `at`. */
static int deref(reader *r, uint64_t at, uint64_t *target) {
    uint64_t v = at + rd_u32(r->buf + at);
    *target = 0;
    if (v >= r->len)
        return fail(r, DLG_ERR_FORMAT, at, "offset at byte %llu points to %llu, past the %llu-byte buffer",
                    (unsigned long long)at, (unsigned long long)v, (unsigned long long)r->len);
    *target = v;
    return 0;
}

static int utf8_valid(const uint8_t *s, uint64_t n, uint64_t *bad) {
    uint64_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        uint64_t need;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) { need = 1; cp = c & 0x1fu; }
        else if (c >= 0xe0 && c <= 0xef) { need = 2; cp = c & 0x0fu; }
        else if (c >= 0xf0 && c <= 0xf4) { need = 3; cp = c & 0x07u; }
        else { *bad = i; return 0; }
        if (n - i <= need) { *bad = i; return 0; }
        for (uint64_t k = 1; k <= need; k++) {
            uint8_t cc = s[i + k];
            if ((cc & 0xc0u) != 0x80u) { *bad = i; return 0; }
            cp = (cp << 6) | (cc & 0x3fu);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (need == 3 && (cp < 0x10000 || cp > 0x10ffff))) {
            *bad = i;
            return 0;
        }
        i += need + 1;
    }
    return 1;
}

static int string_at(reader *r, uint64_t pos, dlg_str *out) {
    if (pos % 4)
        return fail(r, DLG_ERR_FORMAT, pos, "string at byte %llu is not 4-byte aligned",
                    (unsigned long long)pos);
    if (!in_bounds(r, pos, 4))
        return fail(r, DLG_ERR_FORMAT, pos, "string at byte %llu is outside the buffer",
                    (unsigned long long)pos);
    uint64_t n = rd_u32(r->buf + pos);
    if (!in_bounds(r, pos + 4, n + 1))
        return fail(r, DLG_ERR_FORMAT, pos, "string of length %llu at byte %llu runs past the %llu-byte buffer",
                    (unsigned long long)n, (unsigned long long)pos, (unsigned long long)r->len);
    if (r->buf[pos + 4 + n] != 0)
        return fail(r, DLG_ERR_FORMAT, pos + 4 + n, "string at byte %llu is not NUL-terminated",
                    (unsigned long long)pos);
    uint64_t bad = 0;
    if (!utf8_valid(r->buf + pos + 4, n, &bad))
        return fail(r, DLG_ERR_FORMAT, pos + 4 + bad, "string at byte %llu is not valid UTF-8",
                    (unsigned long long)pos);
    out->ptr = (const char *)(r->buf + pos + 4);
    out->len = (uint32_t)n;
    return 0;
}

static int vector_at(reader *r, uint64_t pos, uint32_t elem_size, uint64_t *start, uint32_t *count) {
    if (pos % 4)
        return fail(r, DLG_ERR_FORMAT, pos, "vector at byte %llu is not 4-byte aligned",
                    (unsigned long long)pos);
    if (!in_bounds(r, pos, 4))
        return fail(r, DLG_ERR_FORMAT, pos, "vector at byte %llu is outside the buffer",
                    (unsigned long long)pos);
    uint64_t n = rd_u32(r->buf + pos);
    if (!in_bounds(r, pos + 4, n * elem_size))
        return fail(r, DLG_ERR_FORMAT, pos,
                    "vector of %llu elements of %u bytes at byte %llu runs past the %llu-byte buffer",
                    (unsigned long long)n, elem_size, (unsigned long long)pos, (unsigned long long)r->len);
    *start = pos + 4;
    *count = (uint32_t)n;
    return 0;
}

/* ------------------------------------------------------- field readers */

static int f_scalar(reader *r, const table *t, unsigned id, const char *name, unsigned size, uint64_t *at) {
    if (push(r, name, -1)) return -1;
    int present = field(r, t, id, size, at);
    if (present < 0) return -1;
    pop(r);
    return present;
}

static int f_i32(reader *r, const table *t, unsigned id, const char *name, int32_t *out) {
    uint64_t at = 0;
    int p = f_scalar(r, t, id, name, 4, &at);
    if (p < 0) return -1;
    *out = p ? rd_i32(r->buf + at) : 0;
    return 0;
}

static int f_u32(reader *r, const table *t, unsigned id, const char *name, uint32_t *out) {
    uint64_t at = 0;
    int p = f_scalar(r, t, id, name, 4, &at);
    if (p < 0) return -1;
    *out = p ? rd_u32(r->buf + at) : 0;
    return 0;
}

static int f_f32(reader *r, const table *t, unsigned id, const char *name, float *out) {
    uint64_t at = 0;
    int p = f_scalar(r, t, id, name, 4, &at);
    if (p < 0) return -1;
    *out = p ? rd_f32(r->buf + at) : 0.0f;
    return 0;
}

static int f_bool(reader *r, const table *t, unsigned id, const char *name, uint8_t *out) {
    uint64_t at = 0;
    int p = f_scalar(r, t, id, name, 1, &at);
    if (p < 0) return -1;
    uint8_t v = p ? r->buf[at] : 0;
    if (v > 1) {
        if (push(r, name, -1)) return -1;
        return fail(r, DLG_ERR_FORMAT, at, "bool field holds %u, not 0 or 1", v);
    }
    *out = v;
    return 0;
}

static int f_enum(reader *r, const table *t, unsigned id, const char *name, int8_t max, int8_t *out) {
    uint64_t at = 0;
    int p = f_scalar(r, t, id, name, 1, &at);
    if (p < 0) return -1;
    int8_t v = 0;
    if (p) memcpy(&v, r->buf + at, 1);
    if (v < 0 || v > max) {
        if (push(r, name, -1)) return -1;
        return fail(r, DLG_ERR_FORMAT, at, "enum value %d is not defined by the schema (0..%d)", v, max);
    }
    *out = v;
    return 0;
}

/* Offset-typed field: 0 absent, 1 present with *target set, -1 error. The
 * field name is pushed on the path on success and must be popped by the caller. */
static int f_offset(reader *r, const table *t, unsigned id, const char *name, uint64_t *target) {
    uint64_t at = 0;
    if (push(r, name, -1)) return -1;
    int p = field(r, t, id, 4, &at);
    if (p <= 0) {
        if (p < 0) return -1;
        pop(r);
        return 0;
    }
    if (deref(r, at, target)) return -1;
    return 1;
}

static int f_string(reader *r, const table *t, unsigned id, const char *name, dlg_str *out) {
    uint64_t target = 0;
    out->ptr = NULL;
    out->len = 0;
    int p = f_offset(r, t, id, name, &target);
    if (p <= 0) return p;
    if (string_at(r, target, out)) return -1;
    pop(r);
    return 0;
}

static int f_table(reader *r, const table *t, unsigned id, const char *name, size_t size, table_fn fn,
                   const void **out) {
    uint64_t target = 0;
    *out = NULL;
    int p = f_offset(r, t, id, name, &target);
    if (p <= 0) return p;
    void *obj = alloc(r, size, 1);
    if (!obj || fn(r, target, obj)) return -1;
    *out = obj;
    pop(r);
    return 0;
}

static int f_table_vec(reader *r, const table *t, unsigned id, const char *name, size_t size, table_fn fn,
                       const void **out, uint32_t *count) {
    uint64_t target = 0, start = 0;
    uint32_t n = 0;
    *out = NULL;
    *count = 0;
    int p = f_offset(r, t, id, name, &target);
    if (p <= 0) return p;
    if (vector_at(r, target, 4, &start, &n)) return -1;
    uint8_t *items = alloc(r, size, n);
    if (n && !items) return -1;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t elem = 0;
        r->path[r->depth - 1].index = i;
        if (deref(r, start + 4u * (uint64_t)i, &elem) || fn(r, elem, items + (size_t)i * size)) return -1;
    }
    *out = items;
    *count = n;
    pop(r);
    return 0;
}

static int f_string_vec(reader *r, const table *t, unsigned id, const char *name, const dlg_str **out,
                        uint32_t *count) {
    uint64_t target = 0, start = 0;
    uint32_t n = 0;
    *out = NULL;
    *count = 0;
    int p = f_offset(r, t, id, name, &target);
    if (p <= 0) return p;
    if (vector_at(r, target, 4, &start, &n)) return -1;
    dlg_str *items = alloc(r, sizeof *items, n);
    if (n && !items) return -1;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t elem = 0;
        r->path[r->depth - 1].index = i;
        if (deref(r, start + 4u * (uint64_t)i, &elem) || string_at(r, elem, &items[i])) return -1;
    }
    *out = items;
    *count = n;
    pop(r);
    return 0;
}

/* Vector of 4-byte scalars, decoded into the arena (is_float selects float). */
static int f_word_vec(reader *r, const table *t, unsigned id, const char *name, int is_float, void **out,
                      uint32_t *count) {
    uint64_t target = 0, start = 0;
    uint32_t n = 0;
    *out = NULL;
    *count = 0;
    int p = f_offset(r, t, id, name, &target);
    if (p <= 0) return p;
    if (vector_at(r, target, 4, &start, &n)) return -1;
    void *items = alloc(r, 4, n);
    if (n && !items) return -1;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *src = r->buf + start + 4u * (uint64_t)i;
        if (is_float)
            ((float *)items)[i] = rd_f32(src);
        else
            ((int32_t *)items)[i] = rd_i32(src);
    }
    *out = items;
    *count = n;
    pop(r);
    return 0;
}

static int f_bytes(reader *r, const table *t, unsigned id, const char *name, dlg_bytes *out) {
    uint64_t target = 0, start = 0;
    uint32_t n = 0;
    out->ptr = NULL;
    out->len = 0;
    int p = f_offset(r, t, id, name, &target);
    if (p <= 0) return p;
    if (vector_at(r, target, 1, &start, &n)) return -1;
    out->ptr = r->buf + start;
    out->len = n;
    pop(r);
    return 0;
}

/* ------------------------------------------------------ table readers */

#define BEGIN(type)                 \
    type *o = out;                  \
    table t;                        \
    if (open_table(r, pos, &t)) return -1
#define I32(f, id) if (f_i32(r, &t, id, #f, &o->f)) return -1
#define U32(f, id) if (f_u32(r, &t, id, #f, &o->f)) return -1
#define F32(f, id) if (f_f32(r, &t, id, #f, &o->f)) return -1
#define BOOL(f, id) if (f_bool(r, &t, id, #f, &o->f)) return -1
#define ENUM(f, id, max) if (f_enum(r, &t, id, #f, max, &o->f)) return -1
#define STR(f, id) if (f_string(r, &t, id, #f, &o->f)) return -1
#define BYTES(f, id) if (f_bytes(r, &t, id, #f, &o->f)) return -1
#define TABLE(f, id, type, fn)                                            \
    do {                                                                  \
        const void *p_;                                                   \
        if (f_table(r, &t, id, #f, sizeof(type), fn, &p_)) return -1;     \
        o->f = p_;                                                        \
    } while (0)
#define TABLES(f, id, type, fn)                                                      \
    do {                                                                             \
        const void *p_;                                                              \
        if (f_table_vec(r, &t, id, #f, sizeof(type), fn, &p_, &o->f##_count)) return -1; \
        o->f = p_;                                                                   \
    } while (0)
#define STRS(f, id) if (f_string_vec(r, &t, id, #f, &o->f, &o->f##_count)) return -1
#define WORDS(f, id, is_float)                                                  \
    do {                                                                        \
        void *p_;                                                               \
        if (f_word_vec(r, &t, id, #f, is_float, &p_, &o->f##_count)) return -1; \
        o->f = p_;                                                              \
    } while (0)

/* Largest value of each schema enum. */
#define MAX_ACCESS_TYPE 2
#define MAX_DATA_TYPE 2
#define MAX_MEMORY_TYPE 2
#define MAX_LINEAR_STORAGE 1
#define MAX_TENSOR_STORAGE 6
#define MAX_LAYOUT 4
#define MAX_PRECISION 2
#define MAX_TENSOR_TO_GRID 4
#define MAX_COMPILER_OPTION 5

/* Int4 is declared by the schema but no table refers to it, so it is never read. */

static int rd_int3(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_int3);
    I32(x, 0); I32(y, 1); I32(z, 2);
    return 0;
}

static int rd_int2(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_int2);
    I32(x, 0); I32(y, 1);
    return 0;
}

static int rd_int_value(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_int_value);
    STR(name, 0); I32(value, 1); BOOL(active, 2); U32(offset, 3);
    return 0;
}

static int rd_float_value(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_float_value);
    STR(name, 0); F32(value, 1); BOOL(active, 2); U32(offset, 3);
    return 0;
}

static int rd_half_value(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_half_value);
    STR(name, 0); F32(value, 1); BOOL(active, 2); BOOL(store_as_f32, 3); U32(offset, 4);
    return 0;
}

static int rd_state_variable(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_state_variable);
    STR(key, 0); STR(value, 1);
    return 0;
}

static int rd_gpu_object_descriptor(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_gpu_object_descriptor);
    TABLES(state_vars, 0, dlg_state_variable, rd_state_variable);
    ENUM(access_type, 1, MAX_ACCESS_TYPE);
    return 0;
}

static int rd_buffer_descriptor(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_buffer_descriptor);
    TABLE(base_obj, 0, dlg_gpu_object_descriptor, rd_gpu_object_descriptor);
    ENUM(element_type, 1, MAX_DATA_TYPE);
    I32(element_size, 2);
    ENUM(memory_type, 3, MAX_MEMORY_TYPE);
    STRS(attributes, 4);
    I32(size, 5);
    BYTES(data, 6);
    return 0;
}

static int rd_texture2d_descriptor(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_texture2d_descriptor);
    TABLE(base_obj, 0, dlg_gpu_object_descriptor, rd_gpu_object_descriptor);
    ENUM(element_type, 1, MAX_DATA_TYPE);
    BOOL(normalized, 2);
    ENUM(normalized_type, 3, MAX_DATA_TYPE);
    TABLE(size, 4, dlg_int2, rd_int2);
    BYTES(data, 5);
    return 0;
}

static int rd_tensor_linear_descriptor(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_tensor_linear_descriptor);
    TABLE(base_obj, 0, dlg_gpu_object_descriptor, rd_gpu_object_descriptor);
    ENUM(storage_type, 1, MAX_LINEAR_STORAGE);
    ENUM(element_type, 2, MAX_DATA_TYPE);
    ENUM(memory_type, 3, MAX_MEMORY_TYPE);
    I32(size, 4);
    BYTES(data, 5);
    return 0;
}

static int rd_bhwdc(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_bhwdc);
    I32(b, 0); I32(h, 1); I32(w, 2); I32(d, 3); I32(c, 4);
    return 0;
}

static int rd_tensor_descriptor(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_tensor_descriptor);
    TABLE(base_obj, 0, dlg_gpu_object_descriptor, rd_gpu_object_descriptor);
    ENUM(data_type, 1, MAX_DATA_TYPE);
    ENUM(storage_type, 2, MAX_TENSOR_STORAGE);
    ENUM(layout, 3, MAX_LAYOUT);
    TABLE(shape, 4, dlg_bhwdc, rd_bhwdc);
    BYTES(data, 5);
    return 0;
}

static int rd_buffer_map_value(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_buffer_descriptor_map_value);
    STR(key, 0);
    TABLE(value, 1, dlg_buffer_descriptor, rd_buffer_descriptor);
    return 0;
}

static int rd_texture2d_map_value(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_texture2d_descriptor_map_value);
    STR(key, 0);
    TABLE(value, 1, dlg_texture2d_descriptor, rd_texture2d_descriptor);
    return 0;
}

static int rd_tensor_linear_map_value(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_tensor_linear_descriptor_map_value);
    STR(key, 0);
    TABLE(value, 1, dlg_tensor_linear_descriptor, rd_tensor_linear_descriptor);
    return 0;
}

static int rd_tensor_map_value(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_tensor_descriptor_map_value);
    STR(key, 0);
    TABLE(value, 1, dlg_tensor_descriptor, rd_tensor_descriptor);
    return 0;
}

static int rd_arguments(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_arguments);
    TABLES(int_values, 0, dlg_int_value, rd_int_value);
    WORDS(shared_int4s, 1, 0);
    TABLES(float_values, 2, dlg_float_value, rd_float_value);
    WORDS(shared_float4s, 3, 1);
    TABLES(half_values, 4, dlg_half_value, rd_half_value);
    WORDS(shared_half4s, 5, 1);
    TABLES(buffer_refs, 6, dlg_buffer_descriptor_map_value, rd_buffer_map_value);
    TABLES(texture2d_refs, 7, dlg_texture2d_descriptor_map_value, rd_texture2d_map_value);
    TABLES(tensor_linear_refs, 8, dlg_tensor_linear_descriptor_map_value, rd_tensor_linear_map_value);
    TABLES(tensor_refs, 9, dlg_tensor_descriptor_map_value, rd_tensor_map_value);
    TABLES(buffer_objects, 10, dlg_buffer_descriptor_map_value, rd_buffer_map_value);
    TABLES(texture2d_objects, 11, dlg_texture2d_descriptor_map_value, rd_texture2d_map_value);
    TABLES(tensor_linear_objects, 12, dlg_tensor_linear_descriptor_map_value, rd_tensor_linear_map_value);
    TABLES(tensor_objects, 13, dlg_tensor_descriptor_map_value, rd_tensor_map_value);
    return 0;
}

static int rd_operation_def(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_operation_def);
    ENUM(precision, 0, MAX_PRECISION);
    TABLES(src_tensors, 1, dlg_tensor_descriptor, rd_tensor_descriptor);
    TABLES(dst_tensors, 2, dlg_tensor_descriptor, rd_tensor_descriptor);
    return 0;
}

static int rd_compiler_option(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_compiler_option);
    ENUM(option, 0, MAX_COMPILER_OPTION);
    return 0;
}

static int rd_gpu_operation(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_gpu_operation);
    TABLE(arguments, 0, dlg_arguments, rd_arguments);
    STR(code, 1);
    TABLE(work_group_size, 2, dlg_int3, rd_int3);
    TABLES(compiler_options, 3, dlg_compiler_option, rd_compiler_option);
    ENUM(tensor_to_grid, 4, MAX_TENSOR_TO_GRID);
    BOOL(elementwise, 5);
    BOOL(linkable, 6);
    BOOL(check_src_channels_size, 7);
    TABLE(definition, 8, dlg_operation_def, rd_operation_def);
    I32(grid_dimension, 9);
    TABLE(work_group_launch_order, 10, dlg_int3, rd_int3);
    TABLE(grid_size, 11, dlg_int3, rd_int3);
    STRS(src_tensors_names, 12);
    STRS(dst_tensors_names, 13);
    TABLE(work_groups_count, 14, dlg_int3, rd_int3);
    I32(linkable_count, 15);
    STR(elementwise_code, 16);
    return 0;
}

static int rd_tensor_desc_with_id(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_tensor_desc_with_id);
    TABLE(desc, 0, dlg_tensor_descriptor, rd_tensor_descriptor);
    I32(id, 1);
    return 0;
}

static int rd_cl_node(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_cl_node);
    TABLE(gpu_op, 0, dlg_gpu_operation, rd_gpu_operation);
    WORDS(input_ids, 1, 0);
    WORDS(output_ids, 2, 0);
    STR(name, 3);
    return 0;
}

static int rd_pair_of_value_ids(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_pair_of_value_ids);
    I32(first, 0); I32(second, 1);
    return 0;
}

static int rd_inference_context(reader *r, uint64_t pos, void *out) {
    BEGIN(dlg_inference_context);
    BOOL(need_flush, 0);
    BOOL(flush_periodically, 1);
    I32(flush_period, 2);
    BOOL(need_manual_release, 3);
    ENUM(precision, 4, MAX_PRECISION);
    ENUM(storage_type, 5, MAX_TENSOR_STORAGE);
    TABLES(nodes, 6, dlg_cl_node, rd_cl_node);
    TABLES(tensors, 7, dlg_tensor_desc_with_id, rd_tensor_desc_with_id);
    WORDS(input_ids, 8, 0);
    TABLES(variable_ids_and_refs, 9, dlg_pair_of_value_ids, rd_pair_of_value_ids);
    WORDS(output_ids, 10, 0);
    return 0;
}

/* ------------------------------------------------------------ public */

void dlg_default_limits(dlg_limits *out) {
    out->max_depth = DEFAULT_MAX_DEPTH;
    out->max_tables = DEFAULT_MAX_TABLES;
    out->max_memory = 0; /* derived from the buffer size at read time */
}

int dlg_context_read(const uint8_t *buf, size_t len, const dlg_limits *limits, dlg_context **out,
                     dlg_error *err) {
    reader r;
    memset(&r, 0, sizeof r);
    memset(err, 0, sizeof *err);
    *out = NULL;
    r.buf = buf;
    r.len = len;
    r.err = err;
    dlg_default_limits(&r.lim);
    if (limits) {
        if (limits->max_depth) r.lim.max_depth = limits->max_depth;
        if (limits->max_tables) r.lim.max_tables = limits->max_tables;
        if (limits->max_memory) r.lim.max_memory = limits->max_memory;
    }
    if (!r.lim.max_memory)
        r.lim.max_memory = DEFAULT_MEMORY_BASE + DEFAULT_MEMORY_PER_BYTE * (uint64_t)len;

    dlg_context scratch = {0};
    r.ctx = &scratch;
    /* fail() returns -1 (for the readers' early returns); this function returns the error code. */
    if (len == 0 || !buf) {
        fail(&r, DLG_ERR_FORMAT, 0, "the file is empty");
        return DLG_ERR_FORMAT;
    }
    if ((uint64_t)len > MAX_BUFFER) {
        fail(&r, DLG_ERR_FORMAT, 0, "buffer of %llu bytes is over the 2 GiB FlatBuffers limit",
             (unsigned long long)len);
        return DLG_ERR_FORMAT;
    }
    if (len < 12) {
        fail(&r, DLG_ERR_FORMAT, 0, "%zu bytes is too short for an InferenceContext (at least 12)", len);
        return DLG_ERR_FORMAT;
    }
    if (memcmp(buf + 4, "TFL3", 4) == 0) {
        fail(&r, DLG_ERR_FORMAT, 4,
             "this is a TensorFlow Lite model (file identifier TFL3), not an InferenceContext file");
        return DLG_ERR_FORMAT;
    }

    dlg_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        fail(&r, DLG_ERR_NOMEM, 0, "out of memory");
        return DLG_ERR_NOMEM;
    }
    r.ctx = ctx;
    dlg_inference_context *root = NULL;
    uint64_t root_pos = 0;
    if (deref(&r, 0, &root_pos) == 0) {
        root = alloc(&r, sizeof *root, 1);
        if (root && rd_inference_context(&r, root_pos, root) == 0) {
            ctx->root = root;
            *out = ctx;
            return DLG_OK;
        }
    }
    free_blocks(ctx->blocks);
    free(ctx);
    return err->code ? err->code : DLG_ERR_FORMAT;
}

const dlg_inference_context *dlg_context_root(const dlg_context *ctx) { return ctx ? ctx->root : NULL; }

uint64_t dlg_context_memory(const dlg_context *ctx) { return ctx ? ctx->memory : 0; }

uint64_t dlg_context_tables(const dlg_context *ctx) { return ctx ? ctx->tables : 0; }

void dlg_context_free(dlg_context *ctx) {
    if (!ctx) return;
    free_blocks(ctx->blocks);
    free(ctx);
}
