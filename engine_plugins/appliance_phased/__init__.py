"""Engine-side code the appliance puts on the engine's PYTHONPATH (it imports vLLM, so it
lives outside the `appliance` package, which never does).
"""
