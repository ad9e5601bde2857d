/* The enqueue loop. See runtime.h. */
#include "runtime.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CL_PROFILING_COMMAND_START 0x1282
#define CL_PROFILING_COMMAND_END 0x1283
#define CL_TRUE 1u
#define CL_FALSE 0u
#define CL_MEM_WRITE_ONLY (1u << 1)
#define CL_MEM_READ_ONLY (1u << 2)
#define CL_MEM_USE_HOST_PTR (1u << 3)
#define CL_MAP_READ (1u << 0)
#define CL_MAP_WRITE_INVALIDATE_REGION (1u << 2)

enum { STAGE_UPLOAD = 1, STAGE_LAUNCH = 2, STAGE_DOWNLOAD = 3, STAGE_FINISH = 4, STAGE_PROFILE = 5 };

/* dlopen `path` for the life of the process (the handle is never closed: the library stays
 * loaded, as the loader's own handles would); NULL with a message naming `what` in err. */
static void *open_for_good(const char *path, const char *what, char *err, size_t err_size) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(err, err_size, "cannot load %s%s: %s", what, path, why ? why : "unknown error");
    }
    return lib;
}

int dlg_preload(const char *path, char *err, size_t err_size) {
    return open_for_good(path, "", err, err_size) ? 0 : -1;
}

/* Every entry point of dlg_cl_api: its OpenCL name, and where and how large its slot is. */
#define DLG_ENTRY(symbol, field) {symbol, offsetof(dlg_cl_api, field), sizeof(((dlg_cl_api *)0)->field)}
static const struct {
    const char *symbol;
    size_t offset;
    size_t size;
} ENTRY_POINTS[] = {
    DLG_ENTRY("clEnqueueNDRangeKernel", enqueue_nd_range_kernel),
    DLG_ENTRY("clEnqueueWriteBuffer", enqueue_write_buffer),
    DLG_ENTRY("clEnqueueReadBuffer", enqueue_read_buffer),
    DLG_ENTRY("clFlush", flush),
    DLG_ENTRY("clFinish", finish),
    DLG_ENTRY("clGetEventProfilingInfo", get_event_profiling_info),
    DLG_ENTRY("clReleaseEvent", release_event),
    DLG_ENTRY("clCreateBuffer", create_buffer),
    DLG_ENTRY("clSetKernelArg", set_kernel_arg),
    DLG_ENTRY("clReleaseMemObject", release_mem_object),
    DLG_ENTRY("clEnqueueMapBuffer", enqueue_map_buffer),
    DLG_ENTRY("clEnqueueUnmapMemObject", enqueue_unmap_mem_object),
    DLG_ENTRY("clCreateKernel", create_kernel),
    DLG_ENTRY("clReleaseKernel", release_kernel),
    DLG_ENTRY("clGetPlatformIDs", get_platform_ids),
    DLG_ENTRY("clGetPlatformInfo", get_platform_info),
    DLG_ENTRY("clGetDeviceIDs", get_device_ids),
    DLG_ENTRY("clGetDeviceInfo", get_device_info),
    DLG_ENTRY("clCreateContext", create_context),
    DLG_ENTRY("clReleaseContext", release_context),
    DLG_ENTRY("clCreateCommandQueue", create_command_queue),
    DLG_ENTRY("clReleaseCommandQueue", release_command_queue),
    DLG_ENTRY("clCreateProgramWithSource", create_program_with_source),
    DLG_ENTRY("clCreateProgramWithBinary", create_program_with_binary),
    DLG_ENTRY("clBuildProgram", build_program),
    DLG_ENTRY("clGetProgramInfo", get_program_info),
    DLG_ENTRY("clGetProgramBuildInfo", get_program_build_info),
    DLG_ENTRY("clReleaseProgram", release_program),
    DLG_ENTRY("clCreateImage", create_image),
    DLG_ENTRY("clGetKernelWorkGroupInfo", get_kernel_work_group_info),
    DLG_ENTRY("clWaitForEvents", wait_for_events),
    DLG_ENTRY("clCreateSubBuffer", create_sub_buffer),
};
#undef DLG_ENTRY

int dlg_cl_load(const char *path, dlg_cl_api *api, char *err, size_t err_size) {
    memset(api, 0, sizeof *api);
    void *lib = open_for_good(path, "the OpenCL library ", err, err_size);
    if (!lib) return -1;
    for (size_t i = 0; i < sizeof ENTRY_POINTS / sizeof ENTRY_POINTS[0]; i++) {
        void *sym = dlsym(lib, ENTRY_POINTS[i].symbol);
        if (!sym) {
            snprintf(err, err_size, "the OpenCL library has no %s", ENTRY_POINTS[i].symbol);
            return -1;
        }
        /* POSIX guarantees data and function pointers convert; memcpy keeps ISO C quiet. */
        memcpy((char *)api + ENTRY_POINTS[i].offset, &sym, ENTRY_POINTS[i].size);
    }
    return 0;
}

static int32_t failed(dlg_run_status *status, int32_t code, int32_t stage, int32_t index) {
    status->cl_error = code;
    status->stage = stage;
    status->index = index;
    return code;
}

/* Enqueue every launch once; events[i] filled when events is not NULL. */
static int32_t enqueue_all(const dlg_plan *p, cl_event *events, dlg_run_status *status) {
    const dlg_cl_api *cl = p->api;
    for (uint32_t i = 0; i < p->launches_count; i++) {
        const dlg_launch *l = &p->launches[i];
        int32_t rc = cl->enqueue_nd_range_kernel(p->queue, l->kernel, l->work_dim, NULL, l->global_size,
                                                 l->local_size, 0, NULL, events ? &events[i] : NULL);
        if (rc != 0) return failed(status, rc, STAGE_LAUNCH, (int32_t)i);
        if (p->flush_periodically && p->flush_period > 0 && (i + 1) % (uint32_t)p->flush_period == 0) {
            rc = cl->flush(p->queue);
            if (rc != 0) return failed(status, rc, STAGE_LAUNCH, (int32_t)i);
        }
    }
    if (p->need_flush) {
        int32_t rc = cl->flush(p->queue);
        if (rc != 0) return failed(status, rc, STAGE_LAUNCH, (int32_t)p->launches_count);
    }
    return 0;
}

/* Point transfer t's conversion kernel at `host` itself (zero copy), keeping the buffer made over it
 * for the next run. When the driver refuses the pointer, the transfer goes back to copying through
 * its staging buffer for good. Returns 0 or an OpenCL error. */
static int32_t wrap_host(const dlg_plan *p, dlg_transfer *t, void *host, uint64_t flags) {
    const dlg_cl_api *cl = p->api;
    if (t->wrapped && t->host == host) return 0;
    if (t->wrapped) {
        cl->release_mem_object(t->wrapped);
        t->wrapped = NULL;
        t->host = NULL;
    }
    int32_t err = 0;
    cl_mem wrapped = cl->create_buffer(p->context, flags | CL_MEM_USE_HOST_PTR, t->bytes, host, &err);
    if (!wrapped || err != 0) {
        t->zero_copy = 0;
        return cl->set_kernel_arg(t->kernel, t->arg_index, sizeof t->buffer, &t->buffer);
    }
    err = cl->set_kernel_arg(t->kernel, t->arg_index, sizeof wrapped, &wrapped);
    if (err != 0) {
        cl->release_mem_object(wrapped);
        return err;
    }
    t->wrapped = wrapped;
    t->host = host;
    return 0;
}

/* Tell the runtime the host wrote (inputs) or will read (outputs) the memory a wrapped buffer is over. */
static int32_t sync_host(const dlg_plan *p, dlg_transfer *t, uint64_t map_flags) {
    const dlg_cl_api *cl = p->api;
    int32_t err = 0;
    void *mapped = cl->enqueue_map_buffer(p->queue, t->wrapped, CL_FALSE, map_flags, 0, t->bytes, 0, NULL, NULL, &err);
    if (err != 0) return err;
    return cl->enqueue_unmap_mem_object(p->queue, t->wrapped, mapped, 0, NULL, NULL);
}

static int32_t upload(const dlg_plan *p, uint32_t i, const void *host) {
    dlg_transfer *t = &p->inputs[i];
    if (t->zero_copy) {
        /* The device only reads it (CL_MEM_READ_ONLY): the const is kept in fact. */
        int32_t rc = wrap_host(p, t, (void *)(uintptr_t)host, CL_MEM_READ_ONLY);
        if (rc != 0) return rc;
        if (t->zero_copy) return p->host_memory_in_place ? 0 : sync_host(p, t, CL_MAP_WRITE_INVALIDATE_REGION);
    }
    return p->api->enqueue_write_buffer(p->queue, t->buffer, CL_FALSE, 0, t->bytes, host, 0, NULL, NULL);
}

static int32_t download(const dlg_plan *p, uint32_t i, void *host) {
    dlg_transfer *t = &p->outputs[i];
    if (t->zero_copy && t->wrapped) return p->host_memory_in_place ? 0 : sync_host(p, t, CL_MAP_READ);
    return p->api->enqueue_read_buffer(p->queue, t->buffer, CL_FALSE, 0, t->bytes, host, 0, NULL, NULL);
}

int32_t dlg_run(const dlg_plan *p, const void *const *host_inputs, void *const *host_outputs, uint64_t *launch_ns,
                dlg_run_status *status) {
    const dlg_cl_api *cl = p->api;
    memset(status, 0, sizeof *status);
    cl_event *events = NULL;
    int32_t rc = 0;
    if (launch_ns && p->launches_count) {
        events = calloc(p->launches_count, sizeof *events);
        if (!events) return failed(status, -6 /* CL_OUT_OF_HOST_MEMORY */, STAGE_PROFILE, 0);
    }
    for (uint32_t i = 0; i < p->inputs_count && rc == 0; i++) {
        rc = upload(p, i, host_inputs[i]);
        if (rc != 0) failed(status, rc, STAGE_UPLOAD, (int32_t)i);
    }
    for (uint32_t i = 0; i < p->outputs_count && rc == 0; i++) {
        dlg_transfer *t = &p->outputs[i];
        if (t->zero_copy) rc = wrap_host(p, t, host_outputs[i], CL_MEM_WRITE_ONLY);
        if (rc != 0) failed(status, rc, STAGE_DOWNLOAD, (int32_t)i);
    }
    if (rc == 0) rc = enqueue_all(p, events, status);
    for (uint32_t i = 0; i < p->outputs_count && rc == 0; i++) {
        rc = download(p, i, host_outputs[i]);
        if (rc != 0) failed(status, rc, STAGE_DOWNLOAD, (int32_t)i);
    }
    /* Always wait: the queue may still read host_inputs or write host_outputs. */
    int32_t done = cl->finish(p->queue);
    if (rc == 0 && done != 0) rc = failed(status, done, STAGE_FINISH, 0);
    if (events) {
        for (uint32_t i = 0; i < p->launches_count; i++) {
            if (!events[i]) continue;
            uint64_t start = 0, end = 0;
            if (rc == 0) {
                int32_t e1 = cl->get_event_profiling_info(events[i], CL_PROFILING_COMMAND_START, sizeof start, &start,
                                                          NULL);
                int32_t e2 = cl->get_event_profiling_info(events[i], CL_PROFILING_COMMAND_END, sizeof end, &end, NULL);
                if (e1 != 0 || e2 != 0) rc = failed(status, e1 != 0 ? e1 : e2, STAGE_PROFILE, (int32_t)i);
            }
            launch_ns[i] = end > start ? end - start : 0;
            cl->release_event(events[i]);
        }
        free(events);
    }
    if (!p->keep_wrapped) dlg_plan_release(p);
    return rc;
}

void dlg_plan_release(const dlg_plan *p) {
    dlg_transfer *lists[2] = {p->inputs, p->outputs};
    uint32_t counts[2] = {p->inputs_count, p->outputs_count};
    for (int k = 0; k < 2; k++)
        for (uint32_t i = 0; i < counts[k]; i++) {
            dlg_transfer *t = &lists[k][i];
            if (!t->wrapped) continue;
            p->api->set_kernel_arg(t->kernel, t->arg_index, sizeof t->buffer, &t->buffer);
            p->api->release_mem_object(t->wrapped);
            t->wrapped = NULL;
            t->host = NULL;
        }
}

int32_t dlg_enqueue_launches(const dlg_plan *p, uint32_t repeats, dlg_run_status *status) {
    memset(status, 0, sizeof *status);
    for (uint32_t r = 0; r < repeats; r++) {
        int32_t rc = enqueue_all(p, NULL, status);
        if (rc != 0) return rc;
    }
    return 0;
}
