"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What a server tells its operators about the runs it serves: logs (`logs`), Prometheus metrics (`metrics`) and
OpenTelemetry traces (`tracing`), each fed by the run events; `http.telemetry` turns the last two on for a
service."""
