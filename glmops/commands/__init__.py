"""CLI verbs, one module per area; each verb is thin."""
