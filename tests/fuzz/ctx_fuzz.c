/*
 * libFuzzer target for the InferenceContext reader (csrc/ctxfile.c).
 *
 * Every input is read twice: with the default limits and with tight ones. A
 * read either fails with a proper error (known code, NUL-terminated message,
 * no tree) or gives a tree whose every string, byte vector and enum this
 * walker checks: pointers inside the input, strings NUL-terminated at their
 * length, enums within the schema, counts of absent vectors zero. A violated
 * invariant aborts, so the fuzzer reports it like a sanitizer finding.
 *
 * Built by scripts/fuzz.sh with clang -fsanitize=fuzzer,address,undefined; the
 * regression test (tests/test_fuzz_regressions.py) links it with replay_main.c
 * under gcc's ASan + UBSan to replay tests/fuzz/regressions/ctx/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct span {
    const uint8_t *lo;
    const uint8_t *hi; /* one past the end */
    uint64_t sum;      /* touched bytes, so every pointer is really read */
} span;

static void broken(const char *what) {
    fprintf(stderr, "ctx_fuzz: invariant violated: %s\n", what);
    abort();
}

static void inside(const span *s, const void *p, uint64_t n, const char *what) {
    const uint8_t *b = p;
    if (b < s->lo || b > s->hi || n > (uint64_t)(s->hi - b)) broken(what);
}

static void str(span *s, dlg_str v) {
    if (!v.ptr) {
        if (v.len) broken("absent string with a length");
        return;
    }
    inside(s, v.ptr, (uint64_t)v.len + 1, "string outside the input");
    if (v.ptr[v.len] != 0) broken("string not NUL-terminated at its length");
    for (uint32_t i = 0; i < v.len; i++) s->sum += (unsigned char)v.ptr[i];
}

static void bytes(span *s, dlg_bytes v) {
    if (!v.ptr) {
        if (v.len) broken("absent bytes with a length");
        return;
    }
    inside(s, v.ptr, v.len, "byte vector outside the input");
    for (uint32_t i = 0; i < v.len; i++) s->sum += v.ptr[i];
}

static void enum_in(int8_t v, int8_t max, const char *what) {
    if (v < 0 || v > max) broken(what);
}

static void list(const void *items, uint32_t count, const char *what) {
    if ((items == NULL) != (count == 0)) broken(what);
}

static void base(span *s, const dlg_gpu_object_descriptor *o) {
    if (!o) return;
    list(o->state_vars, o->state_vars_count, "state_vars");
    for (uint32_t i = 0; i < o->state_vars_count; i++) {
        str(s, o->state_vars[i].key);
        str(s, o->state_vars[i].value);
    }
    enum_in(o->access_type, 2, "access_type");
}

static void buffer(span *s, const dlg_buffer_descriptor *d) {
    if (!d) return;
    base(s, d->base_obj);
    enum_in(d->element_type, 2, "buffer element_type");
    enum_in(d->memory_type, 2, "buffer memory_type");
    list(d->attributes, d->attributes_count, "attributes");
    for (uint32_t i = 0; i < d->attributes_count; i++) str(s, d->attributes[i]);
    bytes(s, d->data);
}

static void texture(span *s, const dlg_texture2d_descriptor *d) {
    if (!d) return;
    base(s, d->base_obj);
    enum_in(d->element_type, 2, "texture element_type");
    enum_in(d->normalized_type, 2, "normalized_type");
    if (d->normalized > 1) broken("bool normalized");
    if (d->size) s->sum += (uint32_t)d->size->x + (uint32_t)d->size->y;
    bytes(s, d->data);
}

static void linear(span *s, const dlg_tensor_linear_descriptor *d) {
    if (!d) return;
    base(s, d->base_obj);
    enum_in(d->storage_type, 1, "linear storage_type");
    enum_in(d->element_type, 2, "linear element_type");
    enum_in(d->memory_type, 2, "linear memory_type");
    bytes(s, d->data);
}

static void tensor(span *s, const dlg_tensor_descriptor *d) {
    if (!d) return;
    base(s, d->base_obj);
    enum_in(d->data_type, 2, "data_type");
    enum_in(d->storage_type, 6, "storage_type");
    enum_in(d->layout, 4, "layout");
    if (d->shape)
        s->sum += (uint64_t)(uint32_t)d->shape->b + (uint32_t)d->shape->h + (uint32_t)d->shape->w +
                  (uint32_t)d->shape->d + (uint32_t)d->shape->c;
    bytes(s, d->data);
}

#define MAP(fn, items, count)                                  \
    do {                                                             \
        list(items, count, #items);                                  \
        for (uint32_t i_ = 0; i_ < (count); i_++) {                  \
            str(s, (items)[i_].key);                                 \
            fn(s, (items)[i_].value);                                \
        }                                                            \
    } while (0)

static void words(span *s, const void *items, uint32_t count, const char *what) {
    list(items, count, what);
    const uint8_t *b = items;
    for (uint64_t i = 0; i < 4u * (uint64_t)count; i++) s->sum += b[i]; /* arena memory: ASan checks it */
}

static void arguments(span *s, const dlg_arguments *a) {
    if (!a) return;
    list(a->int_values, a->int_values_count, "int_values");
    for (uint32_t i = 0; i < a->int_values_count; i++) {
        str(s, a->int_values[i].name);
        if (a->int_values[i].active > 1) broken("bool active");
    }
    list(a->float_values, a->float_values_count, "float_values");
    for (uint32_t i = 0; i < a->float_values_count; i++) str(s, a->float_values[i].name);
    list(a->half_values, a->half_values_count, "half_values");
    for (uint32_t i = 0; i < a->half_values_count; i++) {
        str(s, a->half_values[i].name);
        if (a->half_values[i].store_as_f32 > 1) broken("bool store_as_f32");
    }
    words(s, a->shared_int4s, a->shared_int4s_count, "shared_int4s");
    words(s, a->shared_float4s, a->shared_float4s_count, "shared_float4s");
    words(s, a->shared_half4s, a->shared_half4s_count, "shared_half4s");
    MAP(buffer, a->buffer_refs, a->buffer_refs_count);
    MAP(texture, a->texture2d_refs, a->texture2d_refs_count);
    MAP(linear, a->tensor_linear_refs, a->tensor_linear_refs_count);
    MAP(tensor, a->tensor_refs, a->tensor_refs_count);
    MAP(buffer, a->buffer_objects, a->buffer_objects_count);
    MAP(texture, a->texture2d_objects, a->texture2d_objects_count);
    MAP(linear, a->tensor_linear_objects, a->tensor_linear_objects_count);
    MAP(tensor, a->tensor_objects, a->tensor_objects_count);
}

static void operation(span *s, const dlg_gpu_operation *op) {
    if (!op) return;
    arguments(s, op->arguments);
    str(s, op->code);
    str(s, op->elementwise_code);
    list(op->compiler_options, op->compiler_options_count, "compiler_options");
    for (uint32_t i = 0; i < op->compiler_options_count; i++) enum_in(op->compiler_options[i].option, 5, "option");
    enum_in(op->tensor_to_grid, 4, "tensor_to_grid");
    if (op->elementwise > 1 || op->linkable > 1 || op->check_src_channels_size > 1) broken("bool in gpu_op");
    if (op->definition) {
        const dlg_operation_def *d = op->definition;
        enum_in(d->precision, 2, "definition precision");
        list(d->src_tensors, d->src_tensors_count, "src_tensors");
        list(d->dst_tensors, d->dst_tensors_count, "dst_tensors");
        for (uint32_t i = 0; i < d->src_tensors_count; i++) tensor(s, &d->src_tensors[i]);
        for (uint32_t i = 0; i < d->dst_tensors_count; i++) tensor(s, &d->dst_tensors[i]);
    }
    const dlg_int3 *v[] = {op->work_group_size, op->work_group_launch_order, op->grid_size, op->work_groups_count};
    for (unsigned i = 0; i < 4; i++)
        if (v[i]) s->sum += (uint64_t)(uint32_t)v[i]->x + (uint32_t)v[i]->y + (uint32_t)v[i]->z;
    list(op->src_tensors_names, op->src_tensors_names_count, "src_tensors_names");
    list(op->dst_tensors_names, op->dst_tensors_names_count, "dst_tensors_names");
    for (uint32_t i = 0; i < op->src_tensors_names_count; i++) str(s, op->src_tensors_names[i]);
    for (uint32_t i = 0; i < op->dst_tensors_names_count; i++) str(s, op->dst_tensors_names[i]);
}

static void context(span *s, const dlg_inference_context *c) {
    if (c->need_flush > 1 || c->flush_periodically > 1 || c->need_manual_release > 1) broken("bool in context");
    enum_in(c->precision, 2, "precision");
    enum_in(c->storage_type, 6, "context storage_type");
    list(c->nodes, c->nodes_count, "nodes");
    for (uint32_t n = 0; n < c->nodes_count; n++) {
        const dlg_cl_node *node = &c->nodes[n];
        operation(s, node->gpu_op);
        words(s, node->input_ids, node->input_ids_count, "input_ids");
        words(s, node->output_ids, node->output_ids_count, "output_ids");
        str(s, node->name);
    }
    list(c->tensors, c->tensors_count, "tensors");
    for (uint32_t i = 0; i < c->tensors_count; i++) tensor(s, c->tensors[i].desc);
    words(s, c->input_ids, c->input_ids_count, "context input_ids");
    words(s, c->output_ids, c->output_ids_count, "context output_ids");
    list(c->variable_ids_and_refs, c->variable_ids_and_refs_count, "variable_ids_and_refs");
}

static uint64_t read_once(const uint8_t *data, size_t size, const dlg_limits *limits) {
    dlg_context *ctx = (dlg_context *)(uintptr_t)1; /* must become NULL on failure */
    dlg_error err;
    int rc = dlg_context_read(data, size, limits, &ctx, &err);
    if (rc != DLG_OK) {
        if (ctx != NULL) broken("failed read left a context");
        if (rc != DLG_ERR_FORMAT && rc != DLG_ERR_LIMIT && rc != DLG_ERR_NOMEM) broken("unknown error code");
        if (rc != err.code) broken("status and error code differ");
        if (memchr(err.message, 0, sizeof err.message) == NULL || err.message[0] == 0) broken("error message");
        if (err.offset > size) broken("error offset past the input");
        return 0;
    }
    if (ctx == NULL || dlg_context_root(ctx) == NULL) broken("successful read without a tree");
    span s = {data, data + size, 0};
    context(&s, dlg_context_root(ctx));
    if (limits && limits->max_memory && dlg_context_memory(ctx) > limits->max_memory) broken("memory over the limit");
    if (limits && limits->max_tables && dlg_context_tables(ctx) > limits->max_tables) broken("tables over the limit");
    dlg_context_free(ctx);
    return s.sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const dlg_limits tight = {6, 64, 4096};
    volatile uint64_t sink = read_once(data, size, NULL);
    sink += read_once(data, size, &tight);
    (void)sink;
    return 0;
}
