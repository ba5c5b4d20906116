"""The release benchmark: load generator, workloads, statistics, comparison, legacy import.

Entry points: `runner.run_arm` (one arm against a live endpoint), `compare.compare_arms`
(arms C1, P1, C2, ... -> verdicts), `legacy.import_recipe_report` (the recipe's reports), and
`stats` (pure numbers). Nothing here imports the bundled engine: only its HTTP API is used.
"""
