/*
 * Native reader for InferenceContext files (schemas/serialization.fbs).
 *
 * dlg_context_read() verifies a whole FlatBuffers buffer against the schema
 * (every offset, vtable, vector length, string and enum value checked to lie
 * inside the buffer and in range) and, in the same pass, builds a tree of the
 * plain C structs below. Strings and `data` byte vectors point into the
 * caller's buffer (zero-copy): the buffer must outlive the context. Scalar
 * vectors (ids, packed argument values) are decoded into the context's own
 * arena, so no unaligned or big-endian access ever happens.
 *
 * Conventions:
 *   - an absent string has ptr == NULL; strings are NUL-terminated in the
 *     buffer and valid UTF-8 (checked);
 *   - an absent sub-table is a NULL pointer;
 *   - a vector of tables is `items` + `<name>_count`; an absent vector is empty;
 *   - enums are int8_t and always hold a value the schema defines.
 *
 * This header is also the cffi cdef (delegate/_build_native.py strips the
 * preprocessor lines), so it stays within what cffi's parser accepts.
 */
#ifndef DLG_CTXFILE_H
#define DLG_CTXFILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct dlg_str {
    const char *ptr;
    uint32_t len;
} dlg_str;

typedef struct dlg_bytes {
    const uint8_t *ptr;
    uint32_t len;
} dlg_bytes;

typedef struct dlg_int4 { int32_t x; int32_t y; int32_t z; int32_t w; } dlg_int4;
typedef struct dlg_int3 { int32_t x; int32_t y; int32_t z; } dlg_int3;
typedef struct dlg_int2 { int32_t x; int32_t y; } dlg_int2;

typedef struct dlg_int_value {
    dlg_str name;
    int32_t value;
    uint8_t active;
    uint32_t offset;
} dlg_int_value;

typedef struct dlg_float_value {
    dlg_str name;
    float value;
    uint8_t active;
    uint32_t offset;
} dlg_float_value;

typedef struct dlg_half_value {
    dlg_str name;
    float value;
    uint8_t active;
    uint8_t store_as_f32;
    uint32_t offset;
} dlg_half_value;

typedef struct dlg_state_variable {
    dlg_str key;
    dlg_str value;
} dlg_state_variable;

typedef struct dlg_gpu_object_descriptor {
    const dlg_state_variable *state_vars;
    uint32_t state_vars_count;
    int8_t access_type;
} dlg_gpu_object_descriptor;

typedef struct dlg_buffer_descriptor {
    const dlg_gpu_object_descriptor *base_obj;
    int8_t element_type;
    int32_t element_size;
    int8_t memory_type;
    const dlg_str *attributes;
    uint32_t attributes_count;
    int32_t size;
    dlg_bytes data;
} dlg_buffer_descriptor;

typedef struct dlg_texture2d_descriptor {
    const dlg_gpu_object_descriptor *base_obj;
    int8_t element_type;
    uint8_t normalized;
    int8_t normalized_type;
    const dlg_int2 *size;
    dlg_bytes data;
} dlg_texture2d_descriptor;

typedef struct dlg_tensor_linear_descriptor {
    const dlg_gpu_object_descriptor *base_obj;
    int8_t storage_type;
    int8_t element_type;
    int8_t memory_type;
    int32_t size;
    dlg_bytes data;
} dlg_tensor_linear_descriptor;

typedef struct dlg_bhwdc { int32_t b; int32_t h; int32_t w; int32_t d; int32_t c; } dlg_bhwdc;

typedef struct dlg_tensor_descriptor {
    const dlg_gpu_object_descriptor *base_obj;
    int8_t data_type;
    int8_t storage_type;
    int8_t layout;
    const dlg_bhwdc *shape;
    dlg_bytes data;
} dlg_tensor_descriptor;

typedef struct dlg_buffer_descriptor_map_value {
    dlg_str key;
    const dlg_buffer_descriptor *value;
} dlg_buffer_descriptor_map_value;

typedef struct dlg_texture2d_descriptor_map_value {
    dlg_str key;
    const dlg_texture2d_descriptor *value;
} dlg_texture2d_descriptor_map_value;

typedef struct dlg_tensor_linear_descriptor_map_value {
    dlg_str key;
    const dlg_tensor_linear_descriptor *value;
} dlg_tensor_linear_descriptor_map_value;

typedef struct dlg_tensor_descriptor_map_value {
    dlg_str key;
    const dlg_tensor_descriptor *value;
} dlg_tensor_descriptor_map_value;

typedef struct dlg_arguments {
    const dlg_int_value *int_values;
    uint32_t int_values_count;
    const int32_t *shared_int4s;
    uint32_t shared_int4s_count;
    const dlg_float_value *float_values;
    uint32_t float_values_count;
    const float *shared_float4s;
    uint32_t shared_float4s_count;
    const dlg_half_value *half_values;
    uint32_t half_values_count;
    const float *shared_half4s;
    uint32_t shared_half4s_count;
    const dlg_buffer_descriptor_map_value *buffer_refs;
    uint32_t buffer_refs_count;
    const dlg_texture2d_descriptor_map_value *texture2d_refs;
    uint32_t texture2d_refs_count;
    const dlg_tensor_linear_descriptor_map_value *tensor_linear_refs;
    uint32_t tensor_linear_refs_count;
    const dlg_tensor_descriptor_map_value *tensor_refs;
    uint32_t tensor_refs_count;
    const dlg_buffer_descriptor_map_value *buffer_objects;
    uint32_t buffer_objects_count;
    const dlg_texture2d_descriptor_map_value *texture2d_objects;
    uint32_t texture2d_objects_count;
    const dlg_tensor_linear_descriptor_map_value *tensor_linear_objects;
    uint32_t tensor_linear_objects_count;
    const dlg_tensor_descriptor_map_value *tensor_objects;
    uint32_t tensor_objects_count;
} dlg_arguments;

typedef struct dlg_operation_def {
    int8_t precision;
    const dlg_tensor_descriptor *src_tensors;
    uint32_t src_tensors_count;
    const dlg_tensor_descriptor *dst_tensors;
    uint32_t dst_tensors_count;
} dlg_operation_def;

typedef struct dlg_compiler_option {
    int8_t option;
} dlg_compiler_option;

typedef struct dlg_gpu_operation {
    const dlg_arguments *arguments;
    dlg_str code;
    const dlg_int3 *work_group_size;
    const dlg_compiler_option *compiler_options;
    uint32_t compiler_options_count;
    int8_t tensor_to_grid;
    uint8_t elementwise;
    uint8_t linkable;
    uint8_t check_src_channels_size;
    const dlg_operation_def *definition;
    int32_t grid_dimension;
    const dlg_int3 *work_group_launch_order;
    const dlg_int3 *grid_size;
    const dlg_str *src_tensors_names;
    uint32_t src_tensors_names_count;
    const dlg_str *dst_tensors_names;
    uint32_t dst_tensors_names_count;
    const dlg_int3 *work_groups_count;
    int32_t linkable_count;
    dlg_str elementwise_code;
} dlg_gpu_operation;

typedef struct dlg_tensor_desc_with_id {
    const dlg_tensor_descriptor *desc;
    int32_t id;
} dlg_tensor_desc_with_id;

typedef struct dlg_cl_node {
    const dlg_gpu_operation *gpu_op;
    const int32_t *input_ids;
    uint32_t input_ids_count;
    const int32_t *output_ids;
    uint32_t output_ids_count;
    dlg_str name;
} dlg_cl_node;

typedef struct dlg_pair_of_value_ids {
    int32_t first;
    int32_t second;
} dlg_pair_of_value_ids;

typedef struct dlg_inference_context {
    uint8_t need_flush;
    uint8_t flush_periodically;
    int32_t flush_period;
    uint8_t need_manual_release;
    int8_t precision;
    int8_t storage_type;
    const dlg_cl_node *nodes;
    uint32_t nodes_count;
    const dlg_tensor_desc_with_id *tensors;
    uint32_t tensors_count;
    const int32_t *input_ids;
    uint32_t input_ids_count;
    const dlg_pair_of_value_ids *variable_ids_and_refs;
    uint32_t variable_ids_and_refs_count;
    const int32_t *output_ids;
    uint32_t output_ids_count;
} dlg_inference_context;

/* Resource limits of one read. A limit of 0 means "use the default". */
typedef struct dlg_limits {
    /* deepest nesting of tables and vectors (the schema itself needs < 16) */
    uint32_t max_depth;
    /* tables visited; bounds the work on files whose offsets are shared (a DAG) */
    uint64_t max_tables;
    /* bytes the decoded tree may take, on top of the file's own buffer */
    uint64_t max_memory;
} dlg_limits;

/* Status codes of dlg_context_read. */
enum {
    DLG_OK = 0,
    DLG_ERR_FORMAT = 1, /* the buffer is not a valid InferenceContext */
    DLG_ERR_LIMIT = 2,  /* valid so far, but over a resource limit */
    DLG_ERR_NOMEM = 3   /* the system allocator failed */
};

typedef struct dlg_error {
    int code;
    /* byte offset in the buffer where the problem was found */
    uint64_t offset;
    /* "<field path>: <what is wrong>", NUL-terminated */
    char message[384];
} dlg_error;

typedef struct dlg_context dlg_context;

/* Default limits; a memory limit of 0 in `limits` becomes 16 MiB + 32 bytes per file byte. */
void dlg_default_limits(dlg_limits *out);

/* Verify `buf` and build the context tree. On success returns DLG_OK and sets
 * *out (free it with dlg_context_free). On failure returns the error code,
 * fills *err and leaves *out NULL. Never reads outside buf[0..len). */
int dlg_context_read(const uint8_t *buf, size_t len, const dlg_limits *limits,
                     dlg_context **out, dlg_error *err);

const dlg_inference_context *dlg_context_root(const dlg_context *ctx);

/* Bytes of the decoded tree (the arena), and the number of tables visited. */
uint64_t dlg_context_memory(const dlg_context *ctx);
uint64_t dlg_context_tables(const dlg_context *ctx);

void dlg_context_free(dlg_context *ctx);

#endif
