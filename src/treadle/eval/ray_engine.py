"""Running task attempts on Ray: a local Ray started for the eval (the default) or a cluster
by address; ``--workers N`` tasks at once, each a worker process of its own.

Ray is an optional extra (``pip install 'treadle[eval]'``): it is imported here only, and
``EvalEngineUnavailable`` says how to install it. A local Ray is sized for model-bound work:
N logical CPUs whatever the machine has (a task mostly waits on its model and its commands,
so N tasks run at once even on 2 cores), no dashboard; it is shut down, its processes with
it, when the engine closes.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

from treadle.errors import TreadleError
from treadle.eval.runner import TaskJob, run_task_attempt

INSTALL_HINT = "pip install 'treadle[eval]'"


class EvalEngineUnavailable(TreadleError):
    """Ray is not installed here, or the cluster cannot be reached."""


@dataclass(frozen=True)
class AttemptDone:
    """A finished attempt: its job and its result, or why no result came back
    (``worker_died``: the worker process was lost; ``failed``: the attempt raised)."""

    job: TaskJob
    result: dict[str, Any] | None
    outcome: str
    error: str | None = None


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise EvalEngineUnavailable(
            f"treadle eval runs its tasks on Ray, which is not installed here: {INSTALL_HINT}"
        ) from None
    return ray


class RayEngine:
    """Submits attempts to Ray and hands back each one as it ends (``wait``). Use it as a
    context manager: closing it shuts down the Ray this engine started."""

    def __init__(
        self, workers: int, address: str | None = None, log_handler: logging.Handler | None = None
    ) -> None:
        self.workers = workers
        self.address = address
        self._ray = import_ray()
        self._log_handler = log_handler
        """Where Ray's own log records go (a progress bar's console), instead of stderr."""
        self._in_flight: dict[Any, TaskJob] = {}
        self._remote: Any = None
        self._temp_dir: str | None = None
        """A local Ray's session folder (logs, sockets), removed with it."""

    @property
    def description(self) -> dict[str, Any]:
        return {"name": "ray", "address": self.address or "local", "workers": self.workers}

    def __enter__(self) -> RayEngine:
        return self

    def _start(self) -> None:
        """Start (or join) Ray: on the first attempt, so a rerun with nothing left to run
        costs no Ray start."""
        ray = self._ray
        options: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "configure_logging": self._log_handler is None,
            "logging_level": logging.WARNING,
            "namespace": "treadle-eval",
        }
        if self._log_handler is not None:
            # Ray's warnings (its token authentication, say) above a progress bar, not through it.
            ray_logger = logging.getLogger("ray")
            ray_logger.handlers = [self._log_handler]
            ray_logger.setLevel(logging.WARNING)
            ray_logger.propagate = False
        try:
            if self.address is None:
                # Local: N logical CPUs, one per task, so N tasks run even on fewer cores.
                # The workers inherit this process's environment (PYTHONPATH, the model key).
                self._temp_dir = tempfile.mkdtemp(prefix="treadle-ray-")
                ray.init(num_cpus=self.workers, _temp_dir=self._temp_dir, **options)
            else:
                ray.init(address=self.address, **options)
        except Exception as error:  # ConnectionError, RuntimeError, ValueError...
            raise EvalEngineUnavailable(
                f"cannot start Ray{' at ' + self.address if self.address else ''}: {error}"
            ) from None
        self._remote = ray.remote(num_cpus=1, max_retries=0)(run_task_attempt)

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        started_here = self._remote is not None or self._temp_dir is not None
        if started_here and self._ray.is_initialized():
            self._ray.shutdown()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None
        self._remote = None
        self._in_flight.clear()

    @property
    def idle_slots(self) -> int:
        return self.workers - len(self._in_flight)

    def submit(self, job: TaskJob) -> None:
        if self._remote is None:
            self._start()
        self._in_flight[self._remote.remote(job)] = job

    def wait(self, timeout_s: float = 1.0) -> list[AttemptDone]:
        """The attempts that ended within ``timeout_s`` (maybe none)."""
        if not self._in_flight:
            return []
        ready, _ = self._ray.wait(list(self._in_flight), num_returns=1, timeout=timeout_s)
        return [self._collect(ref) for ref in ready]

    def _collect(self, ref: Any) -> AttemptDone:
        job = self._in_flight.pop(ref)
        exceptions = self._ray.exceptions
        try:
            return AttemptDone(job, self._ray.get(ref), "result")
        except (exceptions.WorkerCrashedError, exceptions.NodeDiedError) as error:
            return AttemptDone(job, None, "worker_died", _first_line(error))
        except exceptions.RayTaskError as error:
            return AttemptDone(job, None, "failed", _first_line(error.cause or error))
        except exceptions.RayError as error:  # the task was lost for another reason
            return AttemptDone(job, None, "worker_died", _first_line(error))


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[-1] if text else ''}"[:500]
