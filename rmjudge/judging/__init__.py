"""The Judge: the ReflectRM protocol over an engine, the run spec (a run's judge
settings resolved once) and the pipelined `Judge`."""
