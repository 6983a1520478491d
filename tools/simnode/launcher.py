"""The launcher process: resolve, start the scheduler child, bring the node up, serve, fail and stop like SGLang.

Exit behaviour of SGLang 0.5.23: argparse errors exit 2; resolution errors print `kill_process_tree called`
and a traceback, exit 1; a scheduler failure prints `Scheduler hit an exception: ...`, `Received sigquit from
a child process...` (once serving: `SIGQUIT received...`), kills the tree and SIGKILLs itself (137); an HTTP
port that cannot be bound logs uvicorn's error and the launcher hangs; SIGTERM drains, shuts down and exits 0.

One node of a multi-node launch (`--nnodes`, `--node-rank`, `--dist-init-addr`) meets the others first
(`peers.py`); a node rank above 0 serves no HTTP and stops when node rank 0 does (SGLang's ShutdownReq).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import NoReturn

from specdoctor.tools.simnode import scheduler_tracebacks as tb
from specdoctor.tools.simnode import tracebacks
from specdoctor.tools.simnode.args import Invocation
from specdoctor.tools.simnode.endpoints import ServerState, SimServer
from specdoctor.tools.simnode.engine import Engine
from specdoctor.tools.simnode.failure import ResolveFailure, SchedulerFailure
from specdoctor.tools.simnode.info import model_info, server_info
from specdoctor.tools.simnode.logging_fmt import Log
from specdoctor.tools.simnode.pacing import Pacer, Stopped
from specdoctor.tools.simnode.peers import NodePlace, Peers
from specdoctor.tools.simnode.plan import make_plan
from specdoctor.tools.simnode.profile import NodeProfile
from specdoctor.tools.simnode.stages import SchedulerReady, SchedulerStartup
from specdoctor.tools.simnode.validate import Resolved, resolve

SCHEDULER_MARKER = "sglang::scheduler"
CHILD_SCRIPT = Path(__file__).with_name("child.py")
IMPORT_S, SPAWN_S, HTTP_S = 1.0, 0.6, 0.1
ORPHAN_S = 30.0
WARMUP_TOKENS = 8
WARMUP_TIMEOUT_S = 120.0
CRASH_DIAGNOSTICS_S = 5.0
"""The running-phase SIGQUIT handler waits this long before its crash diagnostics (tokenizer_manager.py)."""


class Launcher:
    def __init__(self, inv: Invocation, profile: NodeProfile, speed: float) -> None:
        multi_node = (inv.args["nnodes"] or 1) > 1
        self.place = NodePlace.of(inv.args) if multi_node else None
        self.inv, self.profile, self.speed = inv, profile.for_node(inv.args["node_rank"] or 0), speed
        self.pid = os.getpid()
        self.log = Log(tp_size=inv.args["tp_size"] or 1)
        self.stop = threading.Event()
        self.pacer = Pacer(speed, profile.inject, self.stop)
        self.child: subprocess.Popen[bytes] | None = None
        self.child_expected_exit = False
        self.http: SimServer | None = None
        self.state: ServerState | None = None
        self.hung_on_port = False
        self.peers: Peers | None = None
        self._dying = threading.Lock()

    @property
    def first_node(self) -> bool:
        """Node rank 0, or a one-node launch: the node that serves HTTP."""
        return self.place is None or self.place.node_rank == 0

    @property
    def first_rank(self) -> int:
        """The global TP rank of this node's first scheduler."""
        return self.place.tp_ranks[0] if self.place else 0

    # ---- lifecycle ---------------------------------------------------------------------------
    def run(self) -> int:
        try:
            return self._run()
        except Stopped:
            return self._shutdown()
        except SchedulerFailure as failure:
            self._die(failure)

    def _run(self) -> int:
        self.pacer.pause(IMPORT_S)
        warnings: list[str] = []
        try:
            resolved = resolve(self.inv.args, self.profile, warnings)
        except ResolveFailure as failure:
            for line in warnings:
                self.log.info(line)
            self.log.info(
                f"kill_process_tree called: parent_pid={self.pid}, include_parent=False, pid={self.pid}"
            )
            self.log.raw(failure.traceback)
            return 1
        for line in warnings:
            self.log.info(line)
        self.log.info(f"server_args={resolved.args!r}")
        # Like SGLang, a stop signal is handled only from here on; before, it just ends the process.
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.pacer.enter("args")
        if self.first_node:  # the tokenizer manager's line; other nodes run none
            self.log.info("Using default HuggingFace chat template with detected content format: string")
        self._spawn_scheduler()
        self.pacer.pause(SPAWN_S)
        plan = make_plan(resolved, self.profile)
        self.peers = Peers(self.place, self.log, self.pacer) if self.place else None
        meet = self.peers.join if self.peers else lambda: None
        ready = SchedulerStartup(self.log, self.pacer, resolved, plan, self.profile, self.place, meet).run()
        if self.peers is not None:
            self.peers.all_ready(on_lost=self._die)
        if not self.first_node:
            return self._follow_node_zero()
        engine = Engine(
            self.log,
            speed=self.speed,
            max_total_tokens=ready.pool.tokens,
            vocab_size=resolved.model.vocab_size,
            spec=plan.spec,
            decode_log_interval=resolved.args["decode_log_interval"],
            decode_graph=resolved.memory.decode_backend != "disabled",
            decode_max_bs=max(ready.decode_graph_bs, default=0),
            prefill_graph=resolved.memory.prefill_backend != "disabled",
            report_accept=not self.profile.inject.hide_accept_length,
        )
        self._serve(resolved, ready, engine)
        return self._wait_after_ready()

    def _serve(self, resolved: Resolved, ready: SchedulerReady, engine: Engine) -> None:
        t = ready.timings
        graphs = ", ".join(f"{k}={v:.2f}" for k, v in ready.graph_s.items())
        tokenizer_s = IMPORT_S + SPAWN_S + t["scheduler_e2e"]
        self.log.info(
            f"Engine startup timings (s): load_weight={t['load_weight']:.2f}, "
            f"kv_cache_allocation={t['kv_cache_allocation']:.2f}, scheduler_e2e={t['scheduler_e2e']:.2f}, "
            f"cuda_graph={{{graphs}}}, tokenizer_e2e={tokenizer_s:.2f}"
        )
        self.state = ServerState(
            self.log,
            engine,
            speed=self.speed,
            server_info=server_info(resolved, ready, self.inv.launch_command, tokenizer_s),
            model_info=model_info(resolved),
            context_len=resolved.context_len,
            enable_metrics=bool(resolved.args["enable_metrics"]),
        )
        self._start_http(resolved.args["host"], resolved.args["port"])
        self._warm_up(resolved.args["host"], resolved.args["port"])
        self.state.status = "Up"
        self.log.info("The server is fired up and ready to roll!")

    def _start_http(self, host: str, port: int) -> None:
        self.log.info(f"INFO:     Started server process [{self.pid}]")
        self.log.info("INFO:     Waiting for application startup.")
        self.log.info("INFO:     Application startup complete.")
        assert self.state is not None
        if not 0 <= port <= 65535:
            self._fail_warm_up(host, port)
        server = SimServer((host, port), self.state)
        try:
            server.server_bind()
            server.server_activate()
        except (OSError, OverflowError) as exc:
            server.server_close()
            self._hang_on_bind_error(host, port, exc)
        self.http = server
        threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
        self.log.info(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
        self.pacer.enter("http")
        self.pacer.pause(HTTP_S)

    def _fail_warm_up(self, host: str, port: int) -> NoReturn:
        """--port beyond 65535: uvicorn still claims to run, the warm-up gives up after 120 s, SGLang kills all."""
        self.log.info(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
        self.pacer.pause(WARMUP_TIMEOUT_S)
        url = f"{_base_url(host, port)}/model_info"
        self.log.info(f"Initialization failed. warmup error: {tracebacks.warmup_bad_url(url)}")
        self._kill_all()

    def _hang_on_bind_error(self, host: str, port: int, exc: Exception) -> NoReturn:
        """uvicorn logs the error and its server exits, but SGLang's launcher never notices: it hangs."""
        reason = exc.strerror.lower() if isinstance(exc, OSError) and exc.strerror else str(exc)
        errno = f"[Errno {exc.errno}] " if isinstance(exc, OSError) and exc.errno else ""
        self.log.info(
            f"ERROR:    {errno}error while attempting to bind on address ({host!r}, {port}): {reason}"
        )
        self.log.info("INFO:     Waiting for application shutdown.")
        self.hung_on_port = True
        while True:
            time.sleep(3600)

    def _warm_up(self, host: str, port: int) -> None:
        """The requests SGLang's warm-up thread sends to its own server before declaring it ready."""
        base = _base_url(host, port)
        _request(f"{base}/model_info")
        self.pacer.enter("warmup")
        body = {
            "text": "The capital city of France is",
            "sampling_params": {"temperature": 0, "max_new_tokens": WARMUP_TOKENS},
        }
        _request(f"{base}/generate", body)
        _request(f"{base}/freeze_gc", {})

    def _wait_after_ready(self) -> int:
        crash_after = self.profile.inject.crash_after_ready_s
        if crash_after is None:
            self.stop.wait()
            raise Stopped
        if self.stop.wait(crash_after):
            raise Stopped
        raise SchedulerFailure(tb.illegal_memory_access(), rank=self.first_rank)

    def _follow_node_zero(self) -> int:
        """A node rank above 0 once its schedulers are up: no HTTP server, no tokenizer; it runs until node
        rank 0 shuts it down. Real SGLang serves a dummy /health on this node's own --port: the simulated
        nodes share one host, so only node rank 0 binds it."""
        signal.signal(signal.SIGTERM, self._on_follower_signal)
        return self._wait_after_ready()

    def _on_follower_signal(self, signum: int, frame: object) -> None:
        assert self.place is not None
        self.log.info(
            f"SIGTERM received on node_rank {self.place.node_rank}; waiting for the rank-0 ShutdownReq "
            "broadcast to stop the schedulers."
        )

    # ---- the scheduler child -----------------------------------------------------------------
    def _spawn_scheduler(self) -> None:
        argv = [sys.executable, "-I", "-S", str(CHILD_SCRIPT), SCHEDULER_MARKER, str(self.pid), str(ORPHAN_S)]
        self.child = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        threading.Thread(target=self._watch_child, name="watch-scheduler", daemon=True).start()

    def _watch_child(self) -> None:
        assert self.child is not None
        code = self.child.wait()
        if self.child_expected_exit:
            return
        self.log.info(
            f"Subprocess scheduler_0 (pid={self.child.pid}) crashed with exit code {code}. "
            "Triggering SIGQUIT for cleanup..."
        )
        self._sigquit()

    def _kill_child(self) -> None:
        self.child_expected_exit = True
        if self.child is not None and self.child.poll() is None:
            self.child.kill()
            self.child.wait()

    # ---- endings -----------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: object) -> None:
        if not self.hung_on_port:
            self.stop.set()

    def _die(self, failure: SchedulerFailure) -> NoReturn:
        if not self._dying.acquire(blocking=False):
            while True:  # another thread is already taking the launch down
                time.sleep(3600)
        # A failure that names no rank of this node happened on its first scheduler.
        ranks = self.place.tp_ranks if self.place else range(self.inv.args["tp_size"] or 1)
        rank = failure.rank if failure.rank in ranks else self.first_rank
        for line in failure.before:
            self.log.info(line, rank)
        self.log.info(f"Scheduler hit an exception: {failure.traceback}", rank)
        self._sigquit()

    def _sigquit(self) -> NoReturn:
        if self.state is not None and self.state.status == "Up":
            # Once serving, the tokenizer manager's running-phase handler answers (tokenizer_manager.py).
            self.log.info("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
            self.log.info("Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
            time.sleep(CRASH_DIAGNOSTICS_S * self.speed)
            self.log.info("No live scheduler processes found; skipping py-spy and CUDA coredump.")
        else:
            self.log.info("Received sigquit from a child process. It usually means the child failed.")
        self._kill_all()

    def _kill_all(self) -> NoReturn:
        """SGLang's kill_process_tree(include_parent=True): the scheduler, then itself, with SIGKILL."""
        self.log.info(f"kill_process_tree called: parent_pid={self.pid}, include_parent=True, pid={self.pid}")
        self._kill_child()
        os.kill(self.pid, signal.SIGKILL)
        raise SystemExit(137)  # not reached: SIGKILL cannot be caught

    def _shutdown(self) -> int:
        if self.peers is not None:
            self.peers.close()
        if not self.first_node:  # stopped by node rank 0: its schedulers just exit
            self._kill_child()
            return 0
        if self.state is not None:
            self.state.status = "ShuttingDown"
        self.log.info("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        self.log.info(
            "Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[]."
        )
        self.log.info(
            f"kill_process_tree called: parent_pid={self.pid}, include_parent=False, pid={self.pid}"
        )
        self._kill_child()
        if self.http is not None:
            self.log.info("INFO:     Shutting down")
            self.log.info("INFO:     Waiting for application shutdown.")
            self.log.info("INFO:     Application shutdown complete.")
            self.log.info(f"INFO:     Finished server process [{self.pid}]")
            self.http.server_close()
        self.log.info(
            f"kill_process_tree called: parent_pid={self.pid}, include_parent=False, pid={self.pid}"
        )
        return 0


def _request(url: str, body: dict | None = None) -> None:
    data = None if body is None else json.dumps(body).encode()
    headers = {"content-type": "application/json"} if data is not None else {}
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=30) as resp:
        resp.read()


def _base_url(host: str, port: int) -> str:
    """How the launcher reaches its own server: a wildcard bind is reached on loopback."""
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"
