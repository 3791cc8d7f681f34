"""Several generations decoded together: one llama.cpp context, a sequence per conversation, one batch per step.

On a CPU, generating a token is bound by memory bandwidth (every weight is read once per step), so a step that
carries a token for each of ``k`` sequences costs little more than a step for one. ``BatchEngine`` runs the
requests in flight (the attempts of a task, or any concurrent callers) as continuous batching, the way
llama.cpp's server does: each request takes the free sequence whose cached tokens share the longest prefix with
its prompt, or a copy of another sequence's longer prefix (the shared system prompt and task are evaluated once
and copied: in a unified KV cache a copy shares the cells), evaluates only the rest, and then gets one token per
step until it stops. Prompt chunks of new requests ride in the same batch as the tokens of those generating.

Sampling is per sequence: its own chain (top-k, top-p, min-p, temperature, a seeded draw) and its own grammar,
checked the way ``local.CountingLlama`` does (sample freely, check that one token, filter the whole vocabulary
only when it is rejected).
"""

from __future__ import annotations

import codecs
import ctypes
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict, cast

from drivetrain.errors import ModelError
from drivetrain.messages import StopReason
from drivetrain.models.toolcall import AnswerStream

if TYPE_CHECKING:
    import llama_cpp as lc
    from llama_cpp.llama_cpp import llama_model_p, llama_vocab_p


class Sampling(TypedDict):
    """The sampling settings of one generation, as ``Llama.generate`` takes them."""

    temp: float
    top_p: float
    top_k: int
    min_p: float
    repeat_penalty: float


class LlamaModelPart(Protocol):  # what is used of llama_cpp's internal LlamaModel
    @property
    def vocab(self) -> llama_vocab_p: ...

    @property
    def model(self) -> llama_model_p: ...


class Weights(Protocol):
    """What the engine uses of a loaded ``llama_cpp.Llama``: its model (the weights and the vocabulary)."""

    @property
    def _model(self) -> LlamaModelPart: ...


N_BATCH = 512  # tokens per decode call, all sequences together
WORTH_WAITING = 32  # a request waits for another to evaluate a prefix they share when it is longer than this


@dataclass
class Generated:
    """What one request's generation gave: the tokens, their text, why it stopped and the timing."""

    tokens: list[int]
    text: str
    stop: StopReason
    stream: AnswerStream
    prompt_tokens: int
    prompt_eval_tokens: int
    time_to_first_token_s: float
    generation_s: float


@dataclass
class Job:
    """One request in the engine: its prompt and settings, and where it has got to."""

    prompt: list[int]
    budget: int
    gbnf: str | None
    sampling: Sampling
    seed: int | None
    stops: list[str]
    sink: Callable[[str], object] | None
    cancel: threading.Event
    stuck: Callable[[list[int]], bool]
    # The fixed prefix (the system turn: its first ``prefix`` prompt tokens) kept on disk as one sequence's KV
    # state, as ``LocalModel`` keeps it for a single context: loaded when no sequence holds it, else saved once
    # evaluated, so a new process does not evaluate it again.
    prefix: int = 0
    prefix_file: Path | None = None
    done: Future[Generated] = field(default_factory=Future)
    seq: int = -1
    save_prefix: bool = False  # the prefix is being evaluated: save it when it is in
    fed: int = 0  # prompt tokens in the sequence's KV
    reused: int = 0  # of those, how many were there already (or copied) when it started
    out: list[int] = field(default_factory=list)
    text: str = ""
    started: float = field(default_factory=time.perf_counter)
    first: float = 0.0
    chain: lc.llama_sampler_p | None = None
    grammar: lc.llama_sampler_p | None = None
    stream: AnswerStream | None = None
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace")
    )


class BatchEngine:
    """A context of ``n_seq`` sequences over ``llm``'s weights, and the thread that decodes them together."""

    def __init__(self, llm: Weights, n_seq: int, n_ctx_seq: int, n_threads: int) -> None:
        import llama_cpp as lc

        self.llm = llm
        self.n_seq = n_seq
        params = lc.llama_context_default_params()
        params.n_ctx = n_ctx_seq * n_seq
        params.n_batch = N_BATCH
        params.n_ubatch = N_BATCH
        params.n_seq_max = n_seq
        params.kv_unified = True  # a copied prefix shares its cells; each sequence may grow to n_ctx_seq
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        self.n_ctx = params.n_ctx
        ctx = lc.llama_init_from_model(llm._model.model, params)
        if not ctx:
            raise ModelError(f"llama.cpp could not make a context of {n_seq} sequences of {n_ctx_seq} tokens")
        self.ctx: lc.llama_context_p = ctx
        self.mem = lc.llama_get_memory(self.ctx)
        self.vocab = llm._model.vocab
        self.n_vocab = lc.llama_vocab_n_tokens(self.vocab)
        self.cells: list[list[int]] = [[] for _ in range(n_seq)]  # what each sequence's KV holds
        self.busy: list[Job | None] = [None] * n_seq
        self.waiting: list[Job] = []
        self.evaluated = 0  # tokens decoded, all sequences (prompt and generated)
        self._batch = lc.llama_batch_init(N_BATCH, 0, n_seq)
        self._cv = threading.Condition()
        self._controls: list[int] | None = None
        self._thread = threading.Thread(target=self._loop, name="drivetrain-batch", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> Future[Generated]:
        if len(job.prompt) >= self.n_ctx // self.n_seq:
            job.done.set_exception(ModelError(f"the prompt is {len(job.prompt)} tokens: longer than a sequence holds"))
            return job.done
        with self._cv:
            self.waiting.append(job)
            self._cv.notify()
        return job.done

    # ----------------------------------------------------------------- the decoding thread

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self.waiting and not any(self.busy):
                    self._cv.wait()
                self._place()
            try:
                self._step()
            except Exception as e:  # a failed decode fails the requests in it, not the engine
                for seq, job in enumerate(self.busy):
                    if job is not None:
                        self._end(seq, job, exc=e if isinstance(e, ModelError) else ModelError(f"llama.cpp: {e}"))

    def _place(self) -> None:
        """Waiting requests into free sequences: the free one whose cells share the longest prefix with the prompt;
        a longer prefix held by any sequence is copied into it instead."""
        import llama_cpp as lc

        for job in list(self.waiting):
            if None not in self.busy:
                return
            have = max(_common(c, job.prompt) for c in self.cells)
            coming = max((_common(j.prompt, job.prompt) for j in self.busy if j is not None), default=0)
            if min(coming, len(job.prompt) - 1) > have + WORTH_WAITING:
                continue  # another request is evaluating a longer shared prefix: copy it once it is in
            self.waiting.remove(job)
            free = [s for s in range(self.n_seq) if self.busy[s] is None]
            own = max(free, key=lambda s: (_common(self.cells[s], job.prompt), -s))
            keep = min(_common(self.cells[own], job.prompt), len(job.prompt) - 1)
            donor = max(range(self.n_seq), key=lambda s: _common(self.cells[s], job.prompt))
            shared = min(_common(self.cells[donor], job.prompt), len(job.prompt) - 1)
            if donor != own and shared > keep:
                lc.llama_memory_seq_rm(self.mem, own, -1, -1)
                lc.llama_memory_seq_cp(self.mem, donor, own, 0, shared)
                self.cells[own] = list(self.cells[donor][:shared])
                keep = shared
            else:
                lc.llama_memory_seq_rm(self.mem, own, keep, -1)
                self.cells[own] = self.cells[own][:keep]
            if job.prefix_file is not None and keep < job.prefix < len(job.prompt):
                loaded = self._load_prefix(own, job.prompt[: job.prefix], job.prefix_file)
                keep = len(self.cells[own])  # the prefix, or what it held before (nothing, if a bad file cleared it)
                job.save_prefix = not loaded
            job.seq, job.fed, job.reused = own, keep, keep
            job.chain = _chain(job.sampling, job.seed)
            if job.gbnf is not None:
                job.grammar = lc.llama_sampler_init_grammar(self.vocab, job.gbnf.encode("utf-8"), b"root")
            job.stream = AnswerStream(job.sink, job.stops)
            self.busy[own] = job

    def _step(self) -> None:
        """One decode: a token of each generating sequence, and prompt chunks of the others in the room left."""
        import llama_cpp as lc

        batch = self._batch
        n = 0
        wants: list[tuple[int, Job]] = []  # (batch index with logits, job)

        def add(token: int, pos: int, seq: int, logits: bool) -> None:
            nonlocal n
            batch.token[n], batch.pos[n], batch.n_seq_id[n] = token, pos, 1
            batch.seq_id[n][0], batch.logits[n] = seq, logits
            n += 1

        jobs = [j for j in self.busy if j is not None]
        for job in jobs:
            if job.cancel.is_set():
                self._end(job.seq, job, stop="end_turn")
        jobs = [j for j in self.busy if j is not None]
        for job in jobs:  # the generating ones first: one token each
            if job.fed == len(job.prompt) and job.out:
                add(job.out[-1], len(self.cells[job.seq]), job.seq, True)
                self.cells[job.seq].append(job.out[-1])
                wants.append((n - 1, job))
        for job in jobs:
            if job.fed < len(job.prompt) and n < N_BATCH:
                take = min(len(job.prompt) - job.fed, N_BATCH - n)
                if job.save_prefix and job.fed < job.prefix:
                    take = min(take, job.prefix - job.fed)  # the sequence holds exactly the prefix to save
                for i in range(job.fed, job.fed + take):
                    last = i == len(job.prompt) - 1
                    add(job.prompt[i], i, job.seq, last)
                    if last:
                        wants.append((n - 1, job))
                self.cells[job.seq] += job.prompt[job.fed : job.fed + take]
                job.fed += take
        if n == 0:
            return
        batch.n_tokens = n
        code = lc.llama_decode(self.ctx, batch)
        if code != 0:
            raise ModelError(
                "the local model's context is full (llama_decode returned 1): fewer attempts, or compact the history"
                if code == 1
                else f"llama_decode failed ({code})"
            )
        self.evaluated += n
        for job in jobs:
            if job.save_prefix and job.fed == job.prefix:
                job.save_prefix = False
                assert job.prefix_file is not None
                self._save_prefix(job.seq, job.prompt[: job.prefix], job.prefix_file)
        for idx, job in wants:
            self._next(job, idx)

    def _load_prefix(self, seq: int, prefix: list[int], path: Path) -> bool:
        """Sequence ``seq`` from the saved state of exactly ``prefix``; False (and the sequence empty) if none."""
        import llama_cpp as lc

        if not path.is_file():
            return False
        tokens = (lc.llama_token * len(prefix))()
        count = ctypes.c_size_t(0)
        lc.llama_memory_seq_rm(self.mem, seq, -1, -1)
        read = lc.llama_state_seq_load_file(self.ctx, str(path).encode(), seq, tokens, len(prefix), ctypes.byref(count))
        if not read or list(tokens[: count.value]) != prefix:
            lc.llama_memory_seq_rm(self.mem, seq, -1, -1)
            self.cells[seq] = []
            return False
        self.cells[seq] = list(prefix)
        return True

    def _save_prefix(self, seq: int, prefix: list[int], path: Path) -> None:
        """Save sequence ``seq`` (holding exactly ``prefix``)."""
        import llama_cpp as lc

        tokens = (lc.llama_token * len(prefix))(*prefix)
        save_atomically(path, lambda tmp: lc.llama_state_seq_save_file(self.ctx, tmp, seq, tokens, len(prefix)))

    def _next(self, job: Job, idx: int) -> None:
        """Sample the job's next token from the logits at batch index ``idx``, and see whether it has ended."""
        import llama_cpp as lc

        token = self._sample(job, idx)
        if not job.out:
            job.first = time.perf_counter()
        if lc.llama_vocab_is_eog(self.vocab, token):
            self._end(job.seq, job, stop="end_turn")
            return
        job.out.append(token)
        piece = job.decoder.decode(_piece(self.vocab, token))
        job.text += piece
        hit = next((s for s in job.stops if s in job.text[-(len(s) + len(piece)) :]), None)
        if hit is not None:
            job.text = job.text[: job.text.index(hit)]
            self._end(job.seq, job, stop="stop_sequence")
            return
        assert job.stream is not None
        job.stream.feed(job.text)
        if len(job.out) >= job.budget or job.stuck(job.out):
            self._end(job.seq, job, stop="max_tokens")

    def _sample(self, job: Job, idx: int) -> int:
        import llama_cpp as lc

        assert job.chain is not None
        token = int(lc.llama_sampler_sample(job.chain, self.ctx, idx))
        if job.grammar is None:
            return token
        if self._controls is None:
            self._controls = control_tokens(self.vocab, self.n_vocab)
        logits = lc.llama_get_logits_ith(self.ctx, idx)
        return constrained(token, job.grammar, job.chain, logits, self.n_vocab, self._controls)

    def _end(self, seq: int, job: Job, *, stop: StopReason = "end_turn", exc: BaseException | None = None) -> None:
        import llama_cpp as lc

        self.busy[seq] = None
        for sampler in (job.chain, job.grammar):
            if sampler is not None:
                lc.llama_sampler_free(sampler)
        job.chain = job.grammar = None
        if exc is not None:
            # what the sequence holds is no longer known to match its cells
            lc.llama_memory_seq_rm(self.mem, seq, -1, -1)
            self.cells[seq] = []
            job.done.set_exception(exc)
            return
        job.text += job.decoder.decode(b"", final=True)
        now = time.perf_counter()
        first = job.first or now
        assert job.stream is not None
        job.done.set_result(
            Generated(
                job.out,
                job.text,
                stop,
                job.stream,
                len(job.prompt),
                len(job.prompt) - job.reused,
                first - job.started,
                now - first,
            )
        )


def save_atomically(path: Path, write: Callable[[bytes], int]) -> None:
    """``write`` a file at the path it is given, then rename it to ``path`` if it says it wrote it (nonzero): a
    cache, so failures are ignored."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        if write(str(tmp).encode()):
            os.replace(tmp, path)
    except OSError:
        pass


def _common(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _chain(sampling: Sampling, seed: int | None) -> lc.llama_sampler_p:
    """The sampler chain of one request: as llama.cpp's common sampling, top-k, top-p, min-p, temperature, draw."""
    import llama_cpp as lc

    params = lc.llama_sampler_chain_default_params()
    chain = cast("lc.llama_sampler_p", lc.llama_sampler_chain_init(params))
    if sampling["temp"] <= 0:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
        return chain
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_k(sampling["top_k"]))
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_p(sampling["top_p"], 1))
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_min_p(sampling["min_p"], 1))
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_temp(sampling["temp"]))
    draw = seed if seed is not None else lc.LLAMA_DEFAULT_SEED
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_dist(draw & 0xFFFFFFFF))
    return chain


def _piece(vocab: lc.llama_vocab_p, token: int) -> bytes:
    import llama_cpp as lc

    buf = ctypes.create_string_buffer(64)
    n = lc.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = lc.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
    return buf.raw[:n]


def control_tokens(vocab: lc.llama_vocab_p, n_vocab: int) -> list[int]:
    """Control tokens other than the end of generation (``<|im_start|>`` …). A grammar matches them by their text,
    which is never shown, so one could carry a refused call past it: the text "cmd<|im_start|>\n" is not "cmd\n",
    yet it reads as that. Under a grammar they are never sampled."""
    import llama_cpp as lc

    return [t for t in range(n_vocab) if lc.llama_vocab_is_control(vocab, t) and not lc.llama_vocab_is_eog(vocab, t)]


def constrained(
    token: int,
    grammar: lc.llama_sampler_p,
    chain: lc.llama_sampler_p,
    logits: ctypes.Array[ctypes.c_float],
    n_vocab: int,
    controls: list[int],
) -> int:
    """Sampling under a grammar the way llama.cpp's own tools do it: the token the chain drew freely, if the grammar
    allows it; else one drawn again by the chain from the whole vocabulary, filtered by the grammar first. (Filtering
    all 151k tokens at every step, as ``Llama.generate`` does, costs ~30 ms a token.) The grammar accepts it."""
    import llama_cpp as lc
    import numpy as np

    if token in controls or not _allowed(grammar, token):
        dtype = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)
        cands = np.empty(n_vocab, dtype=dtype)
        cands["id"] = np.arange(n_vocab)
        cands["logit"], cands["p"] = np.ctypeslib.as_array(logits, shape=(n_vocab,)), 0.0
        cands["logit"][controls] = -np.inf
        cur = lc.llama_token_data_array(cands.ctypes.data_as(lc.llama_token_data_p), n_vocab, -1, False)
        lc.llama_sampler_apply(grammar, ctypes.byref(cur))
        lc.llama_sampler_apply(chain, ctypes.byref(cur))
        token = int(cur.data[cur.selected].id)  # an int already: ctypes reads the c_int32 field as one
    lc.llama_sampler_accept(grammar, token)
    return token


def _allowed(grammar: lc.llama_sampler_p, token: int) -> bool:
    import llama_cpp as lc

    one = (lc.llama_token_data * 1)(lc.llama_token_data(token, 0.0, 0.0))
    lc.llama_sampler_apply(grammar, ctypes.byref(lc.llama_token_data_array(one, 1, -1, False)))
    return bool(one[0].logit != float("-inf"))
