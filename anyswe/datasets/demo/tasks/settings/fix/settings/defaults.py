DEFAULTS = {"retries": 3, "timeout": 30}
