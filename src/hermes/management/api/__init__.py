"""HTTP resources of the management API, one module per resource."""
