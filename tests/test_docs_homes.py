"""Every section of the README as it stood before issue 36 split it has a home: its heading is a
heading of README.md or of some docs/**/*.md page (nothing was lost in the move)."""

from docs_pages import headings, name, pages

# The headings of README.md at 78687e5 (`git show 78687e5:README.md`), in order.
OLD_README_HEADINGS = [
    "scratch-attention",
    "First five minutes",
    "The desktop app",
    "Learn: why, mistakes, tiles",
    "Watch attention learn (the Train tab)",
    "In a notebook",
    "Real models: a real model's heads, recomputed and verified",
    "A decoder: SmolLM2-135M-Instruct (Llama family, GGUF)",
    "In the window: the generation view",
    "Watch attention learn: a tiny transformer trained from scratch",
    "The ground truth: `scratch`",
    "One registry of steps",
    "Presets and the terminal trace",
    "Backward: the gradients, traced",
    "Backends: NumPy and PyTorch, checked against the ground truth",
    "Log-sum-exp per row: `return_lse=True`",
    "Tolerances from an error bound",
    "Backward: backends and tolerances",
    "Variants: FlexAttention's masks and score changes, one definition each",
    "Decode and the KV cache",
    "Variants in a trace and in the window",
    "Check your own attention kernel",
    "Checking a backward kernel",
    "Checking a variant kernel",
    "Checking FlashAttention's own interface",
    "The checker inside your own pytest",
    "16-bit variant kernels",
    "Triton kernels on a CPU",
    "Benchmark",
    "What the NumPy kernel does",
    "Tests",
    "Known limits",
    "Layout",
]


def homes() -> dict[str, list[str]]:
    """Each heading title to the pages that hold it."""
    found: dict[str, list[str]] = {}
    for page in pages():
        for _, title in headings(page.read_text(encoding="utf-8")):
            found.setdefault(title, []).append(name(page))
    return found


def test_the_recorded_headings_are_the_old_readmes():
    assert len(OLD_README_HEADINGS) == len(set(OLD_README_HEADINGS)) == 33


def test_every_old_section_has_a_home():
    found = homes()
    lost = [title for title in OLD_README_HEADINGS if title not in found]
    assert not lost, f"README sections with no home in README.md or docs/**/*.md: {lost}"


def test_every_old_section_has_one_home():
    """A section moved, not copied: its heading is on one page only ("scratch-attention", the
    project's name, heads both README.md and the docs' home)."""
    found = homes()
    twice = {t: found[t] for t in OLD_README_HEADINGS[1:] if len(found.get(t, [])) > 1}
    assert not twice, f"README sections with more than one home: {twice}"
