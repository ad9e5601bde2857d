/*
 * Leak and sanitizer driver for the plugin's C half (csrc/plugin.c), without Python or a device.
 *
 * The dlg_py_* callbacks (Python in the package) and dlg_run (the enqueue loop, covered by
 * runtime_mock.c) are stubs here; a fake TfLiteContext plays the interpreter: its
 * ReplaceNodeSubsetsWithDelegateKernels runs the delegate kernel's init, prepare, invokes and
 * free as TFLite does. Each cycle creates a delegate, prepares, invokes and destroys it, going
 * through the failure paths too (create refused, kernel init failing, a tensor of the wrong size,
 * a run failing, a tensor of the right size whose shape changed). Built with -fsanitize=address,undefined and run with LeakSanitizer by
 * tests/test_leaks.py: any leak, overflow or UB aborts. Prints the counts at the end.
 *
 * Then one overlap check: a thread's invoke is held inside the run while the main thread invokes
 * the same kernel; the second invoke must be refused with a report (never run), and the kernel
 * must take invokes again once the first returns.
 *
 *   plugin_mock CYCLES
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plugin.h"
#include "python_side.h"

static long creates, destroys, inits, kernel_frees, invokes_ok, invokes_failed, reports;
static int fail_init, fail_run;
/* the overlap check: a run waits inside while `hold_run` is set, saying so in `run_inside` */
static atomic_bool hold_run, run_inside;
static atomic_long runs_at_once;

/* ------------------------------------------------------------ Python stubs */

int dlg_python_side_ready(char *error, size_t error_size) {
    (void)error;
    (void)error_size;
    return 0;
}

int64_t dlg_py_create(const char *const *keys, const char *const *values, int count, char *error, size_t error_size) {
    for (int i = 0; i < count; i++)
        if (strcmp(keys[i], "refuse") == 0) {
            snprintf(error, error_size, "refused: %s", values[i]);
            return 0;
        }
    return ++creates;
}

void dlg_py_destroy(int64_t id) {
    if (id > 0) destroys++;
}

int dlg_py_prepare(TfLiteContext *context, TfLiteDelegate *delegate, int64_t id) {
    (void)id;
    static const int nodes[] = {0, 1};
    return dlg_replace_nodes(context, delegate, nodes, 2);
}

static const int32_t input_ids[] = {0};
static const uint64_t input_bytes[] = {64};
static const int32_t output_ids[] = {1};
static const uint64_t output_bytes[] = {64};
static const int32_t compiled_dims[] = {2, 4, 4}; /* rank 2: 4 x 4 floats */
static const int32_t float32_types[] = {kTfLiteFloat32};
static const float unit_scales[] = {1.0f};
static const int32_t zero_points[] = {0};
static const dlg_plan *const fake_plan = (const dlg_plan *)(const void *)&fake_plan;

int dlg_py_kernel_init(TfLiteContext *context, const TfLiteDelegateParams *params, dlg_kernel *kernel) {
    (void)context;
    if (params->nodes_to_replace->size != 2) return 1;
    if (fail_init) {
        snprintf(kernel->error, sizeof kernel->error, "init failed on purpose");
        return 1;
    }
    kernel->handle = ++inits;
    kernel->plan = fake_plan;
    kernel->inputs_count = 1;
    kernel->input_tensors = input_ids;
    kernel->input_bytes = input_bytes;
    kernel->outputs_count = 1;
    kernel->output_tensors = output_ids;
    kernel->output_bytes = output_bytes;
    kernel->input_dims = compiled_dims;
    kernel->output_dims = compiled_dims;
    kernel->input_types = kernel->output_types = float32_types;
    kernel->input_scales = kernel->output_scales = unit_scales;
    kernel->input_zero_points = kernel->output_zero_points = zero_points;
    return 0;
}

int dlg_py_kernel_prepare(TfLiteContext *context, dlg_kernel *kernel, int propagated) {
    (void)context;
    (void)propagated;
    return kernel->handle > 0 ? 0 : 1;
}

void dlg_py_kernel_free(int64_t handle) {
    if (handle > 0) kernel_frees++;
}

int32_t dlg_run(const dlg_plan *plan, const void *const *host_inputs, void *const *host_outputs, uint64_t *launch_ns,
                dlg_run_status *status) {
    (void)launch_ns;
    memset(status, 0, sizeof *status);
    if (plan != fake_plan) abort();
    if (fail_run) {
        status->stage = 2;
        return -5;
    }
    if (atomic_fetch_add(&runs_at_once, 1) != 0) abort(); /* two runs of one plan at once */
    atomic_store(&run_inside, true);
    while (atomic_load(&hold_run)) nanosleep(&(struct timespec){0, 100000}, NULL);
    memcpy(host_outputs[0], host_inputs[0], 64); /* both must be the 64-byte tensors */
    atomic_fetch_sub(&runs_at_once, 1);
    return 0;
}

/* --------------------------------------------------------- fake runtime */

static float tensor_data[2][16];
/* TfLiteIntArray layouts: size, then the dims */
static int square_dims[] = {2, 4, 4};
static int wide_dims[] = {2, 2, 8};

static atomic_long reports_seen;

static void report(TfLiteContext *context, const char *format, ...) {
    (void)context;
    (void)format;
    reports++;
    atomic_fetch_add(&reports_seen, 1);
}

/* the overlap check keeps the kernel TFLite would hold instead of cycling it */
static int keep_node;
static TfLiteRegistration kept_registration;
static TfLiteNode kept_node;

static TfLiteStatus replace(TfLiteContext *context, TfLiteRegistration registration, const TfLiteIntArray *nodes,
                            TfLiteDelegate *delegate) {
    TfLiteIntArray *copy = malloc(sizeof(int) * ((size_t)nodes->size + 1));
    TfLiteIntArray *ins = malloc(sizeof(int) * 2);
    TfLiteIntArray *outs = malloc(sizeof(int) * 2);
    if (!copy || !ins || !outs) abort();
    memcpy(copy, nodes, sizeof(int) * ((size_t)nodes->size + 1));
    ins->size = outs->size = 1;
    ins->data[0] = 0;
    outs->data[0] = 1;
    TfLiteDelegateParams params = {delegate, copy, ins, outs};
    TfLiteNode node;
    memset(&node, 0, sizeof node);
    node.user_data = registration.init(context, (const char *)&params, 0);
    TfLiteStatus status = registration.prepare(context, &node);
    if (keep_node) {
        if (status != kTfLiteOk) abort();
        kept_registration = registration;
        kept_node = node;
        free(copy);
        free(ins);
        free(outs);
        return kTfLiteOk;
    }
    if (status == kTfLiteOk) {
        for (int i = 0; i < 3; i++) {
            if (registration.invoke(context, &node) == kTfLiteOk)
                invokes_ok++;
            else
                invokes_failed++;
        }
    }
    registration.free(context, node.user_data);
    free(copy);
    free(ins);
    free(outs);
    return kTfLiteOk;
}

static TfLiteContext *overlap_context;

static void *invoke_held(void *status) {
    *(TfLiteStatus *)status = kept_registration.invoke(overlap_context, &kept_node);
    return NULL;
}

/* A second invoke while one is inside the run is refused (reported, not run); afterwards the
   kernel runs again. Aborts otherwise. */
static void overlap_check(TfLiteContext *context) {
    const char *keys[] = {"precision"};
    const char *values[] = {"F32"};
    TfLiteDelegate *d = tflite_plugin_create_delegate(keys, values, 1, NULL);
    if (!d) abort();
    fail_init = fail_run = 0;
    keep_node = 1;
    if (d->Prepare(context, d) != kTfLiteOk) abort();
    keep_node = 0;
    overlap_context = context;
    atomic_store(&run_inside, false);
    atomic_store(&hold_run, true);
    TfLiteStatus first = kTfLiteError;
    pthread_t thread;
    if (pthread_create(&thread, NULL, invoke_held, &first) != 0) abort();
    while (!atomic_load(&run_inside)) nanosleep(&(struct timespec){0, 100000}, NULL);
    long reports_before = atomic_load(&reports_seen);
    if (kept_registration.invoke(context, &kept_node) != kTfLiteError) abort();
    if (atomic_load(&reports_seen) != reports_before + 1) abort();
    atomic_store(&hold_run, false);
    if (pthread_join(thread, NULL) != 0 || first != kTfLiteOk) abort();
    if (kept_registration.invoke(context, &kept_node) != kTfLiteOk) abort();
    kept_registration.free(context, kept_node.user_data);
    tflite_plugin_destroy_delegate(d);
    printf("overlap_refused=1\n");
}

int main(int argc, char **argv) {
    long cycles = argc > 1 ? atol(argv[1]) : 1000;
    TfLiteTensor tensors[2];
    memset(tensors, 0, sizeof tensors);
    for (int i = 0; i < 2; i++) {
        tensors[i].type = kTfLiteFloat32;
        tensors[i].bytes = 64;
        tensors[i].data.raw = (char *)tensor_data[i];
        tensors[i].dims = (TfLiteIntArray *)(void *)square_dims;
    }
    TfLiteContext context;
    memset(&context, 0, sizeof context);
    context.tensors = tensors;
    context.tensors_size = 2;
    context.ReportError = report;
    context.ReplaceNodeSubsetsWithDelegateKernels = replace;
    const char *keys[] = {"precision", "refuse"};
    const char *values[] = {"F32", "on purpose"};
    long refused = 0;
    for (long c = 0; c < cycles; c++) {
        /* 0 plain, 1 create refused, 2 init fails, 3 wrong tensor size, 4 run fails, 5 reshaped input */
        int mode = (int)(c % 6);
        TfLiteDelegate *d = tflite_plugin_create_delegate(keys, values, mode == 1 ? 2 : 1, NULL);
        if (mode == 1) {
            if (d) abort();
            refused++;
            continue;
        }
        if (!d) abort();
        fail_init = mode == 2;
        fail_run = mode == 4;
        tensors[1].bytes = mode == 3 ? 60 : 64;
        tensors[0].dims = (TfLiteIntArray *)(void *)(mode == 5 ? wide_dims : square_dims);
        long failed_before = invokes_failed;
        tensor_data[0][c % 16] = (float)c;
        if (d->Prepare(&context, d) != kTfLiteOk) abort();
        if (mode == 0 && tensor_data[1][c % 16] != (float)c) abort();
        if (mode == 5 && invokes_failed != failed_before + 3) abort(); /* never run with the compiled layout */
        tflite_plugin_destroy_delegate(d);
    }
    if (creates != destroys || inits != kernel_frees) abort();
    printf("cycles=%ld creates=%ld destroys=%ld refused=%ld inits=%ld frees=%ld invokes_ok=%ld invokes_failed=%ld "
           "reports=%ld\n",
           cycles, creates, destroys, refused, inits, kernel_frees, invokes_ok, invokes_failed, reports);
    tensors[1].bytes = 64;
    tensors[0].dims = (TfLiteIntArray *)(void *)square_dims;
    overlap_check(&context);
    return 0;
}
