/*
 * libFuzzer target for the TFLite model verifier (csrc/tflmodel.c, fbverify.c).
 *
 * Every input is verified twice: a verdict is either DLG_MODEL_OK with an
 * empty error, or DLG_MODEL_BAD / DLG_MODEL_NOMEM with a NUL-terminated field
 * path under "Model", a non-empty message and an offset inside the input; both
 * runs agree (no hidden state). A violated invariant aborts, so the fuzzer
 * reports it like a sanitizer finding; reads outside the input are ASan's.
 *
 * Built by scripts/fuzz.sh with clang -fsanitize=fuzzer,address,undefined; the
 * regression test (tests/test_fuzz_regressions.py) links it with replay_main.c
 * under gcc's ASan + UBSan to replay tests/fuzz/regressions/model/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tflmodel.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void broken(const char *what) {
    fprintf(stderr, "model_fuzz: invariant violated: %s\n", what);
    abort();
}

static int verdict(const uint8_t *data, size_t size, dlg_model_error *err) {
    memset(err, 0x5a, sizeof *err); /* the verifier must overwrite every byte it reports */
    int rc = dlg_model_verify(data, size, err);
    if (rc == DLG_MODEL_OK) {
        if (err->field[0] || err->message[0] || err->offset) broken("success with an error");
        return rc;
    }
    if (rc != DLG_MODEL_BAD && rc != DLG_MODEL_NOMEM) broken("unknown status");
    if (!memchr(err->field, 0, sizeof err->field) || !memchr(err->message, 0, sizeof err->message))
        broken("error text not NUL-terminated");
    if (strncmp(err->field, "Model", 5) != 0) broken("field path not under Model");
    if (!err->message[0]) broken("empty message");
    if (err->offset > size) broken("offset past the input");
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dlg_model_error first, second;
    int a = verdict(data, size, &first);
    int b = verdict(data, size, &second);
    if (a != b || first.offset != second.offset || strcmp(first.field, second.field) != 0 ||
        strcmp(first.message, second.message) != 0)
        broken("two runs disagree");
    return 0;
}
