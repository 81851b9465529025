"""glmops: deploy and run the GLM-5.3 family on bare-metal GPU nodes."""

__version__ = "0.1.0"
