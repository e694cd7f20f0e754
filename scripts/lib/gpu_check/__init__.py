"""scripts/gpu_check's parts: the journal and step runner (``journal``, the parent's side),
the steps each run in a process of their own (``steps``), the environment (``env``) and the
report rebuilt from the journal after every step (``report``)."""
