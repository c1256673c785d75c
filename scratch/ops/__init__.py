"""What everything stands on: nested lists, checks, fsum matmul, softmax, RoPE, shape plans."""
