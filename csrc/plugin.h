/*
 * The TFLite external-delegate plugin: tflite_plugin_create_delegate /
 * tflite_plugin_destroy_delegate, the delegate's Prepare and the delegate kernel.
 *
 * The extension module is itself the plugin: load_delegate(delegate._native.__file__)
 * loads the already-imported module. Decisions that need the compiler (which nodes
 * to claim, compiling a partition) call back into Python (the dlg_py_* functions,
 * cffi `extern "Python+C"`, declared in delegate/_build_native.py); invoke is C only:
 * it hands the TFLite tensors' memory to the enqueue loop (runtime.h).
 *
 * Also the cffi cdef (preprocessor lines stripped).
 */
#ifndef DLG_PLUGIN_H
#define DLG_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "runtime.h"
#include "tflite_abi.h"

/* One compiled partition, as the delegate kernel's user_data. Python fills it in init. */
typedef struct dlg_kernel {
    int64_t handle;            /* Python-side id of the loaded runtime; 0 when init failed */
    const dlg_plan *plan;
    int32_t inputs_count;
    const int32_t *input_tensors;   /* TFLite tensor indices, in the plan's input order */
    const uint64_t *input_bytes;    /* expected TfLiteTensor.bytes of each */
    int32_t outputs_count;
    const int32_t *output_tensors;
    const uint64_t *output_bytes;
    /* the TFLite dims each was compiled for: per tensor its rank, then that many dims */
    const int32_t *input_dims;
    const int32_t *output_dims;
    /* the TfLiteType of each input and output: float32, or int8 / uint8 for quantized activations
       the partition carries in float (compiler/quant.py), converted here with their scale and
       zero point: real = (q - zero_point) * scale */
    const int32_t *input_types;
    const float *input_scales;
    const int32_t *input_zero_points;
    const int32_t *output_types;
    const float *output_scales;
    const int32_t *output_zero_points;
    const void **input_ptrs;        /* scratch for dlg_run, allocated by C after init */
    void **output_ptrs;
    float **input_floats;           /* float copies of the int8 / uint8 ones (NULL for float32), by C */
    float **output_floats;
    char error[1024];
} dlg_kernel;

TfLiteDelegate *tflite_plugin_create_delegate(const char *const *options_keys, const char *const *options_values,
                                              size_t num_options, void (*report_error)(const char *));
void tflite_plugin_destroy_delegate(TfLiteDelegate *delegate);

/* Replace `nodes` (count of them) with delegate kernels; called from Python inside Prepare. */
int dlg_replace_nodes(TfLiteContext *context, TfLiteDelegate *delegate, const int *nodes, int count);

/* context->ReportError(context, "%s", message). */
void dlg_report(TfLiteContext *context, const char *message);

#endif
