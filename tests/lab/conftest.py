"""The `engines` marker: tests that start real vLLM engines (scripts/test.sh runs them alone, after the others)."""


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "engines: starts real vLLM engines (needs `bash scripts/install.sh --engines`)")
