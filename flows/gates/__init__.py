"""The four qualification gates as plain functions; `flows.qualify` wraps them in Prefect tasks."""
