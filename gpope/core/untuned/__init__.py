"""The tuning-free private default for a spec nobody tuned: its settings and its release."""
