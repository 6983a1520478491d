#!/usr/bin/env bash
# build.sh VENV_DIR — a CPU-only virtualenv holding the real sglang 0.5.23 wheel.
#
# sglang itself is installed --no-deps (its declared requirements pull CUDA builds of torch and
# ~80 serving packages); on top go exactly the packages its CLI, its argument resolution and its
# HTTP server import on the no-accelerator path, each pinned. With `--device cpu` and a tiny model
# the real server then starts, serves and logs "The server is fired up and ready to roll!".
#
# Two things in the venv are not PyPI packages, both small and marked:
#  * a torchvision shim: PyPI's torchvision links libtorch_cuda, so with CPU torch its C ops do not
#    load and `import torchvision` dies; the shim defines the two op schemas it needs.
#  * a stand-in for the one vLLM function sglang's rotary embedding imports off-GPU
#    (vllm._custom_ops.rotary_embedding). SGLANG_CPU_NO_VLLM_STUB=1 turns it off per process.
#
# Needs CPython 3.11 (sglang 0.5.23 ships only a cp311 wheel) and a package index.
set -euo pipefail

VENV=${1:?usage: build.sh VENV_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${SPECDOCTOR_SGLANG_PYTHON:-$(command -v python3.11 || command -v python3)}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 3)' || {
  echo "build.sh: sglang 0.5.23 needs CPython 3.11; set SPECDOCTOR_SGLANG_PYTHON to one" >&2; exit 3; }

rm -rf "$VENV"
"$PY" -m venv "$VENV"
SP=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
export PIP_DISABLE_PIP_VERSION_CHECK=1
quiet() { grep -vE "^(ERROR: pip's dependency resolver|sglang 0\.5\.23 requires|WARNING: Location 'file:)" || true; }

"$VENV/bin/pip" install -q --no-deps sglang==0.5.23 2>&1 | quiet
# torch: a CPU build (PyTorch's CPU index, or a local find-links folder); a plain `torch` from PyPI
# is the multi-GB CUDA build.
"$VENV/bin/pip" install -q -c "$HERE/constraints.txt" -r "$HERE/requirements.txt" 2>&1 | quiet

cat > "$SP/_specdoctor_tv_shim.py" <<'PYEOF'
"""Installed by specdoctor's tests/sglang_env/build.sh; not part of torchvision.

With CPU torch the PyPI torchvision wheel cannot load its C ops, and torchvision/_meta_registrations.py
then fails registering fakes for ops that were never defined. Define those two schemas first, and
only when the C extension is missing; the rest of torchvision stays as shipped."""
import sys

_LIBS = []


class _DefineMissingOps:
    def find_spec(self, name, path=None, target=None):
        if name != "torchvision._meta_registrations":
            return None
        sys.meta_path.remove(self)
        import torch
        import torchvision.extension as ext

        if not ext._has_ops():
            lib = torch.library.Library("torchvision", "FRAGMENT")
            lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            _LIBS.append(lib)
        return None


sys.meta_path.insert(0, _DefineMissingOps())
PYEOF
echo "import _specdoctor_tv_shim" > "$SP/_specdoctor_tv_shim.pth"

mkdir -p "$VENV/specdoctor-stubs/vllm"
echo "# Stand-in installed by specdoctor's tests; this is not vLLM." > "$VENV/specdoctor-stubs/vllm/__init__.py"
cat > "$VENV/specdoctor-stubs/vllm/_custom_ops.py" <<'PYEOF'
"""Stand-in, not vLLM: in-place rotary embedding in plain torch, same signature as vLLM's op."""
import torch


def _rotate(x, cos, sin, is_neox):
    if is_neox:
        a, b = x.chunk(2, dim=-1)
        return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)


def rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox):
    tokens = positions.shape[0]
    cos, sin = cos_sin_cache.index_select(0, positions.flatten()).chunk(2, dim=-1)
    width = cos.shape[-1] * 2
    for t in (query, key):
        if t is None:
            continue
        view = t.view(tokens, -1, head_size)
        c, s = cos.unsqueeze(1).to(view.dtype), sin.unsqueeze(1).to(view.dtype)
        view[..., :width] = _rotate(view[..., :width].clone(), c, s, is_neox)
PYEOF
echo "import os, sys; os.environ.get('SGLANG_CPU_NO_VLLM_STUB') == '1' or sys.path.append('$VENV/specdoctor-stubs')" \
  > "$SP/_specdoctor_stubs.pth"

"$VENV/bin/python" "$HERE/make_tiny_models.py" "$VENV/models"
"$VENV/bin/sglang" version
