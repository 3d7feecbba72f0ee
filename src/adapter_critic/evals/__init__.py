"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Running a dataset through served models and scoring the answers: the engine of `adapter-critic eval`.

`dataset` reads and checks the JSONL items, `endpoint` sends chat requests (in-process or to a server),
`scorers` grade answers, `runner` runs items and models with bounded concurrency, `results` keeps
`results.jsonl`/`summary.json`, `stats` holds the statistics. Nothing here prints: the command line does.
"""
