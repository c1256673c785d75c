"""A keyword the kernel takes and never uses: its names, kept only where true of every case.

A case's diagnosis says "attn_mask ignored" when the output is the attention without the mask
(diagnosis.py, variant_diagnosis.py). `settle_ignored` keeps such a name only when every case
that passes that keyword and ran fails with it: a kernel that applies the keyword in one case
does not ignore it, and a case that fails otherwise is not explained by it.
"""

from __future__ import annotations

from scratch.checker.report import CaseResult

# the forward checker's keywords (torch's scaled_dot_product_attention)
ATTN_MASK = "attn_mask ignored: the output is attention without the mask (every key seen)"
IS_CAUSAL = "is_causal ignored: the output is attention without the causal mask (later keys seen)"
SCALE = "scale ignored: the scale argument is never used (the default 1/sqrt(d) is)"
# the variant checker's FlashAttention keywords (the first four words as the names before them)
CAUSAL = "causal ignored: the output is attention without the causal mask (later keys seen)"
WINDOW = "sliding window not applied (every key seen): window_size ignored"
SOFTCAP = "softcap not applied (scores not capped): softcap ignored"
ALIBI = "ALiBi bias not added: alibi_slopes ignored"
SINKS = (
    "sink left out of the denominator: exp(sink[h]) must be added to each row's sum (the rows' "
    "weights then sum to less than 1); sinks ignored, or never added"
)
DOCUMENTS = "documents leak into each other: keys of other documents seen (cu_seqlens ignored)"
CHUNK = "chunked local attention not applied (keys of earlier chunks seen): attention_chunk ignored"
ROTARY = "rotary_cos and rotary_sin ignored: q and k not turned by RoPE"
# FlashAttention's own interface (flash_attn_func)
SOFTMAX_SCALE = (
    "softmax_scale ignored: the default 1/sqrt(headdim) used, not the softmax_scale given"
)
# FlexAttention's: every mask rule is in mask_mod, softcap and ALiBi in score_mod
MASK_MOD = "mask_mod ignored: every key seen (the case's mask rule never applied)"
SCORE_MOD = "score_mod ignored: the scores neither capped nor biased"

MASK_RULES = ("causal", "window", "documents", "prefix", "chunked")
# name -> the case features (keys of FEATURES / VARIANT_FEATURES) whose cases pass the keyword
IGNORED = {
    ATTN_MASK: ("mask",),
    IS_CAUSAL: ("causal",),
    SCALE: ("scale",),
    CAUSAL: ("causal",),
    WINDOW: ("window",),
    SOFTCAP: ("softcap",),
    ALIBI: ("alibi",),
    SINKS: ("sinks",),
    DOCUMENTS: ("documents",),
    CHUNK: ("chunked",),
    ROTARY: ("rope",),
    SOFTMAX_SCALE: ("scale",),
    MASK_MOD: MASK_RULES,
    SCORE_MOD: ("softcap", "alibi"),
}


def pick(matched: set[str]) -> str | None:
    """A case's one matching name; where several match and one says a keyword is ignored, that
    one (settle_ignored then keeps it only if every case with the keyword agrees), else None."""
    if len(matched) == 1:
        return next(iter(matched))
    keyword = matched & set(IGNORED)
    return keyword.pop() if len(keyword) == 1 else None


def settle_ignored(results: list[CaseResult]) -> None:
    """Drop an 'ignored' name from every case unless each case passing the keyword that ran
    (passed or failed, not refused) failed with exactly that name."""
    for name in {r.diagnosis for r in results if r.diagnosis in IGNORED}:
        uses = IGNORED[name]
        ran = [r for r in results if r.status != "unsupported" and set(uses) & set(r.features)]
        if all(r.status == "fail" and r.diagnosis == name for r in ran):
            continue
        for r in results:
            if r.diagnosis == name:
                r.diagnosis = None


__all__ = ["IGNORED", "pick", "settle_ignored"]
