"""What a running engine tells: /metrics parsing, windows and percentiles, scheduler steps, host usage, alerts."""
