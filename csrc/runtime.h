/*
 * The enqueue loop: runs a loaded context's launches on an OpenCL queue with no
 * Python per node. Python (delegate/runtime/driver.py, through the table below)
 * picks the device, builds the programs, creates the kernels, allocates memory
 * and sets every kernel argument once at load time (memory is assigned
 * statically); a run is then uploads, launches and downloads only.
 *
 * OpenCL is reached through function pointers resolved from the ICD loader
 * (dlg_cl_load: the one pyopencl's wheel ships, with PoCL), so the extension
 * links no OpenCL library and needs no OpenCL headers, and a warm start needs
 * no pyopencl import. The handle types below are OpenCL's own opaque struct
 * tags, and the image structs have OpenCL's layout, so the pointers have the
 * exact types of the real API.
 *
 * Also the cffi cdef (preprocessor lines stripped).
 */
#ifndef DLG_RUNTIME_H
#define DLG_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

typedef struct _cl_command_queue *cl_command_queue;
typedef struct _cl_kernel *cl_kernel;
typedef struct _cl_mem *cl_mem;
typedef struct _cl_event *cl_event;
typedef struct _cl_context *cl_context;
typedef struct _cl_program *cl_program;
typedef struct _cl_platform_id *cl_platform_id;
typedef struct _cl_device_id *cl_device_id;

/* cl_image_format and cl_image_desc (OpenCL 1.2), field for field. */
typedef struct dlg_image_format {
    uint32_t channel_order;
    uint32_t channel_data_type;
} dlg_image_format;

typedef struct dlg_image_desc {
    uint32_t image_type;
    size_t image_width;
    size_t image_height;
    size_t image_depth;
    size_t image_array_size;
    size_t image_row_pitch;
    size_t image_slice_pitch;
    uint32_t num_mip_levels;
    uint32_t num_samples;
    cl_mem buffer;
} dlg_image_desc;

typedef struct dlg_cl_api {
    int32_t (*enqueue_nd_range_kernel)(cl_command_queue, cl_kernel, uint32_t, const size_t *, const size_t *,
                                       const size_t *, uint32_t, const cl_event *, cl_event *);
    int32_t (*enqueue_write_buffer)(cl_command_queue, cl_mem, uint32_t, size_t, size_t, const void *, uint32_t,
                                    const cl_event *, cl_event *);
    int32_t (*enqueue_read_buffer)(cl_command_queue, cl_mem, uint32_t, size_t, size_t, void *, uint32_t,
                                   const cl_event *, cl_event *);
    int32_t (*flush)(cl_command_queue);
    int32_t (*finish)(cl_command_queue);
    int32_t (*get_event_profiling_info)(cl_event, uint32_t, size_t, void *, size_t *);
    int32_t (*release_event)(cl_event);
    /* For zero-copy transfers (dlg_plan.zero_copy). */
    cl_mem (*create_buffer)(cl_context, uint64_t, size_t, void *, int32_t *);
    int32_t (*set_kernel_arg)(cl_kernel, uint32_t, size_t, const void *);
    int32_t (*release_mem_object)(cl_mem);
    void *(*enqueue_map_buffer)(cl_command_queue, cl_mem, uint32_t, uint64_t, size_t, size_t, uint32_t,
                                const cl_event *, cl_event *, int32_t *);
    int32_t (*enqueue_unmap_mem_object)(cl_command_queue, cl_mem, void *, uint32_t, const cl_event *, cl_event *);
    /* Kernels made and released by the Python loader without wrapper objects (a faster load). */
    cl_kernel (*create_kernel)(cl_program, const char *, int32_t *);
    int32_t (*release_kernel)(cl_kernel);
    /* Devices, contexts, queues, programs and memory, for the Python side (driver.py). */
    int32_t (*get_platform_ids)(uint32_t, cl_platform_id *, uint32_t *);
    int32_t (*get_platform_info)(cl_platform_id, uint32_t, size_t, void *, size_t *);
    int32_t (*get_device_ids)(cl_platform_id, uint64_t, uint32_t, cl_device_id *, uint32_t *);
    int32_t (*get_device_info)(cl_device_id, uint32_t, size_t, void *, size_t *);
    cl_context (*create_context)(const intptr_t *, uint32_t, const cl_device_id *, void *, void *, int32_t *);
    int32_t (*release_context)(cl_context);
    cl_command_queue (*create_command_queue)(cl_context, cl_device_id, uint64_t, int32_t *);
    int32_t (*release_command_queue)(cl_command_queue);
    cl_program (*create_program_with_source)(cl_context, uint32_t, const char **, const size_t *, int32_t *);
    cl_program (*create_program_with_binary)(cl_context, uint32_t, const cl_device_id *, const size_t *,
                                             const unsigned char **, int32_t *, int32_t *);
    int32_t (*build_program)(cl_program, uint32_t, const cl_device_id *, const char *, void *, void *);
    int32_t (*get_program_info)(cl_program, uint32_t, size_t, void *, size_t *);
    int32_t (*get_program_build_info)(cl_program, cl_device_id, uint32_t, size_t, void *, size_t *);
    int32_t (*release_program)(cl_program);
    cl_mem (*create_image)(cl_context, uint64_t, const dlg_image_format *, const dlg_image_desc *, void *,
                           int32_t *);
    int32_t (*get_kernel_work_group_info)(cl_kernel, cl_device_id, uint32_t, size_t, void *, size_t *);
    int32_t (*wait_for_events)(uint32_t, const cl_event *);
    /* The constant arena's objects (persistent kernels). */
    cl_mem (*create_sub_buffer)(cl_mem, uint64_t, uint32_t, const void *, int32_t *);
} dlg_cl_api;

/* One kernel launch: geometry already resolved (global = groups x local, launch order applied). */
typedef struct dlg_launch {
    cl_kernel kernel;
    uint32_t work_dim;
    size_t global_size[3];
    size_t local_size[3];
} dlg_launch;

/* A host <-> device transfer of a whole staging buffer: a copy into / out of `buffer`, or, with
 * zero copy, `kernel` (the conversion launch) reads or writes the host memory itself through a
 * buffer created over it with CL_MEM_USE_HOST_PTR, bound as its argument `arg_index`. That
 * buffer is kept for the next run while the host pointer stays the same. */
typedef struct dlg_transfer {
    cl_mem buffer;
    size_t bytes;
    cl_kernel kernel;
    uint32_t arg_index;
    uint8_t zero_copy;  /* 1: zero copy for this transfer; cleared when the driver refuses a host pointer */
    void *host;         /* the host memory `wrapped` is over (NULL: none) */
    cl_mem wrapped;
} dlg_transfer;

typedef struct dlg_plan {
    const dlg_cl_api *api;
    cl_command_queue queue;
    cl_context context;
    dlg_transfer *inputs;
    uint32_t inputs_count;
    const dlg_launch *launches;
    uint32_t launches_count;
    dlg_transfer *outputs;
    uint32_t outputs_count;
    uint8_t need_flush;
    uint8_t flush_periodically;
    int32_t flush_period;
    /* Zero copy: 1 keeps the buffers made over host memory for the next run (the caller's memory
     * outlives the plan, as TFLite's tensors do); 0 unbinds and releases them before dlg_run
     * returns (the caller's arrays are temporaries). */
    uint8_t keep_wrapped;
    /* Zero copy: 1 where the driver's buffer over host memory is that memory itself (PoCL's CPU
     * device), so a run skips the map and unmap that would tell it of the host's writes and reads:
     * each is a command its worker threads take in turn, about 7 us a run on two cores. */
    uint8_t host_memory_in_place;
} dlg_plan;

typedef struct dlg_run_status {
    int32_t cl_error;  /* the OpenCL error code, 0 on success */
    int32_t stage;     /* 1 upload, 2 launch, 3 download, 4 finish, 5 profiling */
    int32_t index;     /* which input, launch or output failed */
} dlg_run_status;

/* Load the shared library at `path` for the life of the process: an OpenCL driver (ICD) that
 * the loader opens by its bare soname, which a directly opened loader could not find in the
 * wheel's folder. Returns 0, or -1 with a message in err. */
int dlg_preload(const char *path, char *err, size_t err_size);

/* Resolve the OpenCL entry points from the ICD loader at `path`. Returns 0, or -1
 * with a message in err. */
int dlg_cl_load(const char *path, dlg_cl_api *api, char *err, size_t err_size);

/* Upload inputs[i] from host_inputs[i], run every launch, download outputs into
 * host_outputs[i] and wait. When launch_ns is not NULL the queue must have
 * profiling enabled; launch_ns[i] receives launch i's device time. Returns 0 or
 * the OpenCL error (details in *status). Releases the GIL-free caller's buffers
 * only after the queue is finished. */
int32_t dlg_run(const dlg_plan *plan, const void *const *host_inputs, void *const *host_outputs,
                uint64_t *launch_ns, dlg_run_status *status);

/* Bind the conversion kernels to their staging buffers again and release the buffers zero-copy
 * transfers keep over host memory (after a run whose host memory goes away, and before the plan
 * does): no launch may reach host memory after this. */
void dlg_plan_release(const dlg_plan *plan);

/* Only the launches (no transfers, no wait): for measuring host cost per launch. */
int32_t dlg_enqueue_launches(const dlg_plan *plan, uint32_t repeats, dlg_run_status *status);

#endif
