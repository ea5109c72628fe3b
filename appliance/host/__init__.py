"""The host: what it has (`discovery`: boards, driver, hugepages, memory, without opening a device) and the engine's
bounded share of its CPU (`share`)."""
