"""The local model in OpenVINO with static int8: quantized once from the ONNX export, cached.

ONNX Runtime's int8 (``onnx-int8``) scales each activation per batch at run time. Here NNCF's
post-training quantization fixes every activation's scale once, from calibration texts
(``calibration.txt``: varied prose, lists, tables, code and a few other languages), and
OpenVINO runs the whole graph in int8 kernels. On all-MiniLM-L6-v2 on a 2-core AMD EPYC it
embeds about 1.6x the passages a second of ``onnx-int8`` (5x PyTorch's), with vectors closer
to fp32 (mean cosine 0.993 against 0.989), and a passage's vector no longer moves with its
batch-mates. It starts from the fp32 ONNX graph that ``onnx_export`` writes, and runs in the
same export child, so no API process or worker ever loads PyTorch or NNCF.
"""

from __future__ import annotations

import os
import queue
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

CALIBRATION_FILE = Path(__file__).with_name("calibration.txt")
OUTPUT = "last_hidden_state"
# How many input shapes OpenVINO keeps compiled, and how many oneDNN primitives (below).
SHAPE_CACHE = 256
PRIMITIVE_CACHE = 16
# Batches are padded to a multiple of this many tokens wide, so they come in at most 8
# widths (the model reads up to 256) and, with 1-16 rows, 128 shapes: all stay compiled.
# Padded to their own longest passage, ingest met a new shape every few batches, and each
# was compiled (ingest of 300 documents: 20.5 documents a second against 15.8, 79 ms of
# server CPU a document against 93). Padding is masked, so the vectors are the same.
WIDTH_STEP = 32


def calibration_texts() -> list[str]:
    """The calibration texts: paragraphs of ``calibration.txt``, split at blank lines."""
    text = CALIBRATION_FILE.read_text(encoding="utf-8")
    return [part.strip() for part in text.split("\n\n") if part.strip()]


def quantize(source: Path, target: Path, model: SentenceTransformer, names: list[str]) -> None:
    """The ONNX graph at ``source`` quantized to int8, written as OpenVINO IR at ``target``
    (``.xml``, its weights beside it in ``.bin``, which is renamed into place first)."""
    import nncf
    import openvino

    tokenizer: Any = model.tokenizer
    # One text a sample, cut to what the model reads: the scales see real lengths, no padding.
    samples = [
        {
            name: np.asarray(values, dtype=np.int64)
            for name, values in tokenizer(
                [text], truncation=True, max_length=model.max_seq_length, return_tensors="np"
            ).items()
            if name in names
        }
        for text in calibration_texts()
    ]
    quantized = nncf.quantize(
        openvino.convert_model(str(source)),
        nncf.Dataset(samples),
        model_type=nncf.ModelType.TRANSFORMER,
        subset_size=len(samples),
    )
    with tempfile.TemporaryDirectory(prefix=".openvino-", dir=target.parent) as scratch:
        written = Path(scratch) / target.name
        openvino.save_model(quantized, str(written), compress_to_fp16=False)
        # The .xml names the model; it goes last, so a reader that finds it finds both.
        os.replace(written.with_suffix(".bin"), target.with_suffix(".bin"))
        os.replace(written, target)


def exported(target: Path) -> bool:
    """Whether the IR at ``target`` is there whole (its .xml and its .bin)."""
    return target.is_file() and target.with_suffix(".bin").is_file()


class OpenVinoSession:
    """The compiled IR on the CPU: up to ``parallel`` inferences at once, one thread each
    (OpenVINO's streams; ingest did 5-14% more documents a second than with one inference
    on both threads of a 2-core machine).

    OpenVINO compiles kernels for each input shape it meets and keeps them: its own cache
    of up to 5,000 shapes and oneDNN's of 1,024 primitives. Batches of passages come in
    hundreds of shapes (rows x width), and both caches together grew a process by 150 MiB
    for every 100 batches of new shapes, past 1.3 GiB (ONNX Runtime's session: 280 MiB).
    Bounded as below, the process held about 520 MiB; a shape no longer cached is compiled
    again, which costs throughput when shapes keep changing (here: 103 passages a second
    with no cache against 142 with every shape cached).
    """

    def __init__(self, path: Path, parallel: int, width_step: int = WIDTH_STEP) -> None:
        # oneDNN reads its bound when it starts; an operator's own setting is kept.
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(PRIMITIVE_CACHE))
        import openvino

        compiled = openvino.Core().compile_model(
            str(path),
            "CPU",
            {
                "INFERENCE_NUM_THREADS": parallel,
                "NUM_STREAMS": parallel,
                # f32 where it is not int8, whatever the CPU: bf16 would give another
                # machine other vectors.
                "INFERENCE_PRECISION_HINT": "f32",
                "CPU_RUNTIME_CACHE_CAPACITY": SHAPE_CACHE,
            },
        )
        self._width_step = width_step
        # A request per stream: an inference takes a free one (a caller beyond ``parallel``
        # waits for one).
        self._requests: queue.SimpleQueue[openvino.InferRequest] = queue.SimpleQueue()
        for _ in range(parallel):
            self._requests.put(compiled.create_infer_request())
        self._output = compiled.output(OUTPUT)
        self.input_names = frozenset(name for i in compiled.inputs for name in i.get_names())
        # OpenVINO's binding sets numpy's C API up on first use, inside a function-local
        # static that waits for the GIL: two threads inferring first at once deadlock (one
        # holds the GIL and waits for the static, the other the reverse), and the whole
        # process freezes for good (pybind11 #4877). It froze a test run; a script racing 8
        # threads on a new session froze 1 time in 30. One inference here, before any
        # caller can share the session, sets it up.
        warm_up = {}
        for port in compiled.inputs:
            name = port.get_any_name()
            value = 0 if name == "token_type_ids" else 1  # segment 0: every model has one
            warm_up[name] = np.full((1, width_step), value, port.get_element_type().to_dtype())
        self.last_hidden_state(warm_up)

    def last_hidden_state(self, feed: dict[str, np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        """The token vectors of a batch (a copy: the request's buffers are reused)."""
        width = next(iter(feed.values())).shape[1]
        padding = -width % self._width_step
        if padding:
            # Zeros: the padding token, masked out of attention (and of the pooling after).
            feed = {name: np.pad(array, ((0, 0), (0, padding))) for name, array in feed.items()}
        request = self._requests.get()
        try:
            result = request.infer(feed)
            return np.array(result[self._output][:, :width])
        finally:
            self._requests.put(request)
