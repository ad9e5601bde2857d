/*
 * Unit test of the enqueue loop (csrc/runtime.c) against a mock OpenCL API, built with
 * ASan + UBSan by tests/test_native_sanitizers.py: checks launch order and geometry, the
 * flush policies, profiling, and that a failing call stops the run but still waits.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

struct _cl_event {
    uint64_t start, end;
};

static struct {
    int launches, flushes, finishes, writes, reads, released;
    int fail_launch_at; /* -1: never */
    uintptr_t last_kernel[64];
    size_t last_global[64];
    int flush_after[64];
} mock;

static int32_t m_enqueue(cl_command_queue q, cl_kernel k, uint32_t dim, const size_t *off, const size_t *global,
                         const size_t *local, uint32_t n, const cl_event *wait, cl_event *event) {
    (void)q; (void)off; (void)local; (void)n; (void)wait;
    if (mock.launches == mock.fail_launch_at) return -54; /* CL_INVALID_WORK_GROUP_SIZE */
    CHECK(dim >= 1 && dim <= 3);
    mock.last_kernel[mock.launches] = (uintptr_t)k;
    mock.last_global[mock.launches] = global[0];
    if (event) {
        struct _cl_event *e = malloc(sizeof *e);
        CHECK(e);
        e->start = 1000u * (uint64_t)mock.launches;
        e->end = e->start + 10u + (uint64_t)mock.launches;
        *event = e;
    }
    mock.launches++;
    return 0;
}

static int32_t m_write(cl_command_queue q, cl_mem b, uint32_t blocking, size_t off, size_t size, const void *p,
                       uint32_t n, const cl_event *w, cl_event *e) {
    (void)q; (void)b; (void)blocking; (void)off; (void)n; (void)w; (void)e;
    CHECK(p != NULL && size > 0 && ((const unsigned char *)p)[size - 1] == 7);
    mock.writes++;
    return 0;
}

static int32_t m_read(cl_command_queue q, cl_mem b, uint32_t blocking, size_t off, size_t size, void *p, uint32_t n,
                      const cl_event *w, cl_event *e) {
    (void)q; (void)b; (void)blocking; (void)off; (void)n; (void)w; (void)e;
    memset(p, 9, size);
    mock.reads++;
    return 0;
}

static int32_t m_flush(cl_command_queue q) {
    (void)q;
    mock.flush_after[mock.flushes++] = mock.launches;
    return 0;
}

static int32_t m_finish(cl_command_queue q) {
    (void)q;
    mock.finishes++;
    return 0;
}

static int32_t m_profile(cl_event e, uint32_t name, size_t size, void *value, size_t *ret) {
    (void)ret;
    CHECK(size == sizeof(uint64_t));
    uint64_t v = name == 0x1282 ? e->start : e->end;
    memcpy(value, &v, sizeof v);
    return 0;
}

static int32_t m_release(cl_event e) {
    free(e);
    mock.released++;
    return 0;
}

static void reset(int fail_at) {
    memset(&mock, 0, sizeof mock);
    mock.fail_launch_at = fail_at;
}

int main(void) {
    dlg_cl_api api = {m_enqueue, m_write, m_read, m_flush, m_finish, m_profile, m_release};
    enum { N = 7 };
    dlg_launch launches[N];
    for (int i = 0; i < N; i++) {
        memset(&launches[i], 0, sizeof launches[i]);
        launches[i].kernel = (cl_kernel)(uintptr_t)(0x1000 + i);
        launches[i].work_dim = 3;
        launches[i].global_size[0] = 8u * (size_t)(i + 1);
        launches[i].global_size[1] = launches[i].global_size[2] = 1;
        launches[i].local_size[0] = 8;
        launches[i].local_size[1] = launches[i].local_size[2] = 1;
    }
    dlg_transfer in[2] = {{(cl_mem)(uintptr_t)1, 16}, {(cl_mem)(uintptr_t)2, 3}};
    dlg_transfer out[1] = {{(cl_mem)(uintptr_t)3, 5}};
    unsigned char a[16], b[3], o[5];
    memset(a, 7, sizeof a);
    memset(b, 7, sizeof b);
    const void *host_in[2] = {a, b};
    void *host_out[1] = {o};
    dlg_plan plan = {&api, (cl_command_queue)(uintptr_t)0x99, in, 2, launches, N, out, 1, 0, 1, 3};
    dlg_run_status status;

    /* Plain run with periodic flushes every 3 launches. */
    reset(-1);
    CHECK(dlg_run(&plan, host_in, host_out, NULL, &status) == 0);
    CHECK(mock.launches == N && mock.writes == 2 && mock.reads == 1 && mock.finishes == 1);
    for (int i = 0; i < N; i++) CHECK(mock.last_kernel[i] == (uintptr_t)(0x1000 + i) && mock.last_global[i] == 8u * (size_t)(i + 1));
    CHECK(mock.flushes == 2 && mock.flush_after[0] == 3 && mock.flush_after[1] == 6);
    CHECK(o[0] == 9 && o[4] == 9);

    /* need_flush adds a flush after the last launch. */
    plan.need_flush = 1;
    plan.flush_periodically = 0;
    reset(-1);
    CHECK(dlg_run(&plan, host_in, host_out, NULL, &status) == 0);
    CHECK(mock.flushes == 1 && mock.flush_after[0] == N);

    /* Profiling: one time per launch, every event released. */
    uint64_t ns[N];
    reset(-1);
    CHECK(dlg_run(&plan, host_in, host_out, ns, &status) == 0);
    for (int i = 0; i < N; i++) CHECK(ns[i] == 10u + (uint64_t)i);
    CHECK(mock.released == N);

    /* A failing launch: reported with its index, nothing after it, but the queue is still finished. */
    reset(4);
    CHECK(dlg_run(&plan, host_in, host_out, ns, &status) == -54);
    CHECK(status.cl_error == -54 && status.stage == 2 && status.index == 4);
    CHECK(mock.launches == 4 && mock.reads == 0 && mock.finishes == 1 && mock.released == 4);

    /* Launch-only loop. */
    reset(-1);
    CHECK(dlg_enqueue_launches(&plan, 5, &status) == 0);
    CHECK(mock.launches == 5 * N && mock.writes == 0 && mock.finishes == 0);

    /* Loading from a path that does not exist fails with a message, not a crash. */
    dlg_cl_api loaded;
    char err[256];
    CHECK(dlg_cl_load("/nonexistent/libOpenCL.so.1", &loaded, err, sizeof err) == -1);
    CHECK(strstr(err, "cannot load the OpenCL library") != NULL);
    printf("runtime loop checks passed\n");
    return 0;
}
