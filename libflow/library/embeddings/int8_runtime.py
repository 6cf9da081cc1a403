"""``LIBFLOW_EMBEDDING_BACKEND=auto``: the int8 runtime that is fastest on this kind of CPU.

OpenVINO's static int8 (``openvino-int8``) wants int8 dot-product instructions: with them it
embedded 1.4-1.6x the passages a second of ONNX Runtime's int8 (``onnx-int8``), on an AMD
EPYC with AVX-512 VNNI and on AVX-512 Xeons. On an AMD EPYC with AVX2 only it embedded
0.53-0.57x of onnx-int8's passages a second, hardly more than PyTorch's fp32. Both hold
nDCG@10 within 1% of fp32 (docs/benchmarks.md).

The two runtimes' vectors are spaces of their own: every process of a deployment must embed
in the same one, or search finds nothing a worker on another kind of machine embedded (and
each would re-embed the other's passages). So the first process records its choice in the
database, and every later ``auto`` process takes it (``agreed``).
"""

from __future__ import annotations

import logging
import platform
from pathlib import Path
from typing import Literal

from libflow.db.deployment_choices import chosen_once

logger = logging.getLogger("libflow.embeddings")

Int8Runtime = Literal["openvino-int8", "onnx-int8"]
RUNTIMES: tuple[Int8Runtime, ...] = ("openvino-int8", "onnx-int8")
# The CPU flags (Linux's names) of int8 dot-product instructions: VNNI in AVX-512 or in AVX
# (Alder Lake, Zen 5), and AMX's int8 tiles.
INT8_DOT_PRODUCT = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
CHOICE_NAME = "local_embedding_backend"
_CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The instruction-set flags of this machine's first CPU (none known off Linux x86)."""
    if cpuinfo is None:
        try:
            cpuinfo = _CPUINFO.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def for_this_cpu(flags: frozenset[str] | None = None) -> tuple[Int8Runtime, str]:
    """The runtime this CPU runs fastest, and why (for the log)."""
    if flags is None:
        flags = cpu_flags()
    found = sorted(flags & INT8_DOT_PRODUCT)
    if found:
        return "openvino-int8", f"this CPU has int8 dot products ({', '.join(found)})"
    return "onnx-int8", f"this CPU ({platform.machine()}) has no int8 dot products (VNNI)"


async def agreed() -> Int8Runtime:
    """The deployment's runtime: the one its first ``auto`` process chose for its CPU.

    Needs the database open.
    """
    proposed, why = for_this_cpu()
    recorded = await chosen_once(CHOICE_NAME, proposed)
    if recorded not in RUNTIMES:  # written by a later version: this one cannot run it
        logger.warning(
            f"LIBFLOW_EMBEDDING_BACKEND=auto: the deployment chose {recorded!r}, which this "
            f"version does not know; embedding with {proposed} ({why})"
        )
        return proposed
    runtime: Int8Runtime = "openvino-int8" if recorded == "openvino-int8" else "onnx-int8"
    if runtime == proposed:
        logger.info(f"LIBFLOW_EMBEDDING_BACKEND=auto: {runtime}, as {why}")
    else:
        logger.warning(
            f"LIBFLOW_EMBEDDING_BACKEND=auto: {runtime}, the deployment's choice (its first "
            f"process chose it), so that every process embeds in one space; this machine "
            f"alone would run {proposed}, as {why}. Set LIBFLOW_EMBEDDING_BACKEND on every "
            f"process to choose otherwise"
        )
    return runtime
