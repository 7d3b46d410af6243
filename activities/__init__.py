"""Activities: each does one side effect and reports a typed fact; the workflow decides."""
