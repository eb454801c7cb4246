"""Security: API keys (and, later, rate limits, the audit log and the secret sanitiser)."""
