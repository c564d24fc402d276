"""The fleet twin: a simulated inference fleet that reproduces the seed incidents (see docs/twin.md)."""
