"""Pick the provider: --provider if given, else whatever the environment configures, else the local model."""

from __future__ import annotations

import os
from typing import Literal, TypeAlias, get_args

from drivetrain.errors import ConfigError
from drivetrain.models.base import Model

Provider: TypeAlias = Literal["anthropic", "openai", "local"]
PROVIDERS: tuple[Provider, ...] = get_args(Provider)


def detect_provider(env: dict[str, str]) -> Provider:
    if any(env.get(k) for k in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL")):
        return "anthropic"
    if any(env.get(k) for k in ("OPENAI_API_KEY", "OPENAI_BASE_URL")):
        return "openai"
    return "local"


def resolve_model(
    provider: str | None = None, model: str | None = None, env: dict[str, str] | None = None, *, batch: bool = False
) -> Model:
    """``batch``: for a sweep's many runs at once, whose text nobody watches as it comes (Anthropic: whole answers
    through the aiohttp transport; the other providers as always)."""
    env = dict(os.environ) if env is None else env
    provider = provider or detect_provider(env)
    if provider == "anthropic":
        from drivetrain.models.anthropic import AnthropicModel

        if batch:
            return AnthropicModel.from_env(model, env, stream=False, aiohttp=True)
        return AnthropicModel.from_env(model, env)
    if provider == "openai":
        try:
            from drivetrain.models.openai import OpenAIModel
        except ImportError as e:
            raise ConfigError(f"The OpenAI-compatible provider is not available: {e}") from e
        return OpenAIModel.from_env(model, env)
    if provider == "local":
        try:
            from drivetrain.models.local import LocalModel
            from drivetrain.models.resident import ResidentModel, daemon_enabled
        except ImportError as e:
            raise ConfigError(
                f"The local model is not available ({e}). Install it with: pip install 'drivetrain[local]'"
            ) from e
        if daemon_enabled(env):  # the user's resident model process (docs/local-model.md)
            return ResidentModel(model, env=env)
        return LocalModel.from_env(model, env)
    raise ConfigError(f"Unknown provider {provider!r}; choose one of {', '.join(PROVIDERS)}.")
