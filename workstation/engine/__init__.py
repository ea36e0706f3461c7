"""Everything about vLLM: environment, model preparation, launcher, flags, endpoints, HTTP client."""
