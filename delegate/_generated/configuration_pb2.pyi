from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExecutionPreference(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ANY: _ClassVar[ExecutionPreference]
    LOW_LATENCY: _ClassVar[ExecutionPreference]
    LOW_POWER: _ClassVar[ExecutionPreference]
    FORCE_CPU: _ClassVar[ExecutionPreference]

class Delegate(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NONE: _ClassVar[Delegate]
    NNAPI: _ClassVar[Delegate]
    GPU: _ClassVar[Delegate]
    HEXAGON: _ClassVar[Delegate]
    XNNPACK: _ClassVar[Delegate]
    EDGETPU: _ClassVar[Delegate]
    EDGETPU_CORAL: _ClassVar[Delegate]

class NNAPIExecutionPreference(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNDEFINED: _ClassVar[NNAPIExecutionPreference]
    NNAPI_LOW_POWER: _ClassVar[NNAPIExecutionPreference]
    NNAPI_FAST_SINGLE_ANSWER: _ClassVar[NNAPIExecutionPreference]
    NNAPI_SUSTAINED_SPEED: _ClassVar[NNAPIExecutionPreference]

class NNAPIExecutionPriority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NNAPI_PRIORITY_UNDEFINED: _ClassVar[NNAPIExecutionPriority]
    NNAPI_PRIORITY_LOW: _ClassVar[NNAPIExecutionPriority]
    NNAPI_PRIORITY_MEDIUM: _ClassVar[NNAPIExecutionPriority]
    NNAPI_PRIORITY_HIGH: _ClassVar[NNAPIExecutionPriority]

class GPUBackend(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNSET: _ClassVar[GPUBackend]
    OPENCL: _ClassVar[GPUBackend]
    OPENGL: _ClassVar[GPUBackend]

class GPUInferencePriority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GPU_PRIORITY_AUTO: _ClassVar[GPUInferencePriority]
    GPU_PRIORITY_MAX_PRECISION: _ClassVar[GPUInferencePriority]
    GPU_PRIORITY_MIN_LATENCY: _ClassVar[GPUInferencePriority]
    GPU_PRIORITY_MIN_MEMORY_USAGE: _ClassVar[GPUInferencePriority]

class EdgeTpuPowerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNDEFINED_POWERSTATE: _ClassVar[EdgeTpuPowerState]
    TPU_CORE_OFF: _ClassVar[EdgeTpuPowerState]
    READY: _ClassVar[EdgeTpuPowerState]
    ACTIVE_MIN_POWER: _ClassVar[EdgeTpuPowerState]
    ACTIVE_VERY_LOW_POWER: _ClassVar[EdgeTpuPowerState]
    ACTIVE_LOW_POWER: _ClassVar[EdgeTpuPowerState]
    ACTIVE: _ClassVar[EdgeTpuPowerState]
    OVER_DRIVE: _ClassVar[EdgeTpuPowerState]

class BenchmarkEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNDEFINED_BENCHMARK_EVENT_TYPE: _ClassVar[BenchmarkEventType]
    START: _ClassVar[BenchmarkEventType]
    END: _ClassVar[BenchmarkEventType]
    ERROR: _ClassVar[BenchmarkEventType]
    LOGGED: _ClassVar[BenchmarkEventType]

class BenchmarkStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNKNOWN: _ClassVar[BenchmarkStage]
    INITIALIZATION: _ClassVar[BenchmarkStage]
    INFERENCE: _ClassVar[BenchmarkStage]
ANY: ExecutionPreference
LOW_LATENCY: ExecutionPreference
LOW_POWER: ExecutionPreference
FORCE_CPU: ExecutionPreference
NONE: Delegate
NNAPI: Delegate
GPU: Delegate
HEXAGON: Delegate
XNNPACK: Delegate
EDGETPU: Delegate
EDGETPU_CORAL: Delegate
UNDEFINED: NNAPIExecutionPreference
NNAPI_LOW_POWER: NNAPIExecutionPreference
NNAPI_FAST_SINGLE_ANSWER: NNAPIExecutionPreference
NNAPI_SUSTAINED_SPEED: NNAPIExecutionPreference
NNAPI_PRIORITY_UNDEFINED: NNAPIExecutionPriority
NNAPI_PRIORITY_LOW: NNAPIExecutionPriority
NNAPI_PRIORITY_MEDIUM: NNAPIExecutionPriority
NNAPI_PRIORITY_HIGH: NNAPIExecutionPriority
UNSET: GPUBackend
OPENCL: GPUBackend
OPENGL: GPUBackend
GPU_PRIORITY_AUTO: GPUInferencePriority
GPU_PRIORITY_MAX_PRECISION: GPUInferencePriority
GPU_PRIORITY_MIN_LATENCY: GPUInferencePriority
GPU_PRIORITY_MIN_MEMORY_USAGE: GPUInferencePriority
UNDEFINED_POWERSTATE: EdgeTpuPowerState
TPU_CORE_OFF: EdgeTpuPowerState
READY: EdgeTpuPowerState
ACTIVE_MIN_POWER: EdgeTpuPowerState
ACTIVE_VERY_LOW_POWER: EdgeTpuPowerState
ACTIVE_LOW_POWER: EdgeTpuPowerState
ACTIVE: EdgeTpuPowerState
OVER_DRIVE: EdgeTpuPowerState
UNDEFINED_BENCHMARK_EVENT_TYPE: BenchmarkEventType
START: BenchmarkEventType
END: BenchmarkEventType
ERROR: BenchmarkEventType
LOGGED: BenchmarkEventType
UNKNOWN: BenchmarkStage
INITIALIZATION: BenchmarkStage
INFERENCE: BenchmarkStage

class ComputeSettings(_message.Message):
    __slots__ = ("preference", "tflite_settings", "model_namespace_for_statistics", "model_identifier_for_statistics", "settings_to_test_locally")
    PREFERENCE_FIELD_NUMBER: _ClassVar[int]
    TFLITE_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAMESPACE_FOR_STATISTICS_FIELD_NUMBER: _ClassVar[int]
    MODEL_IDENTIFIER_FOR_STATISTICS_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_TO_TEST_LOCALLY_FIELD_NUMBER: _ClassVar[int]
    preference: ExecutionPreference
    tflite_settings: TFLiteSettings
    model_namespace_for_statistics: str
    model_identifier_for_statistics: str
    settings_to_test_locally: MinibenchmarkSettings
    def __init__(self, preference: _Optional[_Union[ExecutionPreference, str]] = ..., tflite_settings: _Optional[_Union[TFLiteSettings, _Mapping]] = ..., model_namespace_for_statistics: _Optional[str] = ..., model_identifier_for_statistics: _Optional[str] = ..., settings_to_test_locally: _Optional[_Union[MinibenchmarkSettings, _Mapping]] = ...) -> None: ...

class NNAPISettings(_message.Message):
    __slots__ = ("accelerator_name", "cache_directory", "model_token", "execution_preference", "no_of_nnapi_instances_to_cache", "fallback_settings", "allow_nnapi_cpu_on_android_10_plus", "execution_priority", "allow_dynamic_dimensions", "allow_fp16_precision_for_fp32", "use_burst_computation")
    ACCELERATOR_NAME_FIELD_NUMBER: _ClassVar[int]
    CACHE_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    MODEL_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_PREFERENCE_FIELD_NUMBER: _ClassVar[int]
    NO_OF_NNAPI_INSTANCES_TO_CACHE_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_NNAPI_CPU_ON_ANDROID_10_PLUS_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    ALLOW_DYNAMIC_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_FP16_PRECISION_FOR_FP32_FIELD_NUMBER: _ClassVar[int]
    USE_BURST_COMPUTATION_FIELD_NUMBER: _ClassVar[int]
    accelerator_name: str
    cache_directory: str
    model_token: str
    execution_preference: NNAPIExecutionPreference
    no_of_nnapi_instances_to_cache: int
    fallback_settings: FallbackSettings
    allow_nnapi_cpu_on_android_10_plus: bool
    execution_priority: NNAPIExecutionPriority
    allow_dynamic_dimensions: bool
    allow_fp16_precision_for_fp32: bool
    use_burst_computation: bool
    def __init__(self, accelerator_name: _Optional[str] = ..., cache_directory: _Optional[str] = ..., model_token: _Optional[str] = ..., execution_preference: _Optional[_Union[NNAPIExecutionPreference, str]] = ..., no_of_nnapi_instances_to_cache: _Optional[int] = ..., fallback_settings: _Optional[_Union[FallbackSettings, _Mapping]] = ..., allow_nnapi_cpu_on_android_10_plus: _Optional[bool] = ..., execution_priority: _Optional[_Union[NNAPIExecutionPriority, str]] = ..., allow_dynamic_dimensions: _Optional[bool] = ..., allow_fp16_precision_for_fp32: _Optional[bool] = ..., use_burst_computation: _Optional[bool] = ...) -> None: ...

class GPUSettings(_message.Message):
    __slots__ = ("is_precision_loss_allowed", "enable_quantized_inference", "force_backend", "inference_priority1", "inference_priority2", "inference_priority3")
    IS_PRECISION_LOSS_ALLOWED_FIELD_NUMBER: _ClassVar[int]
    ENABLE_QUANTIZED_INFERENCE_FIELD_NUMBER: _ClassVar[int]
    FORCE_BACKEND_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_PRIORITY1_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_PRIORITY2_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_PRIORITY3_FIELD_NUMBER: _ClassVar[int]
    is_precision_loss_allowed: bool
    enable_quantized_inference: bool
    force_backend: GPUBackend
    inference_priority1: GPUInferencePriority
    inference_priority2: GPUInferencePriority
    inference_priority3: GPUInferencePriority
    def __init__(self, is_precision_loss_allowed: _Optional[bool] = ..., enable_quantized_inference: _Optional[bool] = ..., force_backend: _Optional[_Union[GPUBackend, str]] = ..., inference_priority1: _Optional[_Union[GPUInferencePriority, str]] = ..., inference_priority2: _Optional[_Union[GPUInferencePriority, str]] = ..., inference_priority3: _Optional[_Union[GPUInferencePriority, str]] = ...) -> None: ...

class HexagonSettings(_message.Message):
    __slots__ = ("debug_level", "powersave_level", "print_graph_profile", "print_graph_debug")
    DEBUG_LEVEL_FIELD_NUMBER: _ClassVar[int]
    POWERSAVE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    PRINT_GRAPH_PROFILE_FIELD_NUMBER: _ClassVar[int]
    PRINT_GRAPH_DEBUG_FIELD_NUMBER: _ClassVar[int]
    debug_level: int
    powersave_level: int
    print_graph_profile: bool
    print_graph_debug: bool
    def __init__(self, debug_level: _Optional[int] = ..., powersave_level: _Optional[int] = ..., print_graph_profile: _Optional[bool] = ..., print_graph_debug: _Optional[bool] = ...) -> None: ...

class XNNPackSettings(_message.Message):
    __slots__ = ("num_threads",)
    NUM_THREADS_FIELD_NUMBER: _ClassVar[int]
    num_threads: int
    def __init__(self, num_threads: _Optional[int] = ...) -> None: ...

class EdgeTpuDeviceSpec(_message.Message):
    __slots__ = ("platform_type", "num_chips", "device_paths", "chip_family")
    class PlatformType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MMIO: _ClassVar[EdgeTpuDeviceSpec.PlatformType]
        REFERENCE: _ClassVar[EdgeTpuDeviceSpec.PlatformType]
        SIMULATOR: _ClassVar[EdgeTpuDeviceSpec.PlatformType]
        REMOTE_SIMULATOR: _ClassVar[EdgeTpuDeviceSpec.PlatformType]
    MMIO: EdgeTpuDeviceSpec.PlatformType
    REFERENCE: EdgeTpuDeviceSpec.PlatformType
    SIMULATOR: EdgeTpuDeviceSpec.PlatformType
    REMOTE_SIMULATOR: EdgeTpuDeviceSpec.PlatformType
    PLATFORM_TYPE_FIELD_NUMBER: _ClassVar[int]
    NUM_CHIPS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_PATHS_FIELD_NUMBER: _ClassVar[int]
    CHIP_FAMILY_FIELD_NUMBER: _ClassVar[int]
    platform_type: EdgeTpuDeviceSpec.PlatformType
    num_chips: int
    device_paths: _containers.RepeatedScalarFieldContainer[str]
    chip_family: int
    def __init__(self, platform_type: _Optional[_Union[EdgeTpuDeviceSpec.PlatformType, str]] = ..., num_chips: _Optional[int] = ..., device_paths: _Optional[_Iterable[str]] = ..., chip_family: _Optional[int] = ...) -> None: ...

class EdgeTpuInactivePowerConfig(_message.Message):
    __slots__ = ("inactive_power_state", "inactive_timeout_us")
    INACTIVE_POWER_STATE_FIELD_NUMBER: _ClassVar[int]
    INACTIVE_TIMEOUT_US_FIELD_NUMBER: _ClassVar[int]
    inactive_power_state: EdgeTpuPowerState
    inactive_timeout_us: int
    def __init__(self, inactive_power_state: _Optional[_Union[EdgeTpuPowerState, str]] = ..., inactive_timeout_us: _Optional[int] = ...) -> None: ...

class EdgeTpuSettings(_message.Message):
    __slots__ = ("inference_power_state", "inactive_power_configs", "inference_priority", "edgetpu_device_spec", "model_token", "float_truncation_type")
    class FloatTruncationType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNSPECIFIED: _ClassVar[EdgeTpuSettings.FloatTruncationType]
        NO_TRUNCATION: _ClassVar[EdgeTpuSettings.FloatTruncationType]
        BFLOAT16: _ClassVar[EdgeTpuSettings.FloatTruncationType]
        HALF: _ClassVar[EdgeTpuSettings.FloatTruncationType]
    UNSPECIFIED: EdgeTpuSettings.FloatTruncationType
    NO_TRUNCATION: EdgeTpuSettings.FloatTruncationType
    BFLOAT16: EdgeTpuSettings.FloatTruncationType
    HALF: EdgeTpuSettings.FloatTruncationType
    INFERENCE_POWER_STATE_FIELD_NUMBER: _ClassVar[int]
    INACTIVE_POWER_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    EDGETPU_DEVICE_SPEC_FIELD_NUMBER: _ClassVar[int]
    MODEL_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FLOAT_TRUNCATION_TYPE_FIELD_NUMBER: _ClassVar[int]
    inference_power_state: EdgeTpuPowerState
    inactive_power_configs: _containers.RepeatedCompositeFieldContainer[EdgeTpuInactivePowerConfig]
    inference_priority: int
    edgetpu_device_spec: EdgeTpuDeviceSpec
    model_token: str
    float_truncation_type: EdgeTpuSettings.FloatTruncationType
    def __init__(self, inference_power_state: _Optional[_Union[EdgeTpuPowerState, str]] = ..., inactive_power_configs: _Optional[_Iterable[_Union[EdgeTpuInactivePowerConfig, _Mapping]]] = ..., inference_priority: _Optional[int] = ..., edgetpu_device_spec: _Optional[_Union[EdgeTpuDeviceSpec, _Mapping]] = ..., model_token: _Optional[str] = ..., float_truncation_type: _Optional[_Union[EdgeTpuSettings.FloatTruncationType, str]] = ...) -> None: ...

class CoralSettings(_message.Message):
    __slots__ = ("device", "performance", "usb_always_dfu", "usb_max_bulk_in_queue_length")
    class Performance(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNDEFINED: _ClassVar[CoralSettings.Performance]
        MAXIMUM: _ClassVar[CoralSettings.Performance]
        HIGH: _ClassVar[CoralSettings.Performance]
        MEDIUM: _ClassVar[CoralSettings.Performance]
        LOW: _ClassVar[CoralSettings.Performance]
    UNDEFINED: CoralSettings.Performance
    MAXIMUM: CoralSettings.Performance
    HIGH: CoralSettings.Performance
    MEDIUM: CoralSettings.Performance
    LOW: CoralSettings.Performance
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PERFORMANCE_FIELD_NUMBER: _ClassVar[int]
    USB_ALWAYS_DFU_FIELD_NUMBER: _ClassVar[int]
    USB_MAX_BULK_IN_QUEUE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    device: str
    performance: CoralSettings.Performance
    usb_always_dfu: bool
    usb_max_bulk_in_queue_length: int
    def __init__(self, device: _Optional[str] = ..., performance: _Optional[_Union[CoralSettings.Performance, str]] = ..., usb_always_dfu: _Optional[bool] = ..., usb_max_bulk_in_queue_length: _Optional[int] = ...) -> None: ...

class CPUSettings(_message.Message):
    __slots__ = ("num_threads",)
    NUM_THREADS_FIELD_NUMBER: _ClassVar[int]
    num_threads: int
    def __init__(self, num_threads: _Optional[int] = ...) -> None: ...

class TFLiteSettings(_message.Message):
    __slots__ = ("delegate", "nnapi_settings", "gpu_settings", "hexagon_settings", "xnnpack_settings", "cpu_settings", "max_delegated_partitions", "edgetpu_settings", "fallback_settings", "coral_settings")
    DELEGATE_FIELD_NUMBER: _ClassVar[int]
    NNAPI_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    GPU_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    HEXAGON_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    XNNPACK_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    CPU_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    MAX_DELEGATED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    EDGETPU_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    CORAL_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    delegate: Delegate
    nnapi_settings: NNAPISettings
    gpu_settings: GPUSettings
    hexagon_settings: HexagonSettings
    xnnpack_settings: XNNPackSettings
    cpu_settings: CPUSettings
    max_delegated_partitions: int
    edgetpu_settings: EdgeTpuSettings
    fallback_settings: FallbackSettings
    coral_settings: CoralSettings
    def __init__(self, delegate: _Optional[_Union[Delegate, str]] = ..., nnapi_settings: _Optional[_Union[NNAPISettings, _Mapping]] = ..., gpu_settings: _Optional[_Union[GPUSettings, _Mapping]] = ..., hexagon_settings: _Optional[_Union[HexagonSettings, _Mapping]] = ..., xnnpack_settings: _Optional[_Union[XNNPackSettings, _Mapping]] = ..., cpu_settings: _Optional[_Union[CPUSettings, _Mapping]] = ..., max_delegated_partitions: _Optional[int] = ..., edgetpu_settings: _Optional[_Union[EdgeTpuSettings, _Mapping]] = ..., fallback_settings: _Optional[_Union[FallbackSettings, _Mapping]] = ..., coral_settings: _Optional[_Union[CoralSettings, _Mapping]] = ...) -> None: ...

class FallbackSettings(_message.Message):
    __slots__ = ("allow_automatic_fallback_on_compilation_error", "allow_automatic_fallback_on_execution_error")
    ALLOW_AUTOMATIC_FALLBACK_ON_COMPILATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    ALLOW_AUTOMATIC_FALLBACK_ON_EXECUTION_ERROR_FIELD_NUMBER: _ClassVar[int]
    allow_automatic_fallback_on_compilation_error: bool
    allow_automatic_fallback_on_execution_error: bool
    def __init__(self, allow_automatic_fallback_on_compilation_error: _Optional[bool] = ..., allow_automatic_fallback_on_execution_error: _Optional[bool] = ...) -> None: ...

class BenchmarkMetric(_message.Message):
    __slots__ = ("name", "values")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    name: str
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, name: _Optional[str] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class BenchmarkResult(_message.Message):
    __slots__ = ("initialization_time_us", "inference_time_us", "max_memory_kb", "ok", "metrics")
    INITIALIZATION_TIME_US_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_TIME_US_FIELD_NUMBER: _ClassVar[int]
    MAX_MEMORY_KB_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    initialization_time_us: _containers.RepeatedScalarFieldContainer[int]
    inference_time_us: _containers.RepeatedScalarFieldContainer[int]
    max_memory_kb: int
    ok: bool
    metrics: _containers.RepeatedCompositeFieldContainer[BenchmarkMetric]
    def __init__(self, initialization_time_us: _Optional[_Iterable[int]] = ..., inference_time_us: _Optional[_Iterable[int]] = ..., max_memory_kb: _Optional[int] = ..., ok: _Optional[bool] = ..., metrics: _Optional[_Iterable[_Union[BenchmarkMetric, _Mapping]]] = ...) -> None: ...

class ErrorCode(_message.Message):
    __slots__ = ("source", "tflite_error", "underlying_api_error")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TFLITE_ERROR_FIELD_NUMBER: _ClassVar[int]
    UNDERLYING_API_ERROR_FIELD_NUMBER: _ClassVar[int]
    source: Delegate
    tflite_error: int
    underlying_api_error: int
    def __init__(self, source: _Optional[_Union[Delegate, str]] = ..., tflite_error: _Optional[int] = ..., underlying_api_error: _Optional[int] = ...) -> None: ...

class BenchmarkError(_message.Message):
    __slots__ = ("stage", "exit_code", "signal", "error_code", "mini_benchmark_error_code")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    MINI_BENCHMARK_ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    stage: BenchmarkStage
    exit_code: int
    signal: int
    error_code: _containers.RepeatedCompositeFieldContainer[ErrorCode]
    mini_benchmark_error_code: int
    def __init__(self, stage: _Optional[_Union[BenchmarkStage, str]] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., error_code: _Optional[_Iterable[_Union[ErrorCode, _Mapping]]] = ..., mini_benchmark_error_code: _Optional[int] = ...) -> None: ...

class BenchmarkEvent(_message.Message):
    __slots__ = ("tflite_settings", "event_type", "result", "error", "boottime_us", "wallclock_us")
    TFLITE_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    BOOTTIME_US_FIELD_NUMBER: _ClassVar[int]
    WALLCLOCK_US_FIELD_NUMBER: _ClassVar[int]
    tflite_settings: TFLiteSettings
    event_type: BenchmarkEventType
    result: BenchmarkResult
    error: BenchmarkError
    boottime_us: int
    wallclock_us: int
    def __init__(self, tflite_settings: _Optional[_Union[TFLiteSettings, _Mapping]] = ..., event_type: _Optional[_Union[BenchmarkEventType, str]] = ..., result: _Optional[_Union[BenchmarkResult, _Mapping]] = ..., error: _Optional[_Union[BenchmarkError, _Mapping]] = ..., boottime_us: _Optional[int] = ..., wallclock_us: _Optional[int] = ...) -> None: ...

class BestAccelerationDecision(_message.Message):
    __slots__ = ("number_of_source_events", "min_latency_event", "min_inference_time_us")
    NUMBER_OF_SOURCE_EVENTS_FIELD_NUMBER: _ClassVar[int]
    MIN_LATENCY_EVENT_FIELD_NUMBER: _ClassVar[int]
    MIN_INFERENCE_TIME_US_FIELD_NUMBER: _ClassVar[int]
    number_of_source_events: int
    min_latency_event: BenchmarkEvent
    min_inference_time_us: int
    def __init__(self, number_of_source_events: _Optional[int] = ..., min_latency_event: _Optional[_Union[BenchmarkEvent, _Mapping]] = ..., min_inference_time_us: _Optional[int] = ...) -> None: ...

class BenchmarkInitializationFailure(_message.Message):
    __slots__ = ("initialization_status",)
    INITIALIZATION_STATUS_FIELD_NUMBER: _ClassVar[int]
    initialization_status: int
    def __init__(self, initialization_status: _Optional[int] = ...) -> None: ...

class MiniBenchmarkEvent(_message.Message):
    __slots__ = ("is_log_flushing_event", "best_acceleration_decision", "initialization_failure")
    IS_LOG_FLUSHING_EVENT_FIELD_NUMBER: _ClassVar[int]
    BEST_ACCELERATION_DECISION_FIELD_NUMBER: _ClassVar[int]
    INITIALIZATION_FAILURE_FIELD_NUMBER: _ClassVar[int]
    is_log_flushing_event: bool
    best_acceleration_decision: BestAccelerationDecision
    initialization_failure: BenchmarkInitializationFailure
    def __init__(self, is_log_flushing_event: _Optional[bool] = ..., best_acceleration_decision: _Optional[_Union[BestAccelerationDecision, _Mapping]] = ..., initialization_failure: _Optional[_Union[BenchmarkInitializationFailure, _Mapping]] = ...) -> None: ...

class ModelFile(_message.Message):
    __slots__ = ("filename", "fd", "offset", "length")
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    FD_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    filename: str
    fd: int
    offset: int
    length: int
    def __init__(self, filename: _Optional[str] = ..., fd: _Optional[int] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class BenchmarkStoragePaths(_message.Message):
    __slots__ = ("storage_file_path", "data_directory_path")
    STORAGE_FILE_PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_DIRECTORY_PATH_FIELD_NUMBER: _ClassVar[int]
    storage_file_path: str
    data_directory_path: str
    def __init__(self, storage_file_path: _Optional[str] = ..., data_directory_path: _Optional[str] = ...) -> None: ...

class MinibenchmarkSettings(_message.Message):
    __slots__ = ("settings_to_test", "model_file", "storage_paths")
    SETTINGS_TO_TEST_FIELD_NUMBER: _ClassVar[int]
    MODEL_FILE_FIELD_NUMBER: _ClassVar[int]
    STORAGE_PATHS_FIELD_NUMBER: _ClassVar[int]
    settings_to_test: _containers.RepeatedCompositeFieldContainer[TFLiteSettings]
    model_file: ModelFile
    storage_paths: BenchmarkStoragePaths
    def __init__(self, settings_to_test: _Optional[_Iterable[_Union[TFLiteSettings, _Mapping]]] = ..., model_file: _Optional[_Union[ModelFile, _Mapping]] = ..., storage_paths: _Optional[_Union[BenchmarkStoragePaths, _Mapping]] = ...) -> None: ...
