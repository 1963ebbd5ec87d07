"""flashinfer.sampling over fi_runtime."""

from fi_runtime.flashinfer import (chain_speculative_sampling, min_p_sampling_from_probs,
                                   sampling_from_logits, sampling_from_probs, softmax,
                                   top_k_mask_logits, top_k_renorm_probs,
                                   top_k_sampling_from_probs, top_k_top_p_sampling_from_logits,
                                   top_k_top_p_sampling_from_probs, top_p_renorm_probs,
                                   top_p_sampling_from_probs)

from . import _missing

__all__ = ["softmax", "sampling_from_probs", "sampling_from_logits", "top_p_sampling_from_probs",
           "top_k_sampling_from_probs", "min_p_sampling_from_probs",
           "top_k_top_p_sampling_from_logits", "top_k_top_p_sampling_from_probs",
           "top_p_renorm_probs", "top_k_renorm_probs", "top_k_mask_logits",
           "chain_speculative_sampling"] + _missing.names("sampling")
_missing.install(__name__)
