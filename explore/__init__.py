"""Design-space exploration: the analytic model, training steps lowered to kernels, sweeps."""
