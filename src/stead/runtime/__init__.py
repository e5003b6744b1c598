"""The runtime: ownership of a store, scheduling, and durable execution of runs."""
