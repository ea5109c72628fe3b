"""Side area: model weights a fleet can trust: a pinned revision, a lock of every file's sha256, fetched ahead.

`lock` (the weights lock and the checks on names before any request), `source` (a hub, an HTTP mirror of it or a
mounted folder), `fetch` (resumable, verified, atomic downloads into the store; `download` is one file of it),
`verify` (a boot's quick check and the full re-hash), `store` (what the store holds, and `prune`), `layout` (the
store's paths), `hashing`, `progress` and `errors`.
"""
