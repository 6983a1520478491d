"""The tracebacks SGLang 0.5.23 prints for each fault, as text.

Frames of resolution failures are copied from real SGLang 0.5.23 runs (tests/data/sglang-outputs/); frames
of GPU-only failures are built from the 0.5.23 source (file, line, function, code line as they are
there). Only the install prefix is the simulator's own.
"""

from __future__ import annotations

SITE = "/usr/local/lib/python3.12/dist-packages"
"""Where the simulated SGLang is installed (a CUDA docker image's prefix)."""

_S = SITE + "/sglang/srt"

_RESOLVE_HEAD = f"""Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "<frozen runpy>", line 88, in _run_code
  File "{SITE}/sglang/launch_server.py", line 84, in <module>
    run_server(server_args)
  File "{SITE}/sglang/launch_server.py", line 29, in run_server
    server_args.resolve_once()
  File "{_S}/server_args.py", line 277, in resolve_once
    run_resolution_pipeline(self)
"""

_SPEC_HOOK = f"""  File "{_S}/arg_groups/pipeline.py", line 306, in run_resolution_pipeline
    run_hook(handle_speculative_decoding, server_args)
  File "{_S}/arg_groups/resolution_hooks.py", line 139, in run_hook
    step(server_args)
"""

_SPEC_DISPATCH = f"""  File "{_S}/arg_groups/speculative_hook.py", line 284, in handle_speculative_decoding
    algo.handle_server_args(server_args)
  File "{_S}/speculative/spec_info.py", line @LINE@, in handle_server_args
    @CALL@(server_args)
"""

_HF_REPO_ID = f"""Traceback (most recent call last):
  File "{SITE}/transformers/utils/hub.py", line 537, in cached_files
    hf_hub_download(
  File "{SITE}/huggingface_hub/utils/_validators.py", line 85, in _inner_fn
    validate_repo_id(arg_value)
  File "{SITE}/huggingface_hub/utils/_validators.py", line 133, in validate_repo_id
    raise HFValidationError(
huggingface_hub.errors.HFValidationError: @MESSAGE@

The above exception was the direct cause of the following exception:

"""

_POINTER_HEAD = f"""  File "{SITE}/sglang/srt/utils/common.py", line 4570, in wrapper
    result = func(*args, **kwargs)
             ^^^^^^^^^^^^^^^^^^^^^
"""

_POINTER_TAIL = f"""  File "{_S}/utils/hf_transformers/config.py", line 387, in get_config
    meta = load_pointer_adapter(model, revision)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/configs/model_config.py", line 353, in load_pointer_adapter
    meta = load_pointer_head(model_path, revision)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/configs/model_config.py", line 328, in load_pointer_head
    path = cached_file(
           ^^^^^^^^^^^^
  File "{SITE}/transformers/utils/hub.py", line 370, in cached_file
    file = cached_files(path_or_repo_id=path_or_repo_id, filenames=[filename], **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/transformers/utils/hub.py", line 595, in cached_files
    raise OSError(f"{{e}}") from e
"""

_CONFIG_LOOKUP = f"""  File "{_S}/utils/hf_transformers/config.py", line 379, in get_config
    config = parser.parse(
             ^^^^^^^^^^^^^
  File "{_S}/utils/hf_transformers/config.py", line 224, in parse
    config = _try_load_longcat_config(model, revision, **kwargs)
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/utils/hf_transformers/config.py", line 162, in _try_load_longcat_config
    config_dict, _ = PretrainedConfig.get_config_dict(
                     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/transformers/configuration_utils.py", line 792, in get_config_dict
    config_dict, kwargs = cls._get_config_dict(pretrained_model_name_or_path, **kwargs)
                          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/transformers/configuration_utils.py", line 844, in _get_config_dict
    resolved_config_file = cached_file(
                           ^^^^^^^^^^^^
  File "{SITE}/transformers/utils/hub.py", line 370, in cached_file
    file = cached_files(path_or_repo_id=path_or_repo_id, filenames=[filename], **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
"""
"""get_config down to transformers' cached_file, where both a bad repo id and an offline Hub end."""

_LONGCAT = f"""Traceback (most recent call last):
{_CONFIG_LOOKUP}  File "{SITE}/transformers/utils/hub.py", line 595, in cached_files
    raise OSError(f"{{e}}") from e
OSError: @MESSAGE@

During handling of the above exception, another exception occurred:

"""

_MUSE_SPARK = f"""  File "{_S}/arg_groups/pipeline.py", line 122, in run_resolution_pipeline
    apply_muse_spark_env_defaults(server_args)
  File "{_S}/arg_groups/muse_spark_hook.py", line 43, in apply_muse_spark_env_defaults
    hf_config = get_config(
                ^^^^^^^^^^^
"""


def _dispatch(line: int, handler: str) -> str:
    return _SPEC_DISPATCH.replace("@LINE@", str(line)).replace("@CALL@", handler)


_DRAFT_CONFIG = f"""  File "{_S}/arg_groups/speculative_hook.py", line 154, in handle_speculative_decoding
    speculative_algorithm=_resolve_speculative_algorithm_alias(
                          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/arg_groups/speculative_hook.py", line 93, in _resolve_speculative_algorithm_alias
    cfg = get_config(
          ^^^^^^^^^^^
"""


def resolve_failure(frames: str, error: str) -> str:
    """A resolution-time traceback: SGLang's launcher frames, then `frames`, then the error line."""
    return _RESOLVE_HEAD + frames + error + "\n"


def _spec(frames: str, error: str) -> str:
    return resolve_failure(_SPEC_HOOK + frames, error)


def _eagle(line: int, code: str, error: str, carets: str = "") -> str:
    dispatch = _dispatch(264, "_handle_eagle_family")
    frame = (
        f'  File "{_S}/arg_groups/speculative_hook.py", line {line}, in _handle_eagle_family\n    {code}\n'
    )
    return _spec(dispatch + frame + carets, error)


def spec_steps_missing() -> str:
    """topk or draft tokens given without num steps: a bare assert in the auto-params branch."""
    carets = "        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    return _eagle(1162, "and cfg.speculative_num_draft_tokens is None", "AssertionError", carets)


def spec_topk_none() -> str:
    """Only num steps given: topk stays None and the page-size comparison fails."""
    return _eagle(
        1274,
        "cfg.speculative_eagle_topk > 1",
        "TypeError: '>' not supported between instances of 'NoneType' and 'int'",
    )


def eagle_family_error(line: int, error: str) -> str:
    kind = error.split(":", 1)[0]
    return _eagle(line, f"raise {kind}(", error)


_HANDLERS = {"DFLASH": 256, "UNO": 258, "DSPARK": 260, "NGRAM": 266}
"""The line of spec_info.handle_server_args that calls each algorithm's `_handle_<name>`."""


def algorithm_error(algorithm: str, line: int, error: str) -> str:
    """A ValueError raised in `_handle_<algorithm>` of speculative_hook.py."""
    handler = f"_handle_{algorithm.lower()}"
    dispatch = _dispatch(_HANDLERS[algorithm], handler)
    frame = (
        f'  File "{_S}/arg_groups/speculative_hook.py", line {line}, in {handler}\n    raise ValueError(\n'
    )
    return _spec(dispatch + frame, error)


def spec_hook_error(line: int, error: str) -> str:
    frame = (
        f'  File "{_S}/arg_groups/speculative_hook.py", line {line}, in handle_speculative_decoding\n'
        "    raise ValueError(\n"
    )
    return _spec(frame, error)


def unknown_algorithm(name: str) -> str:
    frames = f"""  File "{_S}/arg_groups/speculative_hook.py", line 242, in handle_speculative_decoding
    algo = SpeculativeAlgorithm.from_string(cfg.speculative_algorithm)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/speculative/spec_info.py", line 65, in from_string
    raise ValueError(f"Unknown speculative algorithm name: {{name}}")
"""
    return _spec(frames, f"ValueError: Unknown speculative algorithm name: {name}")


def _repo_id_message(path: str) -> str:
    return (
        f"Repo id must be in the form 'repo_name' or 'namespace/repo_name': '{path}'. "
        "Use `repo_type` argument if needed."
    )


def path_missing(path: str, *, draft: bool) -> str:
    """A --model-path (or draft path) that is neither a folder nor a valid Hub repo id."""
    message = _repo_id_message(path)
    chained = _HF_REPO_ID.replace("@MESSAGE@", message)
    frames = (_DRAFT_CONFIG if draft else _MUSE_SPARK) + _POINTER_HEAD + _POINTER_TAIL
    failure = (
        _spec(frames, f"OSError: {message}") if draft else resolve_failure(frames, f"OSError: {message}")
    )
    return chained + _LONGCAT.replace("@MESSAGE@", message) + chained + failure


_HUB_OFFLINE = f"""Traceback (most recent call last):
  File "{SITE}/transformers/utils/hub.py", line 537, in cached_files
    hf_hub_download(
  File "{SITE}/huggingface_hub/utils/_validators.py", line 89, in _inner_fn
    return fn(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^
  File "{SITE}/huggingface_hub/utils/_http.py", line 266, in _inner
    return fn(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^
  File "{SITE}/huggingface_hub/file_download.py", line 1047, in hf_hub_download
    return _hf_hub_download_to_cache_dir(
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/huggingface_hub/file_download.py", line 1194, in _hf_hub_download_to_cache_dir
    _raise_on_head_call_error(head_call_error, force_download, local_files_only)
  File "{SITE}/huggingface_hub/file_download.py", line 1944, in _raise_on_head_call_error
    raise LocalEntryNotFoundError(
huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the disk cache and outgoing \
traffic has been disabled. To enable hf.co look-ups and downloads online, set 'local_files_only' to False.

The above exception was the direct cause of the following exception:

"""

_HUB_OFFLINE_TAIL = f"""{_CONFIG_LOOKUP}  File "{SITE}/transformers/utils/hub.py", line 620, in cached_files
    raise OSError(
"""
_HUB_OFFLINE_ERROR = (
    "OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the "
    "cached files.\nCheck your internet connection or see how to run the library in offline mode at "
    "'https://huggingface.co/docs/transformers/installation#offline-mode'."
)


def hub_unreachable(*, draft: bool) -> str:
    """A Hub repo id on a node that cannot reach huggingface.co and has no cached copy."""
    head = _DRAFT_CONFIG if draft else _MUSE_SPARK
    frames = head + _POINTER_HEAD + _HUB_OFFLINE_TAIL
    failure = _spec(frames, _HUB_OFFLINE_ERROR) if draft else resolve_failure(frames, _HUB_OFFLINE_ERROR)
    return _HUB_OFFLINE + failure


def config_missing(path: str) -> str:
    frames = f"""{_MUSE_SPARK}{_POINTER_HEAD}  File "{_S}/utils/hf_transformers/config.py", line 379, in get_config
    config = parser.parse(
             ^^^^^^^^^^^^^
  File "{_S}/utils/hf_transformers/config.py", line 228, in parse
    config = AutoConfig.from_pretrained(
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/transformers/models/auto/configuration_auto.py", line 442, in from_pretrained
    raise ValueError(
"""
    return resolve_failure(
        frames,
        f"ValueError: Unrecognized model in {path}. Should have a `model_type` key in its config.json.",
    )


def context_length_too_long(requested: int, derived: int) -> str:
    frames = f"""  File "{_S}/arg_groups/pipeline.py", line 185, in run_resolution_pipeline
    run_hook(apply_inkling_prefill_cuda_graph_default, server_args)
  File "{_S}/arg_groups/resolution_hooks.py", line 139, in run_hook
    step(server_args)
  File "{_S}/arg_groups/cuda_graph_hook.py", line 363, in apply_inkling_prefill_cuda_graph_default
    arch = model_config_of(server_args).hf_config.architectures[0]
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/arg_groups/model_override_base.py", line 213, in model_config_of
    model_config = ModelConfig.from_server_args(server_args)
                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{_S}/configs/model_config.py", line 955, in from_server_args
    return ModelConfig(
           ^^^^^^^^^^^^
  File "{_S}/configs/model_config.py", line 884, in __init__
    self._derive_context_length(context_length)
  File "{_S}/configs/model_config.py", line 1314, in _derive_context_length
    raise ValueError(
"""
    return resolve_failure(frames, "ValueError: " + context_length_message(requested, derived, allowed=False))


def context_length_message(requested: int, derived: int, *, allowed: bool) -> str:
    msg = (
        f"Warning: User-specified context_length ({requested}) is greater than the derived context_length "
        f"({derived}). This may lead to incorrect model outputs or CUDA errors. Note that the derived "
        "context_length may differ from max_position_embeddings in the model's config."
    )
    if allowed:
        return msg
    return (
        msg + " To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
    )


def serve_missing_model() -> str:
    return f"""Traceback (most recent call last):
  File "/usr/local/bin/sglang", line 8, in <module>
    sys.exit(main())
             ^^^^^^
  File "{SITE}/sglang/cli/main.py", line 51, in main
    serve(args, extra_argv)
  File "{SITE}/sglang/cli/serve.py", line 221, in serve
    get_model_path(request.argv)  # Raise the existing actionable CLI error.
    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/sglang/cli/utils.py", line 165, in get_model_path
    raise Exception(
Exception: Error: --model-path is required. Please provide the path to the model.
"""


def warmup_bad_url(url: str) -> str:
    """The warm-up request of a server whose --port is no TCP port: requests cannot even parse the URL."""
    return f"""Traceback (most recent call last):
  File "{SITE}/requests/models.py", line 509, in prepare_url
    scheme, auth, host, port, path, query, fragment = parse_url(url)
                                                      ^^^^^^^^^^^^^^
  File "{SITE}/urllib3/util/url.py", line 545, in parse_url
    raise LocationParseError(url)
urllib3.exceptions.LocationParseError: Failed to parse: {url}

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "{_S}/entrypoints/http_server.py", line 2373, in _execute_server_warmup
    res = requests.get(
          ^^^^^^^^^^^^^
  File "{SITE}/requests/api.py", line 87, in get
    return request("get", url, params=params, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/requests/api.py", line 71, in request
    return session.request(method=method, url=url, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/requests/sessions.py", line 635, in request
    prep = self.prepare_request(req)
           ^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/requests/sessions.py", line 541, in prepare_request
    p.prepare(
  File "{SITE}/requests/models.py", line 439, in prepare
    self.prepare_url(url, params)
  File "{SITE}/requests/models.py", line 511, in prepare_url
    raise InvalidURL(*e.args)
requests.exceptions.InvalidURL: Failed to parse: {url}
"""
