/* The enqueue loop. See runtime.h. */
#include "runtime.h"

#include <dlfcn.h>
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

static int resolve(void *lib, const char *name, void *slot, size_t slot_size, char *err, size_t err_size) {
    void *sym = dlsym(lib, name);
    if (!sym) {
        snprintf(err, err_size, "the OpenCL library has no %s", name);
        return -1;
    }
    /* POSIX guarantees data and function pointers convert; memcpy keeps ISO C quiet. */
    memcpy(slot, &sym, slot_size);
    return 0;
}

int dlg_preload(const char *path, char *err, size_t err_size) {
    /* The handle is kept on purpose: the library stays loaded, as the loader's own handle would. */
    if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
        const char *why = dlerror();
        snprintf(err, err_size, "cannot load %s: %s", path, why ? why : "unknown error");
        return -1;
    }
    return 0;
}

int dlg_cl_load(const char *path, dlg_cl_api *api, char *err, size_t err_size) {
    memset(api, 0, sizeof *api);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(err, err_size, "cannot load the OpenCL library %s: %s", path, why ? why : "unknown error");
        return -1;
    }
    /* The handle is kept: the loader stays loaded for the life of the process, as pyopencl's does. */
    if (resolve(lib, "clEnqueueNDRangeKernel", &api->enqueue_nd_range_kernel, sizeof api->enqueue_nd_range_kernel,
                err, err_size) ||
        resolve(lib, "clEnqueueWriteBuffer", &api->enqueue_write_buffer, sizeof api->enqueue_write_buffer, err,
                err_size) ||
        resolve(lib, "clEnqueueReadBuffer", &api->enqueue_read_buffer, sizeof api->enqueue_read_buffer, err,
                err_size) ||
        resolve(lib, "clFlush", &api->flush, sizeof api->flush, err, err_size) ||
        resolve(lib, "clFinish", &api->finish, sizeof api->finish, err, err_size) ||
        resolve(lib, "clGetEventProfilingInfo", &api->get_event_profiling_info,
                sizeof api->get_event_profiling_info, err, err_size) ||
        resolve(lib, "clReleaseEvent", &api->release_event, sizeof api->release_event, err, err_size) ||
        resolve(lib, "clCreateBuffer", &api->create_buffer, sizeof api->create_buffer, err, err_size) ||
        resolve(lib, "clSetKernelArg", &api->set_kernel_arg, sizeof api->set_kernel_arg, err, err_size) ||
        resolve(lib, "clReleaseMemObject", &api->release_mem_object, sizeof api->release_mem_object, err,
                err_size) ||
        resolve(lib, "clEnqueueMapBuffer", &api->enqueue_map_buffer, sizeof api->enqueue_map_buffer, err,
                err_size) ||
        resolve(lib, "clEnqueueUnmapMemObject", &api->enqueue_unmap_mem_object,
                sizeof api->enqueue_unmap_mem_object, err, err_size) ||
        resolve(lib, "clCreateKernel", &api->create_kernel, sizeof api->create_kernel, err, err_size) ||
        resolve(lib, "clReleaseKernel", &api->release_kernel, sizeof api->release_kernel, err, err_size) ||
        resolve(lib, "clGetPlatformIDs", &api->get_platform_ids, sizeof api->get_platform_ids, err, err_size) ||
        resolve(lib, "clGetPlatformInfo", &api->get_platform_info, sizeof api->get_platform_info, err, err_size) ||
        resolve(lib, "clGetDeviceIDs", &api->get_device_ids, sizeof api->get_device_ids, err, err_size) ||
        resolve(lib, "clGetDeviceInfo", &api->get_device_info, sizeof api->get_device_info, err, err_size) ||
        resolve(lib, "clCreateContext", &api->create_context, sizeof api->create_context, err, err_size) ||
        resolve(lib, "clReleaseContext", &api->release_context, sizeof api->release_context, err, err_size) ||
        resolve(lib, "clCreateCommandQueue", &api->create_command_queue, sizeof api->create_command_queue, err,
                err_size) ||
        resolve(lib, "clReleaseCommandQueue", &api->release_command_queue, sizeof api->release_command_queue, err,
                err_size) ||
        resolve(lib, "clCreateProgramWithSource", &api->create_program_with_source,
                sizeof api->create_program_with_source, err, err_size) ||
        resolve(lib, "clCreateProgramWithBinary", &api->create_program_with_binary,
                sizeof api->create_program_with_binary, err, err_size) ||
        resolve(lib, "clBuildProgram", &api->build_program, sizeof api->build_program, err, err_size) ||
        resolve(lib, "clGetProgramInfo", &api->get_program_info, sizeof api->get_program_info, err, err_size) ||
        resolve(lib, "clGetProgramBuildInfo", &api->get_program_build_info, sizeof api->get_program_build_info, err,
                err_size) ||
        resolve(lib, "clReleaseProgram", &api->release_program, sizeof api->release_program, err, err_size) ||
        resolve(lib, "clCreateImage", &api->create_image, sizeof api->create_image, err, err_size) ||
        resolve(lib, "clGetKernelWorkGroupInfo", &api->get_kernel_work_group_info,
                sizeof api->get_kernel_work_group_info, err, err_size) ||
        resolve(lib, "clWaitForEvents", &api->wait_for_events, sizeof api->wait_for_events, err, err_size))
        return -1;
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
        if (t->zero_copy) return sync_host(p, t, CL_MAP_WRITE_INVALIDATE_REGION);
    }
    return p->api->enqueue_write_buffer(p->queue, t->buffer, CL_FALSE, 0, t->bytes, host, 0, NULL, NULL);
}

static int32_t download(const dlg_plan *p, uint32_t i, void *host) {
    dlg_transfer *t = &p->outputs[i];
    if (t->zero_copy && t->wrapped) return sync_host(p, t, CL_MAP_READ);
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
