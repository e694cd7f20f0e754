"""One router module per resource; no route module imports another (shared code lives in
:mod:`app.api.service` and :mod:`app.api.status`)."""
