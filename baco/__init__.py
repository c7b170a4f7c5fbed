"""baco: differentiable co-design of DNN accelerators and their programs."""
