"""For learners: why each step, online softmax, planted mistakes, the notebooks' presets."""
