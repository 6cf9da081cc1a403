"""libflow's settings: one typed object, read from ``LIBFLOW_*`` environment variables."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

ENV_PREFIX = "LIBFLOW_"
MiB = 1024 * 1024


# uvloop where it is installed, or the standard library's own loop.
EventLoopKind = Literal["uvloop", "asyncio"]


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(value: str) -> str:
    """A logging level's name, in any case (``info``); anything else is refused here,
    where a message names the setting, not later by logging with a traceback."""
    level = value.strip().upper()
    if level not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
    return level


LogLevel = Annotated[str, AfterValidator(_log_level)]


def _url_of(*schemes: str) -> AfterValidator:
    """A URL whose scheme is one of ``schemes``: another is refused here, with the
    schemes libflow takes, not by a driver's traceback at start-up."""

    def check(value: str | None) -> str | None:
        # As written: Tortoise and arq read schemes case-sensitively.
        if value is not None and value.split("://", 1)[0] not in schemes:
            raise ValueError(f"must be a URL starting {' or '.join(s + '://' for s in schemes)}")
        return value

    return AfterValidator(check)


DatabaseUrl = Annotated[
    str | None, _url_of("sqlite", "postgres", "postgresql", "asyncpg", "psycopg")
]
RedisUrl = Annotated[str | None, _url_of("redis", "rediss", "unix")]


class SettingsError(ValueError):
    """A setting has a value libflow cannot use."""


class Settings(BaseModel):
    """Everything a libflow process needs to know about its deployment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data_dir: Path = Path("data")
    database_url: DatabaseUrl = None
    redis_url: RedisUrl = None
    storage: Literal["local", "s3"] = "local"
    s3_endpoint_url: str | None = None
    s3_bucket: str = "libflow"
    s3_region: str = "us-east-1"
    public_base_url: str | None = None
    secret_key: str | None = None
    max_upload_bytes: int = Field(default=512 * MiB, gt=0)
    embedder: Literal["local", "openai", "none"] = "local"
    embedding_model: str | None = None
    embedding_batch_size: int = Field(default=16, gt=0)
    # The local model's runtime: OpenVINO with the whole graph in int8, quantized once with
    # calibration texts (2.5-5.4x PyTorch's chunks/s where the CPU has VNNI, nDCG@10 as
    # fp32's on the retrieval bench), ONNX Runtime (exported once into the data dir) with
    # int8 matrix products (less memory, the faster of the two without VNNI, nDCG@10 about
    # 1% under fp32's) or in fp32 (PyTorch's vectors), or PyTorch. ``auto`` takes the int8
    # runtime this CPU runs faster, once for the whole deployment (the first process's
    # choice, kept in the database). Each backend's vectors are their own space, so a change
    # re-embeds. Its threads default to the CPUs this process may use.
    embedding_backend: Literal["auto", "openvino-int8", "onnx-int8", "onnx", "torch"] = "auto"
    embedding_threads: int | None = Field(default=None, gt=0)
    # Where the local model's ONNX export and tokenizer are kept (default: <data dir>/models);
    # processes that share it export the model once.
    model_cache_dir: Path | None = None
    # What an OpenAI-compatible model reads of one text, for a model libflow does not know
    # (text-embedding-3-* and ada-002: 8,191); passages are cut to fit it.
    embedding_max_tokens: int | None = Field(default=None, ge=16)
    openai_base_url: str | None = None
    openai_api_key: str | None = Field(default=None, repr=False)
    # The OpenAI-compatible chat API of llm nodes: its base URL (including /v1), key, model.
    llm_base_url: str | None = None
    llm_api_key: str | None = Field(default=None, repr=False)
    llm_model: str | None = None
    http_allow_private: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    upload_url_ttl_seconds: int = Field(default=15 * 60, gt=0)
    download_url_ttl_seconds: int = Field(default=5 * 60, gt=0)
    api_key_cache_seconds: float = Field(default=5.0, ge=0)
    job_concurrency: int = Field(default=4, gt=0)
    # How long a running run's claim holds without renewal: a process that stops renewing it
    # (killed) has its runs failed INTERRUPTED by the sweep after this.
    run_lease_seconds: float = Field(default=30, gt=0)
    # Requests a second per API key (0: no limit), and how many may come at once.
    rate_limit: float = Field(default=100, ge=0)
    rate_limit_burst: int = Field(default=200, gt=0)
    log_level: LogLevel = "INFO"
    # API processes serving the port (run_server.py --workers): more than one shares it
    # with SO_REUSEPORT under a supervisor that restarts a process that dies.
    workers: int = Field(default=1, ge=1, le=64)
    # The event loop of server and worker processes (libflow/event_loop.py).
    event_loop: EventLoopKind = "uvloop"

    @property
    def resolved_database_url(self) -> str:
        """The database URL, defaulting to a SQLite file in the data dir."""
        if self.database_url:
            return self.database_url
        return f"sqlite://{(self.data_dir / 'libflow.sqlite3').resolve()}"

    @property
    def resolved_public_base_url(self) -> str:
        """The base URL clients reach this server at, without a trailing slash."""
        if self.public_base_url:
            return self.public_base_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host  # noqa: S104
        return f"http://{host}:{self.port}"

    @property
    def resolved_model_cache_dir(self) -> Path:
        """Where the local model's exports are kept."""
        return self.model_cache_dir or self.data_dir / "models"

    @property
    def storage_dir(self) -> Path:
        """Where the local storage backend keeps objects."""
        return self.data_dir / "objects"

    def signing_key(self) -> bytes:
        """The key that signs local storage URLs; generated into the data dir when unset."""
        if self.secret_key:
            return self.secret_key.encode()
        path = self.data_dir / "secret_key"
        if not path.exists():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            # Written aside, then linked into place: no process ever reads a half-written
            # key, and when several start at once the first link wins.
            draft = path.with_name(f".secret_key.{secrets.token_hex(8)}")
            fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(secrets.token_urlsafe(48).encode())
                with contextlib.suppress(FileExistsError):
                    os.link(draft, path)
            finally:
                draft.unlink()
        key = path.read_bytes().strip()
        if not key:
            raise SettingsError(
                f"{path} is empty: delete it to generate a new key, or set LIBFLOW_SECRET_KEY"
            )
        return key


def settings_from_env(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build settings from ``LIBFLOW_*`` variables; ``overrides`` (runner flags) win."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    known = Settings.model_fields
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        field = name[len(ENV_PREFIX) :].lower()
        if field in known and value != "":
            values[field] = value
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Settings.model_validate(values)
    except ValidationError as err:
        problems = "; ".join(
            f"{ENV_PREFIX}{'.'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
            for e in err.errors()
        )
        raise SettingsError(f"invalid settings: {problems}") from err
