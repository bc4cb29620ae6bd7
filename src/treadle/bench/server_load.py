"""``treadle bench server --conversations N,...``: one ``treadle serve`` driving N conversations
at once, and what each model step costs it.

Every conversation is the same small job: 5 terminal calls and a finish, asked of a model
(:mod:`treadle.bench.fake_provider`, its own process) that answers each request after 0.5 s,
the calls run in the default bubblewrap sandbox. For each N the figures are the wall time
against one conversation's (measured first, in the same run), the runs that failed or were
refused, the server's peak RSS, and the CPU per model step split three ways:

- ``model_client``: the model client's own CPU per call, measured in this process by making
  the same calls through the same client to the same provider: the one the server uses for
  an OpenAI-compatible base URL (``model_client``: the OpenAI-compatible one, on httpx), with each
  client's figure beside it (``..._openai``, ``..._litellm``);
- ``children``: the server's child processes (the sandboxed shells, bubblewrap, git);
- ``treadle``: the server process's CPU per step less the model client's: events, appends,
  projection, snapshots, statuses, the stream, HTTP.

Then the same CPU split apart by what it pays for (``split_*``): ``SPLIT_CONVERSATIONS``
conversations at once that only finish (one model call, no terminal) give the cost of a
conversation itself (``split_conversation_*_ms``: create, message, run, leases, statuses, the
first snapshot, the finish), and the difference to as many of the usual job gives each terminal
step's (``split_step_*_ms``, per step). The per-step figures above are the two together, the
first spread over the job's six steps.

CPU is read from ``/proc`` (the server's utime and stime; its children's, reaped and alive).
With ``--workers N`` the server is its front and its N worker processes (``treadle`` counts
them all; ``front_cpu_ms_per_step`` is the front's share: the cost of forwarding) and the peak
RSS is theirs summed; ``children`` are then the workers' children.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from treadle.client import RemoteError, TreadleClient
from treadle.data.settings import ConversationSettings
from treadle.data.views import ConversationView
from treadle.server.limits import default_workers
from treadle.server.process import ServerProcess

MODEL_DELAY_S = 0.5
"""How long the fake model takes to answer each request."""
TERMINAL_CALLS = 5
"""Terminal calls per conversation before its finish: 6 model steps each."""
STEPS = TERMINAL_CALLS + 1
BENCH_MODEL = "openai/bench-model"
"""The model the conversations name, at the fake provider's base URL."""
CLIENT_CALLS = 40
"""Model calls made here to measure the model client's CPU per call."""
TICKS = os.sysconf("SC_CLK_TCK")
SPLIT_CONVERSATIONS = 10
"""Conversations at once in each run of the split (finish only, then the usual job)."""
SPLIT_ROUNDS = 3
"""Runs of each kind in the split, alternated; the figures are their medians."""
LIST_PAGE = 1000
"""Conversations per listing request."""
POLL_S = 0.5
"""How often the listing is read to see which runs ended."""


@contextmanager
def fake_provider(
    delay_s: float = MODEL_DELAY_S, tag: str = "", calls: int = TERMINAL_CALLS
) -> Iterator[str]:
    """The provider's base URL while it runs (a child process, stopped on exit); ``tag``
    marks its command line (the run's folder: whose process it is); ``calls``: the terminal
    calls it asks for before the finish."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "treadle.bench.fake_provider",
            "--delay",
            str(delay_s),
            "--calls",
            str(calls),
            "--tag",
            tag,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[1].split()


def _descendants(pid: int) -> list[int]:
    """Every living process below ``pid`` (read from each process's parent in /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(_stat_fields(int(entry))[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _ticks_cpu(fields: list[str]) -> float:
    """A process's CPU from its ``stat`` fields: every thread's, those ended too, in ticks."""
    return (int(fields[11]) + int(fields[12])) / TICKS


def _child_cpu(pid: int) -> float:
    """A living descendant's CPU so far, in seconds: the larger of its ``stat`` ticks and its
    living threads' ``schedstat`` nanoseconds. Ticks alone read each sandboxed shell's few
    milliseconds as 0 (summed over 200 shells: as none); the threads' sum misses those ended."""
    fields = _stat_fields(pid)
    try:
        total = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as schedstat:
                total += int(schedstat.read().split()[0])
    except (OSError, ValueError, IndexError):
        total = 0
    return max(_ticks_cpu(fields), total / 1e9)


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the process's own CPU, its children's: reaped ones and those alive) in seconds."""
    fields = _stat_fields(pid)
    own = _ticks_cpu(fields)
    reaped = (int(fields[13]) + int(fields[14])) / TICKS
    alive = 0.0
    for child in _descendants(pid):
        try:
            alive += _child_cpu(child)
        except OSError:
            continue
    return own, reaped + alive


def _is_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"treadle.server.workers.worker" in cmdline.read()
    except OSError:
        return False


def server_pids(pid: int) -> list[int]:
    """The server's own processes: ``pid`` and its worker processes (``--workers N``)."""
    return [pid, *(child for child in _descendants(pid) if _is_worker(child))]


def server_cpu_seconds(pid: int) -> tuple[float, float, float]:
    """(the front's CPU, its workers', their children's) in seconds; without workers the
    server is all front."""
    workers = server_pids(pid)[1:]
    front, children = cpu_seconds(pid)
    own = 0.0
    for worker in workers:
        try:
            fields = _stat_fields(worker)
            counted = _child_cpu(worker)
        except OSError:
            continue
        own += _ticks_cpu(fields)
        children -= counted  # counted alive under the front; not a child's work
        children += (int(fields[13]) + int(fields[14])) / TICKS  # the worker's reaped shells
    return front, own, children


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def reset_peak_rss(pid: int) -> None:
    """Linux: writing 5 to clear_refs resets the peak RSS (VmHWM) to the current RSS."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
    except OSError:
        pass  # not permitted here: the peak then covers the whole run


MODEL_CLIENTS = ("litellm", "openai")
"""The model clients measured: LiteLLM, and the OpenAI-compatible one on httpx
(``treadle.runtime.llm.choice``)."""


def model_client_cpu_per_call(base_url: str, client: str | None = None) -> float:
    """CPU seconds one call to ``base_url`` costs this process through ``client`` (one of
    ``MODEL_CLIENTS``; None: the one a server would use for the bench's model at that base
    URL). The fake answers at once here: only the client's work is timed, none of its
    waiting."""
    from treadle.runtime.llm import LiteLLMModel, ModelSettings, OpenAICompatibleModel
    from treadle.runtime.llm.base import ModelRequest
    from treadle.runtime.llm.choice import provider_model
    from treadle.runtime.tools.builtin import builtin_tools

    settings = ModelSettings(model=BENCH_MODEL, base_url=base_url)
    model = (
        provider_model(settings)
        if client is None
        else LiteLLMModel(settings)
        if client == "litellm"
        else OpenAICompatibleModel(settings)
    )
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful engineer."},
        {"role": "user", "content": "think it through"},
    ]
    request = ModelRequest(messages, builtin_tools().openai_schemas())
    try:
        model.complete(request)  # warm-up: imports, the connection pool
        begin = time.process_time()
        for _ in range(CLIENT_CALLS):
            model.complete(request)
        return (time.process_time() - begin) / CLIENT_CALLS
    finally:
        model.close()


def model_client_used(base_url: str) -> str:
    """Which of ``MODEL_CLIENTS`` a server calls the bench's model at ``base_url`` with."""
    from treadle.runtime.llm.openai_model import speaks_openai

    return "openai" if speaks_openai(BENCH_MODEL, base_url) else "litellm"


def _run_all(
    client: TreadleClient, settings: ConversationSettings, count: int
) -> tuple[float, int, int, list[str]]:
    """Start ``count`` conversations' runs together; (seconds until all ended, runs refused
    with 429 at least once, runs that did not finish, why those did not)."""
    # The listing is oldest first: this run's conversations are the ones after those stored
    # now, so the polls below read only them (the whole store's listing, ~0.1 ms of server CPU
    # per conversation in it, would be counted as the run's work and grow with every run).
    already = _stored_count(client)
    conversations = [client.create_conversation(settings) for _ in range(count)]
    for conversation in conversations:
        conversation.send_message("think it through")
    refused: set[str] = set()
    begin = datetime.now(UTC)
    pending = list(conversations)
    while pending:
        later = []
        for conversation in pending:
            try:
                conversation.run(max_steps=STEPS + 4, wait=False)
            except RemoteError as error:
                if error.status != 429:
                    raise
                refused.add(conversation.id)
                later.append(conversation)
        pending = later
        if pending:
            time.sleep(0.1)
    waiting = {conversation.id for conversation in conversations}
    statuses: dict[str, str] = {}
    ended = begin
    reasons: dict[str, str | None] = {}
    while waiting:
        # Seldom: a listing reads every conversation's status, work the figure should not
        # count; when each run ended is its last event's time, whenever it is seen.
        time.sleep(POLL_S)
        for item in _listed(client, already, count):
            if item.id in waiting and item.status != "running" and not item.running_here:
                statuses[item.id] = str(item.status)
                reasons[item.id] = item.status_reason
                waiting.discard(item.id)
                ended = max(ended, item.updated_at)
    seconds = (ended - begin).total_seconds()
    failed = sorted(cid for cid, status in statuses.items() if status != "finished")
    why = sorted({f"{statuses[cid]}: {reasons[cid]}"[:300] for cid in failed})
    return seconds, len(refused), len(failed), why


def _stored_count(client: TreadleClient) -> int:
    offset: int | None = 0
    total = 0
    while offset is not None:
        page = client.list_conversations(limit=LIST_PAGE, offset=offset)
        total += len(page.items)
        offset = page.next_offset
    return total


def _listed(client: TreadleClient, offset: int, count: int) -> list[ConversationView]:
    """The ``count`` conversations listed from ``offset`` on."""
    items: list[ConversationView] = []
    next_offset: int | None = offset
    while next_offset is not None and len(items) < count:
        page = client.list_conversations(
            limit=min(LIST_PAGE, count - len(items)), offset=next_offset
        )
        items += page.items
        next_offset = page.next_offset
    return items


def _load_figures(
    server: ServerProcess, settings: ConversationSettings, count: int, one_s: float | None
) -> dict[str, Any]:
    assert server.process is not None
    pid = server.process.pid
    for process in server_pids(pid):
        reset_peak_rss(process)
    front_before, workers_before, children_before = server_cpu_seconds(pid)
    with TreadleClient(server.base_url, timeout=120, max_retries=0) as client:
        seconds, refused, failed, why = _run_all(client, settings, count)
    front_after, workers_after, children_after = server_cpu_seconds(pid)
    own_before, own_after = front_before + workers_before, front_after + workers_after
    steps = count * STEPS
    front = {"front_cpu_ms_per_step": round((front_after - front_before) / steps * 1000, 2)}
    return {
        **(front if workers_after else {}),
        "wall_s": round(seconds, 3),
        "wall_vs_one": round(seconds / one_s, 2) if one_s else 1.0,
        "refused": refused,
        "failed": failed,
        **({"failed_why": why[:3]} if why else {}),
        "rss_peak_mib": round(sum(peak_rss_mib(p) for p in server_pids(pid)), 1),
        "server_cpu_ms_per_step": round((own_after - own_before) / steps * 1000, 2),
        "children_cpu_ms_per_step": round((children_after - children_before) / steps * 1000, 2),
    }


def run_server_load_bench(
    counts: Sequence[int],
    *,
    store_url: str | None = None,
    max_running: int | None = None,
    sandbox: str = "bubblewrap",
    workers: int | None = None,
    parent: Path | None = None,
    split_conversations: int = SPLIT_CONVERSATIONS,
    split_rounds: int = SPLIT_ROUNDS,
) -> dict[str, Any]:
    """Figures for each count in ``counts`` (one conversation's run is measured first).
    ``workers``: the server's --workers (None: its default). The run's files (store,
    workspace) in a new folder under ``parent`` (default: the temp dir), named in every
    process it starts."""
    figures: dict[str, Any] = {
        "workers": workers or default_workers(),
        "model_delay_s": MODEL_DELAY_S,
        "steps_per_conversation": STEPS,
        "sandbox": sandbox,
    }
    with tempfile.TemporaryDirectory(prefix="treadle-bench-load-", dir=parent) as folder:
        root = Path(folder)
        url = store_url or f"sqlite:///{root / 'store.db'}"
        figures["store"] = url.split(":", 1)[0]
        extra = ["--max-running", str(max_running)] if max_running else []
        with (
            fake_provider(tag=folder) as base_url,
            fake_provider(0.0, folder) as instant_url,
            fake_provider(tag=folder, calls=0) as finish_url,
        ):
            extra += ["--allow-base-url", base_url, "--allow-base-url", finish_url]
            server = ServerProcess(
                url, workspace_root=root, extra_args=extra, workers=workers
            ).start()
            try:
                settings = ConversationSettings.litellm(
                    BENCH_MODEL,
                    root / "ws",
                    base_url=base_url,
                    sandbox={"kind": sandbox},
                )
                # Every conversation shares one workspace folder: the job is the loop's cost,
                # not the files (each terminal call only echoes).
                (root / "ws").mkdir()
                with TreadleClient(server.base_url, timeout=120) as client:
                    # Warm-up: imports, caches, the first shell, in every worker.
                    _run_all(client, settings, 4 * figures["workers"])
                one = _load_figures(server, settings, 1, None)
                per_count = {1: one}
                for count in counts:
                    if count != 1:
                        per_count[count] = _load_figures(server, settings, count, one["wall_s"])
                finish_only = settings.model_copy(
                    update={"model": settings.model.model_copy(update={"base_url": finish_url})}
                )
                split = _split_figures(
                    server, settings, finish_only, split_conversations, split_rounds
                )
            finally:
                server.stop()
            per_client = {
                name: model_client_cpu_per_call(instant_url, name) * 1000 for name in MODEL_CLIENTS
            }
    used = model_client_used(base_url)
    client_ms = per_client[used]
    figures["model_client"] = used
    figures["model_client_cpu_ms_per_call"] = round(client_ms, 2)
    for name, ms in per_client.items():
        figures[f"model_client_cpu_ms_per_call_{name}"] = round(ms, 2)
    for count, values in per_count.items():
        values["treadle_cpu_ms_per_step"] = round(values["server_cpu_ms_per_step"] - client_ms, 2)
        figures.update({f"n{count}_{name}": value for name, value in values.items()})
    conversation_ms, step_ms, conversation_children_ms, step_children_ms, split_failed = split
    figures.update(
        {
            "split_conversation_treadle_cpu_ms": round(conversation_ms - client_ms, 2),
            "split_conversation_children_cpu_ms": round(conversation_children_ms, 2),
            "split_step_treadle_cpu_ms": round(step_ms - client_ms, 2),
            "split_step_children_cpu_ms": round(step_children_ms, 2),
            "split_failed": split_failed,
        }
    )
    return figures


def _split_figures(
    server: ServerProcess,
    job: ConversationSettings,
    finish_only: ConversationSettings,
    conversations: int,
    rounds: int,
) -> tuple[float, float, float, float, int]:
    """(server CPU ms of a conversation that only finishes, of each terminal step more, the
    same two for the children, runs that did not finish): medians of ``rounds`` runs of each
    kind, alternated, each of ``conversations`` at once."""
    assert server.process is not None
    pid = server.process.pid
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    failed = 0
    for _round in range(rounds):
        for full in (False, True):
            front_before, workers_before, children_before = server_cpu_seconds(pid)
            with TreadleClient(server.base_url, timeout=120, max_retries=0) as client:
                failed += _run_all(client, job if full else finish_only, conversations)[2]
            front_after, workers_after, children_after = server_cpu_seconds(pid)
            own = front_after + workers_after - front_before - workers_before
            runs[full].append(
                (
                    own / conversations * 1000,
                    (children_after - children_before) / conversations * 1000,
                )
            )
    alone, alone_children = (statistics.median(r[i] for r in runs[False]) for i in (0, 1))
    whole, whole_children = (statistics.median(r[i] for r in runs[True]) for i in (0, 1))
    return (
        alone,
        (whole - alone) / TERMINAL_CALLS,
        alone_children,
        (whole_children - alone_children) / TERMINAL_CALLS,
        failed,
    )
