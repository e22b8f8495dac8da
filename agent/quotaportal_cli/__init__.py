"""qp: quotaportal's command-line client for researchers (submit, status, wait, logs, cancel, why)."""

__version__ = "0.1.0"
