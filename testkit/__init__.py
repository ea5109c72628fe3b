"""The test-support package: what the tests, the benches and the documentation's pictures stand an appliance on.

Fake and replaying engines run as real child processes (`fake_engine`, `fake_gate`, `replay_engine`), real
appliances are started and stopped (`appliance_process`, `sigterm_scenario`), recorded appliances answer over real
HTTP from captures (`recorded_appliance`, `recorded_vision_server`, `console_pilot` drives the console against
them), and servers stand in for the outside (`weights_mirror`: nginx in the hub's layout; `media_hosts`: image
hosts; `chromium`: a headless browser); `helpers` holds the small shared pieces and `paths` where the files lie.
`data/` holds the recorded real data (engine logs, /metrics pages, sysfs trees, tt-smi output) and `engine_side/`
the scripts run inside an engine's own interpreter.

Imported by `tests/`, `bench/` and `docsgen/` (its pictures); never by `appliance` or `tui` (an import-linter
contract), and not shipped in the wheel. mypy --strict checks it with the package.
"""
