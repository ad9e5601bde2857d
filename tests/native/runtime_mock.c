/*
 * Unit test of the enqueue loop (csrc/runtime.c) against a mock OpenCL API, built with
 * ASan + UBSan by tests/test_native_sanitizers.py: checks launch order and geometry, the
 * flush policies, profiling, that a failing call stops the run but still waits, and zero-copy
 * transfers (a buffer made over the host memory once per pointer, bound to the conversion
 * kernel, synchronised by map/unmap unless the driver's buffer is the host memory itself, released at
 * the end; a refused pointer falls back to copies).
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

struct _cl_mem {
    void *host;
    size_t size;
};

static struct {
    int launches, flushes, finishes, writes, reads, released;
    int creates, mem_releases, maps, unmaps, arg_sets, refuse_host;
    cl_mem bound[8]; /* kernel 0x2000 + k's argument 3 */
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

static cl_mem m_create(cl_context c, uint64_t flags, size_t size, void *host, int32_t *err) {
    (void)c;
    CHECK(flags & (1u << 3)); /* CL_MEM_USE_HOST_PTR */
    if (mock.refuse_host) {
        *err = -37; /* CL_INVALID_HOST_PTR */
        return NULL;
    }
    cl_mem m = malloc(sizeof *m);
    CHECK(m);
    m->host = host;
    m->size = size;
    mock.creates++;
    *err = 0;
    return m;
}

static int32_t m_set_arg(cl_kernel k, uint32_t index, size_t size, const void *value) {
    uintptr_t which = (uintptr_t)k - 0x2000;
    CHECK(which < 8 && index == 3 && size == sizeof(cl_mem));
    memcpy(&mock.bound[which], value, sizeof(cl_mem));
    mock.arg_sets++;
    return 0;
}

static int32_t m_release_mem(cl_mem m) {
    free(m);
    mock.mem_releases++;
    return 0;
}

static void *m_map(cl_command_queue q, cl_mem m, uint32_t blocking, uint64_t flags, size_t off, size_t size,
                   uint32_t n, const cl_event *w, cl_event *e, int32_t *err) {
    (void)q; (void)blocking; (void)flags; (void)n; (void)w; (void)e;
    CHECK(off == 0 && size == m->size);
    mock.maps++;
    *err = 0;
    return m->host;
}

static int32_t m_unmap(cl_command_queue q, cl_mem m, void *p, uint32_t n, const cl_event *w, cl_event *e) {
    (void)q; (void)n; (void)w; (void)e;
    CHECK(p == m->host);
    mock.unmaps++;
    return 0;
}

static void reset(int fail_at) {
    cl_mem bound[8];
    memcpy(bound, mock.bound, sizeof bound); /* bindings outlive a reset, as kernel arguments do */
    memset(&mock, 0, sizeof mock);
    memcpy(mock.bound, bound, sizeof bound);
    mock.fail_launch_at = fail_at;
}

int main(void) {
    /* Only what the loop calls; the rest (devices, programs, kernels) is the Python loader's. */
    dlg_cl_api api = {.enqueue_nd_range_kernel = m_enqueue,
                      .enqueue_write_buffer = m_write,
                      .enqueue_read_buffer = m_read,
                      .flush = m_flush,
                      .finish = m_finish,
                      .get_event_profiling_info = m_profile,
                      .release_event = m_release,
                      .create_buffer = m_create,
                      .set_kernel_arg = m_set_arg,
                      .release_mem_object = m_release_mem,
                      .enqueue_map_buffer = m_map,
                      .enqueue_unmap_mem_object = m_unmap};
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
    dlg_transfer in[2] = {{.buffer = (cl_mem)(uintptr_t)1, .bytes = 16}, {.buffer = (cl_mem)(uintptr_t)2, .bytes = 3}};
    dlg_transfer out[1] = {{.buffer = (cl_mem)(uintptr_t)3, .bytes = 5}};
    unsigned char a[16], b[3], o[5];
    memset(a, 7, sizeof a);
    memset(b, 7, sizeof b);
    const void *host_in[2] = {a, b};
    void *host_out[1] = {o};
    dlg_plan plan = {.api = &api, .queue = (cl_command_queue)(uintptr_t)0x99, .context = NULL, .inputs = in,
                     .inputs_count = 2, .launches = launches, .launches_count = N, .outputs = out,
                     .outputs_count = 1, .need_flush = 0, .flush_periodically = 1, .flush_period = 3};
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

    /* Zero copy: one buffer per host pointer, kept while the pointer stays; map/unmap instead of copies. */
    plan.flush_periodically = 0;
    for (int i = 0; i < 2; i++) {
        in[i].zero_copy = 1;
        in[i].kernel = (cl_kernel)(uintptr_t)(0x2000 + i);
        in[i].arg_index = 3;
    }
    out[0].zero_copy = 1;
    out[0].kernel = (cl_kernel)(uintptr_t)0x2002;
    out[0].arg_index = 3;
    /* Temporaries (keep_wrapped 0): wrapped for the run, then unbound and released before returning. */
    reset(-1);
    CHECK(dlg_run(&plan, host_in, host_out, NULL, &status) == 0);
    CHECK(mock.writes == 0 && mock.reads == 0 && mock.creates == 3 && mock.mem_releases == 3);
    CHECK(mock.bound[0] == in[0].buffer && mock.bound[1] == in[1].buffer && mock.bound[2] == out[0].buffer);
    CHECK(in[0].wrapped == NULL && out[0].wrapped == NULL);
    /* Host memory in place (the driver's buffer is the host memory): wrapped alike, no map or unmap. */
    plan.host_memory_in_place = 1;
    reset(-1);
    CHECK(dlg_run(&plan, host_in, host_out, NULL, &status) == 0);
    CHECK(mock.creates == 3 && mock.mem_releases == 3 && mock.maps == 0 && mock.unmaps == 0);
    CHECK(mock.writes == 0 && mock.reads == 0 && mock.launches == N && mock.finishes == 1);
    plan.host_memory_in_place = 0;
    plan.keep_wrapped = 1;
    reset(-1);
    CHECK(dlg_run(&plan, host_in, host_out, NULL, &status) == 0);
    CHECK(mock.writes == 0 && mock.reads == 0 && mock.creates == 3 && mock.arg_sets == 3);
    CHECK(mock.maps == 3 && mock.unmaps == 3 && mock.finishes == 1);
    CHECK(mock.bound[0]->host == a && mock.bound[1]->host == b && mock.bound[2]->host == o);
    reset(-1);
    CHECK(dlg_run(&plan, host_in, host_out, NULL, &status) == 0); /* same pointers: nothing new */
    CHECK(mock.creates == 0 && mock.arg_sets == 0 && mock.mem_releases == 0 && mock.maps == 3);
    unsigned char o2[5];
    void *host_out2[1] = {o2};
    reset(-1);
    CHECK(dlg_run(&plan, host_in, host_out2, NULL, &status) == 0); /* a new output pointer: rewrapped */
    CHECK(mock.creates == 1 && mock.mem_releases == 1 && mock.bound[2]->host == o2);
    /* A pointer the driver refuses: that transfer copies through its staging buffer from then on. */
    unsigned char a2[16];
    memset(a2, 7, sizeof a2);
    const void *host_in2[2] = {a2, b};
    reset(-1);
    mock.refuse_host = 1;
    CHECK(dlg_run(&plan, host_in2, host_out2, NULL, &status) == 0);
    CHECK(in[0].zero_copy == 0 && in[0].wrapped == NULL && mock.bound[0] == in[0].buffer && mock.writes == 1);
    CHECK(mock.mem_releases == 1 && in[1].zero_copy == 1);
    reset(-1);
    dlg_plan_release(&plan);
    CHECK(mock.mem_releases == 2 && in[1].wrapped == NULL && out[0].wrapped == NULL);

    /* Loading from a path that does not exist fails with a message, not a crash. */
    dlg_cl_api loaded;
    char err[256];
    CHECK(dlg_cl_load("/nonexistent/libOpenCL.so.1", &loaded, err, sizeof err) == -1);
    CHECK(strstr(err, "cannot load the OpenCL library") != NULL);
    printf("runtime loop checks passed\n");
    return 0;
}
