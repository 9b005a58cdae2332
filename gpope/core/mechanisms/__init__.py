"""Privacy primitives every release uses: the one total L2 clip, the private quantile of norms (one noisy histogram) and the opt-in secure noise."""
