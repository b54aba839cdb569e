def load(values):
    return {"retries": values["retries"], "timeout": values["timeout"]}
