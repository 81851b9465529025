"""One module per engine: a Service in, argv/env/config out."""
