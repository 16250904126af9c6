"""One process or many: the process group of a training run, and how a training stage is launched.

Under torchrun every rank joins one process group (NCCL on CUDA, gloo on CPU); on CUDA a second, gloo group
carries what the hosts agree on (counts, stop requests, plans, RNG states, barriers), so no step waits for
the GPU to drain its queue. `launch`: only rank 0 takes the workspace lock and runs the engine; each stage
that trains sends every rank its `plan` through the `Session`, and ``None`` when the engine is done or has
failed. The other ranks train each plan they receive and never touch the engine.
"""

from __future__ import annotations

import gc
import importlib
import os
import time
import traceback
from typing import Any, Callable

import torch

from bertwb.errors import BertwbError
from bertwb.train.device import resolve_device


GIL_FREE_WAIT = 0.05  # seconds in which gloo's threads can take the GIL before the group goes (`Dist.close`)


class Dist:
    """This process's place in the process group; every collective is a no-op when alone."""

    def __init__(self, rank: int = 0, world_size: int = 1, local_rank: int = 0, device: str = "auto",
                 origin: str = "--device", control: Any = None):
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.device = resolve_device(device, origin, local_rank)
        self.control = control  # the process group for host-side agreement; None: the default (gloo) group

    @classmethod
    def from_environment(cls, device: str, origin: str = "--device") -> Dist:
        """Join the torchrun process group when WORLD_SIZE > 1 (NCCL on CUDA, gloo on CPU)."""
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size == 1:
            return cls(device=device, origin=origin)
        rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        place = resolve_device(device, origin, local_rank)  # the device Dist resolves too: the group's backend
        if place.type == "cuda":
            torch.cuda.set_device(place)
        backend = "nccl" if place.type == "cuda" else "gloo"
        # DDP imports torch._dynamo. Imported after the process group exists, dynamo keeps references
        # to it (torch 2.13), so destroy_process_group cannot free the group and its worker threads
        # live on into interpreter shutdown, where one can abort the process after a good run.
        # Imported first, dynamo keeps nothing and the group closes.
        importlib.import_module("torch._dynamo")
        torch.distributed.init_process_group(backend, rank=rank, world_size=world_size)
        # What the hosts must agree on goes over gloo between the CPUs: through NCCL it would be a GPU
        # tensor that the host must read back, which waits for all the GPU's queued work every step.
        control = torch.distributed.new_group(backend="gloo") if backend != "gloo" else None
        return cls(rank, world_size, local_rank, device, origin, control)

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum a tensor on this process's device over all ranks, in place."""
        if self.enabled:
            torch.distributed.all_reduce(tensor)
        return tensor

    def sum_on_host(self, values: list[float]) -> list[float]:
        """Sum a few numbers over all ranks between the hosts, without touching the GPU."""
        if not self.enabled:
            return values
        tensor = torch.tensor(values, dtype=torch.float64)
        torch.distributed.all_reduce(tensor, group=self.control)
        return tensor.tolist()

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (the others pass anything, usually None)."""
        if not self.enabled:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        if not self.enabled:
            return [obj]
        boxes: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(boxes, obj, group=self.control)
        return boxes

    def barrier(self) -> None:
        if self.enabled:
            torch.distributed.barrier(group=self.control)

    def close(self) -> None:
        """Leave the process group, after `GIL_FREE_WAIT` seconds without the GIL.

        gloo's worker threads drop a finished collective's tensors themselves, which takes the GIL. When an
        exception (Ctrl-C) keeps the DDP model alive in its traceback until the CLI catches it, the model's
        reducer drops the last reference to the group there, and the group's destructor joins those threads
        while holding the GIL: if one still waits for it, neither moves (seen twice in the two-node test).
        `launch` frees a failed stage's locals before this (`release_locals`); the wait stays for any other
        holder of the group, letting the threads finish first."""
        if self.enabled and torch.distributed.is_initialized():
            time.sleep(GIL_FREE_WAIT)
            torch.distributed.destroy_process_group()


class Session:
    """The process group of one training command, through which rank 0 sends each stage's plan."""

    def __init__(self, dist: Dist):
        self.dist = dist

    @classmethod
    def of(cls, runtime: Any, device: str, origin: str) -> Session:
        """The session a stage was launched with, or a single process's when it runs inside `bertwb run`."""
        if isinstance(runtime, Session):
            return runtime
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise BertwbError("under torchrun only the training commands run (`bertwb pretrain`, "
                              "`bertwb finetune`); build their data first with `bertwb run --until ...`")
        return cls(Dist(device=device, origin=origin))

    def send_plan(self, plan: Any) -> None:
        """Every rank trains with ``plan`` (rank 0 calls this when a stage starts training)."""
        self.dist.broadcast(plan)


def launch(run_stages: Callable[[Session], Any], train_received_plan: Callable[[Any, Dist], None], device: str,
           origin: str) -> Any:
    """Run training stages on every rank: ``run_stages(session)`` (the engine) on rank 0, whose result is
    returned; ``train_received_plan(plan, dist)`` on the others, for every plan rank 0 sends."""
    dist = Dist.from_environment(device, origin)
    try:
        if dist.rank == 0:
            try:
                return run_stages(Session(dist))
            finally:
                dist.broadcast(None)  # no more plans: the other ranks stop waiting
        while (plan := dist.broadcast(None)) is not None:
            train_received_plan(plan, dist)
        return None
    except BaseException as failed:  # Ctrl-C, an error: the stage's frames are done, their locals can go
        if dist.enabled:
            release_locals(failed)
        raise
    finally:
        dist.close()


def release_locals(failed: BaseException) -> None:
    """Free the locals of the finished frames ``failed``'s traceback holds, before the process group is destroyed.

    A failed stage's frames hold its trainer, whose DDP model holds the group: kept alive by the exception until
    the CLI drops it, the group was then freed by the model's reducer under the GIL, and its destructor joined
    gloo's threads while one of them waited for the GIL (`Dist.close`). Freed here, the model goes first and the
    group dies inside destroy_process_group, which releases the GIL. The traceback keeps its files and lines."""
    traceback.clear_frames(failed.__traceback__)  # frames still running (this one, the caller's) are skipped
    gc.collect()  # the trainer's own reference cycles
