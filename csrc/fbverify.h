/*
 * A schema-driven FlatBuffers verifier: walks a buffer from its root table and
 * checks every offset, vtable, vector, string, struct and union against a
 * schema described by the tables below (generated per schema, e.g. by
 * scripts/gen_model_verifier.py into tflmodel_verify.c).
 *
 * Also small bounds-checked readers for code that inspects a buffer after it
 * verified (csrc/tflmodel.c). Nothing here keeps global state.
 */
#ifndef DLG_FBVERIFY_H
#define DLG_FBVERIFY_H

#include <stddef.h>
#include <stdint.h>

enum fbv_kind {
    FBV_DEPRECATED = 0, /* takes a vtable slot, never verified (nor read by its users) */
    FBV_SCALAR,         /* size 1, 2, 4 or 8 */
    FBV_STRUCT,         /* size, align */
    FBV_STRING,
    FBV_TABLE,          /* ref: table index */
    FBV_UNION_TYPE,     /* the u8 type slot before an FBV_UNION field */
    FBV_UNION,          /* ref: union index; its type is the slot before it */
    FBV_VEC_SCALAR,     /* size: element size */
    FBV_VEC_STRUCT,     /* size, align of one element */
    FBV_VEC_STRING,
    FBV_VEC_TABLE       /* ref: table index */
};

typedef struct fbv_field {
    const char *name;
    uint8_t kind;
    uint8_t align;
    uint16_t size;
    uint16_t ref;
} fbv_field;

typedef struct fbv_table {
    const char *name;
    const fbv_field *fields; /* index = vtable slot */
    uint16_t count;
} fbv_table;

#define FBV_NO_TABLE 0xffffu

typedef struct fbv_union {
    const char *name;
    const uint16_t *members; /* table index of type value i (0 = NONE); FBV_NO_TABLE: not verifiable */
    uint16_t count;          /* type values 0 .. count - 1 are defined */
} fbv_union;

typedef struct fbv_schema {
    const fbv_table *tables;
    const fbv_union *unions;
    uint16_t root;
    const char *identifier; /* 4 characters, or NULL */
} fbv_schema;

#define FBV_MAX_DEPTH 32u
#define FBV_FIELD_MAX 256u
#define FBV_MESSAGE_MAX 256u

typedef struct fbv_error {
    uint64_t offset;              /* byte offset in the buffer where the problem was found */
    char field[FBV_FIELD_MAX];    /* path of the field, e.g. Model.subgraphs[0].operators[3].inputs */
    char message[FBV_MESSAGE_MAX]; /* what is wrong */
} fbv_error;

/* Path of the field under check, kept by the caller (no global state). */
typedef struct fbv_path {
    const char *root;
    const char *name[FBV_MAX_DEPTH];
    int64_t index[FBV_MAX_DEPTH]; /* -1: not a vector element */
    uint32_t depth;
} fbv_path;

/* Verify buf[0..len) against `schema`. Returns 0, or -1 with *err filled.
 * `max_visits` bounds the tables, strings and vectors followed (offsets may be
 * shared, making the buffer a DAG walked as a tree); 0 picks len / 4 + 64,
 * which no buffer without shared tables exceeds. */
int fbv_verify(const fbv_schema *schema, const uint8_t *buf, size_t len, uint64_t max_visits, fbv_error *err);

/* ---- readers for verified buffers (still bounds-checked, never trusting) */

uint16_t fbv_u16(const uint8_t *p);
uint32_t fbv_u32(const uint8_t *p);
uint64_t fbv_u64(const uint8_t *p);
int32_t fbv_i32(const uint8_t *p);
int64_t fbv_i64(const uint8_t *p);

/* Position of field `slot` of the table at `table` (size bytes), 0 when absent or out of bounds. */
uint64_t fbv_field_at(const uint8_t *buf, size_t len, uint64_t table, unsigned slot, unsigned size);

/* The table, vector or string an offset field points to, 0 when absent. */
uint64_t fbv_ref(const uint8_t *buf, size_t len, uint64_t table, unsigned slot);

/* Element count of the vector at `vec` (0 when vec is 0), first element at vec + 4. */
uint32_t fbv_count(const uint8_t *buf, size_t len, uint64_t vec);

/* Element i of a vector of tables or strings, 0 when out of range. */
uint64_t fbv_elem_ref(const uint8_t *buf, size_t len, uint64_t vec, uint32_t i);

/* Scalar fields with their schema defaults. */
int64_t fbv_int(const uint8_t *buf, size_t len, uint64_t table, unsigned slot, unsigned size, int64_t dflt);
uint64_t fbv_uint(const uint8_t *buf, size_t len, uint64_t table, unsigned slot, unsigned size, uint64_t dflt);

void fbv_path_push(fbv_path *p, const char *name, int64_t index);
void fbv_path_pop(fbv_path *p);

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
int fbv_fail(fbv_error *err, const fbv_path *path, uint64_t offset, const char *fmt, ...);

#endif
