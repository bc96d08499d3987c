"""Layer 4: telemetry — sampling, history, the Prometheus exporter, alert rules, idle policy."""
