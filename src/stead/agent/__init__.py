"""Agents: data plus registered code, run as a durable loop."""
