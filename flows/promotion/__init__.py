"""Promotion: a person's decision turns a qualified release into the promoted one, reversibly.

Why it exists: a release reaches production only after every gate passed for the very build
that would be deployed, and only by a named person with a reason. Each cluster has its own
promoted release (a release promoted for the TP3 triangle is not thereby promoted for the TP4
ring), kept in a pointer file; every decision is appended to the promotions log.

One module per concern, read in this order:

- `models`: the promoted entry, a cluster's pointer, one line of the log (no I/O).
- `rules`: the pure rules: why a record may not be promoted, pointer updates, which file, the
  deploy's spot check.
- `description`: what the approval form shows, from the record it shows (pure).
- `store`: the pointer files and the log on disk, under flock, with whole-line appends.
- `deploy`: start a promoted release on a cluster and verify it (health, spot check).
- `promote`: promote and roll back one cluster's pointer, deploying with automatic rollback.
- `paused`: find the qualification that waits for a decision and resume it (Prefect API).
- `decision`: inside the qualify flow, pause for a person, then promote the record shown.
- `flow`: promotion as a Prefect flow, for deployments.

`models`, `rules`, `description` and `store` import no Prefect; the others are imported only
after `flows.settings.prefect_environment()`.
"""
