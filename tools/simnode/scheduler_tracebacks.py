"""Tracebacks of the scheduler process (after `Scheduler hit an exception: `), built from the 0.5.23 source.

These failures need a GPU, so no real run could record them here; every frame names a real file, line,
function and code line of SGLang 0.5.23, and the messages are the source's own format strings.
"""

from __future__ import annotations

from specdoctor.tools.simnode.tracebacks import SITE

_S = SITE + "/sglang/srt"
_TORCH = SITE + "/torch"
_STDLIB = "/usr/lib/python3.12"

CAPTURE_HINT = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
    "(Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
CUDA_ERROR_TAIL = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
    "might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)

_RUN = f"""Traceback (most recent call last):
  File "{_S}/managers/scheduler.py", line 6362, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args)
                ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
"""

_MODEL_RUNNER = f"""  File "{_S}/managers/scheduler.py", line 568, in __init__
    self.init_model_worker()
  File "{_S}/managers/scheduler.py", line 1130, in init_model_worker
    self.init_tp_model_worker()
  File "{_S}/managers/scheduler.py", line 1033, in init_tp_model_worker
    self.tp_worker = TpModelWorker(**worker_kwargs)
                     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/managers/tp_worker.py", line 319, in __init__
    self._init_model_runner()
  File "{_S}/managers/tp_worker.py", line 487, in _init_model_runner
    self._model_runner = ModelRunner(
                         ^^^^^^^^^^^^
"""

_LOAD = f"""  File "{_S}/model_executor/model_runner.py", line 499, in __init__
    self.initialize()
  File "{_S}/model_executor/model_runner.py", line 715, in initialize
    self.load_model()
  File "{_S}/model_executor/model_runner.py", line 1312, in load_model
    loaded = load_model_with_memory_saver(
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/model_executor/model_runner_components/load_model_utils.py", line 346, in load_model_with_memory_saver
    model = loader.load_model(
            ^^^^^^^^^^^^^^^^^^
  File "{_S}/model_loader/loader.py", line 1014, in load_model
    model = _initialize_model(
            ^^^^^^^^^^^^^^^^^^
  File "{_S}/model_loader/loader.py", line 309, in _initialize_model
    model = model_class(**kwargs)
            ^^^^^^^^^^^^^^^^^^^^^
"""

_LLAMA_ATTENTION = f"""  File "{_S}/models/llama.py", line 567, in __init__
    self.model = self._init_model(config, quant_config, add_prefix("model", prefix))
                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/models/llama.py", line 599, in _init_model
    return LlamaModel(config, quant_config=quant_config, prefix=prefix)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/models/llama.py", line 446, in __init__
    self.layers, self.start_layer, self.end_layer = make_pp_layers(
                                                    ^^^^^^^^^^^^^^^
@LAYERS@  File "{_S}/models/llama.py", line 448, in <lambda>
    lambda idx, prefix: LlamaDecoderLayer(
                        ^^^^^^^^^^^^^^^^^^
  File "{_S}/models/llama.py", line 342, in __init__
    self.self_attn = LlamaAttention(
                     ^^^^^^^^^^^^^^^
  File "{_S}/models/llama.py", line 183, in __init__
    assert self.total_num_heads % tp_size == 0
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
"""

_QWEN2_ATTENTION = f"""  File "{_S}/models/qwen2.py", line 530, in __init__
    self.model = Qwen2Model(
                 ^^^^^^^^^^^
  File "{_S}/models/qwen2.py", line 392, in __init__
    self.layers, self.start_layer, self.end_layer = make_pp_layers(
                                                    ^^^^^^^^^^^^^^^
@LAYERS@  File "{_S}/models/qwen2.py", line 394, in <lambda>
    lambda idx, prefix: decoder_layer_type(
                        ^^^^^^^^^^^^^^^^^^^
  File "{_S}/models/qwen2.py", line 282, in __init__
    self.self_attn = Qwen2Attention(
                     ^^^^^^^^^^^^^^^
  File "{_S}/models/qwen2.py", line 167, in __init__
    assert self.total_num_heads % tp_size == 0
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
"""

_MAKE_LAYERS = f"""  File "{_S}/utils/common.py", line 1695, in make_pp_layers
    return make_layers(
           ^^^^^^^^^^^^
  File "{_S}/utils/common.py", line 1666, in make_layers
    + get_offloader().wrap_modules(
      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/utils/offloader.py", line 40, in wrap_modules
    return list(all_modules_generator)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/utils/common.py", line 1667, in <genexpr>
    (build(stack, idx) for idx in range(start_layer, end_layer)),
     ^^^^^^^^^^^^^^^^^
  File "{_S}/utils/common.py", line 1653, in build
    layer = layer_fn(idx=idx, prefix=add_prefix(idx, prefix))
            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
"""

_MEMORY_POOL = f"""  File "{_S}/managers/scheduler.py", line 568, in __init__
    self.init_model_worker()
  File "{_S}/managers/scheduler.py", line 1137, in init_model_worker
    self.init_memory_pools()
  File "{_S}/managers/scheduler.py", line 1100, in init_memory_pools
    self.init_target_memory_pool()
  File "{_S}/managers/scheduler.py", line 1090, in init_target_memory_pool
    self.tp_worker.alloc_memory_pool(
  File "{_S}/managers/tp_worker.py", line 409, in alloc_memory_pool
    self.model_runner.alloc_memory_pool(
  File "{_S}/model_executor/model_runner.py", line 982, in alloc_memory_pool
    result = self.kv_cache_configurator.configure(
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/mem_cache/kv_cache_configurator.py", line 476, in configure
    config = self._resolve_memory_pool_config(pre_model_load_memory)
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
"""

_GRAPHS = f"""  File "{_S}/managers/scheduler.py", line 568, in __init__
    self.init_model_worker()
  File "{_S}/managers/scheduler.py", line 1146, in init_model_worker
    self.init_all_cuda_graphs()
  File "{SITE}/torch/utils/_contextlib.py", line 120, in decorate_context
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/managers/scheduler.py", line 1124, in init_all_cuda_graphs
    self.tp_worker.init_cuda_graphs()
  File "{_S}/managers/tp_worker.py", line 434, in init_cuda_graphs
    self.model_runner.init_cuda_graphs(
  File "{_S}/model_executor/model_runner.py", line 1192, in init_cuda_graphs
    capture = capture_cuda_graphs(
              ^^^^^^^^^^^^^^^^^^^^
  File "{_S}/model_executor/model_runner_components/cuda_graph_setup.py", line 437, in capture_cuda_graphs
    decode = capture_decode_graph(model_runner=model_runner)
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/model_executor/model_runner_components/cuda_graph_setup.py", line 780, in capture_decode_graph
    runner = GraphRunnerCls(model_runner)
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^
"""

_CAPTURE_START = f"""Traceback (most recent call last):
  File "{_S}/model_executor/runner/decode_cuda_graph_runner.py", line 600, in __init__
    self.capture()
  File "{_S}/model_executor/runner/decode_cuda_graph_runner.py", line 1251, in capture
    self._capture()
"""
"""The runner's constructor entering capture, where every capture failure starts."""

_CAPTURE_INNER = f"""{_CAPTURE_START}  File "{_S}/model_executor/runner/decode_cuda_graph_runner.py", line 1303, in _capture
    self._capture_one_stream()
  File "{_S}/model_executor/runner/decode_cuda_graph_runner.py", line 1359, in _capture_one_stream
    self.capture_one_shape(
@INNER@"""


def _scheduler(frames: str, error: str) -> str:
    return _RUN + frames + error + "\n"


def kv_no_room(mem_fraction_static: float, available_gib: float, pre_load_gib: float) -> str:
    """0.5.23's check when the loaded weights leave nothing for the KV pool (kv_cache_configurator.py)."""
    minimum = 1 - available_gib / pre_load_gib
    suggested = -(-minimum * 1000 // 1) / 1000
    frames = (
        _MEMORY_POOL
        + f"""  File "{_S}/mem_cache/kv_cache_configurator.py", line 3182, in _resolve_memory_pool_config
    available_bytes = self._profile_available_bytes(pre_model_load_memory)
                      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/mem_cache/kv_cache_configurator.py", line 3050, in _profile_available_bytes
    raise ValueError(
"""
    )
    error = (
        "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        f"--mem-fraction-static={mem_fraction_static}. Raise --mem-fraction-static above "
        f"{suggested:.3f} (minimum viable = 1 - available/pre = {minimum:.4f}). If using speculative "
        "decoding, draft weights are now counted."
    )
    return _scheduler(frames, error)


def kv_not_enough(mem_fraction_static: float) -> str:
    """The pool came out at zero tokens (pool_configurator.py MemoryPoolConfig.__post_init__)."""
    frames = (
        _MEMORY_POOL
        + f"""  File "{_S}/mem_cache/kv_cache_configurator.py", line 3183, in _resolve_memory_pool_config
    config = self.config_from_budget(available_bytes)
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "<string>", line 13, in __init__
  File "{_S}/model_executor/pool_configurator.py", line 100, in __post_init__
    raise RuntimeError(msg)
"""
    )
    error = (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        f"Current value: mem_fraction_static={mem_fraction_static}"
    )
    return _scheduler(frames, error)


def _capture_wrapped(inner: str, cause: str) -> str:
    """The runner re-raises any capture error as `Capture cuda graph failed`, after the original traceback."""
    frames = (
        _GRAPHS
        + f"""  File "{_S}/model_executor/runner/decode_cuda_graph_runner.py", line 602, in __init__
    raise Exception(
"""
    )
    return inner + _scheduler(frames, f"Exception: Capture cuda graph failed: {cause}\n{CAPTURE_HINT}")


def capture_failed(cause: str, cause_type: str = "torch.OutOfMemoryError") -> str:
    """A decode-graph capture failure wrapped as 0.5.23's decode_cuda_graph_runner does."""
    inner = _CAPTURE_INNER.replace(
        "@INNER@",
        f"""  File "{_S}/model_executor/runner/decode_cuda_graph_runner.py", line 1385, in capture_one_shape
    forward_batch, attn_backend, pp_proxy_tensors = self.capture_prepare(
                                                    ^^^^^^^^^^^^^^^^^^^^^
{cause_type}: {cause}

During handling of the above exception, another exception occurred:

""",
    )
    return _capture_wrapped(inner, cause)


def oom_message(
    tried_mib: float,
    gpu: int,
    total_gib: float,
    free_mib: float,
    others: list[tuple[int, float]],
    process_gib: float,
    pytorch_gib: float,
    graph_pool_mib: float,
    reserved_free_mib: float,
) -> str:
    """torch's CUDA caching-allocator OOM text (c10/cuda/CUDACachingAllocator.cpp)."""
    procs = "".join(f"Process {pid} has {_size(mib)} memory in use. " for pid, mib in others)
    pool = (
        f"with {_size(graph_pool_mib)} allocated in private pools (e.g., CUDA Graphs), "
        if graph_pool_mib
        else ""
    )
    return (
        f"CUDA out of memory. Tried to allocate {_size(tried_mib)}. GPU {gpu} has a total capacity of "
        f"{total_gib:.2f} GiB of which {_size(free_mib)} is free. {procs}Including non-PyTorch memory, this "
        f"process has {process_gib:.2f} GiB memory in use. Of the allocated memory {pytorch_gib:.2f} GiB is "
        f"allocated by PyTorch, {pool}and {_size(reserved_free_mib)} is reserved by PyTorch but unallocated. "
        "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def _size(mib: float) -> str:
    return f"{mib / 1024:.2f} GiB" if mib >= 1024 else f"{mib:.2f} MiB"


def load_oom(message: str) -> str:
    """Weights that do not fit the GPU at all: torch raises while the model is being built."""
    frames = (
        _MODEL_RUNNER
        + _LOAD
        + f"""  File "{SITE}/torch/utils/_device.py", line 104, in __torch_function__
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
"""
    )
    return _scheduler(frames, f"torch.OutOfMemoryError: {message}")


def heads_not_divisible(architecture: str) -> str:
    """TP that does not divide the attention heads: a bare assert in the model's attention layer."""
    attention = _QWEN2_ATTENTION if architecture.startswith("Qwen") else _LLAMA_ATTENTION
    return _scheduler(_MODEL_RUNNER + _LOAD + attention.replace("@LAYERS@", _MAKE_LAYERS), "AssertionError")


def invalid_device_ordinal() -> str:
    """A TP rank with no GPU of its own: torch refuses the device in init_parallel_runtime."""
    frames = f"""  File "{_S}/managers/scheduler.py", line 536, in __init__
    bootstrap.init_parallel_runtime(
  File "{_S}/distributed/bootstrap.py", line 133, in init_parallel_runtime
    torch.get_device_module(device).set_device(get_device().gpu_id)
  File "{_TORCH}/cuda/__init__.py", line 689, in set_device
    torch._C._cuda_setDevice(device)
"""
    return _scheduler(
        frames, "torch.AcceleratorError: CUDA error: invalid device ordinal\n" + CUDA_ERROR_TAIL
    )


def unbalanced_memory(pre_gib: float, local_gib: float) -> str:
    frames = (
        _MODEL_RUNNER
        + f"""  File "{_S}/model_executor/model_runner.py", line 466, in __init__
    self.init_torch_distributed()
  File "{_S}/model_executor/model_runner.py", line 1262, in init_torch_distributed
    self.pre_model_load_memory = bootstrap.measure_pre_model_load_memory(
                                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/distributed/bootstrap.py", line 215, in measure_pre_model_load_memory
    _check_tp_memory_balance(
  File "{_S}/distributed/bootstrap.py", line 450, in _check_tp_memory_balance
    raise RuntimeError(msg)
"""
    )
    error = (
        "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
        f"pre_model_load_memory={pre_gib!r}, local_gpu_memory={local_gib!r}, "
        f"local_gpu_memory * 0.9={local_gib * 0.9!r}"
    )
    return _scheduler(frames, error)


def peer_access_in_capture() -> str:
    """Custom all-reduce on GPUs without P2P: registering the graphs' IPC buffers fails as capture ends."""
    cause = "CUDART error: peer access is not supported between these two devices"
    inner = f"""{_CAPTURE_START}  File "{_S}/model_executor/runner/decode_cuda_graph_runner.py", line 1295, in _capture
    with (
  File "{_STDLIB}/contextlib.py", line 144, in __exit__
    next(self.gen)
  File "{_S}/distributed/parallel_state.py", line 633, in graph_capture
    with self.device_module.stream(stream), maybe_ca_context:
  File "{_STDLIB}/contextlib.py", line 144, in __exit__
    next(self.gen)
  File "{_S}/distributed/device_communicators/custom_all_reduce.py", line 194, in capture
    self.register_graph_buffers()
  File "{_S}/distributed/device_communicators/custom_all_reduce.py", line 258, in register_graph_buffers
    ops.register_graph_buffers(self._ptr, handles, offsets)
RuntimeError: {cause}

During handling of the above exception, another exception occurred:

"""
    return _capture_wrapped(inner, cause)


def illegal_memory_access() -> str:
    """A kernel fault while serving (what crash_after_ready_s injects)."""
    frames = f"""  File "{_S}/managers/scheduler.py", line 6368, in run_scheduler_process
    scheduler.run_event_loop()
  File "{_S}/managers/scheduler.py", line 2010, in run_event_loop
    dispatch_event_loop(self)
  File "{_S}/managers/scheduler.py", line 6231, in dispatch_event_loop
    scheduler.event_loop_overlap()
  File "{_S}/managers/scheduler.py", line 2109, in event_loop_overlap
    batch_result = self.run_batch(batch)
                   ^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/managers/scheduler.py", line 4704, in run_batch
    batch_result = self.model_worker.forward_batch_generation(
                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
"""
    return _runtime(
        frames,
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n" + CUDA_ERROR_TAIL,
    )


def _runtime(frames: str, error: str) -> str:
    return "Traceback (most recent call last):\n" + frames + error.rstrip("\n") + "\n"
