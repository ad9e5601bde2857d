/*
 * The subset of TensorFlow Lite's C ABI (v2.14, also ai-edge-litert 2.x) that the delegate
 * plugin touches, declared here so the plugin links no TFLite symbol. Field order, types and
 * enum values are the runtime's (see shared/reference/tflite-delegate-abi.md); structs are
 * complete where the plugin indexes arrays of them or receives them by value.
 *
 * Also part of the cffi cdef (preprocessor lines stripped).
 */
#ifndef DLG_TFLITE_ABI_H
#define DLG_TFLITE_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum TfLiteStatus {
    kTfLiteOk = 0,
    kTfLiteError = 1,
    kTfLiteDelegateError = 2,
    kTfLiteApplicationError = 3
} TfLiteStatus;

typedef enum TfLiteType {
    kTfLiteNoType = 0,
    kTfLiteFloat32 = 1,
    kTfLiteInt32 = 2,
    kTfLiteUInt8 = 3,
    kTfLiteInt64 = 4,
    kTfLiteString = 5,
    kTfLiteBool = 6,
    kTfLiteInt16 = 7,
    kTfLiteComplex64 = 8,
    kTfLiteInt8 = 9,
    kTfLiteFloat16 = 10
} TfLiteType;

typedef enum TfLiteAllocationType {
    kTfLiteMemNone = 0,
    kTfLiteMmapRo = 1,
    kTfLiteArenaRw = 2,
    kTfLiteArenaRwPersistent = 3,
    kTfLiteDynamic = 4,
    kTfLitePersistentRo = 5,
    kTfLiteCustom = 6
} TfLiteAllocationType;

typedef struct TfLiteIntArray {
    int size;
    int data[];
} TfLiteIntArray;

typedef struct TfLiteFloatArray {
    int size;
    float data[];
} TfLiteFloatArray;

typedef struct TfLiteQuantizationParams {
    float scale;
    int32_t zero_point;
} TfLiteQuantizationParams;

typedef struct TfLiteQuantization {
    int type; /* TfLiteQuantizationType: 0 none, 1 affine */
    void *params;
} TfLiteQuantization;

typedef struct TfLiteAffineQuantization {
    TfLiteFloatArray *scale;
    TfLiteIntArray *zero_point;
    int32_t quantized_dimension;
} TfLiteAffineQuantization;

typedef enum TfLiteDimensionType {
    kTfLiteDimDense = 0,
    kTfLiteDimSparseCSR = 1
} TfLiteDimensionType;

/* One traversal level of a sparse tensor. The runtime converts the model's uint8 / uint16 /
 * int32 segment and index vectors to int arrays when it loads the model; both are NULL on a
 * DENSE level. */
typedef struct TfLiteDimensionMetadata {
    TfLiteDimensionType format;
    int dense_size;
    TfLiteIntArray *array_segments;
    TfLiteIntArray *array_indices;
} TfLiteDimensionMetadata;

/* TfLiteTensor.sparsity: how a sparse constant's stored values fill its dense shape. */
typedef struct TfLiteSparsity {
    TfLiteIntArray *traversal_order;
    TfLiteIntArray *block_map;
    TfLiteDimensionMetadata *dim_metadata;
    int dim_metadata_size;
} TfLiteSparsity;

typedef union TfLitePtrUnion {
    int32_t *i32;
    uint32_t *u32;
    int64_t *i64;
    uint64_t *u64;
    float *f;
    void *f16;
    double *f64;
    char *raw;
    const char *raw_const;
    uint8_t *uint8;
    bool *b;
    int16_t *i16;
    uint16_t *ui16;
    void *c64;
    void *c128;
    int8_t *int8;
    void *data;
} TfLitePtrUnion;

struct TfLiteDelegate;
struct TfLiteContext;

typedef struct TfLiteTensor {
    TfLiteType type;
    TfLitePtrUnion data;
    TfLiteIntArray *dims;
    TfLiteQuantizationParams params;
    TfLiteAllocationType allocation_type;
    size_t bytes;
    const void *allocation;
    const char *name;
    struct TfLiteDelegate *delegate;
    int buffer_handle;
    bool data_is_stale;
    bool is_variable;
    TfLiteQuantization quantization;
    TfLiteSparsity *sparsity; /* NULL when dense */
    const TfLiteIntArray *dims_signature;
} TfLiteTensor;

typedef struct TfLiteNode {
    TfLiteIntArray *inputs;
    TfLiteIntArray *outputs;
    TfLiteIntArray *intermediates;
    TfLiteIntArray *temporaries;
    void *user_data;
    void *builtin_data;
    const void *custom_initial_data;
    int custom_initial_data_size;
    struct TfLiteDelegate *delegate;
    bool might_have_side_effect;
} TfLiteNode;

typedef struct TfLiteRegistration {
    void *(*init)(struct TfLiteContext *, const char *, size_t);
    void (*free)(struct TfLiteContext *, void *);
    TfLiteStatus (*prepare)(struct TfLiteContext *, TfLiteNode *);
    TfLiteStatus (*invoke)(struct TfLiteContext *, TfLiteNode *);
    const char *(*profiling_string)(const struct TfLiteContext *, const TfLiteNode *);
    int32_t builtin_code;
    const char *custom_name;
    int version;
    void *registration_external;
    void *(*async_kernel)(struct TfLiteContext *, TfLiteNode *);
    uint64_t inplace_operator;
} TfLiteRegistration;

typedef struct TfLiteDelegateParams {
    struct TfLiteDelegate *delegate;
    TfLiteIntArray *nodes_to_replace;
    TfLiteIntArray *input_tensors;
    TfLiteIntArray *output_tensors;
} TfLiteDelegateParams;

typedef struct TfLiteContext {
    size_t tensors_size;
    TfLiteStatus (*GetExecutionPlan)(struct TfLiteContext *, TfLiteIntArray **);
    TfLiteTensor *tensors;
    void *impl_;
    TfLiteStatus (*ResizeTensor)(struct TfLiteContext *, TfLiteTensor *, TfLiteIntArray *);
    void (*ReportError)(struct TfLiteContext *, const char *, ...);
    TfLiteStatus (*AddTensors)(struct TfLiteContext *, int, int *);
    TfLiteStatus (*GetNodeAndRegistration)(struct TfLiteContext *, int, TfLiteNode **, TfLiteRegistration **);
    TfLiteStatus (*ReplaceNodeSubsetsWithDelegateKernels)(struct TfLiteContext *, TfLiteRegistration,
                                                          const TfLiteIntArray *, struct TfLiteDelegate *);
    int recommended_num_threads;
    void *GetExternalContext;
    void *SetExternalContext;
    bool allow_fp32_relax_to_fp16;
    void *profiler;
    void *AllocatePersistentBuffer;
    void *AllocateBufferForEval;
    void *RequestScratchBufferInArena;
    void *GetScratchBuffer;
    void *ResizeTensorExplicit;
    TfLiteStatus (*PreviewDelegatePartitioning)(struct TfLiteContext *, const TfLiteIntArray *,
                                                TfLiteDelegateParams **, int *);
    void *GetTensor;
    void *GetEvalTensor;
    void *GetModelMetadata;
    void *AcquireSubgraphContext;
    void *ReleaseSubgraphContext;
} TfLiteContext;

typedef enum TfLiteDelegateFlags {
    kTfLiteDelegateFlagsNone = 0,
    kTfLiteDelegateFlagsAllowDynamicTensors = 1,
    kTfLiteDelegateFlagsRequirePropagatedShapes = 2
} TfLiteDelegateFlags;

typedef struct TfLiteDelegate {
    void *data_;
    TfLiteStatus (*Prepare)(TfLiteContext *, struct TfLiteDelegate *);
    void *CopyFromBufferHandle;
    void *CopyToBufferHandle;
    void *FreeBufferHandle;
    int64_t flags;
    void *opaque_delegate_builder;
} TfLiteDelegate;

/* Builtin operator parameters (node->builtin_data), in the runtime's field order. */
typedef struct TfLiteConvParams {
    int padding;
    int stride_width;
    int stride_height;
    int activation;
    int dilation_width_factor;
    int dilation_height_factor;
} TfLiteConvParams;

typedef struct TfLiteDepthwiseConvParams {
    int padding;
    int stride_width;
    int stride_height;
    int depth_multiplier;
    int activation;
    int dilation_width_factor;
    int dilation_height_factor;
} TfLiteDepthwiseConvParams;

typedef struct TfLiteFullyConnectedParams {
    int activation;
    int weights_format;
    bool keep_num_dims;
    bool asymmetric_quantize_inputs;
} TfLiteFullyConnectedParams;

typedef struct TfLitePoolParams {
    int padding;
    int stride_width;
    int stride_height;
    int filter_width;
    int filter_height;
    int activation;
    int computed_padding[4];
} TfLitePoolParams;

typedef struct TfLiteAddParams {
    int activation;
    bool pot_scale_int16;
} TfLiteAddParams;

typedef struct TfLiteMulParams {
    int activation;
} TfLiteMulParams;

typedef struct TfLiteSoftmaxParams {
    float beta;
} TfLiteSoftmaxParams;

typedef struct TfLiteReducerParams {
    bool keep_dims;
} TfLiteReducerParams;

typedef struct TfLiteDivParams {
    int activation;
} TfLiteDivParams;

typedef struct TfLiteLeakyReluParams {
    float alpha;
} TfLiteLeakyReluParams;

typedef struct TfLiteConcatenationParams {
    int axis;
    int activation;
} TfLiteConcatenationParams;

typedef struct TfLiteResizeBilinearParams {
    bool align_corners;
    bool half_pixel_centers;
} TfLiteResizeBilinearParams;

typedef struct TfLiteResizeNearestNeighborParams {
    bool align_corners;
    bool half_pixel_centers;
} TfLiteResizeNearestNeighborParams;

typedef struct TfLiteSpaceToDepthParams {
    int block_size;
} TfLiteSpaceToDepthParams;

typedef struct TfLiteDepthToSpaceParams {
    int block_size;
} TfLiteDepthToSpaceParams;

typedef struct TfLiteMirrorPaddingParams {
    int mode; /* 1 REFLECT, 2 SYMMETRIC */
} TfLiteMirrorPaddingParams;

typedef struct TfLiteStridedSliceParams {
    int begin_mask;
    int end_mask;
    int ellipsis_mask;
    int new_axis_mask;
    int shrink_axis_mask;
    bool offset;
} TfLiteStridedSliceParams;

typedef struct TfLiteBatchMatMulParams {
    bool adj_x;
    bool adj_y;
    bool asymmetric_quantize_inputs;
} TfLiteBatchMatMulParams;

typedef struct TfLiteTransposeConvParams {
    int padding;
    int stride_width;
    int stride_height;
    int activation;
} TfLiteTransposeConvParams;

/* Params of PACK (whose int32 shape arithmetic the compiler folds, compiler/shapes.py) and UNPACK. */
typedef struct TfLitePackParams {
    int values_count;
    int axis;
} TfLitePackParams;

typedef struct TfLiteUnpackParams {
    int num;
    int axis;
} TfLiteUnpackParams;

typedef struct TfLiteGatherParams {
    int axis;
    int batch_dims;
} TfLiteGatherParams;

typedef struct TfLiteShapeParams {
    TfLiteType out_type;
} TfLiteShapeParams;

/* VAR_HANDLE's: which resource variable a handle names (compiler/shapes.py pairs reads with writes). */
typedef struct TfLiteVarHandleParams {
    const char *container;
    const char *shared_name;
} TfLiteVarHandleParams;

#endif
