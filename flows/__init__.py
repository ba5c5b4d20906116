"""sparkgate: declarative release qualification for LLM serving recipes on small GPU clusters."""

__version__ = "0.1.0"
