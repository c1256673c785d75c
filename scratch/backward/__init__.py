"""The backward pass: SDPA and multi-head gradients, grad_output choices."""
