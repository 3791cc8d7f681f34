"""The embedded local model: a Qwen2.5-Coder GGUF run in-process by llama.cpp (llama-cpp-python).

The canonical (Anthropic-shaped) history is rendered with Qwen's ChatML template, token by
token, so the prompt of turn n+1 starts with exactly the tokens of turn n (the history only
grows at the end) and llama.cpp's KV cache evaluates only the new suffix. Replies the model
generated are replayed from their original tokens for the same reason.
"""

from __future__ import annotations

import asyncio
import codecs
import ctypes
import functools
import importlib.metadata
import json
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from drivetrain.errors import ConfigError, ModelError
from drivetrain.messages import Block, Message, StopReason, TextBlock, ToolUseBlock, Usage
from drivetrain.models.base import ModelRequest, ModelResponse
from drivetrain.models.batched import (
    BatchEngine,
    Job,
    LlamaModelPart,
    Sampling,
    constrained,
    control_tokens,
    save_atomically,
)
from drivetrain.models.cpu import this_cpu, unsupported
from drivetrain.models.toolcall import (
    AnswerStream,
    assistant_text,
    parse_tool_calls,
    system_text,
    tool_call_grammar,
    user_turns,
)
from drivetrain.models.weights import ENV_MODEL, bundled_spec, cache_dir, resolve_model

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from llama_cpp._internals import LlamaSampler
    from llama_cpp.llama_cpp import llama_context_p
    from llama_cpp.llama_grammar import LlamaGrammar

_REPLAY_SIZE = 128  # generated replies remembered for exact replay
_PREFILL_CHUNK = 64  # prompt tokens evaluated between looks at a cancel: ~1 s on 2 cores, as fast as 512 at once

# A sampler setting CountingLlama passes on to llama_cpp.Llama untouched (an int, float, bool or logits processor).
SamplerArg: TypeAlias = Any


class _LlamaContextPart(Protocol):  # what is used of llama_cpp's internal LlamaContext
    @property
    def ctx(self) -> llama_context_p: ...

    def kv_cache_clear(self) -> None: ...


class LlamaLike(Protocol):
    """What LocalModel uses of its model: a ``llama_cpp.Llama`` with CountingLlama's ``evaluated`` counter."""

    evaluated: int
    n_tokens: int
    input_ids: npt.NDArray[np.intc]
    model_path: str

    @property
    def _model(self) -> LlamaModelPart: ...

    @property
    def _ctx(self) -> _LlamaContextPart: ...

    def set_seed(self, seed: int) -> None: ...

    def generate(
        self,
        tokens: Sequence[int],
        *,
        temp: float,
        top_p: float,
        top_k: int,
        min_p: float,
        repeat_penalty: float,
        reset: bool,
        grammar: LlamaGrammar | None,
    ) -> Generator[int, Sequence[int] | None, None]: ...

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]: ...

    def detokenize(self, tokens: list[int]) -> bytes: ...

    def reset(self) -> None: ...

    def eval(self, tokens: Sequence[int]) -> None: ...


@dataclass(frozen=True)
class GenerationStats:
    prompt_tokens: int  # length of the whole prompt
    prompt_eval_tokens: int  # of those, how many llama.cpp actually evaluated (the rest came from the KV cache)
    output_tokens: int
    time_to_first_token_s: float
    generation_s: float  # from the first token to the last

    @property
    def generation_tokens_per_s(self) -> float:
        return (self.output_tokens - 1) / self.generation_s if self.output_tokens > 1 and self.generation_s else 0.0


class GenerationProgress:
    """The generation running now, read from another thread by a display (plain attribute writes only)."""

    def __init__(self) -> None:
        self.first_token_at: float | None = None  # perf_counter at the first token; None while the prompt is read
        self.tokens = 0

    def tokens_per_s(self) -> float | None:
        """Tokens/s from the first token until now, as ``GenerationStats`` counts it once the reply is in."""
        if self.first_token_at is None or self.tokens < 2:
            return None
        took = time.perf_counter() - self.first_token_at
        return (self.tokens - 1) / took if took > 0 else None


@functools.cache
def _llama_class() -> Callable[..., LlamaLike]:
    try:
        from llama_cpp import Llama
    except ImportError as exc:
        raise ConfigError(
            f"the local model needs llama-cpp-python ({exc}). Install it with: pip install 'drivetrain[local]'"
        ) from None

    import llama_cpp as lc

    missing = unsupported(lc.llama_print_system_info().decode(errors="replace"), this_cpu())
    if missing:  # loading would die of SIGILL at the first matrix product
        raise ConfigError(
            f"llama-cpp-python here was built for {', '.join(missing)}, which this CPU does not have. Build it for "
            'this CPU: CMAKE_ARGS="$(python3 -m drivetrain.models.cpu)" pip install --force-reinstall --no-cache-dir '
            f"--no-deps llama-cpp-python=={importlib.metadata.version('llama-cpp-python')}"
        )

    class CountingLlama(Llama):
        """Llama that counts the tokens it evaluates (so KV reuse is measured, not assumed) and
        samples with a grammar the way llama.cpp's own tools do: sample freely, check that one
        token against the grammar, and filter the whole vocabulary only when it is rejected.
        Llama.generate filters all 151k tokens at every step, which costs ~30 ms a token here.
        """

        evaluated = 0
        _grammar_sampler: lc.llama_sampler_p | None = None
        _control_ids: list[int] | None = None

        def eval(self, tokens: Sequence[int]) -> None:
            self.evaluated += len(tokens)
            super().eval(tokens)

        # called by generate(); the chain gets no grammar
        def _init_sampler(
            self, *args: SamplerArg, grammar: LlamaGrammar | None = None, **kwargs: SamplerArg
        ) -> LlamaSampler:
            if self._grammar_sampler is not None:
                lc.llama_sampler_free(self._grammar_sampler)
                self._grammar_sampler = None
            if grammar is not None:
                self._grammar_sampler = lc.llama_sampler_init_grammar(
                    self._model.vocab, grammar._grammar.encode(), b"root"
                )
            sampler: LlamaSampler = super()._init_sampler(*args, **kwargs)
            return sampler

        def sample(self, *args: SamplerArg, idx: int | None = None, **kwargs: SamplerArg) -> int:
            # mypy cannot tell that *args never reaches idx (generate() passes every setting by name)
            token: int = super().sample(*args, idx=idx, **kwargs)  # type: ignore[misc]
            if self._grammar_sampler is None:
                return token
            if self._control_ids is None:
                self._control_ids = control_tokens(self._model.vocab, self._n_vocab)
            logits = lc.llama_get_logits_ith(self._ctx.ctx, idx - self.n_tokens if idx is not None else -1)
            # the usual chain, ending in dist (llama_cpp leaves Llama._sampler unannotated: None to mypy)
            chain = self._sampler.sampler  # type: ignore[attr-defined]
            return constrained(token, self._grammar_sampler, chain, logits, self._n_vocab, self._control_ids)

    return CountingLlama


class LocalModel:
    """The Model protocol on an in-process llama.cpp model. Loads lazily, on first use or ``load()``."""

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        temperature: float = 0.2,
        top_p: float = 0.8,
        top_k: int = 20,
        seed: int | None = None,
        constrained: bool = True,
        max_output_tokens: int = 2048,
        parallel: int = 1,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``model``: "default" (1.5B), "small" (0.5B) or a .gguf path; None reads $DRIVETRAIN_LOCAL_MODEL.

        ``env`` (default ``os.environ``) supplies $DRIVETRAIN_LOCAL_MODEL, $DRIVETRAIN_LOCAL_THREADS (``n_threads``
        when it is not given; else one a core) and the cache directory variables.
        ``constrained`` makes the model answer with text or valid tool calls only (a llama.cpp grammar).
        A low temperature by default: small models pick tools and arguments far more reliably at 0.2
        than at Qwen's chat default of 0.7. ``seed`` fixes the sampling seed of every call.
        ``max_output_tokens`` caps one reply whatever the request asks: at CPU speed (~12 tokens/s for the
        1.5B) the 8,192 a cloud model is given would be an 11-minute turn.
        ``parallel`` > 1: requests in flight together are decoded together, in one batch of a context with a
        sequence for each (``models/batched.py``), e.g. the attempts of a task; each may use ``n_ctx`` tokens.
        """
        self._env = dict(os.environ if env is None else env)
        choice = os.fspath(model) if model is not None else self._env.get(ENV_MODEL, "")
        self._model_arg = model
        spec = bundled_spec(choice)
        self.name = f"local/{spec.key if spec else Path(choice).stem}"
        self.n_ctx = n_ctx
        self.context_window = n_ctx  # what compaction keeps the history within: the real window, not an assumed one
        self.n_threads = n_threads or _threads_setting(self._env) or _cpu_count()
        self.sampling: Sampling = {
            "temp": temperature,
            "top_p": top_p,
            "top_k": top_k,
            "min_p": 0.0,
            "repeat_penalty": 1.0,
        }
        self.seed = seed
        self.constrained = constrained
        self.max_output_tokens = max_output_tokens
        self.parallel = parallel
        self._engine: BatchEngine | None = None
        self.last_stats: GenerationStats | None = None
        self.live: GenerationProgress | None = None  # the generation running now, if any
        # Keep the KV state of the fixed prompt prefix (the system turn) on disk, so a new process starts
        # generating in a second instead of evaluating ~1k tokens first: always, or for requests that ask for it
        # (``ModelRequest.keep_prefix``, which the small profile's ``prefixcache`` aid sets).
        self.prefix_cache = False
        self.prefix_cache_dir: Path | None = None  # default: kv/ beside the assembled models' cache folder
        self.prefix_cache_hit: bool | None = None  # for the last call: None when not used
        self._llm: LlamaLike | None = None
        self._lock = threading.Lock()  # llama.cpp contexts are not thread-safe
        self._grammars: dict[str, LlamaGrammar] = {}
        self._replay: OrderedDict[str, list[int]] = OrderedDict()
        self._next_id = 1

    @classmethod
    def from_env(cls, model: str | None = None, env: Mapping[str, str] | None = None) -> LocalModel:
        """The provider factory's entry point: ``model`` as for the constructor, else $DRIVETRAIN_LOCAL_MODEL;
        $DRIVETRAIN_LOCAL_PARALLEL gives ``parallel``."""
        return cls(model, env=env, parallel=parallel_setting(os.environ if env is None else env))

    @property
    def last_prompt_eval_tokens(self) -> int:
        """Prompt tokens llama.cpp evaluated in the last call; the rest of the prompt was reused from the KV cache."""
        return self.last_stats.prompt_eval_tokens if self.last_stats else 0

    @property
    def _loaded(self) -> LlamaLike:
        """The llama.cpp model, for the code that runs after ``_load_locked``."""
        assert self._llm is not None, "the local model is not loaded"
        return self._llm

    def load(self) -> None:
        """Assemble/verify the weights and load them. Idempotent; ``respond`` calls it if needed."""
        with self._lock:
            self._load_locked()

    def _load_locked(self) -> None:
        if self._llm is not None:
            return
        path = resolve_model(self._model_arg, env=self._env)
        try:
            self._llm = _llama_class()(
                model_path=str(path),
                n_ctx=self.n_ctx,
                n_threads=self.n_threads,
                n_threads_batch=self.n_threads,
                verbose=False,
            )
        except (ValueError, RuntimeError) as exc:
            raise ConfigError(f"llama.cpp could not load {path}: {exc}. Is it a valid .gguf file?") from exc

    async def respond(self, request: ModelRequest) -> ModelResponse:
        cancel = threading.Event()
        loop = asyncio.get_running_loop()
        on_text = request.on_text
        sink = (lambda s: loop.call_soon_threadsafe(on_text, s)) if on_text else None
        try:
            return await asyncio.to_thread(self._respond_blocking, request, sink, cancel)
        except asyncio.CancelledError:
            cancel.set()  # the worker thread stops at its next token
            raise

    # ----------------------------------------------------------------- generation

    def _respond_blocking(
        self, request: ModelRequest, sink: Callable[[str], object] | None, cancel: threading.Event
    ) -> ModelResponse:
        if self.parallel > 1:
            return self._respond_batched(request, sink, cancel)
        with self._lock:
            self._load_locked()
            prompt = self._prompt(request)
            self._loaded.evaluated = 0  # counts the prefix too, when it is evaluated (not loaded) below
            if request.seed is not None and not any(m.role == "assistant" for m in request.messages):
                # A seeded conversation starts as in a new process: no KV state another request left (a run before
                # it in the resident process) is reused, for a reuse changes the floating-point sums and so the
                # sample. Its later requests reuse its own, as in a new process.
                self._loaded.reset()
            if self.prefix_cache or request.keep_prefix:
                self._restore_prefix(self._system_tokens(request))
            budget = self._budget(request, prompt)
            gbnf = self._gbnf(request)
            grammar = self._compiled(gbnf) if gbnf is not None else None
            try:
                tokens, text, stop, stream = self._generate(
                    prompt, budget, grammar, request.stop_sequences, sink, cancel, *self._sampling(request)
                )
            except RuntimeError as exc:
                raise ModelError(f"llama.cpp failed while generating: {exc}") from exc
            return self._response(request, tokens, text, stop, stream)

    def _respond_batched(
        self, request: ModelRequest, sink: Callable[[str], object] | None, cancel: threading.Event
    ) -> ModelResponse:
        """The request decoded together with the others in flight (``BatchEngine``)."""
        with self._lock:
            self._load_locked()
            if self._engine is None:
                self._engine = BatchEngine(self._loaded, self.parallel, self.n_ctx, self.n_threads)
            prompt = self._prompt(request)
            gbnf = self._gbnf(request)
            if gbnf is not None:
                self._compiled(gbnf)  # checked by llama.cpp's parser here, with a clear error
            sampling, seed = self._sampling(request)
            job = Job(
                prompt,
                self._budget(request, prompt),
                gbnf,
                sampling,
                seed,
                request.stop_sequences,
                sink,
                cancel,
                _stuck,
            )
            if self.prefix_cache or request.keep_prefix:
                prefix = self._system_tokens(request)
                job.prefix, job.prefix_file = len(prefix), self._prefix_path(prefix).with_suffix(".seq")
            engine = self._engine
        done = engine.submit(job).result()
        with self._lock:
            self.last_stats = GenerationStats(
                done.prompt_tokens,
                done.prompt_eval_tokens,
                len(done.tokens),
                done.time_to_first_token_s,
                done.generation_s,
            )
            return self._response(request, done.tokens, done.text, done.stop, done.stream)

    def _budget(self, request: ModelRequest, prompt: list[int]) -> int:
        budget = min(request.max_tokens, self.max_output_tokens, self.n_ctx - len(prompt))
        if budget <= 0:
            raise ModelError(
                f"the prompt is {len(prompt)} tokens; the local model's context holds {self.n_ctx}. "
                "Compact the history."
            )
        return budget

    def _sampling(self, request: ModelRequest) -> tuple[Sampling, int | None]:
        """The model's sampling settings with the request's temperature, if it has one, and the seed to draw with."""
        sampling = Sampling(**self.sampling)
        if request.temperature is not None:
            sampling["temp"] = request.temperature
        return sampling, request.seed if request.seed is not None else self.seed

    def _response(
        self, request: ModelRequest, tokens: list[int], text: str, stop: StopReason, stream: AnswerStream
    ) -> ModelResponse:
        parsed = parse_tool_calls(text, [t["name"] for t in request.tools])
        content: list[Block] = [TextBlock(parsed.text)] if parsed.text else []
        content += [ToolUseBlock(self._new_id(request.messages), c.name, c.arguments) for c in parsed.calls]
        if not parsed.calls:
            stream.finish(parsed.text)
        if stop != "stop_sequence":  # the tokens hold the stop sequence the text was cut before
            self._remember(tuple(content), tokens)
        stats = self.last_stats
        assert stats is not None  # the generation set it
        return ModelResponse(
            content=tuple(content),
            stop_reason="tool_use" if parsed.calls else stop,
            usage=Usage(
                input_tokens=stats.prompt_eval_tokens,
                output_tokens=stats.output_tokens,
                cache_read_input_tokens=stats.prompt_tokens - stats.prompt_eval_tokens,
            ),
            model=self.name,
            id=f"msg_local_{uuid.uuid4().hex[:24]}",
        )

    def _generate(
        self,
        prompt: list[int],
        budget: int,
        grammar: LlamaGrammar | None,
        stops: list[str],
        sink: Callable[[str], object] | None,
        cancel: threading.Event,
        sampling: Sampling,
        seed: int | None,
    ) -> tuple[list[int], str, StopReason, AnswerStream]:
        llm = self._loaded
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        stream = AnswerStream(sink, stops)
        tokens: list[int] = []
        stop: StopReason
        text, stop = "", "max_tokens"
        if seed is not None:
            llm.set_seed(seed)
        prompt_eval = 0
        started = time.perf_counter()
        first = started
        self.live = GenerationProgress()
        if not self._prefill(prompt, cancel):
            self.live = None
            self.last_stats = GenerationStats(len(prompt), llm.evaluated, 0, time.perf_counter() - started, 0.0)
            return [], "", "end_turn", stream
        gen = llm.generate(prompt, grammar=grammar, reset=True, **sampling)
        try:
            for token in gen:
                if not tokens:
                    first, prompt_eval = time.perf_counter(), llm.evaluated
                    self.live.first_token_at = first
                if cancel.is_set() or _is_end_of_generation(llm, token):
                    stop = "end_turn"
                    break
                tokens.append(token)
                self.live.tokens = len(tokens)
                piece = decoder.decode(llm.detokenize([token]))
                text += piece
                hit = next((s for s in stops if s in text[-(len(s) + len(piece)) :]), None)
                if hit is not None:
                    text, stop = text[: text.index(hit)], "stop_sequence"
                    break
                stream.feed(text)
                if len(tokens) >= budget or _stuck(tokens):
                    break
        finally:
            gen.close()
            self.live = None
        text += decoder.decode(b"", final=True)
        self.last_stats = GenerationStats(
            prompt_tokens=len(prompt),
            prompt_eval_tokens=prompt_eval,
            output_tokens=len(tokens),
            time_to_first_token_s=first - started,
            generation_s=time.perf_counter() - first,
        )
        return tokens, text, stop, stream

    def _prefill(self, prompt: list[int], cancel: threading.Event) -> bool:
        """Evaluate the prompt but its last token, a chunk at a time, and say whether it was not cancelled.

        ``generate`` evaluates a prompt in one uninterruptible call: a long tool result (~70 tokens/s on 2 cores)
        held a run a minute past its wall budget. Done here, a cancel stops it within a chunk; ``generate`` then
        finds all but the last token in the KV cache and evaluates only that one, for the logits to sample from.
        """
        llm = self._loaded
        cached = 0
        for have, want in zip(llm.input_ids[: llm.n_tokens], prompt[:-1]):
            if have != want:
                break
            cached += 1
        llm.n_tokens = cached  # eval drops the KV cells past it
        for i in range(cached, len(prompt) - 1, _PREFILL_CHUNK):
            if cancel.is_set():
                return False
            llm.eval(prompt[i : min(i + _PREFILL_CHUNK, len(prompt) - 1)])
        return not cancel.is_set()

    def _gbnf(self, request: ModelRequest) -> str | None:
        """The request's own grammar, else (when constrained) one for its tools and tool_choice."""
        gbnf = request.grammar
        if gbnf is None and self.constrained and request.tools and request.tool_choice != "none":
            gbnf = tool_call_grammar(request.tools, allow_text=request.tool_choice != "any")
        return gbnf

    def _compiled(self, gbnf: str) -> LlamaGrammar:
        if gbnf not in self._grammars:
            self._grammars[gbnf] = compile_grammar(self._loaded, gbnf)
            while len(self._grammars) > 16:  # grammars with refused calls left out change from turn to turn
                del self._grammars[next(iter(self._grammars))]
        return self._grammars[gbnf]

    def _new_id(self, history: list[Message]) -> str:
        # Continue after any local ids already in the history, so a resumed session never reuses one.
        for msg in history:
            for use in msg.tool_uses:
                tail = use.id.removeprefix("toolu_local_")
                if tail != use.id and tail.isdigit():
                    self._next_id = max(self._next_id, int(tail) + 1)
        n, self._next_id = self._next_id, self._next_id + 1
        return f"toolu_local_{n}"

    # ----------------------------------------------------------------- prompt rendering

    def _remember(self, content: tuple[Block, ...], tokens: list[int]) -> None:
        self._replay[_fingerprint(content)] = tokens
        while len(self._replay) > _REPLAY_SIZE:
            self._replay.popitem(last=False)

    def _system_tokens(self, request: ModelRequest) -> list[int]:
        tok = self._tokenize
        return (
            tok("<|im_start|>", True)
            + tok("system\n" + system_text(request.system, request.tools))
            + tok("<|im_end|>", True)
            + tok("\n")
        )

    def _restore_prefix(self, prefix: list[int]) -> None:
        """Put the prefix's KV state in the context: from the disk cache, or evaluated once and saved there."""
        llm = self._loaded
        if llm.n_tokens >= len(prefix) and list(llm.input_ids[: len(prefix)]) == prefix:
            self.prefix_cache_hit = None  # already in memory: the ordinary KV reuse
            return
        path = self._prefix_path(prefix)
        self.prefix_cache_hit = load_prefix(llm, path, prefix)
        if not self.prefix_cache_hit:
            llm.reset()
            llm.eval(prefix)
            save_prefix(llm, path, prefix)

    def _prefix_path(self, prefix: list[int]) -> Path:
        import hashlib

        import llama_cpp

        model_file = Path(self._loaded.model_path)
        stat = model_file.stat()
        key = hashlib.sha256(
            json.dumps(
                [str(model_file), stat.st_size, stat.st_mtime_ns, self.n_ctx, llama_cpp.__version__, prefix]
            ).encode()
        ).hexdigest()[:32]
        return (self.prefix_cache_dir or cache_dir(self._env).parent / "kv") / f"{key}.bin"

    def _prompt(self, request: ModelRequest) -> list[int]:
        """Qwen2.5's chat template, tokenized one message at a time so earlier turns never change."""
        tok = self._tokenize
        start, end, nl = tok("<|im_start|>", True), tok("<|im_end|>", True), tok("\n")
        out = self._system_tokens(request)
        for i, msg in enumerate(request.messages):
            last = i == len(request.messages) - 1
            if msg.role == "assistant":
                replay = self._replay.get(_fingerprint(msg.content))
                body = replay if replay is not None else tok(assistant_text(msg))
                out += start + tok("assistant\n") + body + ([] if last else end + nl)
            else:
                for text in user_turns(msg):
                    out += start + tok(text) + end + nl
        if not request.messages or request.messages[-1].role != "assistant":
            out += start + tok("assistant\n")
        return out

    def _tokenize(self, text: str, special: bool = False) -> list[int]:
        return self._loaded.tokenize(text.encode("utf-8"), add_bos=False, special=special)


def compile_grammar(llm: LlamaLike, gbnf: str) -> LlamaGrammar:
    """A LlamaGrammar, checked by llama.cpp's own parser now rather than failing later inside sampling."""
    import llama_cpp
    from llama_cpp.llama_grammar import LlamaGrammar  # the class llama_cpp.LlamaGrammar names

    sampler = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, gbnf.encode("utf-8"), b"root")
    if not sampler:
        raise ModelError("llama.cpp rejected the tool-call grammar (see stderr for the parse error)")
    llama_cpp.llama_sampler_free(sampler)
    return LlamaGrammar.from_string(gbnf)


def load_prefix(llm: LlamaLike, path: Path, prefix: list[int]) -> bool:
    """Load a saved KV state of exactly ``prefix`` into ``llm``; False when there is none (or it is unusable)."""
    import llama_cpp

    if not path.is_file():
        return False
    tokens = (llama_cpp.llama_token * len(prefix))()
    count = ctypes.c_size_t(0)
    llm.reset()
    ok = llama_cpp.llama_state_load_file(llm._ctx.ctx, str(path).encode(), tokens, len(prefix), ctypes.byref(count))
    if not ok or list(tokens[: count.value]) != prefix:
        llm.reset()
        llm._ctx.kv_cache_clear()
        return False
    llm.input_ids[: len(prefix)] = prefix
    llm.n_tokens = len(prefix)
    return True


def save_prefix(llm: LlamaLike, path: Path, prefix: list[int]) -> None:
    """Save the context's KV state (holding exactly ``prefix``), atomically; a cache, so failures are ignored."""
    import llama_cpp

    tokens = (llama_cpp.llama_token * len(prefix))(*prefix)
    save_atomically(path, lambda tmp: llama_cpp.llama_state_save_file(llm._ctx.ctx, tmp, tokens, len(prefix)))


def _is_end_of_generation(llm: LlamaLike, token: int) -> bool:
    import llama_cpp

    return bool(llama_cpp.llama_vocab_is_eog(llm._model.vocab, token))


def _fingerprint(content: tuple[Block, ...]) -> str:
    return json.dumps([b.to_wire() for b in content], sort_keys=True, ensure_ascii=False)


ENV_THREADS = "DRIVETRAIN_LOCAL_THREADS"
ENV_PARALLEL = "DRIVETRAIN_LOCAL_PARALLEL"


def parallel_setting(env: Mapping[str, str]) -> int:
    """$DRIVETRAIN_LOCAL_PARALLEL: how many requests the local model decodes together (``LocalModel``'s
    ``parallel``); over 1, a task's attempts run at once on it rather than one after another."""
    text = env.get(ENV_PARALLEL, "").strip()
    if not text:
        return 1
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{ENV_PARALLEL}={text!r}: give a whole number of sequences, 1 or more (unset: 1)")
    return int(text)


def _threads_setting(env: Mapping[str, str]) -> int | None:
    """$DRIVETRAIN_LOCAL_THREADS: llama.cpp's threads, when the cores are shared (its threads wait for each other
    spinning, so two threads on a core something else is using run slower than one)."""
    text = env.get(ENV_THREADS, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{ENV_THREADS}={text!r}: give a whole number of threads, 1 or more (unset: one a core)")
    return int(text)


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _stuck(tokens: list[int], window: int = 128) -> bool:
    """A small model can fall into repeating a cycle of tokens until max_tokens, which at CPU speed costs
    minutes: a short one ("0000…"), or a sentence or two over and over. Stop it as if the budget ran out."""
    if len(tokens) < window:
        return False
    tail = tokens[-window:]
    if any(all(tail[i] == tail[i - period] for i in range(period, window)) for period in (1, 2, 3, 4)):
        return True
    if len(tokens) % 16:
        return False  # the long cycles are looked for every 16 tokens
    n = len(tokens)
    for p in range(8, min(400, n // 3) + 1):
        reps = max(3, -(-window // p))  # the repeated stretch spans at least ``window`` tokens
        if reps * p <= n and all(tokens[n - k * p : n - (k - 1) * p] == tokens[n - p :] for k in range(2, reps + 1)):
            return True
    return False
