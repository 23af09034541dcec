"""Markov sources: kernels, closed-form information quantities and samplers."""

from replicate.markov.chains import (
    ChainParameterError,
    binary_entropy,
    binary_entropy_rate,
    binary_kernel,
    binary_stationary,
    binary_unigram_entropy,
    entropy,
    entropy_rate,
    mutual_information_gap,
    stationary_distribution,
    symmetric_entropy_rate,
    symmetric_kernel,
    symmetric_unigram_entropy,
    unigram_entropy,
    validate_kernel,
)
from replicate.markov.sampling import sample_chain, sample_chain_loop

__all__ = [
    "ChainParameterError",
    "binary_entropy",
    "binary_entropy_rate",
    "binary_kernel",
    "binary_stationary",
    "binary_unigram_entropy",
    "entropy",
    "entropy_rate",
    "mutual_information_gap",
    "sample_chain",
    "sample_chain_loop",
    "stationary_distribution",
    "symmetric_entropy_rate",
    "symmetric_kernel",
    "symmetric_unigram_entropy",
    "unigram_entropy",
    "validate_kernel",
]
