"""Error bounds: the forward's, the weights', the gradients', each step's."""
