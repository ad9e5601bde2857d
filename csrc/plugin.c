/* The TFLite external-delegate plugin. See plugin.h. */
#include "plugin.h"
#include "python_side.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Implemented in Python (cffi extern "Python+C", delegate/plugin/callbacks.py). */
extern int64_t dlg_py_create(const char *const *keys, const char *const *values, int count, char *error,
                             size_t error_size);
extern void dlg_py_destroy(int64_t id);
extern int dlg_py_prepare(TfLiteContext *context, TfLiteDelegate *delegate, int64_t id);
extern int dlg_py_kernel_init(TfLiteContext *context, const TfLiteDelegateParams *params, dlg_kernel *kernel);
extern int dlg_py_kernel_prepare(TfLiteContext *context, dlg_kernel *kernel, int propagated);
extern void dlg_py_kernel_free(int64_t handle);

#define PLUGIN_NAME "tflite-opencl-delegate"

typedef struct delegate_data {
    int64_t id;
} delegate_data;

/* Hosts append reported messages to one buffer with nothing between them (TFLite's own follow):
 * a message ends its own line. */
void dlg_report(TfLiteContext *context, const char *message) {
    if (context && context->ReportError) context->ReportError(context, "%s\n", message);
}

/* The kernel TFLite holds as user_data: what Python fills in (first member, so a dlg_kernel * is
   the instance's address), and whether a call is running in it. TFLite's interpreter takes one
   call at a time; a second thread's invoke (or prepare) of the same interpreter would run the
   partition's plan twice at once over the same memory objects, so it is refused instead. */
typedef struct kernel_instance {
    dlg_kernel kernel;
    atomic_bool busy;
} kernel_instance;

static kernel_instance *instance_of(dlg_kernel *k) { return (kernel_instance *)(void *)k; }

/* Mark `k` busy for `call`; 0, or -1 (reported to TFLite) when another thread is inside it. */
static int enter(TfLiteContext *context, dlg_kernel *k, const char *call) {
    if (!atomic_exchange_explicit(&instance_of(k)->busy, true, memory_order_acquire)) return 0;
    char message[256];
    snprintf(message, sizeof message,
             "%s: %s refused: the interpreter is in use by another thread (the delegate's partition is "
             "running); a TFLite interpreter takes one call at a time, so give each thread its own or hold a lock",
             PLUGIN_NAME, call);
    dlg_report(context, message);
    return -1;
}

static void leave(dlg_kernel *k) { atomic_store_explicit(&instance_of(k)->busy, false, memory_order_release); }

static TfLiteStatus delegate_prepare(TfLiteContext *context, TfLiteDelegate *delegate) {
    const delegate_data *d = delegate->data_;
    return dlg_py_prepare(context, delegate, d->id) == 0 ? kTfLiteOk : kTfLiteError;
}

/* Bytes of one element of a TfLiteType the kernel binds (float32; int8, uint8 carried in float;
   int32, int64, bool held as floats: compiler/claim.py). */
static size_t element_size(int32_t type) {
    switch (type) {
    case kTfLiteFloat32:
    case kTfLiteInt32:
        return 4;
    case kTfLiteInt64:
        return 8;
    default:
        return 1;
    }
}

static const char *type_name(int32_t type) {
    switch (type) {
    case kTfLiteFloat32:
        return "float32";
    case kTfLiteInt32:
        return "int32";
    case kTfLiteInt64:
        return "int64";
    case kTfLiteBool:
        return "bool";
    case kTfLiteInt8:
        return "int8";
    case kTfLiteUInt8:
        return "uint8";
    default:
        return "unsupported";
    }
}

/* Every integer up to 2^24 in magnitude is a float32; past it float storage would round. */
#define EXACT_INT (1 << 24)

/* One float copy per int8 / uint8 tensor of `count` (NULL entries for float32 ones); NULL when out of memory. */
static float **float_copies(int32_t count, const int32_t *types, const uint64_t *bytes) {
    float **copies = calloc((size_t)count + 1, sizeof *copies);
    if (!copies || !types) return copies; /* no types: every tensor is float32 (no copies) */
    for (int32_t i = 0; i < count; i++) {
        if (types[i] == kTfLiteFloat32) continue;
        copies[i] = malloc((size_t)(bytes[i] / element_size(types[i])) * sizeof(float) + 1);
        if (!copies[i]) {
            for (int32_t j = 0; j < i; j++) free(copies[j]);
            free(copies);
            return NULL;
        }
    }
    return copies;
}

static void free_copies(float **copies, int32_t count) {
    if (!copies) return;
    for (int32_t i = 0; i < count; i++) free(copies[i]);
    free(copies);
}

/* real = (q - zero_point) * scale over `n` int8 or uint8 values. */
static void dequantize(float *dst, const void *src, size_t n, int32_t type, float scale, int32_t zero_point) {
    if (type == kTfLiteInt8) {
        const int8_t *q = src;
        for (size_t i = 0; i < n; i++) dst[i] = (float)((int32_t)q[i] - zero_point) * scale;
    } else {
        const uint8_t *q = src;
        for (size_t i = 0; i < n; i++) dst[i] = (float)((int32_t)q[i] - zero_point) * scale;
    }
}

/* q = clamp(round(real / scale) + zero_point) into the type's range, rounding half away from zero
   as TFLite's QUANTIZE does (the values are on the grid already: the partition rounded them). */
static void quantize(void *dst, const float *src, size_t n, int32_t type, float scale, int32_t zero_point) {
    int32_t low = type == kTfLiteInt8 ? -128 : 0, high = type == kTfLiteInt8 ? 127 : 255;
    for (size_t i = 0; i < n; i++) {
        float v = src[i] / scale;
        if (v != v) v = 0.0f; /* NaN: the zero point */
        v = v > 1e6f ? 1e6f : (v < -1e6f ? -1e6f : v); /* in range of the casts below, far outside the type's */
        int64_t q = (v < 0.0f ? -(int64_t)(0.5f - v) : (int64_t)(v + 0.5f)) + zero_point;
        q = q < low ? low : (q > high ? high : q);
        if (type == kTfLiteInt8)
            ((int8_t *)dst)[i] = (int8_t)q;
        else
            ((uint8_t *)dst)[i] = (uint8_t)q;
    }
}

/* An integer or bool input as the floats the partition holds it in (exact: |v| <= 2^24); the
   index of the first value too large to hold exactly, or -1 when all are converted. */
static int64_t integers_to_floats(float *dst, const void *src, size_t n, int32_t type) {
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        if (type == kTfLiteInt32)
            v = ((const int32_t *)src)[i];
        else if (type == kTfLiteInt64)
            v = ((const int64_t *)src)[i];
        else /* bool: one byte, any non-zero is true */
            v = ((const uint8_t *)src)[i] != 0;
        if (v > EXACT_INT || v < -EXACT_INT) return (int64_t)i;
        dst[i] = (float)v;
    }
    return -1;
}

/* The floats of an int32 or bool output into the host's tensor: int32 saturates at its range (the
   partition holds INT_MAX as 2^31, what a saturating CAST gives), bool is non-zero. */
static void floats_to_integers(void *dst, const float *src, size_t n, int32_t type) {
    for (size_t i = 0; i < n; i++) {
        float v = src[i];
        if (type == kTfLiteBool) {
            ((uint8_t *)dst)[i] = v != 0.0f;
            continue;
        }
        int32_t q;
        if (v != v)
            q = 0; /* never written by the partition; a defined value all the same */
        else if (v >= 2147483648.0f)
            q = INT32_MAX;
        else if (v <= -2147483648.0f)
            q = INT32_MIN;
        else
            q = (int32_t)v;
        ((int32_t *)dst)[i] = q;
    }
}

/* 0 when `type` can be an input (`input`) or an output of a partition, as the conversions handle. */
static int edge_type_ok(int32_t type, int input) {
    switch (type) {
    case kTfLiteFloat32:
    case kTfLiteInt8:
    case kTfLiteUInt8:
    case kTfLiteInt32:
    case kTfLiteBool:
        return 0;
    case kTfLiteInt64:
        return input ? 0 : -1;
    default:
        return -1;
    }
}

static int is_quantized(int32_t type) { return type == kTfLiteInt8 || type == kTfLiteUInt8; }

static void *kernel_init(TfLiteContext *context, const char *buffer, size_t length) {
    (void)length;
    kernel_instance *instance = calloc(1, sizeof *instance);
    if (!instance) return NULL;
    atomic_init(&instance->busy, false);
    dlg_kernel *k = &instance->kernel;
    const TfLiteDelegateParams *params = (const TfLiteDelegateParams *)(const void *)buffer;
    if (dlg_py_kernel_init(context, params, k) != 0 || k->handle == 0) {
        if (!k->error[0]) snprintf(k->error, sizeof k->error, "%s: compiling the partition failed", PLUGIN_NAME);
        k->handle = 0;
        return k; /* prepare reports the error: 2.14 has no init-failure sentinel */
    }
    for (int32_t i = 0; k->input_types && i < k->inputs_count; i++)
        if (edge_type_ok(k->input_types[i], 1) != 0) {
            snprintf(k->error, sizeof k->error, "%s: partition input %d has type %d, which the kernel does not bind",
                     PLUGIN_NAME, i, k->input_types[i]);
            dlg_py_kernel_free(k->handle);
            k->handle = 0;
            return k;
        }
    for (int32_t i = 0; k->output_types && i < k->outputs_count; i++)
        if (edge_type_ok(k->output_types[i], 0) != 0) {
            snprintf(k->error, sizeof k->error, "%s: partition output %d has type %d, which the kernel does not bind",
                     PLUGIN_NAME, i, k->output_types[i]);
            dlg_py_kernel_free(k->handle);
            k->handle = 0;
            return k;
        }
    k->input_ptrs = calloc((size_t)k->inputs_count + 1, sizeof *k->input_ptrs);
    k->output_ptrs = calloc((size_t)k->outputs_count + 1, sizeof *k->output_ptrs);
    k->input_floats = float_copies(k->inputs_count, k->input_types, k->input_bytes);
    k->output_floats = float_copies(k->outputs_count, k->output_types, k->output_bytes);
    if (!k->input_ptrs || !k->output_ptrs || !k->input_floats || !k->output_floats) {
        snprintf(k->error, sizeof k->error, "%s: out of memory", PLUGIN_NAME);
        dlg_py_kernel_free(k->handle);
        k->handle = 0;
    }
    return k;
}

static void kernel_free(TfLiteContext *context, void *buffer) {
    (void)context;
    dlg_kernel *k = buffer;
    if (!k) return;
    if (k->handle) dlg_py_kernel_free(k->handle);
    free((void *)k->input_ptrs);
    free(k->output_ptrs);
    free_copies(k->input_floats, k->inputs_count);
    free_copies(k->output_floats, k->outputs_count);
    free(instance_of(k));
}

static TfLiteStatus prepare_exclusive(TfLiteContext *context, TfLiteNode *node, dlg_kernel *k) {
    if (!k->handle) {
        dlg_report(context, k->error);
        return kTfLiteError;
    }
    /* After a resize TFLite has propagated the new shapes when the delegate asks for it
       (kTfLiteDelegateFlagsRequirePropagatedShapes, cleared on graphs where it cannot): Python
       compares them with the compiled ones and recompiles the partition when they differ. */
    int propagated = node->delegate && (node->delegate->flags & kTfLiteDelegateFlagsRequirePropagatedShapes);
    if (dlg_py_kernel_prepare(context, k, propagated) != 0) {
        dlg_report(context, k->error);
        return kTfLiteError;
    }
    /* A recompiled partition (new shapes) binds tensors of other sizes: size the float copies again. */
    free_copies(k->input_floats, k->inputs_count);
    free_copies(k->output_floats, k->outputs_count);
    k->input_floats = float_copies(k->inputs_count, k->input_types, k->input_bytes);
    k->output_floats = float_copies(k->outputs_count, k->output_types, k->output_bytes);
    if (!k->input_floats || !k->output_floats) {
        dlg_report(context, PLUGIN_NAME ": out of memory sizing the delegate kernel's float copies");
        return kTfLiteError;
    }
    return kTfLiteOk;
}

static TfLiteStatus kernel_prepare(TfLiteContext *context, TfLiteNode *node) {
    dlg_kernel *k = node->user_data;
    if (!k) {
        dlg_report(context, PLUGIN_NAME ": out of memory creating the delegate kernel");
        return kTfLiteError;
    }
    if (enter(context, k, "prepare") != 0) return kTfLiteError;
    TfLiteStatus status = prepare_exclusive(context, node, k);
    leave(k);
    return status;
}

/* 0 when `dims` are the `expected` ones (rank, then the dims), which `*cursor` points at; advances it. */
static int dims_differ(const TfLiteIntArray *dims, const int32_t *expected, size_t *cursor) {
    int32_t rank = expected[(*cursor)++];
    const int32_t *want = expected + *cursor;
    *cursor += (size_t)(rank > 0 ? rank : 0);
    if (!dims || dims->size != rank) return 1;
    for (int32_t i = 0; i < rank; i++)
        if (dims->data[i] != want[i]) return 1;
    return 0;
}

static int bind_tensor(TfLiteContext *context, int32_t index, int32_t type, uint64_t bytes, const int32_t *dims,
                       size_t *cursor, void **out, char *error, size_t error_size) {
    if (index < 0 || (size_t)index >= context->tensors_size) {
        snprintf(error, error_size, "%s: tensor index %d out of range", PLUGIN_NAME, index);
        return -1;
    }
    TfLiteTensor *t = &context->tensors[index];
    /* A tensor whose shape changed since compiling (a shape computed at run time) must not be read
       with the compiled layout, even when its size is the same. */
    int reshaped = dims_differ(t->dims, dims, cursor);
    if ((int32_t)t->type != type || t->bytes != bytes || t->data.raw == NULL || reshaped) {
        snprintf(error, error_size,
                 "%s: tensor %d is not the %s tensor of %llu bytes and the shape it was compiled for "
                 "(its shape changed at run time: resize the inputs and call allocate_tensors() again)",
                 PLUGIN_NAME, index, type_name(type), (unsigned long long)bytes);
        return -1;
    }
    *out = t->data.raw;
    return 0;
}

static TfLiteStatus invoke_exclusive(TfLiteContext *context, dlg_kernel *k) {
    char error[256];
    if (!k->handle || !k->input_floats || !k->output_floats) {
        dlg_report(context, PLUGIN_NAME ": the delegate kernel was not initialised");
        return kTfLiteError;
    }
    size_t cursor = 0;
    for (int32_t i = 0; i < k->inputs_count; i++) {
        void *p = NULL;
        int32_t type = k->input_types ? k->input_types[i] : kTfLiteFloat32;
        if (bind_tensor(context, k->input_tensors[i], type, k->input_bytes[i], k->input_dims, &cursor, &p, error,
                        sizeof error)) {
            dlg_report(context, error);
            return kTfLiteError;
        }
        if (k->input_floats[i]) {
            size_t n = (size_t)k->input_bytes[i] / element_size(type);
            if (is_quantized(type)) {
                dequantize(k->input_floats[i], p, n, type, k->input_scales[i], k->input_zero_points[i]);
            } else {
                int64_t at = integers_to_floats(k->input_floats[i], p, n, type);
                if (at >= 0) {
                    /* Float storage would round it: refused, never a wrong answer (with execution
                       fallback on, the invoke runs on TFLite's CPU kernels instead). */
                    snprintf(error, sizeof error,
                             "%s: %s input tensor %d holds %lld at element %lld, beyond the 2^24 the delegate holds "
                             "exactly",
                             PLUGIN_NAME, type_name(type), k->input_tensors[i],
                             (long long)(type == kTfLiteInt64 ? ((const int64_t *)p)[at] : ((const int32_t *)p)[at]),
                             (long long)at);
                    dlg_report(context, error);
                    return kTfLiteError;
                }
            }
            p = k->input_floats[i];
        }
        k->input_ptrs[i] = p;
    }
    cursor = 0;
    for (int32_t i = 0; i < k->outputs_count; i++) {
        void *p = NULL;
        int32_t type = k->output_types ? k->output_types[i] : kTfLiteFloat32;
        if (bind_tensor(context, k->output_tensors[i], type, k->output_bytes[i], k->output_dims, &cursor,
                        &p, error, sizeof error)) {
            dlg_report(context, error);
            return kTfLiteError;
        }
        k->output_ptrs[i] = k->output_floats[i] ? (void *)k->output_floats[i] : p;
    }
    dlg_run_status status;
    int32_t rc = dlg_run(k->plan, k->input_ptrs, k->output_ptrs, NULL, &status);
    if (rc != 0) {
        snprintf(error, sizeof error, "%s: OpenCL error %d at stage %d, launch %d", PLUGIN_NAME, rc, status.stage,
                 status.index);
        dlg_report(context, error);
        return kTfLiteError;
    }
    for (int32_t i = 0; i < k->outputs_count; i++) {
        if (!k->output_floats[i]) continue;
        int32_t type = k->output_types[i];
        void *dst = context->tensors[k->output_tensors[i]].data.raw;
        size_t n = (size_t)k->output_bytes[i] / element_size(type);
        if (is_quantized(type))
            quantize(dst, k->output_floats[i], n, type, k->output_scales[i], k->output_zero_points[i]);
        else
            floats_to_integers(dst, k->output_floats[i], n, type);
    }
    return kTfLiteOk;
}

static TfLiteStatus kernel_invoke(TfLiteContext *context, TfLiteNode *node) {
    dlg_kernel *k = node->user_data;
    if (!k) {
        dlg_report(context, PLUGIN_NAME ": the delegate kernel was not initialised");
        return kTfLiteError;
    }
    if (enter(context, k, "invoke") != 0) return kTfLiteError;
    TfLiteStatus status = invoke_exclusive(context, k);
    leave(k);
    return status;
}

int dlg_replace_nodes(TfLiteContext *context, TfLiteDelegate *delegate, const int *nodes, int count) {
    if (count < 0) return kTfLiteError;
    TfLiteIntArray *array = malloc(sizeof(int) * ((size_t)count + 1));
    if (!array) return kTfLiteError;
    array->size = count;
    for (int i = 0; i < count; i++) array->data[i] = nodes[i];
    TfLiteRegistration registration;
    memset(&registration, 0, sizeof registration); /* registration_external etc. must be NULL */
    registration.init = kernel_init;
    registration.free = kernel_free;
    registration.prepare = kernel_prepare;
    registration.invoke = kernel_invoke;
    registration.custom_name = PLUGIN_NAME;
    registration.version = 1;
    TfLiteStatus status = context->ReplaceNodeSubsetsWithDelegateKernels(context, registration, array, delegate);
    free(array); /* the runtime does not take ownership */
    return status;
}

TfLiteDelegate *tflite_plugin_create_delegate(const char *const *options_keys, const char *const *options_values,
                                              size_t num_options, void (*report_error)(const char *)) {
    char error[1024] = {0};
    if (num_options > 4096) num_options = 0; /* the count arrives as a C int from ctypes */
    if (dlg_python_side_ready(error, sizeof error) != 0) {
        if (report_error) report_error(error);
        fprintf(stderr, "%s\n", error); /* a host may pass no report_error: the reason must show */
        return NULL;
    }
    int64_t id = dlg_py_create(options_keys, options_values, (int)num_options, error, sizeof error);
    if (id <= 0) {
        if (report_error) report_error(error[0] ? error : PLUGIN_NAME ": creating the delegate failed");
        return NULL;
    }
    TfLiteDelegate *delegate = calloc(1, sizeof *delegate);
    delegate_data *data = calloc(1, sizeof *data);
    if (!delegate || !data) {
        free(delegate);
        free(data);
        dlg_py_destroy(id);
        if (report_error) report_error(PLUGIN_NAME ": out of memory");
        return NULL;
    }
    data->id = id;
    delegate->data_ = data;
    delegate->Prepare = delegate_prepare;
    /* Dynamic tensors allowed: TFLite then applies the delegate to graphs with shapes computed at
       run time (their nodes stay on CPU, compiler/shapes.py), and keeps the graph mutable; with
       propagated shapes, a resize reaches the kernel's prepare with the new shapes, which recompiles. */
    delegate->flags = kTfLiteDelegateFlagsAllowDynamicTensors | kTfLiteDelegateFlagsRequirePropagatedShapes;
    return delegate;
}

void tflite_plugin_destroy_delegate(TfLiteDelegate *delegate) {
    if (!delegate) return;
    delegate_data *data = delegate->data_;
    if (data) {
        dlg_py_destroy(data->id);
        free(data);
    }
    free(delegate);
}
