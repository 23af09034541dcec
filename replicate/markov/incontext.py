"""In-context k-th-order Markov sources: a fresh random kernel for every group of sequences.

Papers C and D train on sequences whose transition kernel is itself random: every row
P[c] ~ Dirichlet(alpha * 1_S), independently for each of the S**order contexts (paper C,
Sec. 2.2 and the authors' `problems.py`; paper D, Sec. 2.1 with alpha = 1).

Conventions (used by every function here):

* ``order`` k = number of previous tokens the next token depends on (paper D's k; paper C's
  n - 1). A kernel is (S**k, S); a batch of kernels is (..., S**k, S), float64.
* Context index of the window (x_{t-k}, ..., x_{t-1}): c = sum_j x_{t-k+j} S**(k-1-j), the
  *oldest token is the most significant digit* (the authors' ``powers``, paper D's code).
* A path is driven by pre-drawn i.i.d. uniforms u (batch, length): the first k tokens come
  from the initial law, then x_t = F^{-1}_{P[c_t]}(u_t) (inverse CDF of the kernel row of
  the current context). The uniforms u_1..u_{k-1} are unused under the stationary law
  (one window is drawn from u_0). The only Python loops of a draw are the scan over
  positions t = k..length-1 and, for an alpha other than 1/2, the few rejection rounds of
  the Gamma sampler.
* Random numbers are drawn from the one ``generator`` given, in a fixed order: kernels,
  then the path uniforms, then the noise. A noisy source therefore draws the same kernels
  and the same clean path as the noiseless one from the same generator state.

Dirichlet draws: a Dirichlet row is S i.i.d. Gamma(alpha, 1) variates divided by their sum.
``torch._standard_gamma`` and ``torch.distributions`` take no generator, so the variates come
from the given generator's own draws. For paper C's alpha = 1/2 an exact one-draw form
serves: with E = -log(1 - U) exponential and U' uniform, E cos^2(2 pi U') is Gamma(1/2, 1)
(it is Z^2 / 2 for the standard normal Z = sqrt(2 E) cos(2 pi U') of the Box-Muller
transform, and Z^2 is chi-square with one degree of freedom). Any other alpha, 1 included,
uses the Marsaglia-Tsang rejection method (ACM TOMS 26, 2000) in log space, with the boost
log G(a) = log G(a + 1) + log(U) / a for a < 1 (so small alphas do not underflow), and a
row is the softmax of S such log-Gamma variates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import torch

from replicate.markov.chains import ChainParameterError

InitialLaw = Literal["uniform", "stationary"]

JOINT_SCAN_BYTES = 1 << 20
"""The kernel tables one joint scan reads at most (a core's L2 cache): beyond it the scan's
row gathers miss the cache and one joint scan is slower than separate ones (measured 0.9x
at paper C's Fig. 3 shapes, 1.4x faster at paper D's; benchmarks/incontext_sampler.py)."""


def _device(generator: torch.Generator | None) -> torch.device:
    return generator.device if generator is not None else torch.device("cpu")


def _half_gamma(
    count: int, generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """``count`` i.i.d. Gamma(1/2, 1) variates, float64, by the one-draw form E cos^2(2 pi U')
    (see the module's docstring): 2 ``count`` uniforms, no rejection loop."""
    u = torch.rand(2 * count, dtype=torch.float64, generator=generator, device=device)
    gamma = torch.log1p(-u[:count]).neg_()  # E = -log(1 - U): U = 0 gives 0, never inf
    return gamma.mul_(torch.cos(2.0 * math.pi * u[count:]).square_())


def _log_gamma(
    alpha: float, count: int, generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """``count`` i.i.d. log Gamma(alpha, 1) variates, float64 (Marsaglia-Tsang, see module)."""
    shape = alpha + 1.0 if alpha < 1.0 else alpha
    d = shape - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    out: torch.Tensor | None = None
    pending = torch.arange(count, device=device)
    while pending.numel():
        m = pending.numel()
        z = torch.randn(m, dtype=torch.float64, generator=generator, device=device)
        u = torch.rand(m, dtype=torch.float64, generator=generator, device=device)
        v = (1.0 + c * z) ** 3
        log_v = torch.log(v.clamp(min=1e-300))
        accept = (v > 0) & (torch.log(u) < 0.5 * z * z + d - d * v + d * log_v)
        if out is None:  # the first round draws for every variate: no gather, no scatter
            out = math.log(d) + log_v
        else:
            out[pending[accept]] = math.log(d) + log_v[accept]
        pending = pending[~accept]
    assert out is not None
    if alpha < 1.0:
        u = torch.rand(count, dtype=torch.float64, generator=generator, device=device)
        out += torch.log(u) / alpha
    return out


def draw_kernels(
    states: int, order: int, alpha: float, count: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``count`` kernels (count, S**order, S), each row ~ Dirichlet(alpha * 1_S).

    Paper C, Sec. 2.2; paper D, Sec. 2.1, with alpha = 1.
    """
    _check_shape_args(states, order)
    if not alpha > 0:
        raise ChainParameterError(f"alpha must be > 0, got {alpha!r}")
    if count < 1:
        raise ChainParameterError(f"count must be >= 1, got {count!r}")
    shape = (count, states**order, states)
    return _dirichlet_rows(float(alpha), shape, generator, _device(generator))


def _dirichlet_rows(
    alpha: float,
    shape: tuple[int, ...],
    generator: torch.Generator | None,
    device: torch.device,
) -> torch.Tensor:
    """A float64 tensor of ``shape`` whose rows (last axis, S) are i.i.d. Dirichlet(alpha 1_S):
    Gamma(alpha, 1) variates over their row's sum (see the module's docstring)."""
    count = math.prod(shape)
    if alpha == 0.5:
        gamma = _half_gamma(count, generator, device).view(shape)
        return gamma / gamma.sum(-1, keepdim=True)
    return torch.softmax(_log_gamma(alpha, count, generator, device).view(shape), -1)


def _check_shape_args(states: int, order: int) -> None:
    if int(states) != states or states < 2:
        raise ChainParameterError(f"states must be an integer >= 2, got {states!r}")
    if int(order) != order or order < 1:
        raise ChainParameterError(f"order must be an integer >= 1, got {order!r}")


def kernel_order(kernels: torch.Tensor) -> int:
    """The order k of a kernel batch (..., S**k, S)."""
    rows, states = kernels.shape[-2], kernels.shape[-1]
    order = round(math.log(rows) / math.log(states)) if rows > 1 else 0
    if states < 2 or order < 1 or states**order != rows:
        raise ChainParameterError(
            f"kernels must be (..., S**k, S) with S >= 2, k >= 1, got {tuple(kernels.shape)}"
        )
    return order


def context_indices(tokens: torch.Tensor, order: int, states: int) -> torch.Tensor:
    """Index of every length-``order`` window: out[..., j] = c(x_j, ..., x_{j+order-1}).

    Oldest token most significant (paper D's code); shape (..., L - order + 1).
    """
    windows = tokens.unfold(-1, order, 1)
    powers = states ** torch.arange(order - 1, -1, -1, device=tokens.device)
    return (windows * powers).sum(-1)


def lifted_kernel(kernels: torch.Tensor) -> torch.Tensor:
    """First-order chain on the S**k contexts: (..., S**k, S**k).

    From context c = (x_1..x_k) the chain moves to (x_2..x_k, s) with probability P[c, s]
    (paper C, App. H.1, the lifted chain Xi).
    """
    order = kernel_order(kernels)
    states = kernels.shape[-1]
    rows = states**order
    c = torch.arange(rows, device=kernels.device)
    successors = (c % states ** (order - 1)).unsqueeze(1) * states + torch.arange(
        states, device=kernels.device
    )
    lifted = torch.zeros(*kernels.shape[:-1], rows, dtype=kernels.dtype, device=kernels.device)
    return lifted.scatter_(-1, successors.expand_as(kernels), kernels)


def lifted_stationary(kernels: torch.Tensor) -> torch.Tensor:
    """Stationary law (..., S**k) of the lifted chain, i.e. the law of a stationary window.

    Solves pi (Xi - I) = 0 with sum(pi) = 1 (one equation replaced by the normalisation),
    batched in float64; unique for Dirichlet kernels, whose rows are a.s. positive (paper C,
    App. H.1; our option ``stationary``).
    """
    lifted = lifted_kernel(kernels.to(torch.float64))
    rows = lifted.shape[-1]
    system = (lifted - torch.eye(rows, dtype=torch.float64, device=lifted.device)).transpose(-1, -2)
    system[..., -1, :] = 1.0
    rhs = torch.zeros(*lifted.shape[:-1], 1, dtype=torch.float64, device=lifted.device)
    rhs[..., -1, 0] = 1.0
    pi = torch.linalg.solve(system, rhs).squeeze(-1).clamp(min=0.0)
    return pi / pi.sum(-1, keepdim=True)


def _inverse_cdf(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index s with F(s-1) <= u < F(s) along the last axis (never a zero-mass category)."""
    return (u.unsqueeze(-1) >= cdf).sum(-1).clamp_(max=cdf.shape[-1] - 1)


def _decode(contexts: torch.Tensor, order: int, states: int) -> torch.Tensor:
    """Tokens (..., order) of context indices (oldest token most significant)."""
    powers = states ** torch.arange(order - 1, -1, -1, device=contexts.device)
    return (contexts.unsqueeze(-1) // powers) % states


def _uniform_first(u: torch.Tensor, order: int, states: int) -> torch.Tensor:
    """First ``order`` tokens (batch, order), i.i.d. uniform: floor(S u_t) for t < order."""
    return (u[:, :order] * states).long().clamp_(max=states - 1)


def _stationary_first(pi: torch.Tensor, u: torch.Tensor, order: int, states: int) -> torch.Tensor:
    """One window (batch, order) from the lifted-chain law ``pi`` by inverse CDF of u_0."""
    return _decode(_inverse_cdf(pi.cumsum(-1), u[:, 0]), order, states)


def _initial_tokens(kernels: torch.Tensor, u: torch.Tensor, initial: InitialLaw) -> torch.Tensor:
    order, states = kernel_order(kernels), kernels.shape[-1]
    if initial == "uniform":
        return _uniform_first(u, order, states)
    if initial == "stationary":
        return _stationary_first(lifted_stationary(kernels), u, order, states)
    raise ChainParameterError(f"initial must be 'uniform' or 'stationary', got {initial!r}")


def _scan(
    kernels: torch.Tensor,
    first: torch.Tensor,
    u: torch.Tensor,
    mix: torch.Tensor | None = None,
    eps: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Extend ``first`` (batch, k) to (batch, L) with x_t = F^{-1}_{row_t}(u_t); row_t =
    P[c_t], or (1 - eps) P[c_t] + eps mix[:, t] when ``mix`` is given (paper D, Eq. (23)).
    One vectorised step per position: gather the current context's row for the whole
    batch, invert its CDF at u_t, shift the context. Returns the tokens and the context
    index of the last k tokens.

    The loop runs on NumPy arrays: the same float64 arithmetic and comparisons as torch's
    (so the same paths), at a fraction of torch's per-operation cost on these small rows
    (measured by `benchmarks/step_profile.py`).
    """
    batch, length = u.shape
    order, states = first.shape[1], kernels.shape[-1]
    contexts = kernels.shape[-2]
    wrap = states ** (order - 1)
    tokens = np.empty((batch, length), dtype=np.int64)
    tokens[:, :order] = first.cpu().numpy()
    context = context_indices(first, order, states).squeeze(-1).cpu().numpy()
    flat = kernels.reshape(batch * contexts, states).cpu().numpy()
    uniforms = u.cpu().numpy()
    mixes = mix.cpu().numpy() if mix is not None else None
    if mixes is None:
        flat = flat.cumsum(-1)
    base = np.arange(batch) * contexts
    for t in range(order, length):
        row = flat[base + context]
        if mixes is not None:
            row = ((1.0 - eps) * row + eps * mixes[:, t]).cumsum(-1)
        token = np.minimum((uniforms[:, t, None] >= row).sum(-1), states - 1)
        tokens[:, t] = token
        context = (context % wrap) * states + token
    return torch.from_numpy(tokens).to(u.device), torch.from_numpy(context).to(u.device)


def _path_uniforms(
    batch: int, length: int, order: int, generator: torch.Generator | None
) -> torch.Tensor:
    if length < order or batch < 1:
        raise ChainParameterError(
            f"need batch >= 1 and length >= order ({order}), got batch={batch}, length={length}"
        )
    return torch.rand(
        batch, length, dtype=torch.float64, generator=generator, device=_device(generator)
    )


def sample_from_kernels(
    kernels: torch.Tensor,
    length: int,
    initial: InitialLaw = "uniform",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One path of ``length`` tokens per kernel: (batch, length) int64 for kernels
    (batch, S**k, S). First k tokens i.i.d. uniform or a stationary window (module doc)."""
    kernels = kernels.to(torch.float64)
    order = kernel_order(kernels)
    u = _path_uniforms(kernels.shape[0], length, order, generator)
    return _scan(kernels, _initial_tokens(kernels, u, initial), u)[0]


def sample_from_kernels_loop(
    kernels: torch.Tensor,
    length: int,
    initial: InitialLaw = "uniform",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Reference for tests and the benchmark: the same path as `sample_from_kernels` from
    the same generator state, one Python step per sequence and position."""
    kernels = kernels.to(torch.float64)
    order, states = kernel_order(kernels), kernels.shape[-1]
    u = _path_uniforms(kernels.shape[0], length, order, generator)
    first = _initial_tokens(kernels, u, initial).tolist()
    rows, uniforms = kernels.tolist(), u.tolist()
    out = []
    for b, path in enumerate(first):
        for t in range(order, length):
            context = sum(tok * states ** (order - 1 - j) for j, tok in enumerate(path[-order:]))
            cumulative, token = 0.0, states - 1
            for s, p in enumerate(rows[b][context]):
                cumulative += p
                if uniforms[b][t] < cumulative:
                    token = s
                    break
            path.append(token)
        out.append(path)
    return torch.tensor(out, dtype=torch.int64)


def true_next_token_nll(kernels: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """-log P(x_{t} | x_{t-k..t-1}) for every target t = 1..L-1: (batch, L - 1), float64.

    Paper D's L_true (App. H.3, the authors' ``optimal_est``) is its mean. Targets that are
    initial tokens (t < k, 0-indexed) get -log(1/S) = log S: as in the authors' code, exact for
    the uniform initial law. ``kernels`` (batch, S**k, S), ``tokens`` (batch, L) clean.
    """
    kernels = kernels.to(torch.float64)
    order, states = kernel_order(kernels), kernels.shape[-1]
    batch, length = tokens.shape
    nll = torch.full(
        (batch, length - 1), math.log(states), dtype=torch.float64, device=tokens.device
    )
    if length > order:
        contexts = context_indices(tokens[:, :-1], order, states)[:, : length - order]
        rows = torch.arange(batch, device=tokens.device).unsqueeze(1)
        nll[:, order - 1 :] = -torch.log(kernels[rows, contexts, tokens[:, order:]])
    return nll


class InContextDraw(NamedTuple):
    """Everything one `InContextSource.draw` produced.

    kernels (batch, S**k, S) per sequence (the clean P); clean (batch, L) the noiseless path
    of the same uniforms; tokens (batch, L) what the model sees; next_law (batch, S).
    """

    kernels: torch.Tensor
    clean: torch.Tensor
    tokens: torch.Tensor
    next_law: torch.Tensor


@dataclass(frozen=True)
class InContextSource:
    """In-context k-th-order Markov source (stack contract, Source protocol).

    Every group of ``per_kernel`` consecutive sequences of a batch shares one kernel drawn
    by `draw_kernels` (paper D's ``batch_size_per_chain``; batch must be a multiple of it).
    ``initial``: first k tokens i.i.d. uniform (paper C's code, paper D) or one window from
    the stationary law of the lifted chain of the clean kernel (paper C, App. H.1).

    Noise (paper D, App. H.3.1 and H.3.2; at most one of them non-zero):

    * ``substitution`` eps: after drawing the clean path, every token (initial ones
      included) is independently replaced with probability eps by a uniform *other*
      symbol; the model's inputs and targets are the corrupted path. ``next_law`` is then
      the law of the next corrupted token given the *latent clean* context c of the last k
      clean tokens: (1 - eps) P[c] + eps (1 - P[c]) / (S - 1) (the law given the observed
      corrupted history is not Markov and is not computed).
    * ``perturbation`` eps: x_{t+1} ~ (1 - eps) P[c_t] + eps Q_t, a fresh Q_t ~ Dirichlet(1)
      per step and sequence, same uniforms as the clean path. ``next_law`` = (1 - eps) P[c]
      + eps / S at the observed last context: the exact law of the next token given the
      observed history (E Q_t = uniform, so the marginal process is the k-th-order chain
      with kernel (1 - eps) P + eps / S).

    Without noise ``next_law`` = P[c] of the last k tokens: paper C's soft target y
    (Eq. (1)).
    """

    states: int
    order: int
    alpha: float
    initial: InitialLaw = "uniform"
    per_kernel: int = 1
    substitution: float = 0.0
    perturbation: float = 0.0

    def __post_init__(self) -> None:
        _check_shape_args(self.states, self.order)
        if not self.alpha > 0:
            raise ChainParameterError(f"alpha must be > 0, got {self.alpha!r}")
        if self.initial not in ("uniform", "stationary"):
            raise ChainParameterError(f"initial must be uniform|stationary, got {self.initial!r}")
        if int(self.per_kernel) != self.per_kernel or self.per_kernel < 1:
            raise ChainParameterError(f"per_kernel must be an integer >= 1, got {self.per_kernel}")
        for name in ("substitution", "perturbation"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ChainParameterError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if self.substitution > 0 and self.perturbation > 0:
            raise ChainParameterError("at most one of substitution, perturbation may be > 0")

    def key(self) -> bytes:
        """Identity of the distribution: every field, in declaration order."""
        return repr(
            ("InContextSource", self.states, self.order, float(self.alpha), self.initial,
             self.per_kernel, float(self.substitution), float(self.perturbation))
        ).encode()  # fmt: skip

    def draw(self, batch: int, length: int, generator: torch.Generator) -> InContextDraw:
        """Kernels, clean path, observed path and next-token law of one batch."""
        return self.draw_many(batch, length, [generator])[0]

    def draw_many(
        self, batch: int, length: int, generators: Sequence[torch.Generator]
    ) -> list[InContextDraw]:
        """One `draw` per generator, exactly as separate calls would make them.

        The per-position scan of the clean paths runs once over the rows of several draws
        (fewer, larger operations), as many as keep their kernel tables within
        `JOINT_SCAN_BYTES`: it is row-wise, so each row takes the same arithmetic and
        comparisons, and each generator is consumed in the order of a single draw (kernels,
        path uniforms, then the noise).
        """
        if batch % self.per_kernel:
            raise ChainParameterError(
                f"batch ({batch}) must be a multiple of per_kernel ({self.per_kernel})"
            )
        starts = [self._start(batch, length, g) for g in generators]
        table = starts[0][0].element_size() * starts[0][0].numel()
        joined = max(1, JOINT_SCAN_BYTES // table)
        draws: list[InContextDraw] = []
        for i in range(0, len(starts), joined):
            group, gens = starts[i : i + joined], generators[i : i + joined]
            clean, context = _scan(*(torch.cat(parts) for parts in zip(*group, strict=True)))
            draws += [
                self._finish(kernels, first, u, path, last, generator)
                for (kernels, first, u), path, last, generator in zip(
                    group, clean.split(batch), context.split(batch), gens, strict=True
                )
            ]
        return draws

    def _start(
        self, batch: int, length: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A draw's kernels (batch, S**k, S), first k tokens and path uniforms (batch, L)."""
        groups = draw_kernels(
            self.states, self.order, self.alpha, batch // self.per_kernel, generator
        )
        kernels = groups.repeat_interleave(self.per_kernel, dim=0)
        u = _path_uniforms(batch, length, self.order, generator)
        if self.initial == "stationary":
            pi = lifted_stationary(groups).repeat_interleave(self.per_kernel, dim=0)
            first = _stationary_first(pi, u, self.order, self.states)
        else:
            first = _uniform_first(u, self.order, self.states)
        return kernels, first, u

    def _finish(
        self,
        kernels: torch.Tensor,
        first: torch.Tensor,
        u: torch.Tensor,
        clean: torch.Tensor,
        context: torch.Tensor,
        generator: torch.Generator,
    ) -> InContextDraw:
        """The noise and the next-token law of a draw whose clean path is scanned."""
        rows = torch.arange(clean.shape[0], device=u.device)
        law = kernels[rows, context]
        if self.substitution > 0:
            tokens = self._substitute(clean, generator)
            return InContextDraw(kernels, clean, tokens, self._sub_law(law))
        if self.perturbation > 0:
            eps = self.perturbation
            mix = torch.empty(*u.shape, self.states, dtype=torch.float64, device=u.device)
            mix.exponential_(generator=generator)
            mix /= mix.sum(-1, keepdim=True)
            tokens, context = _scan(kernels, first, u, mix, eps)
            law = (1.0 - eps) * kernels[rows, context] + eps / self.states
            return InContextDraw(kernels, clean, tokens, law)
        return InContextDraw(kernels, clean, clean, law)

    def _substitute(self, clean: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Replace each token w.p. eps by a uniform other symbol (paper D, App. H.3.1)."""
        shape, device = clean.shape, clean.device
        flip = torch.rand(shape, dtype=torch.float64, generator=generator, device=device)
        other = torch.rand(shape, dtype=torch.float64, generator=generator, device=device)
        shift = 1 + (other * (self.states - 1)).long().clamp_(max=self.states - 2)
        return torch.where(flip < self.substitution, (clean + shift) % self.states, clean)

    def _sub_law(self, law: torch.Tensor) -> torch.Tensor:
        eps = self.substitution
        return (1.0 - eps) * law + eps * (1.0 - law) / (self.states - 1)

    def sample(
        self, batch: int, length: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens (batch, length) int64 and next_law (batch, S) float64 (Source protocol)."""
        drawn = self.draw(batch, length, generator)
        return drawn.tokens, drawn.next_law

    def sample_many(
        self, batch: int, length: int, generators: Sequence[torch.Generator]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`sample` once per generator, stacked: (G, batch, length) and (G, batch, S)."""
        draws = self.draw_many(batch, length, generators)
        return torch.stack([d.tokens for d in draws]), torch.stack([d.next_law for d in draws])
