"""The GPOPE solver: its settings, operating point, step schedules, secret sample plan, iterations and compiled steps."""
