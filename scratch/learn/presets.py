"""Worked examples from the seed notebooks, with the numbers each notebook printed.

Design
------
- `names()` lists the preset slugs in seed order; `get(name)` builds a fresh `Preset` (a
  frozen dataclass, scratch.learn.preset_record) every call, so a caller that edits its nested lists
  changes only its copy. `Preset` and `Printed` (what a notebook printed, and how precisely)
  are described in scratch.learn.preset_record.
- `trace(preset)` (or `preset.trace()`) runs `scratch.trace_attention` on the preset.

Not here: seed 000's example 1 (a function with no data), seed 002's step 8 (unseeded
`np.random.random`, not reproducible), and the trailing `n_words`/`d_h` cell of seed 000.
Seed 004's weights come from `np.random.seed(42)` and three `np.random.randint(3, size=(3, 3))`
calls; the integers are stored here so this module needs only the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from scratch.learn.preset_record import Preset, Printed, floats, notebook_source

if TYPE_CHECKING:
    from scratch.trace.forward import Trace


def trace(preset: Preset | str) -> Trace:
    """Trace a preset (or a preset name) with `scratch.trace_attention`."""
    if isinstance(preset, str):
        preset = get(preset)
    return preset.trace()


# --- seed 000: torch, d_k passed as 4 although the width is 3 ----------------------------


def _seed000_example2() -> Preset:
    """Seed 000 examples 2-3: q, k, v given directly, d_k = 4."""
    seed = "000_7c14042d86dbc24d"
    q = floats([[0, 10, 0]])  # (1, 3)
    k = floats([[10, 0, 0], [0, 10, 0], [0, 0, 10], [0, 0, 10]])  # (4, 3)
    v = floats([[1, 0, 1], [10, 0, 2], [100, 5, 0], [1000, 6, 0]])  # (4, 3)
    return Preset(
        name="seed000-example2",
        title="Seed 000 examples 2-3: one query picks key 1 out of four",
        source=notebook_source(seed, "In[29]-In[58], In[43]"),
        tokens=("q",),
        key_tokens=("k0", "k1", "k2", "k3"),
        x=q,
        key=k,
        value=v,
        scale=1 / math.sqrt(4),
        printed={
            "q": Printed(floats(q), None, "In[56]", "temp_q"),
            "k": Printed(floats(k), None, "In[56]", "temp_k"),
            "v": Printed(floats(v), None, "In[56]", "temp_v"),
            "weights": Printed(
                [[0.0, 1.0, 0.0, 0.0]], 3, "In[58]", "torch.round(attention_weights, decimals=3)"
            ),
            "output": Printed([[10.0, 0.0, 2.0]], 3, "In[43]", "torch.round(output, decimals=3)"),
        },
        notes=(
            "q, k and v are given directly; there are no projections.",
            "Slip: the notebook passes d_k = 4 although the vectors are 3 wide, so scale ="
            " 1/sqrt(4), as here (1/sqrt(3) would give the same weights to 3 decimals: the keys"
            " it does not attend to get 8e-26 instead of 2e-22).",
            "Example 3 of the notebook prints this example's output; example 1 has no data.",
        ),
    )


# --- seed 001: torch, three small examples on the same three word vectors -----------------

_SEED001 = "001_d4886b04eb600938"
_V001 = [[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]]  # v_1, v_2, v_3 stacked, (3, 4)
_WK001 = [[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]]  # (4, 3)
_WQ001 = [[1, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]]  # (4, 3)
_WV001 = [[0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]]  # (4, 3)
_Q001 = [[1, 0, 2], [2, 2, 2], [2, 1, 3]]  # v @ W_q, (3, 3)
_K001 = [[0, 1, 1], [4, 4, 0], [2, 3, 1]]  # v @ W_k, (3, 3)
_VAL001 = [[1, 2, 3], [2, 8, 0], [2, 6, 3]]  # v @ W_v, (3, 3)
_SCORES001 = [[2, 4, 4], [4, 16, 12], [4, 12, 10]]  # q @ k.T, (3, 3)


def _int64(value: object, cell: str, expr: str, **more: object) -> Printed:
    """An integer tensor the notebook printed in full (seed 001's torch examples)."""
    return Printed(value, None, cell, expr, dtype="int64", **more)


def _on_v001(tokens: tuple[str, ...] = ("v_1", "v_2", "v_3"), **fields: object) -> Preset:
    """A preset on seed 001's three word vectors and weights (seed 002 takes the same), unscaled."""
    w_q, w_k, w_v = floats(_WQ001), floats(_WK001), floats(_WV001)
    return Preset(tokens=tokens, x=floats(_V001), w_q=w_q, w_k=w_k, w_v=w_v, scale=1.0, **fields)


def _seed001_example1() -> Preset:
    """Seed 001 example 1: given scores, softmax, elementwise product with the states."""
    states = [[0.21, 0.51, 1.25], [4.13, -41.3, 0.31], [3.2, 0.02, 9.44]]  # (3, 3)
    return Preset(
        name="seed001-example1",
        title="Seed 001 example 1: softmax of given scores [13, 9, 9] over three encoder states",
        source=notebook_source(_SEED001, "In[3]-In[16]"),
        tokens=("q",),
        key_tokens=("h_1", "h_2", "h_3"),
        x=[[1.0]],  # (1, 1): with k below, q @ k^T = [[13, 9, 9]]
        key=[[13.0], [9.0], [9.0]],  # (3, 1)
        value=floats(states),
        scale=1.0,
        printed={
            "v": Printed(
                floats(states), 4, "In[4]", "encoder_hidden_states", sci=True, dtype="float32"
            ),
            "slip_product": Printed(
                [
                    [2.0258e-01, 9.0109e-03, 2.2086e-02],
                    [3.9841e00, -7.2971e-01, 5.4772e-03],
                    [3.0869e00, 3.5337e-04, 1.6679e-01],
                ],
                4,
                "In[15]",
                "softmax_scores * encoder_hidden_states (weight j scales column j of every state)",
                sci=True,
            ),
            "slip_row_sums": Printed([0.2337, 3.2598, 3.2541], 4, "In[16]", "output.sum(dim=-1)"),
        },
        notes=(
            "The notebook gives the scores [13, 9, 9] directly; the preset makes them with"
            " q = [1] and k = [[13], [9], [9]] so that q @ k^T is those scores (scale 1).",
            "Slip: the notebook multiplies softmax(scores) elementwise with the states, which"
            " broadcasts weight j over column j, then sums each row: that is states @ weights,"
            " not attention.",
            "Attention's context vector is weights @ states (weight j scales state j); the trace's"
            " output is that, so it differs from the notebook's row sums.",
        ),
    )


def _seed001_example2() -> Preset:
    """Seed 001 example 2: the keys of three word vectors."""
    return _on_v001(
        name="seed001-example2",
        title="Seed 001 example 2: keys of three word vectors",
        source=notebook_source(_SEED001, "In[54]-In[100]"),
        printed={
            "x": _int64(floats(_V001), "In[95]", "v_1, v_2, v_3"),
            "w_k": _int64(floats(_WK001), "In[59]", "W_k"),
            "k": _int64(
                floats(_K001), "In[99]", "compute_keys([v_1, v_2, v_3], [W_k1, W_k2, W_k3])"
            ),
        },
        notes=(
            "This example computes only the keys (W_k1..W_k3 are the columns of W_k);"
            " w_q and w_v come from example 3 of the same notebook so the preset runs whole.",
            "The notebook does not scale, so scale = 1.",
        ),
    )


def _seed001_example3() -> Preset:
    """Seed 001 example 3: q, k, v and query 1's scores and softmax (integer tensors)."""
    return _on_v001(
        name="seed001-example3",
        title="Seed 001 example 3: queries, keys, values; scores and softmax of query 1",
        source=notebook_source(_SEED001, "In[101]-In[157]"),
        printed={
            "k": _int64(floats(_K001), "In[114]", "keys = v @ W_k"),
            "q": _int64(floats(_Q001), "In[119]", "queries = v @ W_q"),
            "v": _int64(floats(_VAL001), "In[118]", "values = v @ W_v"),
            "q0_times_kT": _int64(
                [[0.0, 0.0, 4.0], [1.0, 0.0, 6.0], [1.0, 0.0, 2.0]],
                "In[123]",
                "queries[0] * keys.t() (broadcast: entry [r][j] = q_0[j] * k_j[r])",
            ),
            "kT": _int64(floats(zip(*_K001)), "In[147]", "keys.t()"),
            "q01_times_k0": _int64([0.0, 0.0, 0.0], "In[143]", "queries[0][1] * keys[0]"),
            "scores": _int64(floats(_SCORES001)[0], "In[154]", "queries[0] @ keys.t()", row=0),
            "weights": Printed(
                [0.0634, 0.4683, 0.4683],
                4,
                "In[157]",
                "F.softmax(attention_score.float(), dim=0)",
                row=0,
            ),
        },
        notes=("The notebook scores and normalises query v_1 only (row 0); it does not scale.",),
    )


def _seed001_example2b() -> Preset:
    """Seed 001's second 'example 2': float q and k, scores without the transpose."""
    return _on_v001(
        name="seed001-example2b",
        title="Seed 001 second 'example 2': float queries and keys, multiplied without transpose",
        source=notebook_source(_SEED001, "In[161]-In[183]"),
        printed={
            "x": Printed(floats(_V001), None, "In[163]", "v"),
            "q": Printed(floats(_Q001), None, "In[181]", "queries = v @ w_query"),
            "k": Printed(floats(_K001), None, "In[182]", "keys = v @ w_key"),
            "slip_scores": Printed(
                [[4.0, 7.0, 3.0], [12.0, 16.0, 4.0], [10.0, 15.0, 5.0]],
                None,
                "In[183]",
                "queries @ keys (no transpose: row i . column j of keys)",
            ),
        },
        corrected={
            "scores": Printed(
                floats(_SCORES001), None, "(corrected)", "queries @ keys.T", dtype="float64"
            ),
        },
        notes=(
            "Slip: In[183] computes queries @ keys without a transpose, which dots query i with"
            " column j of keys; the scores are queries @ keys.T (as seed 002 prints for the same"
            " inputs), and the trace computes those.",
            "The notebook stops at the scores; weights and output here are the correct ones.",
        ),
    )


# --- seed 002: numpy/scipy, the same inputs as seed 001, root_dk = 1 ----------------------


def _seed002() -> Preset:
    """Seed 002: the same inputs in NumPy, root_dk = 1, and the slipped final loop."""
    seed = "002_ff6712ad9f25e5f8"

    def p(value, cell, expr, decimals=8, dtype="float64", **kw) -> Printed:
        """A NumPy print: float64, 8 decimals unless said otherwise."""
        return Printed(value, decimals, cell, expr, dtype=dtype, **kw)

    return _on_v001(
        name="seed002",
        title="Seed 002: self-attention of three inputs in NumPy, unscaled",
        source=notebook_source(seed, "In[36]-In[50]"),
        tokens=("x1", "x2", "x3"),
        printed={
            "x": p(floats(_V001), "In[36]", "x"),
            "w_q": p(floats(_WQ001), "In[37]", "w_query", None, "int64"),
            "w_k": p(floats(_WK001), "In[37]", "w_key", None, "int64"),
            "w_v": p(floats(_WV001), "In[37]", "w_value", None, "int64"),
            "q": p(floats(_Q001), "In[38]", "Q = np.matmul(x, w_query)"),
            "k": p(floats(_K001), "In[38]", "K = np.matmul(x, w_key)"),
            "v": p(floats(_VAL001), "In[38]", "V = np.matmul(x, w_value)"),
            "scores": p(floats(_SCORES001), "In[39]", "(Q @ K.T) / root_dk"),
            "weights": p(
                [
                    [6.33789383e-02, 4.68310531e-01, 4.68310531e-01],
                    [6.03366485e-06, 9.82007865e-01, 1.79861014e-02],
                    [2.95387223e-04, 8.80536902e-01, 1.19167711e-01],
                ],
                "In[40]",
                "softmax(attention_scores[i]) for each row i",
                sci=True,
            ),
            "slip_terms": p(
                [
                    [0.06337894, 0.12675788, 0.19013681],
                    [0.93662106, 3.74648425, 0.0],
                    [0.93662106, 2.80986319, 1.40493159],
                ],
                "In[46]",
                "attention_scores[0][i] * V[i] for i in range(3)",
            ),
            "slip_sums": p(
                [0.3802736299982257, 4.683105308334811, 5.151415839168293],
                "In[50]",
                "[a + b + c for a, b, c in attentions] (sums each term over the features)",
                None,
            ),
        },
        corrected={
            "output": p(
                [
                    [1.93662106, 6.68310531, 1.59506841],
                    [1.99999397, 7.96399160, 0.05397641],
                    [1.99970461, 7.75989225, 0.35838929],
                ],
                "(corrected)",
                "attention_scores @ V",
            ),
        },
        notes=(
            "The notebook sets root_dk = 1 instead of sqrt(3), so scale = 1.",
            "Slip: In[46] multiplies row 0's weights w[0][i] with V[i] for every i (the three"
            " terms of query x1's output, not one output per input as the text says), and In[50]"
            " sums each term over the features instead of adding the terms; the output is"
            " weights @ V, which the trace computes.",
            "Step 8 (np.random.random with no seed) cannot be reproduced and is left out.",
        ),
    )


# --- seed 003: torch, "Your journey starts with one step", no projections, no scaling -----

_WORDS003 = ("Your", "journey", "starts", "with", "one", "step")
_INPUTS003 = [
    [0.43, 0.15, 0.89],  # Your
    [0.55, 0.87, 0.66],  # journey
    [0.57, 0.85, 0.64],  # starts
    [0.22, 0.58, 0.33],  # with
    [0.77, 0.25, 0.10],  # one
    [0.05, 0.80, 0.55],  # step
]
_SEED003 = "003_2230e3e7cf9359cf"


def _journey() -> Preset:
    """Seed 003: the six-word sentence attending to itself, no projections."""
    return Preset(
        name="journey",
        title='Seed 003: "Your journey starts with one step", every word attends to every word',
        source=notebook_source(_SEED003, "In[32], In[36]-In[43]"),
        tokens=_WORDS003,
        x=floats(_INPUTS003),
        scale=1.0,
        printed={
            "scores": Printed(
                [
                    [0.9995, 0.9544, 0.9422, 0.4753, 0.4576, 0.6310],
                    [0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865],
                    [0.9422, 1.4754, 1.4570, 0.8296, 0.7154, 1.0605],
                    [0.4753, 0.8434, 0.8296, 0.4937, 0.3474, 0.6565],
                    [0.4576, 0.7070, 0.7154, 0.3474, 0.6654, 0.2935],
                    [0.6310, 1.0865, 1.0605, 0.6565, 0.2935, 0.9450],
                ],
                4,
                "In[36], In[39]",
                "attn_scores = inputs @ inputs.T",
            ),
            "weights": Printed(
                [
                    [0.2098, 0.2006, 0.1981, 0.1242, 0.1220, 0.1452],
                    [0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581],
                    [0.1390, 0.2369, 0.2326, 0.1242, 0.1108, 0.1565],
                    [0.1435, 0.2074, 0.2046, 0.1462, 0.1263, 0.1720],
                    [0.1526, 0.1958, 0.1975, 0.1367, 0.1879, 0.1295],
                    [0.1385, 0.2184, 0.2128, 0.1420, 0.0988, 0.1896],
                ],
                4,
                "In[41]",
                "torch.softmax(attn_scores, dim=-1)",
            ),
            "output": Printed(
                [
                    [0.4421, 0.5931, 0.5790],
                    [0.4419, 0.6515, 0.5683],
                    [0.4431, 0.6496, 0.5671],
                    [0.4304, 0.6298, 0.5510],
                    [0.4671, 0.5910, 0.5266],
                    [0.4177, 0.6503, 0.5645],
                ],
                4,
                "In[43]",
                "all_context_vecs = attn_weights @ inputs",
            ),
        },
        notes=(
            "No projections: q = k = v = x (the word vectors).",
            "The notebook does not scale the scores, so scale = 1.",
        ),
    )


def _journey_query() -> Preset:
    """Seed 003: the single query 'journey' (inputs[1]) against the six words."""
    words = floats(_INPUTS003)  # (6, 3)
    return Preset(
        name="journey-query",
        title='Seed 003: the single query "journey" against the six words',
        source=notebook_source(_SEED003, "In[32], In[14]-In[16]"),
        tokens=("journey",),
        key_tokens=_WORDS003,
        x=floats(_INPUTS003[1:2]),  # (1, 3): query = inputs[1]
        key=words,  # the same list for keys and values: the trace shows one key-side input
        value=words,
        scale=1.0,
        printed={
            "scores": Printed(
                [[0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]],
                4,
                "In[14]",
                "attn_scores_2[i] = torch.dot(x_i, query)",
            ),
            "naive_weights": Printed(
                [[0.1455, 0.2278, 0.2249, 0.1285, 0.1077, 0.1656]],
                4,
                "In[14]",
                "attn_scores_2 / attn_scores_2.sum()",
            ),
            "naive_weights_sum": Printed(1.0, 4, "In[14]", "attn_weights_2_tmp.sum()"),
            "weights": Printed(
                [[0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]],
                4,
                "In[14]",
                "torch.softmax(attn_scores_2, dim=0)",
            ),
            "weights_sum": Printed(1.0, 4, "In[14]", "attn_weights_2.sum()"),
            "output": Printed(
                [[0.4419, 0.6515, 0.5683]],
                4,
                "In[16]",
                "context_vec_2 += attn_weights_2[i] * x_i",
            ),
        },
        notes=(
            "The query is the word vector of 'journey' (inputs[1]); keys and values are all six.",
            "The notebook also normalises by the plain sum (naive_weights: 0.1455, 0.2278,"
            " 0.2249, 0.1285, 0.1077, 0.1656) before using softmax (weights).",
            "Slip (markdown): it calls 'journey' x^2 while the code's query is inputs[1] (x^1 in"
            " its comments), and writes z_2 = w_2 x with w_2 the scores; taken literally that is"
            " 2.858, 4.233, 3.727. The code, and the trace, weigh the values by softmax(w_2):"
            " 0.4419, 0.6515, 0.5683, which is the number the markdown prints.",
        ),
    )


# --- seed 004: numpy/scipy, weights from np.random.seed(42) --------------------------------

# np.random.seed(42); np.random.randint(3, size=(3, 3)) three times, computed once with NumPy.
SEED004_W_Q = [[2, 0, 2], [2, 0, 0], [2, 1, 2]]
SEED004_W_K = [[2, 2, 2], [0, 2, 1], [0, 1, 1]]
SEED004_W_V = [[1, 1, 0], [0, 1, 1], [0, 0, 0]]


def _seed004() -> Preset:
    """Seed 004: four one-hot-ish words, seeded integer weights, scale 1/sqrt(3)."""
    words = [[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]]  # word_1..word_4, (4, 3)
    return Preset(
        name="seed004",
        title="Seed 004: four words with seeded random integer weights, scaled by 1/sqrt(3)",
        source=notebook_source("004_d720eb7a223f5663", "In[3]-In[15]"),
        tokens=("word_1", "word_2", "word_3", "word_4"),
        x=floats(words),
        w_q=floats(SEED004_W_Q),
        w_k=floats(SEED004_W_K),
        w_v=floats(SEED004_W_V),
        scale=1 / math.sqrt(3),
        printed={
            "output": Printed(
                [0.98522025, 1.74174051, 0.75652026],
                8,
                "In[15]",
                "weights[0] * value_1 + ... + weights[3] * value_4",
                dtype="float64",
                row=0,
            ),
        },
        notes=(
            "W_Q, W_K, W_V are np.random.seed(42) then np.random.randint(3, size=(3, 3)) x 3,"
            " stored as integers.",
            "The notebook computes the attention of word_1 only (row 0); scale = 1/sqrt(3).",
        ),
    )


_BUILDERS: dict[str, Callable[[], Preset]] = {
    "seed000-example2": _seed000_example2,
    "seed001-example1": _seed001_example1,
    "seed001-example2": _seed001_example2,
    "seed001-example3": _seed001_example3,
    "seed001-example2b": _seed001_example2b,
    "seed002": _seed002,
    "journey": _journey,
    "journey-query": _journey_query,
    "seed004": _seed004,
}

DEFAULT = "journey"


def names() -> list[str]:
    """Preset names in seed order."""
    return list(_BUILDERS)


def get(name: str) -> Preset:
    """A fresh copy of the preset called `name`."""
    if not isinstance(name, str):
        raise TypeError(f"name: expected a preset name (str), found {type(name).__name__}")
    if name not in _BUILDERS:
        known = ", ".join(_BUILDERS)
        raise KeyError(f"name: unknown preset {name!r}; expected one of: {known}")
    return _BUILDERS[name]()


__all__ = ["DEFAULT", "Preset", "Printed", "get", "names", "trace"]
