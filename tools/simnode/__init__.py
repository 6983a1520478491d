"""A simulated GPU node running a fake SGLang 0.5.23, for the demo and end-to-end tests on a machine with no GPU.

Run it as SGLang is run: `python -m specdoctor.tools.simnode <SGLang args>` (like `python -m sglang.launch_server`) or
`python -m specdoctor.tools.simnode serve [MODEL] <args>` (like `sglang serve`). Environment:

* `SPECDOCTOR_SIM_PROFILE`: a built-in node (`h200x8` (default), `h100x8`, `rtx4090x2`, `a100x2-busy`) or the
  path of a JSON file shaped like `profile.NodeProfile`:

      {"gpus": {"count": 2, "name": "NVIDIA GeForce RTX 4090", "memory_mib": 24564,
                "compute_capability": "8.9", "p2p": false},
       "processes": [{"gpu": 1, "pid": 4242, "name": "python3", "memory_mib": 30720}],
       "models": {"Llama-3.1-8B-Instruct": {"weights_gib": 14.96, "kv_bytes_per_token": 131072,
                  "draft_weights_gib": 0.79, "accept_length": 3.1}},
       "inject": {"hang_at_stage": "weights", "crash_after_ready_s": 5, "slow_stage": {"cuda_graph": 30}}}

* `SPECDOCTOR_SIM_SPEED`: time scale; 1.0 is a realistic but short startup (about 5 s), 0.02 suits tests.

Model and draft paths must be real folders with a `config.json` (architectures, heads, max_position_embeddings
are read from it); their GPU cost comes from the profile's `models` entry named like the folder (every
profile also sees `profiles/models.json`), or is estimated from the config.

It is independent of specdoctor's diagnosis (`playbooks/`, `agent/`): it only reproduces what real SGLang
prints and serves, so tests of the diagnosis are not circular.
"""
