"""The engine lab: real vLLM engines (a CPU build, a tiny local model) behind HAProxy, with infercast's whole stack
on loopback (`infercast lab`, docs/lab.md)."""
