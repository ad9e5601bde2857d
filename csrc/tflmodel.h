/*
 * Verifier of TFLite model files (schemas/tflite_schema.fbs), run before any
 * TFLite runtime sees a model: the FlatBuffer's structure (every offset,
 * vtable, vector, string and union, by csrc/fbverify.c against the tables
 * generated into tflmodel_verify.c), then what TFLite relies on without
 * checking (indices, sizes, subgraph references; csrc/tflmodel.c).
 *
 * This header is also the cffi cdef (delegate/_build_native.py strips the
 * preprocessor lines), so it stays within what cffi's parser accepts.
 */
#ifndef DLG_TFLMODEL_H
#define DLG_TFLMODEL_H

#include <stddef.h>
#include <stdint.h>

enum {
    DLG_MODEL_OK = 0,
    DLG_MODEL_BAD = 1,  /* not a valid model: err says where and why */
    DLG_MODEL_NOMEM = 2 /* the system allocator failed */
};

typedef struct dlg_model_error {
    /* byte offset in the file where the problem was found */
    uint64_t offset;
    /* field path, e.g. "Model.subgraphs[0].operators[3].inputs"; NUL-terminated */
    char field[256];
    /* what is wrong; NUL-terminated */
    char message[256];
} dlg_model_error;

/* Verify the model file buf[0..len). Returns DLG_MODEL_OK, or an error code
 * with *err filled. Never reads outside buf[0..len). */
int dlg_model_verify(const uint8_t *buf, size_t len, dlg_model_error *err);

#endif
