/* The TFLite external-delegate plugin. See plugin.h. */
#include "plugin.h"

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

void dlg_report(TfLiteContext *context, const char *message) {
    if (context && context->ReportError) context->ReportError(context, "%s", message);
}

static TfLiteStatus delegate_prepare(TfLiteContext *context, TfLiteDelegate *delegate) {
    const delegate_data *d = delegate->data_;
    return dlg_py_prepare(context, delegate, d->id) == 0 ? kTfLiteOk : kTfLiteError;
}

static void *kernel_init(TfLiteContext *context, const char *buffer, size_t length) {
    (void)length;
    dlg_kernel *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    const TfLiteDelegateParams *params = (const TfLiteDelegateParams *)(const void *)buffer;
    if (dlg_py_kernel_init(context, params, k) != 0 || k->handle == 0) {
        if (!k->error[0]) snprintf(k->error, sizeof k->error, "%s: compiling the partition failed", PLUGIN_NAME);
        k->handle = 0;
        return k; /* prepare reports the error: 2.14 has no init-failure sentinel */
    }
    k->input_ptrs = calloc((size_t)k->inputs_count + 1, sizeof *k->input_ptrs);
    k->output_ptrs = calloc((size_t)k->outputs_count + 1, sizeof *k->output_ptrs);
    if (!k->input_ptrs || !k->output_ptrs) {
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
    free(k);
}

static TfLiteStatus kernel_prepare(TfLiteContext *context, TfLiteNode *node) {
    dlg_kernel *k = node->user_data;
    if (!k) {
        dlg_report(context, PLUGIN_NAME ": out of memory creating the delegate kernel");
        return kTfLiteError;
    }
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
    return kTfLiteOk;
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

static int bind_tensor(TfLiteContext *context, int32_t index, uint64_t bytes, const int32_t *dims, size_t *cursor,
                       void **out, char *error, size_t error_size) {
    if (index < 0 || (size_t)index >= context->tensors_size) {
        snprintf(error, error_size, "%s: tensor index %d out of range", PLUGIN_NAME, index);
        return -1;
    }
    TfLiteTensor *t = &context->tensors[index];
    /* A tensor whose shape changed since compiling (a shape computed at run time) must not be read
       with the compiled layout, even when its size is the same. */
    int reshaped = dims_differ(t->dims, dims, cursor);
    if (t->type != kTfLiteFloat32 || t->bytes != bytes || t->data.raw == NULL || reshaped) {
        snprintf(error, error_size,
                 "%s: tensor %d is not the float32 tensor of %llu bytes and the shape it was compiled for "
                 "(its shape changed at run time: resize the inputs and call allocate_tensors() again)",
                 PLUGIN_NAME, index, (unsigned long long)bytes);
        return -1;
    }
    *out = t->data.raw;
    return 0;
}

static TfLiteStatus kernel_invoke(TfLiteContext *context, TfLiteNode *node) {
    dlg_kernel *k = node->user_data;
    char error[256];
    if (!k || !k->handle) {
        dlg_report(context, PLUGIN_NAME ": the delegate kernel was not initialised");
        return kTfLiteError;
    }
    size_t cursor = 0;
    for (int32_t i = 0; i < k->inputs_count; i++) {
        void *p = NULL;
        if (bind_tensor(context, k->input_tensors[i], k->input_bytes[i], k->input_dims, &cursor, &p, error,
                        sizeof error)) {
            dlg_report(context, error);
            return kTfLiteError;
        }
        k->input_ptrs[i] = p;
    }
    cursor = 0;
    for (int32_t i = 0; i < k->outputs_count; i++) {
        if (bind_tensor(context, k->output_tensors[i], k->output_bytes[i], k->output_dims, &cursor,
                        &k->output_ptrs[i], error, sizeof error)) {
            dlg_report(context, error);
            return kTfLiteError;
        }
    }
    dlg_run_status status;
    int32_t rc = dlg_run(k->plan, k->input_ptrs, k->output_ptrs, NULL, &status);
    if (rc != 0) {
        snprintf(error, sizeof error, "%s: OpenCL error %d at stage %d, launch %d", PLUGIN_NAME, rc, status.stage,
                 status.index);
        dlg_report(context, error);
        return kTfLiteError;
    }
    return kTfLiteOk;
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
