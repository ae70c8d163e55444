"""The OpenAI-compatible gateway: classify, apply policy, route, stream back."""
