/* A stand-in for the package's plugin library (tests/native/litert_mock.c): makes an empty
   delegate for any options, so the accelerator's C can be driven without Python or a device. */
#include <stdlib.h>

#include "tflite_abi.h"

TfLiteDelegate *tflite_plugin_create_delegate(const char *const *keys, const char *const *values, size_t count,
                                              void (*report_error)(const char *)) {
    (void)keys;
    (void)values;
    (void)count;
    (void)report_error;
    return calloc(1, sizeof(TfLiteDelegate));
}

void tflite_plugin_destroy_delegate(TfLiteDelegate *delegate) { free(delegate); }
