/*
 * Schema-driven FlatBuffers verifier. See fbverify.h.
 *
 * Layout facts (little-endian): the buffer starts with a uoffset (u32) to the
 * root table, then the optional 4-byte file identifier; a table starts with an
 * soffset (i32), table - soffset is its vtable: u16 vtable size, u16 table
 * size, one u16 per field slot (offset in the table, 0 when absent); offset
 * fields hold a u32 relative to their own position; vectors and strings start
 * with a u32 count, strings end with a NUL byte. All position arithmetic is in
 * uint64_t on values below 2^33, so it cannot wrap.
 */
#include "fbverify.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* FlatBuffers offsets are signed 32-bit: nothing past 2^31 - 1 is reachable. */
#define MAX_BUFFER ((uint64_t)0x7fffffff)

uint16_t fbv_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

uint32_t fbv_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

uint64_t fbv_u64(const uint8_t *p) { return (uint64_t)fbv_u32(p) | ((uint64_t)fbv_u32(p + 4) << 32); }

int32_t fbv_i32(const uint8_t *p) {
    uint32_t u = fbv_u32(p);
    int32_t v;
    memcpy(&v, &u, sizeof v); /* two's complement reinterpretation without UB */
    return v;
}

int64_t fbv_i64(const uint8_t *p) {
    uint64_t u = fbv_u64(p);
    int64_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* ------------------------------------------------------------ errors, path */

void fbv_path_push(fbv_path *p, const char *name, int64_t index) {
    if (p->depth < FBV_MAX_DEPTH) {
        p->name[p->depth] = name;
        p->index[p->depth] = index;
    }
    p->depth++; /* past the maximum only the text stops growing; pops stay paired */
}

void fbv_path_pop(fbv_path *p) {
    if (p->depth) p->depth--;
}

static void format_path(const fbv_path *p, char *out, size_t cap) {
    size_t n = (size_t)snprintf(out, cap, "%s", p && p->root ? p->root : "");
    uint32_t depth = p ? (p->depth < FBV_MAX_DEPTH ? p->depth : FBV_MAX_DEPTH) : 0;
    for (uint32_t i = 0; i < depth && n < cap; i++) {
        int w;
        if (p->name[i] && p->index[i] >= 0)
            w = snprintf(out + n, cap - n, ".%s[%lld]", p->name[i], (long long)p->index[i]);
        else if (p->name[i])
            w = snprintf(out + n, cap - n, ".%s", p->name[i]);
        else
            w = snprintf(out + n, cap - n, "[%lld]", (long long)p->index[i]);
        if (w < 0) break;
        n += (size_t)w;
    }
}

int fbv_fail(fbv_error *err, const fbv_path *path, uint64_t offset, const char *fmt, ...) {
    err->offset = offset;
    format_path(path, err->field, sizeof err->field);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* ------------------------------------------------------------ the walker */

typedef struct walker {
    const fbv_schema *schema;
    const uint8_t *buf;
    uint64_t len;
    uint64_t visits;
    uint64_t max_visits;
    fbv_path path;
    fbv_error *err;
} walker;

typedef struct table {
    uint64_t pos;
    uint64_t vt;
    uint32_t vt_size;
    uint32_t size;
} table;

#define FAIL(w, off, ...) fbv_fail((w)->err, &(w)->path, (off), __VA_ARGS__)
#define ULL(x) ((unsigned long long)(x))

static int in_bounds(const walker *w, uint64_t pos, uint64_t size) { return pos <= w->len && size <= w->len - pos; }

static int push(walker *w, const char *name, int64_t index) {
    if (w->path.depth >= FBV_MAX_DEPTH) return FAIL(w, 0, "nested deeper than %u levels", FBV_MAX_DEPTH);
    fbv_path_push(&w->path, name, index);
    return 0;
}

static int visit(walker *w, uint64_t pos) {
    if (++w->visits > w->max_visits)
        return FAIL(w, pos, "more than %llu tables, vectors and strings: offsets are shared in a loop-like way",
                    ULL(w->max_visits));
    return 0;
}

static int open_table(walker *w, uint64_t pos, table *t) {
    if (visit(w, pos)) return -1;
    if (pos % 4) return FAIL(w, pos, "table at byte %llu is not 4-byte aligned", ULL(pos));
    if (!in_bounds(w, pos, 4)) return FAIL(w, pos, "table at byte %llu is outside the buffer", ULL(pos));
    int64_t vt = (int64_t)pos - (int64_t)fbv_i32(w->buf + pos);
    if (vt < 0 || !in_bounds(w, (uint64_t)vt, 4))
        return FAIL(w, pos, "vtable of the table at byte %llu is outside the buffer", ULL(pos));
    if (vt % 2) return FAIL(w, (uint64_t)vt, "vtable at byte %lld is not 2-byte aligned", (long long)vt);
    t->pos = pos;
    t->vt = (uint64_t)vt;
    t->vt_size = fbv_u16(w->buf + t->vt);
    t->size = fbv_u16(w->buf + t->vt + 2);
    if (t->vt_size < 4 || t->vt_size % 2 || !in_bounds(w, t->vt, t->vt_size))
        return FAIL(w, t->vt, "vtable at byte %llu has an invalid size %u", ULL(t->vt), t->vt_size);
    if (t->size < 4 || !in_bounds(w, pos, t->size))
        return FAIL(w, pos, "table at byte %llu declares %u bytes, past the end of the buffer", ULL(pos), t->size);
    return 0;
}

/* Field `slot`: 0 absent, 1 present at *at, -1 error. */
static int field_at(walker *w, const table *t, unsigned slot, unsigned size, unsigned align, uint64_t *at) {
    uint64_t entry = 4u + 2u * (uint64_t)slot;
    if (entry + 2 > t->vt_size) return 0;
    uint32_t off = fbv_u16(w->buf + t->vt + entry);
    if (off == 0) return 0;
    if (off < 4 || (uint64_t)off + size > t->size)
        return FAIL(w, t->vt + entry, "field at offset %u does not fit its %u-byte table", off, t->size);
    *at = t->pos + off;
    if (align > 1 && *at % align)
        return FAIL(w, *at, "%u-byte field at byte %llu is not %u-byte aligned", size, ULL(*at), align);
    return 1;
}

/* Follow the uoffset stored at `at` (inside the buffer, 4-byte aligned). */
static int follow(walker *w, uint64_t at, uint64_t *target) {
    uint32_t off = fbv_u32(w->buf + at);
    if (off == 0 || off > MAX_BUFFER || at + off >= w->len)
        return FAIL(w, at, "offset %u at byte %llu points outside the %llu-byte buffer", off, ULL(at), ULL(w->len));
    *target = at + off;
    return 0;
}

static int check_string(walker *w, uint64_t pos) {
    if (visit(w, pos)) return -1;
    if (pos % 4) return FAIL(w, pos, "string at byte %llu is not 4-byte aligned", ULL(pos));
    if (!in_bounds(w, pos, 4)) return FAIL(w, pos, "string at byte %llu is outside the buffer", ULL(pos));
    uint64_t n = fbv_u32(w->buf + pos);
    if (!in_bounds(w, pos + 4, n + 1))
        return FAIL(w, pos, "string of %llu bytes at byte %llu runs past the %llu-byte buffer", ULL(n), ULL(pos),
                    ULL(w->len));
    if (w->buf[pos + 4 + n] != 0)
        return FAIL(w, pos + 4 + n, "string at byte %llu is not NUL-terminated", ULL(pos));
    return 0;
}

static int check_vector(walker *w, uint64_t pos, unsigned elem, unsigned align, uint32_t *count) {
    if (visit(w, pos)) return -1;
    if (pos % 4) return FAIL(w, pos, "vector at byte %llu is not 4-byte aligned", ULL(pos));
    if (!in_bounds(w, pos, 4)) return FAIL(w, pos, "vector at byte %llu is outside the buffer", ULL(pos));
    uint64_t n = fbv_u32(w->buf + pos);
    if (!in_bounds(w, pos + 4, n * elem))
        return FAIL(w, pos, "vector of %llu %u-byte elements at byte %llu runs past the %llu-byte buffer", ULL(n),
                    elem, ULL(pos), ULL(w->len));
    if (align > 4 && (pos + 4) % align)
        return FAIL(w, pos, "vector of %u-byte elements at byte %llu is not %u-byte aligned", elem, ULL(pos), align);
    *count = (uint32_t)n;
    return 0;
}

static int check_table(walker *w, uint16_t index, uint64_t pos);

/* An offset field's target: a table, a string or a vector of any kind. */
static int check_target(walker *w, const fbv_field *f, uint64_t target) {
    uint32_t n = 0;
    switch (f->kind) {
    case FBV_STRING:
        return check_string(w, target);
    case FBV_TABLE:
        return check_table(w, f->ref, target);
    case FBV_VEC_SCALAR:
    case FBV_VEC_STRUCT:
        return check_vector(w, target, f->size, f->align, &n);
    case FBV_VEC_STRING:
    case FBV_VEC_TABLE:
        if (check_vector(w, target, 4, 4, &n)) return -1;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t at = target + 4 + 4 * (uint64_t)i, elem = 0;
            w->path.index[w->path.depth - 1] = i;
            if (follow(w, at, &elem)) return -1;
            if (f->kind == FBV_VEC_STRING ? check_string(w, elem) : check_table(w, f->ref, elem)) return -1;
        }
        w->path.index[w->path.depth - 1] = -1;
        return 0;
    default:
        return FAIL(w, target, "internal: field kind %u is not an offset", f->kind);
    }
}

static int check_union(walker *w, const table *t, unsigned slot, const fbv_field *f) {
    uint64_t type_at = 0, value_at = 0, target = 0;
    int has_type = slot > 0 ? field_at(w, t, slot - 1, 1, 1, &type_at) : 0;
    if (has_type < 0) return -1;
    int has_value = field_at(w, t, slot, 4, 4, &value_at);
    if (has_value <= 0) return has_value; /* a type without a value reads as the union's defaults */
    unsigned type = has_type ? w->buf[type_at] : 0;
    if (type == 0) return FAIL(w, value_at, "union value at byte %llu has type NONE", ULL(value_at));
    if (follow(w, value_at, &target)) return -1;
    const fbv_union *u = &w->schema->unions[f->ref];
    /* A type this schema does not know (a newer one) is ignored by readers of this schema. */
    if (type >= u->count || u->members[type] == FBV_NO_TABLE) return 0;
    return check_table(w, u->members[type], target);
}

static int check_table(walker *w, uint16_t index, uint64_t pos) {
    const fbv_table *spec = &w->schema->tables[index];
    table t;
    if (open_table(w, pos, &t)) return -1;
    for (unsigned slot = 0; slot < spec->count; slot++) {
        const fbv_field *f = &spec->fields[slot];
        uint64_t at = 0, target = 0;
        int present = 0;
        if (f->kind == FBV_DEPRECATED) continue;
        if (push(w, f->name, -1)) return -1;
        switch (f->kind) {
        case FBV_SCALAR:
        case FBV_UNION_TYPE:
            present = field_at(w, &t, slot, f->size, f->size, &at);
            break;
        case FBV_STRUCT:
            present = field_at(w, &t, slot, f->size, f->align, &at);
            break;
        case FBV_UNION:
            present = check_union(w, &t, slot, f);
            break;
        default:
            present = field_at(w, &t, slot, 4, 4, &at);
            if (present > 0) present = follow(w, at, &target) || check_target(w, f, target) ? -1 : 1;
            break;
        }
        if (present < 0) return -1;
        fbv_path_pop(&w->path);
    }
    return 0;
}

int fbv_verify(const fbv_schema *schema, const uint8_t *buf, size_t len, uint64_t max_visits, fbv_error *err) {
    walker w;
    memset(&w, 0, sizeof w);
    memset(err, 0, sizeof *err);
    w.schema = schema;
    w.buf = buf;
    w.len = (uint64_t)len < MAX_BUFFER ? (uint64_t)len : MAX_BUFFER;
    w.max_visits = max_visits ? max_visits : w.len / 4 + 64;
    w.err = err;
    w.path.root = schema->tables[schema->root].name;
    uint64_t head = schema->identifier ? 8 : 4;
    if (!buf || w.len < head)
        return FAIL(&w, 0, "%llu bytes is too short for a FlatBuffer (the header alone is %llu bytes)", ULL(w.len),
                    ULL(head));
    if (schema->identifier && memcmp(buf + 4, schema->identifier, 4) != 0)
        return FAIL(&w, 4, "file identifier is not \"%.4s\"", schema->identifier);
    uint64_t root = 0;
    if (follow(&w, 0, &root)) return -1;
    return check_table(&w, schema->root, root);
}

/* ------------------------------------------------ readers of verified buffers */

static int bounded(size_t len, uint64_t pos, uint64_t size) { return pos <= len && size <= len - pos; }

uint64_t fbv_field_at(const uint8_t *buf, size_t len, uint64_t tpos, unsigned slot, unsigned size) {
    if (!tpos || !bounded(len, tpos, 4)) return 0;
    int64_t vt = (int64_t)tpos - (int64_t)fbv_i32(buf + tpos);
    if (vt < 0 || !bounded(len, (uint64_t)vt, 4)) return 0;
    uint32_t vt_size = fbv_u16(buf + vt), t_size = fbv_u16(buf + vt + 2);
    uint64_t entry = 4u + 2u * (uint64_t)slot;
    if (entry + 2 > vt_size || !bounded(len, (uint64_t)vt, vt_size)) return 0;
    uint32_t off = fbv_u16(buf + vt + entry);
    if (off == 0 || (uint64_t)off + size > t_size || !bounded(len, tpos + off, size)) return 0;
    return tpos + off;
}

uint64_t fbv_ref(const uint8_t *buf, size_t len, uint64_t tpos, unsigned slot) {
    uint64_t at = fbv_field_at(buf, len, tpos, slot, 4);
    if (!at) return 0;
    uint64_t target = at + fbv_u32(buf + at);
    return target > at && bounded(len, target, 4) ? target : 0;
}

uint32_t fbv_count(const uint8_t *buf, size_t len, uint64_t vec) {
    return vec && bounded(len, vec, 4) ? fbv_u32(buf + vec) : 0;
}

uint64_t fbv_elem_ref(const uint8_t *buf, size_t len, uint64_t vec, uint32_t i) {
    if (i >= fbv_count(buf, len, vec)) return 0;
    uint64_t at = vec + 4 + 4 * (uint64_t)i;
    if (!bounded(len, at, 4)) return 0;
    uint64_t target = at + fbv_u32(buf + at);
    return target > at && bounded(len, target, 4) ? target : 0;
}

int64_t fbv_int(const uint8_t *buf, size_t len, uint64_t tpos, unsigned slot, unsigned size, int64_t dflt) {
    uint64_t at = fbv_field_at(buf, len, tpos, slot, size);
    if (!at) return dflt;
    switch (size) {
    case 1: return (int8_t)buf[at];
    case 2: return (int16_t)fbv_u16(buf + at);
    case 4: return fbv_i32(buf + at);
    default: return fbv_i64(buf + at);
    }
}

uint64_t fbv_uint(const uint8_t *buf, size_t len, uint64_t tpos, unsigned slot, unsigned size, uint64_t dflt) {
    uint64_t at = fbv_field_at(buf, len, tpos, slot, size);
    if (!at) return dflt;
    switch (size) {
    case 1: return buf[at];
    case 2: return fbv_u16(buf + at);
    case 4: return fbv_u32(buf + at);
    default: return fbv_u64(buf + at);
    }
}
