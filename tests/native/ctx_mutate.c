/*
 * Sanitizer driver for the InferenceContext reader: feeds csrc/ctxfile.c every
 * truncation of each file given, seeded random bit flips and forged 32-bit
 * words (offsets and lengths), and checks each read either fails cleanly or
 * gives a tree that can be walked. Built with -fsanitize=address,undefined by
 * tests/test_native_sanitizers.py, so any out-of-bounds read, leak or UB aborts.
 *
 *   ctx_mutate FLIPS SEED FILE...
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxfile.h"

static uint64_t rng_state;

static uint64_t next_random(void) {
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

typedef struct counts {
    unsigned long reads, ok, errors;
} counts;

/* Touch every byte the tree points at, so ASan sees any bad pointer. */
static unsigned sum_str(dlg_str s) {
    unsigned acc = 0;
    for (uint32_t i = 0; s.ptr && i <= s.len; i++) acc += (unsigned char)s.ptr[i]; /* includes the NUL */
    return acc;
}

static unsigned sum_tensor(const dlg_tensor_descriptor *t) {
    unsigned acc = (unsigned)t->data_type + (unsigned)t->storage_type;
    if (t->shape) acc += (unsigned)t->shape->c;
    if (t->base_obj)
        for (uint32_t i = 0; i < t->base_obj->state_vars_count; i++)
            acc += sum_str(t->base_obj->state_vars[i].key) + sum_str(t->base_obj->state_vars[i].value);
    for (uint32_t i = 0; i < t->data.len; i++) acc += t->data.ptr[i];
    return acc;
}

static unsigned walk(const dlg_inference_context *c) {
    unsigned acc = 0;
    for (uint32_t n = 0; n < c->nodes_count; n++) {
        const dlg_cl_node *node = &c->nodes[n];
        acc += sum_str(node->name);
        for (uint32_t i = 0; i < node->input_ids_count; i++) acc += (unsigned)node->input_ids[i];
        const dlg_gpu_operation *op = node->gpu_op;
        if (!op) continue;
        acc += sum_str(op->code) + sum_str(op->elementwise_code);
        for (uint32_t i = 0; i < op->src_tensors_names_count; i++) acc += sum_str(op->src_tensors_names[i]);
        if (op->grid_size) acc += (unsigned)op->grid_size->x;
        const dlg_arguments *a = op->arguments;
        if (!a) continue;
        for (uint32_t i = 0; i < a->int_values_count; i++) acc += sum_str(a->int_values[i].name);
        for (uint32_t i = 0; i < a->shared_float4s_count; i++) acc += (unsigned)(a->shared_float4s[i] != 0.0f);
        for (uint32_t i = 0; i < a->tensor_refs_count; i++)
            if (a->tensor_refs[i].value) acc += sum_tensor(a->tensor_refs[i].value);
        for (uint32_t i = 0; i < a->buffer_objects_count; i++) {
            const dlg_buffer_descriptor *b = a->buffer_objects[i].value;
            if (!b) continue;
            for (uint32_t k = 0; k < b->attributes_count; k++) acc += sum_str(b->attributes[k]);
            for (uint32_t k = 0; k < b->data.len; k++) acc += b->data.ptr[k];
        }
    }
    for (uint32_t t = 0; t < c->tensors_count; t++)
        if (c->tensors[t].desc) acc += sum_tensor(c->tensors[t].desc);
    return acc;
}

static unsigned volatile sink;

static void read_one(const uint8_t *buf, size_t len, counts *k) {
    /* A private copy of exactly `len` bytes, so reads past the end hit ASan's redzone. */
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) abort();
    if (len) memcpy(copy, buf, len);
    dlg_context *ctx = NULL;
    dlg_error err;
    int rc = dlg_context_read(copy, len, NULL, &ctx, &err);
    k->reads++;
    if (rc == DLG_OK) {
        k->ok++;
        sink += walk(dlg_context_root(ctx));
        dlg_context_free(ctx);
    } else {
        k->errors++;
        if (ctx != NULL || err.message[0] == 0 || memchr(err.message, 0, sizeof err.message) == NULL) {
            fprintf(stderr, "bad error report (rc %d)\n", rc);
            abort();
        }
    }
    free(copy);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s FLIPS SEED FILE...\n", argv[0]);
        return 2;
    }
    unsigned long flips = strtoul(argv[1], NULL, 10);
    rng_state = strtoull(argv[2], NULL, 10) | 1u;
    counts k = {0, 0, 0};
    static const uint32_t forged[] = {0u, 1u, 3u, 4u, 0x7fffffffu, 0x80000000u, 0xfffffffcu, 0xffffffffu};
    for (int f = 3; f < argc; f++) {
        FILE *fp = fopen(argv[f], "rb");
        if (!fp) { perror(argv[f]); return 2; }
        fseek(fp, 0, SEEK_END);
        long size = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
        if (!buf || fread(buf, 1, (size_t)size, fp) != (size_t)size) { fprintf(stderr, "read failed\n"); return 2; }
        fclose(fp);
        size_t len = (size_t)size;

        dlg_context *ctx = NULL;
        dlg_error err;
        if (dlg_context_read(buf, len, NULL, &ctx, &err) != DLG_OK) {
            fprintf(stderr, "%s: the unmodified file does not read: %s\n", argv[f], err.message);
            return 1;
        }
        dlg_context_free(ctx);

        for (size_t cut = 0; cut < len; cut++) read_one(buf, cut, &k);
        uint8_t *m = malloc(len);
        if (!m) abort();
        for (unsigned long i = 0; i < flips; i++) {
            memcpy(m, buf, len);
            unsigned nbits = 1 + (unsigned)(next_random() % 4);
            for (unsigned b = 0; b < nbits; b++) {
                uint64_t bit = next_random() % ((uint64_t)len * 8);
                m[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            }
            read_one(m, len, &k);
        }
        for (size_t pos = 0; pos + 4 <= len; pos += 4) {
            for (size_t v = 0; v < sizeof forged / sizeof forged[0]; v++) {
                memcpy(m, buf, len);
                uint32_t word = forged[v];
                if (v == 0) word = (uint32_t)len; /* exactly one past the end */
                m[pos] = (uint8_t)word; m[pos + 1] = (uint8_t)(word >> 8);
                m[pos + 2] = (uint8_t)(word >> 16); m[pos + 3] = (uint8_t)(word >> 24);
                read_one(m, len, &k);
            }
        }
        free(m);
        free(buf);
    }
    printf("reads=%lu ok=%lu errors=%lu\n", k.reads, k.ok, k.errors);
    return 0;
}
