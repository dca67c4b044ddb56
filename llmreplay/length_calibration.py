"""A target's prompt count as a function of what a local tokenizer sees, fitted from the
`usage.prompt_tokens` of probe requests (for a target without /tokenize). Pure functions.

    count ~ per_request + per_message x (messages - 1) + per_system x [a system message]
            + per_tools x [tools offered] + per_token x local tokens + per_char x characters

The layout terms are the target's chat template; the text terms say how its tokenizer relates to the
local one. Three text models are fitted by least squares (local tokens only, characters only, both);
the one with the lowest leave-one-out relative error is kept (a simpler one wins unless the richer is
better by more than TIE_MARGIN), and that leave-one-out error is the calibration's stated accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

LAYOUT_TERMS = ("per_request", "per_message", "per_system", "per_tools")
TEXT_MODELS = {"tokens": ("per_token",), "chars": ("per_char",), "tokens+chars": ("per_token", "per_char")}
TIE_MARGIN = 0.10  # a model with more text terms must cut the leave-one-out error by this share
SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True)
class LengthSample:
    """One probe: its layout, what the local tokenizer sees of its texts, and what the target counted."""

    messages: int
    system: bool
    tools: bool
    local_tokens: int
    chars: int
    target: int

    def terms(self) -> dict[str, float]:
        return {
            "per_request": 1.0,
            "per_message": float(self.messages - 1),
            "per_system": float(self.system),
            "per_tools": float(self.tools),
            "per_token": float(self.local_tokens),
            "per_char": float(self.chars),
        }


@dataclass(frozen=True)
class LengthModel:
    """Fitted coefficients (target tokens per unit of each term) and how well they predicted the probes."""

    per_request: float = 0.0
    per_message: float = 0.0
    per_system: float = 0.0
    per_tools: float = 0.0
    per_token: float = 1.0
    per_char: float = 0.0
    text: str = "tokens"  # which TEXT_MODELS entry
    chars_per_token: float = 4.0  # of the probes' texts: how many characters a local token adds
    samples: int = 0
    error_p95: float | None = None  # leave-one-out |predicted / counted - 1| over the probes
    error_max: float | None = None

    def predict(self, messages: int, system: bool, tools: bool, local_tokens: int, chars: int) -> float:
        return (
            self.per_request
            + self.per_message * (messages - 1)
            + self.per_system * system
            + self.per_tools * tools
            + self.per_token * local_tokens
            + self.per_char * chars
        )

    @property
    def step_rate(self) -> float:
        """Target tokens per local token of text like the probes' (how far one more word moves the count)."""
        return self.per_token + self.per_char * self.chars_per_token

    def as_dict(self) -> dict:
        return {k: round(v, 5) if isinstance(v, float) else v for k, v in asdict(self).items()}


def design(samples: Sequence[LengthSample], terms: Sequence[str]) -> np.ndarray:
    return np.array([[s.terms()[t] for t in terms] for s in samples], dtype=float)


def least_squares(
    samples: Sequence[LengthSample], terms: Sequence[str]
) -> tuple[dict[str, float], np.ndarray]:
    """(coefficient per term, leave-one-out residual per sample) of the least-squares fit. A term that is
    zero in every sample gets 0; the leave-one-out residual is e_i / (1 - h_ii) (inf where one sample
    alone fixes a coefficient)."""
    x = design(samples, terms)
    y = np.array([s.target for s in samples], dtype=float)
    used = np.flatnonzero(np.abs(x).sum(axis=0) > 0)
    pinv = np.linalg.pinv(x[:, used])
    beta = pinv @ y
    residual = y - x[:, used] @ beta
    leverage = np.einsum("ij,ji->i", x[:, used], pinv)
    with np.errstate(divide="ignore", invalid="ignore"):
        loo = np.where(leverage < 1 - 1e-9, residual / (1 - leverage), np.inf)
    coefficients = dict.fromkeys(terms, 0.0)
    coefficients.update({terms[i]: float(b) for i, b in zip(used, beta, strict=True)})
    return coefficients, loo


def fit_lengths(samples: Sequence[LengthSample]) -> LengthModel:
    """The text model with the lowest mean leave-one-out relative error, fitted on every sample."""
    if not samples:
        raise ValueError("no probe to fit")
    targets = np.array([max(s.target, 1) for s in samples], dtype=float)
    fitted = []
    for name, text_terms in TEXT_MODELS.items():
        coefficients, loo = least_squares(samples, (*LAYOUT_TERMS, *text_terms))
        relative = np.abs(loo) / targets
        score = float(np.mean(relative)) if np.isfinite(relative).all() else float("inf")
        fitted.append((score, len(text_terms), name, coefficients, relative))
    best = min((f for f in fitted if f[1] == 1), key=lambda f: f[0])
    for candidate in fitted:
        if candidate[1] > best[1] and candidate[0] < best[0] * (1 - TIE_MARGIN):
            best = candidate
    _, _, name, coefficients, relative = best
    finite = relative[np.isfinite(relative)]
    return LengthModel(
        **{"per_token": 0.0, **coefficients},
        text=name,
        chars_per_token=sum(s.chars for s in samples) / max(sum(s.local_tokens for s in samples), 1),
        samples=len(samples),
        error_p95=float(np.percentile(finite, 95)) if finite.size else None,
        error_max=float(finite.max()) if finite.size else None,
    )
