"""The checker in tests: its cases as pytest parameters, one case as an assertion, hypothesis
strategies that draw cases, and a pytest plugin.

    from scratch.testing import assert_attention_close, attention_cases

Modules: assertions (attention_cases, assert_attention_close: one case through the checker's
one runner), strategies (hypothesis strategies of shapes and cases; needs hypothesis, the
`dev` extra), plugin (`pytest --attention-kernel=module:function`: a test per case).
"""

from scratch.testing.assertions import AttentionCase, assert_attention_close, attention_cases

__all__ = ["AttentionCase", "assert_attention_close", "attention_cases"]
