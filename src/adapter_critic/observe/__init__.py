"""What a server tells its operators about the runs it serves: logs now; the run store, metrics and traces
build on the same run events."""
