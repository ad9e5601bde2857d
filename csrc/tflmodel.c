/*
 * TFLite model verifier: the FlatBuffer's structure (fbverify.c with the
 * generated tables of tflmodel_verify.c), then the references and sizes that
 * TFLite's InterpreterBuilder and kernels use without (always) checking them.
 * Each check below names what TFLite would do with the bad value.
 */
#include "tflmodel.h"

#include <stdlib.h>
#include <string.h>

#include "tflmodel_verify.h"

/* The only schema version TFLite's InterpreterBuilder accepts. */
#define SCHEMA_VERSION 3u
/* Bytes one tensor may need: past any device, and far from uint64_t overflow. */
#define MAX_TENSOR_BYTES ((uint64_t)1 << 40)
#define MAX_RANK 64u

typedef struct call {
    uint32_t from, to, op;
    uint64_t at;
} call;

typedef struct model {
    const uint8_t *buf;
    size_t len;
    fbv_path path;
    fbv_error *err;
    uint64_t buffers, subgraphs, opcodes;
    uint32_t n_buffers, n_subgraphs, n_opcodes;
    call *calls;
    size_t n_calls, cap_calls;
    int nomem;
} model;

#define FAIL(m, off, ...) fbv_fail((m)->err, &(m)->path, (off), __VA_ARGS__)
#define ULL(x) ((unsigned long long)(x))
#define REF(m, t, slot) fbv_ref((m)->buf, (m)->len, (t), (slot))
#define COUNT(m, v) fbv_count((m)->buf, (m)->len, (v))
#define ELEM(m, v, i) fbv_elem_ref((m)->buf, (m)->len, (v), (i))
#define INT(m, t, slot, size, d) fbv_int((m)->buf, (m)->len, (t), (slot), (size), (d))
#define UINT(m, t, slot, size, d) fbv_uint((m)->buf, (m)->len, (t), (slot), (size), (d))
#define AT(m, t, slot, size) fbv_field_at((m)->buf, (m)->len, (t), (slot), (size))

/* Element i of a verified vector of 4-byte scalars, and its position. */
static int32_t vec_i32(const model *m, uint64_t vec, uint32_t i) { return fbv_i32(m->buf + vec + 4 + 4 * (uint64_t)i); }
static uint64_t vec_at(uint64_t vec, uint32_t i) { return vec + 4 + 4 * (uint64_t)i; }

/* Where to point an error on table t's field: the field, else the table. */
static uint64_t where(const model *m, uint64_t t, unsigned slot, unsigned size) {
    uint64_t at = AT(m, t, slot, size);
    return at ? at : t;
}

/* Bits of one element of a TensorType; 0 for the types without a fixed size. */
static unsigned elem_bits(int64_t type) {
    switch (type) {
    case TFL_TensorType_INT2: return 2;
    case TFL_TensorType_INT4:
    case TFL_TensorType_UINT4: return 4;
    case TFL_TensorType_UINT8:
    case TFL_TensorType_INT8:
    case TFL_TensorType_BOOL:
    case TFL_TensorType_FLOAT8_E4M3FN:
    case TFL_TensorType_FLOAT8_E5M2: return 8;
    case TFL_TensorType_FLOAT16:
    case TFL_TensorType_INT16:
    case TFL_TensorType_UINT16:
    case TFL_TensorType_BFLOAT16: return 16;
    case TFL_TensorType_FLOAT32:
    case TFL_TensorType_INT32:
    case TFL_TensorType_UINT32: return 32;
    case TFL_TensorType_INT64:
    case TFL_TensorType_UINT64:
    case TFL_TensorType_FLOAT64:
    case TFL_TensorType_COMPLEX64: return 64;
    case TFL_TensorType_COMPLEX128: return 128;
    default: return 0; /* STRING, RESOURCE, VARIANT */
    }
}

/* Is [offset, offset + size) of an external (>2 GB format) region inside the file? */
static int external_ok(const model *m, uint64_t offset, uint64_t size) {
    return offset <= (uint64_t)m->len && size <= (uint64_t)m->len - offset;
}

/* The bytes of buffer b: *data (0 when none) and *size. */
static void buffer_bytes(const model *m, uint64_t b, uint64_t *data, uint64_t *size) {
    uint64_t vec = REF(m, b, TFL_Buffer_data);
    uint64_t offset = UINT(m, b, TFL_Buffer_offset, 8, 0);
    *data = 0;
    *size = 0;
    if (COUNT(m, vec)) {
        *data = vec + 4;
        *size = COUNT(m, vec);
    } else if (offset > 1) { /* offsets 0 and 1 mean "no external data" */
        *data = offset;
        *size = UINT(m, b, TFL_Buffer_size, 8, 0);
    }
}

static int check_buffers(model *m) {
    for (uint32_t i = 0; i < m->n_buffers; i++) {
        uint64_t b = ELEM(m, m->buffers, i);
        fbv_path_push(&m->path, "buffers", i);
        uint64_t offset = UINT(m, b, TFL_Buffer_offset, 8, 0);
        uint64_t size = UINT(m, b, TFL_Buffer_size, 8, 0);
        if (offset > 1 && !external_ok(m, offset, size))
            return FAIL(m, where(m, b, TFL_Buffer_offset, 8),
                        "external data at offset %llu, %llu bytes, lies outside the %llu-byte file", ULL(offset),
                        ULL(size), ULL(m->len));
        fbv_path_pop(&m->path);
    }
    return 0;
}

/* A string tensor's buffer: i32 count n, n + 1 i32 offsets into the buffer, then the bytes. */
static int check_string_buffer(model *m, uint64_t data, uint64_t size, uint64_t at) {
    if (size < 4) return FAIL(m, at, "string tensor data of %llu bytes lacks its count", ULL(size));
    int32_t n = fbv_i32(m->buf + data);
    if (n < 0 || (uint64_t)(n + 2ull) * 4 > size)
        return FAIL(m, at, "string tensor data of %llu bytes cannot hold %d strings", ULL(size), n);
    uint64_t prev = (uint64_t)(n + 2ull) * 4;
    for (int32_t i = 0; i <= n; i++) {
        int32_t off = fbv_i32(m->buf + data + 4 + 4 * (uint64_t)i);
        if (off < 0 || (uint64_t)off < prev || (uint64_t)off > size)
            return FAIL(m, at, "string tensor offset %d of entry %d is out of order or past the %llu-byte data", off,
                        i, ULL(size));
        prev = (uint64_t)off;
    }
    return 0;
}

static int check_sparsity(model *m, uint64_t sp, uint32_t rank) {
    uint64_t order = REF(m, sp, TFL_SparsityParameters_traversal_order);
    uint64_t block = REF(m, sp, TFL_SparsityParameters_block_map);
    uint64_t dims = REF(m, sp, TFL_SparsityParameters_dim_metadata);
    uint32_t n = COUNT(m, order), k = COUNT(m, block);
    fbv_path_push(&m->path, "sparsity", -1);
    /* TFLite's densification indexes its per-dimension arrays with these. */
    if (n != COUNT(m, dims) || (uint64_t)rank + k != n)
        return FAIL(m, sp, "traversal_order has %u entries, dim_metadata %u, block_map %u for a rank-%u tensor", n,
                    COUNT(m, dims), k, rank);
    for (uint32_t i = 0; i < n; i++) {
        int32_t v = vec_i32(m, order, i);
        if (v < 0 || (uint32_t)v >= n) return FAIL(m, vec_at(order, i), "traversal_order[%u] is %d, not in 0..%u", i, v, n - 1);
    }
    for (uint32_t i = 0; i < k; i++) {
        int32_t v = vec_i32(m, block, i);
        if (v < 0 || (uint32_t)v >= rank)
            return FAIL(m, vec_at(block, i), "block_map[%u] is %d; the tensor has rank %u", i, v, rank);
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t d = ELEM(m, dims, i);
        int64_t format = INT(m, d, TFL_DimensionMetadata_format, 1, 0);
        fbv_path_push(&m->path, "dim_metadata", i);
        if (format < 0 || format > TFL_DimensionType__MAX)
            return FAIL(m, where(m, d, TFL_DimensionMetadata_format, 1), "format %lld is not a DimensionType",
                        (long long)format);
        if (format == TFL_DimensionType_SPARSE_CSR &&
            (!REF(m, d, TFL_DimensionMetadata_array_segments) || !REF(m, d, TFL_DimensionMetadata_array_indices)))
            return FAIL(m, d, "a SPARSE_CSR dimension needs array_segments and array_indices");
        if (format == TFL_DimensionType_DENSE && INT(m, d, TFL_DimensionMetadata_dense_size, 4, 0) < 0)
            return FAIL(m, where(m, d, TFL_DimensionMetadata_dense_size, 4), "dense_size is negative");
        fbv_path_pop(&m->path);
    }
    fbv_path_pop(&m->path);
    return 0;
}

static int check_tensor(model *m, uint64_t t) {
    uint64_t shape = REF(m, t, TFL_Tensor_shape);
    uint32_t rank = COUNT(m, shape);
    int64_t type = INT(m, t, TFL_Tensor_type, 1, 0);
    if (type < 0 || type > TFL_TensorType__MAX)
        return FAIL(m, where(m, t, TFL_Tensor_type, 1), "type %lld is not a TensorType", (long long)type);
    if (rank > MAX_RANK) return FAIL(m, shape, "rank %u is over %u", rank, MAX_RANK);
    unsigned bits = elem_bits(type);
    uint64_t elements = 1, limit = MAX_TENSOR_BYTES * 8 / (bits ? bits : 8);
    for (uint32_t i = 0; i < rank; i++) {
        int32_t d = vec_i32(m, shape, i);
        fbv_path_push(&m->path, "shape", i);
        if (d < 0) return FAIL(m, vec_at(shape, i), "dimension is %d; only shape_signature may hold -1", d);
        if (d && elements > limit / (uint64_t)d)
            return FAIL(m, vec_at(shape, i), "the shape needs more than %llu bytes", ULL(MAX_TENSOR_BYTES));
        elements *= (uint64_t)d;
        fbv_path_pop(&m->path);
    }
    uint64_t sig = REF(m, t, TFL_Tensor_shape_signature);
    for (uint32_t i = 0; i < COUNT(m, sig); i++) {
        if (vec_i32(m, sig, i) < -1) {
            fbv_path_push(&m->path, "shape_signature", i);
            return FAIL(m, vec_at(sig, i), "dimension is %d; -1 (unknown) is the only negative one",
                        vec_i32(m, sig, i));
        }
    }
    uint32_t index = (uint32_t)UINT(m, t, TFL_Tensor_buffer, 4, 0);
    if (index >= m->n_buffers)
        return FAIL(m, where(m, t, TFL_Tensor_buffer, 4), "buffer %u is past the model's %u buffers", index,
                    m->n_buffers);
    uint64_t data = 0, size = 0;
    buffer_bytes(m, ELEM(m, m->buffers, index), &data, &size);
    uint64_t sparsity = REF(m, t, TFL_Tensor_sparsity);
    if (sparsity) return check_sparsity(m, sparsity, rank);
    if (!data) return 0;
    uint64_t at = where(m, t, TFL_Tensor_buffer, 4);
    if (type == TFL_TensorType_STRING) return check_string_buffer(m, data, size, at);
    /* TFLite's kernels read shape x element size bytes from constant data (sub-byte types are packed in
     * ways that vary between versions: left to TFLite). */
    if (bits >= 8 && size != elements * (bits / 8))
        return FAIL(m, at, "buffer %u holds %llu bytes; the %s shape of %llu elements of %u bytes needs %llu", index,
                    ULL(size), rank ? "tensor's" : "scalar", ULL(elements), bits / 8, ULL(elements * (bits / 8)));
    uint64_t q = REF(m, t, TFL_Tensor_quantization);
    uint32_t scales = COUNT(m, REF(m, q, TFL_QuantizationParameters_scale));
    if (scales > 1) {
        /* Per-channel kernels index the scales by the channel of quantized_dimension. */
        int64_t qd = INT(m, q, TFL_QuantizationParameters_quantized_dimension, 4, 0);
        if (qd < 0 || qd >= rank || (uint32_t)vec_i32(m, shape, (uint32_t)qd) != scales)
            return FAIL(m, where(m, q, TFL_QuantizationParameters_quantized_dimension, 4),
                        "%u scales do not match dimension %lld of the rank-%u shape", scales, (long long)qd, rank);
    }
    return 0;
}

static int tensor_index(model *m, uint64_t vec, uint32_t i, uint32_t n_tensors, int allow_optional,
                        const char *name) {
    int32_t v = vec_i32(m, vec, i);
    if ((v == -1 && allow_optional) || (v >= 0 && (uint32_t)v < n_tensors)) return 0;
    fbv_path_push(&m->path, name, i);
    return FAIL(m, vec_at(vec, i), "tensor index %d is not in 0..%lld%s", v, (long long)n_tensors - 1,
                allow_optional ? " (or -1, an omitted optional input)" : "");
}

static int tensor_list(model *m, uint64_t t, unsigned slot, const char *name, uint32_t n_tensors, int optional) {
    uint64_t vec = REF(m, t, slot);
    for (uint32_t i = 0; i < COUNT(m, vec); i++)
        if (tensor_index(m, vec, i, n_tensors, optional, name)) return -1;
    return 0;
}

static int add_call(model *m, uint32_t from, uint32_t op, int64_t to, uint64_t at, const char *name) {
    if (to < 0 || to >= m->n_subgraphs) {
        fbv_path_push(&m->path, name, -1);
        return FAIL(m, at, "subgraph %lld is not in 0..%u", (long long)to, m->n_subgraphs - 1);
    }
    if (m->n_calls == m->cap_calls) {
        size_t cap = m->cap_calls ? 2 * m->cap_calls : 16;
        call *grown = realloc(m->calls, cap * sizeof *grown);
        if (!grown) {
            m->nomem = 1;
            return FAIL(m, at, "out of memory");
        }
        m->calls = grown;
        m->cap_calls = cap;
    }
    m->calls[m->n_calls++] = (call){from, (uint32_t)to, op, at};
    return 0;
}

/* The options TFLite reads for an operator: the union's table when its type is `type`, else none (defaults). */
static uint64_t options(const model *m, uint64_t op, unsigned type_slot, unsigned value_slot, uint64_t type) {
    return UINT(m, op, type_slot, 1, 0) == type ? REF(m, op, value_slot) : 0;
}

static int positive(model *m, uint64_t op, uint64_t opts, const char *table, unsigned slot, const char *name,
                    int32_t dflt) {
    int64_t v = INT(m, opts, slot, 4, dflt);
    if (v > 0) return 0;
    /* Kernels divide by strides and dilations and loop over filter sizes. */
    if (opts) fbv_path_push(&m->path, "builtin_options", -1); /* else the error is the operator's */
    return FAIL(m, opts ? where(m, opts, slot, 4) : op, "%s.%s is %lld%s; TFLite needs it positive", table, name,
                (long long)v, opts ? "" : " (the operator has no options of that type)");
}

#define POSITIVE(T, F, D) positive(m, op, opts, #T, TFL_##T##_##F, #F, D)
#define OPTS(T) options(m, op, TFL_Operator_builtin_options_type, TFL_Operator_builtin_options, TFL_BuiltinOptions_##T)
#define OPTS2(T) \
    options(m, op, TFL_Operator_builtin_options_2_type, TFL_Operator_builtin_options_2, TFL_BuiltinOptions2_##T)
#define CALLS(T, F) \
    add_call(m, s, k, INT(m, opts, TFL_##T##_##F, 4, 0), opts ? where(m, opts, TFL_##T##_##F, 4) : op, #F)

static int check_options(model *m, uint32_t s, uint32_t k, uint64_t op, int64_t code) {
    uint64_t opts = 0;
    switch (code) {
    case TFL_BuiltinOperator_CONV_2D:
        opts = OPTS(Conv2DOptions);
        return POSITIVE(Conv2DOptions, stride_w, 0) || POSITIVE(Conv2DOptions, stride_h, 0) ||
               POSITIVE(Conv2DOptions, dilation_w_factor, 1) || POSITIVE(Conv2DOptions, dilation_h_factor, 1);
    case TFL_BuiltinOperator_DEPTHWISE_CONV_2D:
        opts = OPTS(DepthwiseConv2DOptions);
        return POSITIVE(DepthwiseConv2DOptions, stride_w, 0) || POSITIVE(DepthwiseConv2DOptions, stride_h, 0) ||
               POSITIVE(DepthwiseConv2DOptions, dilation_w_factor, 1) ||
               POSITIVE(DepthwiseConv2DOptions, dilation_h_factor, 1);
    case TFL_BuiltinOperator_TRANSPOSE_CONV:
        opts = OPTS(TransposeConvOptions);
        return POSITIVE(TransposeConvOptions, stride_w, 0) || POSITIVE(TransposeConvOptions, stride_h, 0);
    case TFL_BuiltinOperator_AVERAGE_POOL_2D:
    case TFL_BuiltinOperator_MAX_POOL_2D:
    case TFL_BuiltinOperator_L2_POOL_2D:
        opts = OPTS(Pool2DOptions);
        return POSITIVE(Pool2DOptions, stride_w, 0) || POSITIVE(Pool2DOptions, stride_h, 0) ||
               POSITIVE(Pool2DOptions, filter_width, 0) || POSITIVE(Pool2DOptions, filter_height, 0);
    case TFL_BuiltinOperator_CONV_3D:
    case TFL_BuiltinOperator_CONV_3D_TRANSPOSE:
        opts = OPTS(Conv3DOptions);
        return POSITIVE(Conv3DOptions, stride_d, 0) || POSITIVE(Conv3DOptions, stride_w, 0) ||
               POSITIVE(Conv3DOptions, stride_h, 0) || POSITIVE(Conv3DOptions, dilation_d_factor, 1) ||
               POSITIVE(Conv3DOptions, dilation_w_factor, 1) || POSITIVE(Conv3DOptions, dilation_h_factor, 1);
    /* Control flow: every subgraph reference in range; cycles are found once all are known. */
    case TFL_BuiltinOperator_IF:
        opts = OPTS(IfOptions);
        return CALLS(IfOptions, then_subgraph_index) || CALLS(IfOptions, else_subgraph_index);
    case TFL_BuiltinOperator_WHILE:
        opts = OPTS(WhileOptions);
        return CALLS(WhileOptions, cond_subgraph_index) || CALLS(WhileOptions, body_subgraph_index);
    case TFL_BuiltinOperator_CALL_ONCE:
        opts = OPTS(CallOnceOptions);
        return CALLS(CallOnceOptions, init_subgraph_index);
    case TFL_BuiltinOperator_CALL:
        opts = OPTS(CallOptions);
        return add_call(m, s, k, (int64_t)UINT(m, opts, TFL_CallOptions_subgraph, 4, 0),
                        opts ? where(m, opts, TFL_CallOptions_subgraph, 4) : op, "subgraph");
    case TFL_BuiltinOperator_STABLEHLO_WHILE:
        opts = OPTS2(StablehloWhileOptions);
        return CALLS(StablehloWhileOptions, cond_subgraph_index) || CALLS(StablehloWhileOptions, body_subgraph_index);
    case TFL_BuiltinOperator_STABLEHLO_REDUCE:
        opts = OPTS2(StablehloReduceOptions);
        return CALLS(StablehloReduceOptions, body_subgraph_index);
    case TFL_BuiltinOperator_STABLEHLO_REDUCE_WINDOW:
        opts = OPTS2(StablehloReduceWindowOptions);
        return CALLS(StablehloReduceWindowOptions, body_subgraph_index);
    case TFL_BuiltinOperator_STABLEHLO_SORT:
        opts = OPTS2(StablehloSortOptions);
        return CALLS(StablehloSortOptions, comparator_subgraph_index);
    case TFL_BuiltinOperator_STABLEHLO_SCATTER:
        opts = OPTS2(StablehloScatterOptions);
        return CALLS(StablehloScatterOptions, update_computation_subgraph_index);
    case TFL_BuiltinOperator_STABLEHLO_COMPOSITE:
        opts = OPTS2(StableHLOCompositeOptions);
        return CALLS(StableHLOCompositeOptions, decomposition_subgraph_index);
    case TFL_BuiltinOperator_STABLEHLO_CASE: {
        opts = OPTS2(StablehloCaseOptions);
        uint64_t vec = REF(m, opts, TFL_StablehloCaseOptions_branch_subgraph_indices);
        for (uint32_t i = 0; i < COUNT(m, vec); i++)
            if (add_call(m, s, k, vec_i32(m, vec, i), vec_at(vec, i), "branch_subgraph_indices")) return -1;
        return 0;
    }
    default:
        return 0;
    }
}

static int check_operator(model *m, uint32_t s, uint32_t k, uint64_t op, uint32_t n_tensors) {
    uint32_t index = (uint32_t)UINT(m, op, TFL_Operator_opcode_index, 4, 0);
    if (index >= m->n_opcodes)
        return FAIL(m, where(m, op, TFL_Operator_opcode_index, 4), "opcode_index %u is past the model's %u operator_codes",
                    index, m->n_opcodes);
    if (tensor_list(m, op, TFL_Operator_inputs, "inputs", n_tensors, 1) ||
        tensor_list(m, op, TFL_Operator_outputs, "outputs", n_tensors, 0) ||
        tensor_list(m, op, TFL_Operator_intermediates, "intermediates", n_tensors, 1))
        return -1;
    uint64_t offset = UINT(m, op, TFL_Operator_large_custom_options_offset, 8, 0);
    uint64_t size = UINT(m, op, TFL_Operator_large_custom_options_size, 8, 0);
    if (offset > 1 && !external_ok(m, offset, size))
        return FAIL(m, where(m, op, TFL_Operator_large_custom_options_offset, 8),
                    "large custom options at offset %llu, %llu bytes, lie outside the %llu-byte file", ULL(offset),
                    ULL(size), ULL(m->len));
    /* TFLite takes the larger of the two codes (the byte one predates codes over 127). */
    uint64_t code_table = ELEM(m, m->opcodes, index);
    int64_t code = INT(m, code_table, TFL_OperatorCode_builtin_code, 4, 0);
    int64_t old = INT(m, code_table, TFL_OperatorCode_deprecated_builtin_code, 1, 0);
    return check_options(m, s, k, op, code > old ? code : old);
}

static int check_subgraph(model *m, uint32_t s, uint64_t g) {
    uint64_t tensors = REF(m, g, TFL_SubGraph_tensors);
    uint32_t n_tensors = COUNT(m, tensors);
    for (uint32_t i = 0; i < n_tensors; i++) {
        fbv_path_push(&m->path, "tensors", i);
        if (check_tensor(m, ELEM(m, tensors, i))) return -1;
        fbv_path_pop(&m->path);
    }
    if (tensor_list(m, g, TFL_SubGraph_inputs, "inputs", n_tensors, 0) ||
        tensor_list(m, g, TFL_SubGraph_outputs, "outputs", n_tensors, 0))
        return -1;
    uint64_t ops = REF(m, g, TFL_SubGraph_operators);
    for (uint32_t k = 0; k < COUNT(m, ops); k++) {
        fbv_path_push(&m->path, "operators", k);
        if (check_operator(m, s, k, ELEM(m, ops, k), n_tensors)) return -1;
        fbv_path_pop(&m->path);
    }
    return 0;
}

static int by_caller(const void *a, const void *b) {
    const call *x = a, *y = b;
    return (x->from > y->from) - (x->from < y->from);
}

/* TFLite prepares and runs a called subgraph inside its caller: a cycle recurses until the stack overflows. */
static int check_cycles(model *m) {
    if (!m->n_calls) return 0;
    qsort(m->calls, m->n_calls, sizeof *m->calls, by_caller);
    size_t *first = calloc((size_t)m->n_subgraphs + 1, sizeof *first);
    uint8_t *state = calloc(m->n_subgraphs, 1); /* 0 unseen, 1 on the stack, 2 done */
    size_t *stack = malloc(((size_t)m->n_subgraphs + 1) * sizeof *stack), *cursor = malloc(((size_t)m->n_subgraphs + 1) * sizeof *cursor);
    int rc = 0;
    if (!first || !state || !stack || !cursor) {
        m->nomem = 1;
        rc = FAIL(m, 0, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < m->n_calls; i++) first[m->calls[i].from + 1]++;
    for (uint32_t s = 0; s < m->n_subgraphs; s++) first[s + 1] += first[s];
    for (uint32_t root = 0; root < m->n_subgraphs && !rc; root++) {
        if (state[root]) continue;
        size_t depth = 0;
        stack[depth] = root;
        cursor[depth++] = first[root];
        state[root] = 1;
        while (depth && !rc) {
            size_t node = stack[depth - 1];
            if (cursor[depth - 1] == first[node + 1]) {
                state[node] = 2;
                depth--;
                continue;
            }
            const call *c = &m->calls[cursor[depth - 1]++];
            if (state[c->to] == 1) {
                fbv_path_push(&m->path, "subgraphs", c->from);
                fbv_path_push(&m->path, "operators", c->op);
                rc = FAIL(m, c->at, "calls subgraph %u, which leads back to subgraph %u: a cycle TFLite would recurse"
                                    " into without end", c->to, c->from);
            } else if (state[c->to] == 0) {
                state[c->to] = 1;
                stack[depth] = c->to;
                cursor[depth++] = first[c->to];
            }
        }
    }
done:
    free(first);
    free(state);
    free(stack);
    free(cursor);
    return rc;
}

static int check_signatures(model *m, uint64_t root) {
    uint64_t sigs = REF(m, root, TFL_Model_signature_defs);
    for (uint32_t i = 0; i < COUNT(m, sigs); i++) {
        uint64_t sig = ELEM(m, sigs, i);
        fbv_path_push(&m->path, "signature_defs", i);
        uint32_t s = (uint32_t)UINT(m, sig, TFL_SignatureDef_subgraph_index, 4, 0);
        if (s >= m->n_subgraphs)
            return FAIL(m, where(m, sig, TFL_SignatureDef_subgraph_index, 4), "subgraph_index %u is past the %u subgraphs",
                        s, m->n_subgraphs);
        uint32_t n_tensors = COUNT(m, REF(m, ELEM(m, m->subgraphs, s), TFL_SubGraph_tensors));
        static const unsigned slots[2] = {TFL_SignatureDef_inputs, TFL_SignatureDef_outputs};
        static const char *const names[2] = {"inputs", "outputs"};
        for (unsigned io = 0; io < 2; io++) {
            uint64_t maps = REF(m, sig, slots[io]);
            for (uint32_t j = 0; j < COUNT(m, maps); j++) {
                uint64_t map = ELEM(m, maps, j);
                uint32_t t = (uint32_t)UINT(m, map, TFL_TensorMap_tensor_index, 4, 0);
                if (t >= n_tensors) {
                    fbv_path_push(&m->path, names[io], j);
                    return FAIL(m, where(m, map, TFL_TensorMap_tensor_index, 4),
                                "tensor_index %u is past the %u tensors of subgraph %u", t, n_tensors, s);
                }
            }
        }
        fbv_path_pop(&m->path);
    }
    uint64_t meta = REF(m, root, TFL_Model_metadata);
    for (uint32_t i = 0; i < COUNT(m, meta); i++) {
        uint64_t entry = ELEM(m, meta, i);
        uint32_t b = (uint32_t)UINT(m, entry, TFL_Metadata_buffer, 4, 0);
        if (b >= m->n_buffers) {
            fbv_path_push(&m->path, "metadata", i);
            return FAIL(m, where(m, entry, TFL_Metadata_buffer, 4), "buffer %u is past the %u buffers", b, m->n_buffers);
        }
    }
    uint64_t old = REF(m, root, TFL_Model_metadata_buffer);
    for (uint32_t i = 0; i < COUNT(m, old); i++) {
        int32_t b = vec_i32(m, old, i);
        if (b < 0 || (uint32_t)b >= m->n_buffers) {
            fbv_path_push(&m->path, "metadata_buffer", i);
            return FAIL(m, vec_at(old, i), "buffer %d is not in 0..%lld", b, (long long)m->n_buffers - 1);
        }
    }
    return 0;
}

static int check_model(model *m) {
    uint64_t root = fbv_u32(m->buf); /* verified: inside the buffer */
    uint32_t version = (uint32_t)UINT(m, root, TFL_Model_version, 4, 0);
    if (version != SCHEMA_VERSION) {
        fbv_path_push(&m->path, "version", -1);
        return FAIL(m, where(m, root, TFL_Model_version, 4), "schema version %u; TFLite reads version %u", version,
                    SCHEMA_VERSION);
    }
    m->buffers = REF(m, root, TFL_Model_buffers);
    m->subgraphs = REF(m, root, TFL_Model_subgraphs);
    m->opcodes = REF(m, root, TFL_Model_operator_codes);
    m->n_buffers = COUNT(m, m->buffers);
    m->n_subgraphs = COUNT(m, m->subgraphs);
    m->n_opcodes = COUNT(m, m->opcodes);
    if (!m->n_subgraphs) return FAIL(m, root, "the model has no subgraphs");
    if (!m->n_buffers) return FAIL(m, root, "the model has no buffers (TFLite needs at least the empty buffer 0)");
    if (check_buffers(m)) return -1;
    for (uint32_t s = 0; s < m->n_subgraphs; s++) {
        fbv_path_push(&m->path, "subgraphs", s);
        if (check_subgraph(m, s, ELEM(m, m->subgraphs, s))) return -1;
        fbv_path_pop(&m->path);
    }
    return check_cycles(m) || check_signatures(m, root) ? -1 : 0;
}

int dlg_model_verify(const uint8_t *buf, size_t len, dlg_model_error *out) {
    fbv_error err;
    memset(out, 0, sizeof *out);
    int rc = DLG_MODEL_OK;
    if (fbv_verify(&tfl_model_schema, buf, len, 0, &err)) {
        rc = DLG_MODEL_BAD;
    } else {
        model m;
        memset(&m, 0, sizeof m);
        m.buf = buf;
        m.len = len;
        m.err = &err;
        m.path.root = "Model";
        if (check_model(&m)) rc = m.nomem ? DLG_MODEL_NOMEM : DLG_MODEL_BAD;
        free(m.calls);
    }
    if (rc != DLG_MODEL_OK) {
        out->offset = err.offset;
        memcpy(out->field, err.field, sizeof out->field);
        memcpy(out->message, err.message, sizeof out->message);
        out->field[sizeof out->field - 1] = 0;
        out->message[sizeof out->message - 1] = 0;
    }
    return rc;
}
