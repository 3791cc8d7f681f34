"""Telemetry: the run as OpenTelemetry traces, metrics and events, configured as Claude Code configures its own."""
