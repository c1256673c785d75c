"""flex_attention and create_block_mask in plain Python, and their backward."""
