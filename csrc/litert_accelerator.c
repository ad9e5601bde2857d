/*
 * A LiteRT CompiledModel GPU accelerator around the project's TFLite delegate.
 *
 * LiteRT's runtime dlopens <runtime folder>/libLiteRtGpuAccelerator.so and reads the exported
 * LiteRtAcceleratorImpl (litert_abi.h). For each CompiledModel that asks for the GPU, LiteRT calls
 * create_delegate; this reads the runtime folder from the environment, the options file that
 * delegate/litert.py wrote there, loads the plugin library it names (the package's _native
 * module, already loaded in a Python host: dlopen returns that copy) and asks it for a delegate
 * with those options. LiteRT applies the delegate with ModifyGraphWithDelegate; nodes it leaves
 * run on LiteRT's CPU accelerator when the model allows it.
 *
 * No Python symbols and no library dependencies beyond libc and libdl, so loading it never fails
 * for want of a symbol. No global mutable state: each delegate carries what it needs.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "litert_abi.h"

#define NAME "tflite-opencl-delegate"
#define WHO NAME " (LiteRT GPU accelerator)"
#define OPTIONS_FILE "tflite-opencl-delegate.options"
#define OPTIONS_MAGIC "tflite-opencl-delegate litert-options 1\n"
#define OPTIONS_MAX_BYTES (64 * 1024)
#define OPTIONS_MAX_PAIRS 256
/* The LiteRtRuntimeContext ABI of the LiteRT this accelerator was built and tested for: 2.3.x.
   Mirrored in delegate/litert.py (SUPPORTED_LITERT), which refuses other versions first. */
#define PINNED_CONTEXT_MAJOR 1
#define PINNED_CONTEXT_MINOR 2
#define SUPPORTED_TEXT "ai-edge-litert 2.3.x"

typedef TfLiteDelegate *(*create_fn)(const char *const *, const char *const *, size_t, void (*)(const char *));
typedef void (*destroy_fn)(TfLiteDelegate *);

/* What LiteRT holds: a copy of the plugin's delegate (same data_ and callbacks, so TFLite and the
   plugin see one delegate), first so the TfLiteDelegate * LiteRT's deleter gets is this. */
typedef struct accelerator_delegate {
    TfLiteDelegate delegate;
    TfLiteDelegate *inner;
    destroy_fn destroy;
    void *library;
} accelerator_delegate;

/* The options file, parsed: NUL-terminated strings in key, value pairs after the magic line. */
typedef struct options {
    char *text;
    const char *keys[OPTIONS_MAX_PAIRS];
    const char *values[OPTIONS_MAX_PAIRS];
    size_t count;
    const char *plugin;      /* litert.plugin: the plugin library's path */
    bool any_context_minor;  /* litert.runtime_abi = any: the version check was waived */
} options;

static void say(const char *message) { fprintf(stderr, WHO ": %s\n", message); }

static lrt_status get_name(const void *accelerator, const char **name) {
    (void)accelerator;
    if (!name) return LRT_ERROR_INVALID_ARGUMENT;
    *name = NAME;
    return LRT_OK;
}

static lrt_status get_version(const void *accelerator, lrt_api_version *version) {
    (void)accelerator;
    if (!version) return LRT_ERROR_INVALID_ARGUMENT;
    *version = (lrt_api_version){1, 0, 0};
    return LRT_OK;
}

static lrt_status get_hardware_support(const void *accelerator, int *supported_hardware) {
    (void)accelerator;
    if (!supported_hardware) return LRT_ERROR_INVALID_ARGUMENT;
    *supported_hardware = LRT_HW_GPU;
    return LRT_OK;
}

/* True: the delegate compiles its partitions itself, so LiteRT applies it only to models
   compiled for the GPU (a CPU-only CompiledModel of the same environment never sees it). */
static lrt_status does_jit(const void *accelerator, bool *does_jit_compilation) {
    (void)accelerator;
    if (!does_jit_compilation) return LRT_ERROR_INVALID_ARGUMENT;
    *does_jit_compilation = true;
    return LRT_OK;
}

static lrt_status no_metrics_start(lrt_runtime_context *context, void *wrapper, int detail_level) {
    (void)context;
    (void)wrapper;
    (void)detail_level;
    return LRT_ERROR_UNSUPPORTED;
}

static lrt_status no_metrics_stop(lrt_runtime_context *context, void *wrapper, void *metrics) {
    (void)context;
    (void)wrapper;
    (void)metrics;
    return LRT_ERROR_UNSUPPORTED;
}

/* The runtime folder LiteRT was given (kLiteRtEnvOptionTagRuntimeLibraryDir), or NULL. */
static const char *runtime_folder(lrt_runtime_context *context, void *environment) {
    void *env_options = NULL;
    if (context->get_environment_options(environment, &env_options) != LRT_OK || !env_options) return NULL;
    lrt_any value = {0};
    if (context->get_environment_options_value(env_options, LRT_ENV_RUNTIME_LIBRARY_DIR, &value) != LRT_OK)
        return NULL;
    return value.type == LRT_ANY_STRING ? value.value.str_value : NULL;
}

/* Read <folder>/OPTIONS_FILE into `o`; 0, or -1 with `error` filled. The file is untrusted: its
   size is bounded, every string must end inside it, and keys must be non-empty. */
static int read_options(const char *folder, options *o, char *error, size_t error_size) {
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/%s", folder, OPTIONS_FILE);
    if (n < 0 || (size_t)n >= sizeof path) {
        snprintf(error, error_size, "the runtime folder's path is too long");
        return -1;
    }
    FILE *file = fopen(path, "rb");
    if (!file) {
        snprintf(error, error_size, "cannot read %s (%s); create the environment with delegate.litert_environment()",
                 path, strerror(errno));
        return -1;
    }
    o->text = malloc(OPTIONS_MAX_BYTES + 1);
    size_t size = o->text ? fread(o->text, 1, OPTIONS_MAX_BYTES + 1, file) : 0;
    fclose(file);
    if (!o->text || size > OPTIONS_MAX_BYTES) {
        snprintf(error, error_size, "%s: %s", path, o->text ? "larger than 64 KiB" : "out of memory");
        return -1;
    }
    size_t magic = sizeof OPTIONS_MAGIC - 1;
    if (size < magic || memcmp(o->text, OPTIONS_MAGIC, magic) != 0) {
        snprintf(error, error_size, "%s: not an options file of this accelerator", path);
        return -1;
    }
    const char *strings[2 * OPTIONS_MAX_PAIRS + 4];
    size_t count = 0;
    for (size_t at = magic; at < size;) {
        const char *end = memchr(o->text + at, '\0', size - at);
        if (!end || count == sizeof strings / sizeof *strings) {
            snprintf(error, error_size, "%s: malformed (%s)", path, end ? "too many options" : "unterminated string");
            return -1;
        }
        strings[count++] = o->text + at;
        at = (size_t)(end - o->text) + 1;
    }
    if (count % 2) {
        snprintf(error, error_size, "%s: malformed (a key without a value)", path);
        return -1;
    }
    for (size_t i = 0; i < count; i += 2) {
        const char *key = strings[i], *value = strings[i + 1];
        if (!key[0]) {
            snprintf(error, error_size, "%s: malformed (an empty key)", path);
            return -1;
        }
        if (strcmp(key, "litert.plugin") == 0) {
            o->plugin = value;
        } else if (strcmp(key, "litert.runtime_abi") == 0) {
            o->any_context_minor = strcmp(value, "any") == 0;
        } else if (o->count < OPTIONS_MAX_PAIRS) {
            o->keys[o->count] = key;
            o->values[o->count++] = value;
        }
    }
    if (!o->plugin || o->plugin[0] != '/') {
        snprintf(error, error_size, "%s: no absolute litert.plugin path", path);
        return -1;
    }
    return 0;
}

/* Whether this LiteRT's runtime context is the one the accelerator was built for. */
static int check_context(const lrt_runtime_context *context, bool any_minor, char *error, size_t error_size) {
    const lrt_abi_header *h = &context->abi_header;
    bool usable = h->major_version == PINNED_CONTEXT_MAJOR && h->struct_size >= sizeof *context &&
                  context->get_environment_options && context->get_environment_options_value &&
                  context->wrap_delegate;
    if (usable && (any_minor || h->minor_version == PINNED_CONTEXT_MINOR)) return 0;
    snprintf(error, error_size,
             "this LiteRT's runtime context ABI is %u.%u (%u bytes); the accelerator was built for %d.%d, "
             "which is " SUPPORTED_TEXT,
             h->major_version, h->minor_version, h->struct_size, PINNED_CONTEXT_MAJOR, PINNED_CONTEXT_MINOR);
    return -1;
}

static void delete_delegate(TfLiteDelegate *delegate) {
    accelerator_delegate *d = (accelerator_delegate *)(void *)delegate;
    if (!d) return;
    d->destroy(d->inner);
    dlclose(d->library);
    free(d);
}

static lrt_status create_delegate(lrt_runtime_context *context, void *environment, const void *accelerator,
                                  void *compile_options, void **wrapper) {
    (void)accelerator;
    (void)compile_options;
    if (!context || !environment || !wrapper) return LRT_ERROR_INVALID_ARGUMENT;
    *wrapper = NULL;
    char error[4096 + 512] = {0};
    /* The header and the two option getters come first: checked before anything is called. */
    if (context->abi_header.major_version != PINNED_CONTEXT_MAJOR ||
        context->abi_header.struct_size < sizeof *context) {
        check_context(context, true, error, sizeof error);
        say(error);
        return LRT_ERROR_WRONG_VERSION;
    }
    const char *folder = runtime_folder(context, environment);
    if (!folder) {
        say("the environment has no runtime folder; create it with delegate.litert_environment()");
        return LRT_ERROR_INVALID_ARGUMENT;
    }
    options o = {0};
    lrt_status status = LRT_ERROR_RUNTIME;
    void *library = NULL;
    create_fn create = NULL;
    destroy_fn destroy = NULL;
    accelerator_delegate *d = NULL;
    if (read_options(folder, &o, error, sizeof error) != 0) goto fail;
    if (check_context(context, o.any_context_minor, error, sizeof error) != 0) {
        status = LRT_ERROR_WRONG_VERSION;
        goto fail;
    }
    library = dlopen(o.plugin, RTLD_NOW | RTLD_LOCAL);
    if (library) {
        create = (create_fn)dlsym(library, "tflite_plugin_create_delegate");
        destroy = (destroy_fn)dlsym(library, "tflite_plugin_destroy_delegate");
    }
    if (!create || !destroy) {
        const char *why = dlerror();
        snprintf(error, sizeof error, "cannot load the plugin %s: %s", o.plugin, why ? why : "no plugin symbols");
        goto fail;
    }
    d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(error, sizeof error, "out of memory");
        status = LRT_ERROR_MEMORY;
        goto fail;
    }
    d->inner = create(o.keys, o.values, o.count, say); /* the plugin reports its own reasons */
    if (!d->inner) {
        snprintf(error, sizeof error, "the plugin refused to create a delegate");
        goto fail;
    }
    d->delegate = *d->inner;
    d->destroy = destroy;
    d->library = library;
    status = context->wrap_delegate(&d->delegate, delete_delegate, wrapper);
    if (status != LRT_OK) {
        snprintf(error, sizeof error, "LiteRT could not wrap the delegate (status %d)", status);
        goto fail;
    }
    free(o.text);
    return LRT_OK;
fail:
    say(error);
    if (d && d->inner) destroy(d->inner);
    free(d);
    if (library) dlclose(library);
    free(o.text);
    *wrapper = NULL;
    return status;
}

/* The symbol LiteRT looks up (RegisterSharedObjectAcceleratorViaAcceleratorDef). */
__attribute__((visibility("default"))) const lrt_accelerator_def LiteRtAcceleratorImpl = {
    .abi_header = {.struct_size = sizeof(lrt_accelerator_def), .major_version = 1, .minor_version = 0},
    .get_name = get_name,
    .get_version = get_version,
    .get_hardware_support = get_hardware_support,
    .is_tflite_delegate_responsible_for_jit_compilation = does_jit,
    .create_delegate = create_delegate,
    .start_metrics_collection = no_metrics_start,
    .stop_metrics_collection = no_metrics_stop,
};
