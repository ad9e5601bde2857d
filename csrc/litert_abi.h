/*
 * The parts of LiteRT's C ABI the CompiledModel GPU accelerator (litert_accelerator.c) touches,
 * declared from the layouts ai-edge-litert 2.3 ships (docs/litert_accelerator.md lists the
 * sources and the checks that confirmed them against its libLiteRt.so).
 *
 * Only what the accelerator reads or fills is named; the rest of a table is kept as opaque
 * pointer slots so the named members sit at LiteRT's offsets (asserted below).
 */
#ifndef DLG_LITERT_ABI_H
#define DLG_LITERT_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tflite_abi.h"

/* LiteRtStatus values used here (litert/c/litert_common.h). */
enum {
    LRT_OK = 0,
    LRT_ERROR_INVALID_ARGUMENT = 1,
    LRT_ERROR_MEMORY = 2,
    LRT_ERROR_RUNTIME = 3,
    LRT_ERROR_UNSUPPORTED = 5,
    LRT_ERROR_WRONG_VERSION = 8,
};
typedef int lrt_status;

/* LiteRtHwAcceleratorSet bits. */
enum { LRT_HW_GPU = 1 << 1 };

/* LiteRtEnvOptionTag kLiteRtEnvOptionTagRuntimeLibraryDir; LiteRtAnyType kLiteRtAnyTypeString. */
enum { LRT_ENV_RUNTIME_LIBRARY_DIR = 22, LRT_ANY_STRING = 8 };

/* LiteRtAbiHeader: first member of every ABI-stable LiteRT struct. */
typedef struct lrt_abi_header {
    uint16_t struct_size;
    uint16_t major_version;
    uint16_t minor_version;
    uint16_t reserved;
} lrt_abi_header;

typedef struct lrt_api_version {
    int major;
    int minor;
    int patch;
} lrt_api_version;

/* LiteRtAny. */
typedef struct lrt_any {
    int type;
    union {
        bool bool_value;
        int64_t int_value;
        double real_value;
        const char *str_value;
        const void *ptr_value;
    } value;
} lrt_any;

typedef void (*lrt_slot)(void); /* a table entry the accelerator never calls */

/* LiteRtRuntimeContext, up to unwrap_delegate (LiteRT 2.3: 416 bytes, ABI 1.2). */
typedef struct lrt_runtime_context {
    lrt_abi_header abi_header;
    lrt_slot buffer_slots[9];  /* tensor buffer requirements, external buffer context */
    lrt_slot options_slots[3]; /* get_opaque_options, find_opaque_options_data, destroy_options */
    lrt_status (*get_environment_options)(void *environment, void **options);
    lrt_status (*get_environment_options_value)(void *options, int tag, lrt_any *value);
    lrt_slot environment_slots[3]; /* has_gpu_environment, add_environment_options, gpu_environment_create */
    lrt_status (*wrap_delegate)(TfLiteDelegate *delegate, void (*deleter)(TfLiteDelegate *), void **wrapper);
    lrt_status (*unwrap_delegate)(void *wrapper, TfLiteDelegate **delegate);
} lrt_runtime_context;

/* LiteRtCustomTensorBufferHandlersDef (136 bytes); the accelerator registers none (all zero). */
typedef struct lrt_buffer_handlers {
    lrt_abi_header abi_header;
    lrt_slot functions[6];
    int device_tag;
    int queue_tag;
    size_t num_supported_buffer_types;
    int supported_buffer_types[16];
} lrt_buffer_handlers;

/* LiteRtAcceleratorDef (LiteRtAcceleratorDefV1, ABI 1.0, 200 bytes): what LiteRT reads from the
   library's exported symbol LiteRtAcceleratorImpl. `accelerator` arguments are LiteRT's
   LiteRtAcceleratorConst handles. */
typedef struct lrt_accelerator_def {
    lrt_abi_header abi_header;
    lrt_status (*get_name)(const void *accelerator, const char **name);
    lrt_status (*get_version)(const void *accelerator, lrt_api_version *version);
    lrt_status (*get_hardware_support)(const void *accelerator, int *supported_hardware);
    lrt_status (*is_tflite_delegate_responsible_for_jit_compilation)(const void *accelerator, bool *does_jit);
    lrt_status (*create_delegate)(lrt_runtime_context *runtime_context, void *environment, const void *accelerator,
                                  void *options, void **delegate_wrapper);
    lrt_status (*start_metrics_collection)(lrt_runtime_context *runtime_context, void *delegate_wrapper,
                                           int detail_level);
    lrt_status (*stop_metrics_collection)(lrt_runtime_context *runtime_context, void *delegate_wrapper,
                                          void *metrics);
    lrt_buffer_handlers buffer_handlers;
} lrt_accelerator_def;

#if UINTPTR_MAX == 0xFFFFFFFFFFFFFFFFu
_Static_assert(sizeof(lrt_any) == 16, "LiteRtAny is 16 bytes");
_Static_assert(offsetof(lrt_runtime_context, get_environment_options) == 104, "runtime context layout");
_Static_assert(offsetof(lrt_runtime_context, get_environment_options_value) == 112, "runtime context layout");
_Static_assert(offsetof(lrt_runtime_context, wrap_delegate) == 144, "runtime context layout");
_Static_assert(sizeof(lrt_runtime_context) == 160, "runtime context prefix");
_Static_assert(sizeof(lrt_buffer_handlers) == 136, "buffer handlers layout");
_Static_assert(offsetof(lrt_buffer_handlers, num_supported_buffer_types) == 64, "buffer handlers layout");
_Static_assert(offsetof(lrt_accelerator_def, create_delegate) == 40, "accelerator def layout");
_Static_assert(offsetof(lrt_accelerator_def, buffer_handlers) == 64, "accelerator def layout");
_Static_assert(sizeof(lrt_accelerator_def) == 200, "accelerator def layout");
#endif

#endif
