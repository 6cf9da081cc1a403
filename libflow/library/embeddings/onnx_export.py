"""The local model as an ONNX Runtime session: exported here, once, and cached on disk.

The weights ship for PyTorch only, and no model is ever fetched: the sentence-transformers
model already loaded is exported with ``torch.onnx.export`` (about 2 s) into the cache
directory, under a name made of its weights' digest, so a change of model or weights exports
again and nothing stale is reused. A BERT-like model's graph is then rewritten by ONNX
Runtime's transformer optimizer into its fused operators (attention, embedding and skip layer
normalization, bias GELU: about 50 nodes instead of 300), kept only if it gives the plain
graph's vectors; other models keep the plain graph. ``int8`` adds dynamic quantization of the
matrix products and of the fused attention (per channel: per tensor lost too much here, a
mean cosine of 0.92 to the fp32 vectors). ``openvino-int8`` quantizes the fp32 graph
statically for OpenVINO instead (``openvino_int8``).

Beside the files, a small record (``ExportedModel``) names them with what else a process
needs (the tokenizer, the length and dimension), under a digest of the model directory's
files: a later start of a process finds it. The export itself runs in a child process
(``local.export_in_child``), so no API process or worker ever loads PyTorch (about 1 GiB it
never gives back).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from libflow.library.embeddings import openvino_int8

if TYPE_CHECKING:
    import onnxruntime
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger("libflow.embeddings")

# What is exported: the fp32 ONNX graph, its dynamic int8 quantization for ONNX Runtime, or
# its static int8 quantization for OpenVINO.
ExportKind = Literal["fp32", "int8", "openvino-int8"]
_SUFFIXES: dict[ExportKind, str] = {
    "fp32": ".onnx",
    "int8": ".int8.onnx",
    "openvino-int8": ".openvino-int8.xml",
}

# Bumped when the export below changes, so files of an older export are not reused: it is
# in both digests, so the ONNX files' names and the records' names change with it.
# 2: the graph is optimized (fused operators) before it is quantized.
_EXPORT_FORMAT = "2"
_OPSET = 17
# Hugging Face model types whose encoder layer is BERT's, which the optimizer's "bert" type
# fuses; the result is checked against the plain graph before it is kept.
_BERT_LIKE = frozenset({"bert", "roberta", "xlm-roberta"})
# The optimized graph is kept when its vectors are those of the plain graph (fp32 sums in
# another order: 1.00000 to five decimals on all-MiniLM-L6-v2).
_SAME_VECTORS = 0.9999


def supports_onnx(model: SentenceTransformer) -> bool:
    """Whether the model is a transformer with mean pooling, which the session reproduces."""
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    modules = list(model)
    return (
        len(modules) in (2, 3)
        and isinstance(modules[0], Transformer)
        and isinstance(modules[1], Pooling)
        and getattr(modules[1], "pooling_mode", None) in ("mean", ["mean"], ("mean",))
        and all(isinstance(m, Normalize) for m in modules[2:])
    )


def input_names(model: SentenceTransformer) -> list[str]:
    """What the transformer takes: input_ids, attention_mask and perhaps token_type_ids."""
    names = list(model.tokenizer.model_input_names)
    return [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in names]


def weights_digest(model: SentenceTransformer) -> str:
    """A digest of the model's weights (and of this export's format)."""
    digest = hashlib.sha256(_EXPORT_FORMAT.encode())
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class ExportedModel:
    """An exported model as a process runs it without PyTorch."""

    graph: Path  # an ONNX file, or OpenVINO's IR (.xml, with its .bin beside it)
    tokenizer: Path  # the model's fast tokenizer (tokenizers' JSON)
    max_tokens: int
    dimensions: int

    def to_json(self) -> str:
        """The record of it: file names within the cache directory, the length, the width."""
        return json.dumps(
            {
                "onnx": self.graph.name,
                "tokenizer": self.tokenizer.name,
                "maxTokens": self.max_tokens,
                "dimensions": self.dimensions,
            }
        )

    @classmethod
    def from_json(cls, cache_dir: Path, text: str) -> ExportedModel:
        """The export ``text`` (``to_json``) records in ``cache_dir``; ValueError, KeyError or
        TypeError when it is not one."""
        data = json.loads(text)
        return cls(
            graph=cache_dir / str(data["onnx"]),
            tokenizer=cache_dir / str(data["tokenizer"]),
            max_tokens=int(data["maxTokens"]),
            dimensions=int(data["dimensions"]),
        )


def source_digest(location: str) -> str | None:
    """A digest of the model directory's files (names, sizes, modification times) and of this
    export's format; None when ``location`` is not a directory (a name in a cache)."""
    root = Path(location)
    if not root.is_dir():
        return None
    digest = hashlib.sha256(_EXPORT_FORMAT.encode())
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(root)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:24]


def _record_path(cache_dir: Path, source: str, kind: ExportKind) -> Path:
    tag = "" if kind == "fp32" else f".{kind}"
    return cache_dir / f"exported-{source}{tag}.json"


def find_exported(cache_dir: Path, source: str, *, kind: ExportKind) -> ExportedModel | None:
    """The export of the model whose files have digest ``source``, if one is recorded and
    its files are there."""
    try:
        record = _record_path(cache_dir, source, kind).read_text(encoding="utf-8")
        exported = ExportedModel.from_json(cache_dir, record)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none yet, or unreadable: export again
    if not (_graph_exported(exported.graph) and exported.tokenizer.is_file()):
        return None
    return exported


def record_exported(
    cache_dir: Path, source: str, exported: ExportedModel, *, kind: ExportKind
) -> None:
    """Record ``exported`` for the model whose files have digest ``source``."""
    text = exported.to_json()
    write_atomically(_record_path(cache_dir, source, kind), lambda target: target.write_text(text))


def _graph_exported(path: Path) -> bool:
    return openvino_int8.exported(path) if path.suffix == ".xml" else path.is_file()


def exported_model(model: SentenceTransformer, cache_dir: Path, *, kind: ExportKind) -> Path:
    """The model's graph of ``kind`` in ``cache_dir``, exported (and quantized) if not there.

    Processes that may share ``cache_dir`` call this holding ``export_lock(cache_dir)``.
    """
    key = weights_digest(model)
    fp32 = cache_dir / f"{key}{_SUFFIXES['fp32']}"
    if not fp32.exists():
        logger.info("exporting the embedding model to ONNX", extra={"path": str(fp32)})
        write_atomically(fp32, lambda target: _export_optimized(model, target))
    quantized = cache_dir / f"{key}{_SUFFIXES[kind]}"
    if kind == "int8" and not quantized.exists():
        write_atomically(quantized, lambda target: _quantize(fp32, target))
    elif kind == "openvino-int8" and not openvino_int8.exported(quantized):
        logger.info("quantizing the embedding model for OpenVINO", extra={"path": str(quantized)})
        with _quiet_root_logger():  # NNCF logs its progress at INFO
            openvino_int8.quantize(fp32, quantized, model, input_names(model))
    return quantized


@contextlib.contextmanager
def export_lock(cache_dir: Path) -> Iterator[None]:
    """Hold the cache directory's export lock (blocking), across processes.

    Processes started together (--workers N, a worker beside the API) would each export,
    and the quantizer writes a scratch file named after its input (<key>-inferred.onnx)
    that one process deleted under another, which then failed. Held from looking for the
    export to recording it, so that the processes that waited find it and never load
    PyTorch. Not re-entrant: a second hold in one process waits for ever.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    with (cache_dir / ".export.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """Write through a temporary file renamed into place: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(Path(temporary))
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)


def _export_optimized(model: SentenceTransformer, target: Path) -> None:
    """The model's graph at ``target``: optimized if the optimizer knows its type and the
    result gives the plain graph's vectors, else the plain export."""
    with tempfile.TemporaryDirectory(prefix=".export-", dir=target.parent) as scratch:
        plain = Path(scratch) / "plain.onnx"
        _export(model, plain)
        transformer: Any = model[0]
        config = transformer.auto_model.config
        if config.model_type not in _BERT_LIKE:
            logger.info("no graph optimization for this model type: the plain graph is used")
            os.replace(plain, target)
            return
        optimized = Path(scratch) / "optimized.onnx"
        try:
            fused = _optimize(plain, optimized, config.num_attention_heads, config.hidden_size)
        except ModuleNotFoundError:
            raise  # no ONNX Runtime: the caller runs the model with PyTorch
        # Any failure of the optimizer (its asserts, shape inference, ONNX checks) leaves the
        # plain graph, which runs: a faster one is not worth a server that does not start.
        except Exception as err:
            logger.warning("the embedding graph could not be optimized", extra={"error": str(err)})
            fused = False
        if fused and _same_vectors(model, plain, optimized):
            os.replace(optimized, target)
        else:
            logger.warning("the embedding model runs its plain graph, not an optimized one")
            os.replace(plain, target)


def _optimize(source: Path, target: Path, heads: int, hidden: int) -> bool:
    """ONNX Runtime's BERT fusions of ``source`` written to ``target``; whether attention
    was fused (the pattern of another architecture may not match)."""
    # ONNX Runtime itself first: its optimizer's modules may be imported when it is not
    # (tests hide it), and the optimizer imports it only midway, leaving a scratch
    # directory behind when that fails.
    importlib.import_module("onnxruntime")
    from onnxruntime.transformers.optimizer import optimize_model

    with _quiet_root_logger():  # it logs every fusion, and warnings of shapes it skips
        optimized = optimize_model(
            str(source),
            model_type="bert",
            num_heads=heads,
            hidden_size=hidden,
            opt_level=1,  # ONNX Runtime's own basic rewrites first, provider-neutral
            use_gpu=False,
        )
        optimized.save_model_to_file(str(target))
        return bool(optimized.get_fused_operator_statistics().get("Attention"))


def _same_vectors(model: SentenceTransformer, plain: Path, optimized: Path) -> bool:
    """Whether the two graphs give the same mean-pooled vectors for texts of two lengths."""
    names = input_names(model)
    sample = model.tokenizer(
        ["an example", "a second text, longer than the first, so that it pads the other"],
        padding=True,
        return_tensors="np",
    )
    feed = {name: np.asarray(sample[name], dtype=np.int64) for name in names}
    mask = feed["attention_mask"]
    vectors = []
    for path in (plain, optimized):
        [hidden] = open_session(path, 1).run(["last_hidden_state"], feed)
        vectors.append(mean_pooled(hidden, mask))
    return bool(np.min(np.sum(vectors[0] * vectors[1], axis=1)) > _SAME_VECTORS)


def _export(model: SentenceTransformer, target: Path) -> None:
    import torch

    transformer: Any = model[0]
    transformer = transformer.auto_model.eval()
    # Exported with the eager attention: the optimizer fuses its pattern of operators, not
    # the one of PyTorch's scaled_dot_product_attention. The same vectors, to 1e-6.
    attention = getattr(transformer.config, "_attn_implementation", None)
    switch = attention not in (None, "eager") and hasattr(transformer, "set_attn_implementation")
    names = input_names(model)
    sample = model.tokenizer(["an example", "two"], padding=True, return_tensors="pt")

    class _LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            output = self.transformer(**dict(zip(names, inputs, strict=True)))
            hidden: torch.Tensor = output.last_hidden_state
            return hidden

    axes = {name: {0: "batch", 1: "sequence"} for name in [*names, "last_hidden_state"]}
    # In eval mode: the exporter puts the module back in the mode it found it in, and a new
    # module is in training mode, which would leave the shared model's dropout on.
    wrapper = _LastHiddenState().eval()
    if switch:
        transformer.set_attn_implementation("eager")
    try:
        with warnings.catch_warnings(), torch.inference_mode():
            # The TorchScript exporter warns that it is deprecated; it needs no onnxscript.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                wrapper,
                tuple(sample[name] for name in names),
                str(target),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=_OPSET,
                dynamo=False,
            )
    finally:
        if switch:
            transformer.set_attn_implementation(attention)


def _quantize(source: Path, target: Path) -> None:
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # Its advice to pre-process first is logged at WARNING on the root logger.
    with _quiet_root_logger():
        quantize_dynamic(
            source,
            target,
            per_channel=True,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul", "Attention"],
            # ONNX's shape inference knows no fused operator, so the types of the tensors
            # after one are unknown to the quantizer: all are float32 here.
            extra_options={"DefaultTensorType": TensorProto.FLOAT},
        )


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """Errors only from the root logger (ONNX Runtime's Python tools log on it)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


class OnnxSession:
    """An ONNX Runtime session of the model, as the embedder calls it: one thread an
    inference, several inferences at once (ONNX Runtime's ``run`` is thread-safe).

    Two inferences at once on two cores embedded 8% more documents a second in ingest than
    one on both threads, which waits at every operator for the slower thread when the cores
    are shared with the rest of the pipeline.
    """

    def __init__(self, path: Path) -> None:
        self._session = open_session(path, threads=1)
        self.input_names = frozenset(i.name for i in self._session.get_inputs())

    def last_hidden_state(self, feed: dict[str, np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        """The token vectors of a batch."""
        [hidden] = self._session.run(["last_hidden_state"], feed)
        return np.asarray(hidden)


def open_session(path: Path, threads: int) -> onnxruntime.InferenceSession:
    """An ONNX Runtime CPU session of ``threads`` threads for one inference at a time."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: it reports every fused node otherwise
    # Idle threads sleep rather than spin between operators: the CPUs are shared with the
    # extraction children and the event loop of the same process.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def mean_pooled(hidden: np.ndarray[Any, Any], mask: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Mean of each row's token vectors where ``mask`` is 1, L2-normalized, as float32."""
    weights = mask[..., None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    pooled = summed / np.maximum(weights.sum(axis=1), 1e-9)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return np.asarray(pooled / np.maximum(norms, 1e-12), dtype=np.float32)
