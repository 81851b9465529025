"""One module per engine (a Service in, argv/env/config out), each declaring its ``SPEC``;
``glmops.engines.registry`` lists them and is the only way in from outside this package."""
