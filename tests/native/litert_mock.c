/*
 * Sanitizer driver for the LiteRT accelerator (csrc/litert_accelerator.c) without LiteRT: a fake
 * runtime context (LiteRT's function table) gives the runtime folder and wraps the delegate; a
 * stub plugin library (tests/native/stub_plugin.c, built by the test) stands for the package's.
 * Cases: a good options file (a delegate made, wrapped and deleted), options files damaged every
 * way the reader checks, another context ABI, a plugin that cannot be loaded. Built with
 * -fsanitize=address,undefined by tests/test_leaks.py: any leak, overflow or UB aborts.
 *
 *   litert_mock FOLDER STUB_PLUGIN
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "litert_abi.h"

extern const lrt_accelerator_def LiteRtAcceleratorImpl;

static const char *folder;
static TfLiteDelegate *wrapped;
static void (*wrapped_deleter)(TfLiteDelegate *);

static lrt_status get_options(void *environment, void **options) {
    *options = environment;
    return LRT_OK;
}

static lrt_status get_value(void *options, int tag, lrt_any *value) {
    (void)options;
    if (tag != LRT_ENV_RUNTIME_LIBRARY_DIR) return LRT_ERROR_INVALID_ARGUMENT;
    value->type = LRT_ANY_STRING;
    value->value.str_value = folder;
    return LRT_OK;
}

static lrt_status wrap(TfLiteDelegate *delegate, void (*deleter)(TfLiteDelegate *), void **wrapper) {
    wrapped = delegate;
    wrapped_deleter = deleter;
    *wrapper = delegate;
    return LRT_OK;
}

/* Write the options file: the magic line, then `size` bytes of `body` (NULs included). */
static void write_options(const char *magic, const char *body, size_t size) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tflite-opencl-delegate.options", folder);
    FILE *file = fopen(path, "wb");
    if (!file) abort();
    fputs(magic, file);
    if (size && fwrite(body, 1, size, file) != size) abort();
    fclose(file);
}

static lrt_status create(lrt_runtime_context *context) {
    void *wrapper = NULL;
    static int environment;
    lrt_status status = LiteRtAcceleratorImpl.create_delegate(context, &environment, NULL, NULL, &wrapper);
    if ((status == LRT_OK) != (wrapper != NULL)) abort(); /* a wrapper exactly when it succeeds */
    return status;
}

#define MAGIC "tflite-opencl-delegate litert-options 1\n"

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    folder = argv[1];
    lrt_runtime_context context;
    memset(&context, 0, sizeof context);
    context.abi_header.struct_size = sizeof context;
    context.abi_header.major_version = 1;
    context.abi_header.minor_version = 2;
    context.get_environment_options = get_options;
    context.get_environment_options_value = get_value;
    context.wrap_delegate = wrap;

    /* a good file: the stub plugin makes a delegate, LiteRT's deleter frees it */
    char good[4096];
    int n = snprintf(good, sizeof good, "litert.plugin%c%s%cprecision%cF32", 0, argv[2], 0, 0);
    write_options(MAGIC, good, (size_t)n + 1);
    if (create(&context) != LRT_OK || !wrapped) abort();
    wrapped_deleter(wrapped);
    wrapped = NULL;
    int made = 1;

    /* damaged files: each refused with a status, nothing leaked */
    const struct {
        const char *magic, *body;
        size_t size;
    } damaged[] = {
        {"not the magic\n", "", 0},
        {MAGIC, "litert.plugin\0/x\0precision", 27},   /* a key without a value */
        {MAGIC, "litert.plugin\0/x\0precision\0F32", 30}, /* unterminated */
        {MAGIC, "\0value\0litert.plugin\0/x\0", 24},  /* an empty key */
        {MAGIC, "precision\0F32\0", 14},               /* no plugin path */
        {MAGIC, "litert.plugin\0relative.so\0", 26},   /* a relative plugin path */
        {MAGIC, "litert.plugin\0/nonexistent/plugin.so\0", 37},
    };
    int refused = 0;
    for (size_t i = 0; i < sizeof damaged / sizeof *damaged; i++) {
        write_options(damaged[i].magic, damaged[i].body, damaged[i].size);
        if (create(&context) == LRT_OK) abort();
        refused++;
    }
    /* larger than the reader takes */
    size_t big = 70 * 1024;
    char *filler = calloc(big, 1);
    if (!filler) abort();
    memset(filler, 'a', big - 1);
    write_options(MAGIC, filler, big);
    free(filler);
    if (create(&context) == LRT_OK) abort();
    refused++;

    /* another context ABI: refused before the options are read */
    write_options(MAGIC, good, (size_t)n + 1);
    context.abi_header.minor_version = 3;
    if (create(&context) != LRT_ERROR_WRONG_VERSION) abort();
    context.abi_header.minor_version = 2;
    context.abi_header.major_version = 2;
    if (create(&context) != LRT_ERROR_WRONG_VERSION) abort();
    refused += 2;
    printf("made=%d refused=%d\n", made, refused);
    return 0;
}
